"""The simulated device: its cost model reads a cost file as written, and an engine step takes what it says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from models.segment_io import PromptInputs
from pipeline.engine.engine import Engine, EngineConfig, StepTiming
from pipeline.engine.requests import GenerationRequest
from pipeline.engine.simulated_device import CostModel, SimulatedRunner, StepShape, VirtualClock, simulated_spec

H200 = Path(__file__).resolve().parents[2] / "shared" / "device_costs" / "h200-vibevoice-1.5b-bf16-eager.json"
SMALL = {
    "parts_by_batch": [
        {"batch_size": 1, "lm_step_ms": 10.0, "diffusion_sampling_ms": 20.0, "acoustic_decode_ms": 8.0,
         "semantic_encode_ms": 6.0, "connectors_ms": 1.0, "other_ms": 5.0},
        {"batch_size": 8, "lm_step_ms": 24.0, "diffusion_sampling_ms": 34.0, "acoustic_decode_ms": 15.0,
         "semantic_encode_ms": 13.0, "connectors_ms": 1.0, "other_ms": 5.0},
    ],
    "prefill_chunks": [{"tokens": 100, "ms": 20.0}, {"tokens": 300, "ms": 40.0}],
}  # fmt: skip


def frame_ms(row: dict) -> float:
    """A frame step's milliseconds as the cost file states it: both LM branches, then the other parts."""
    return 2 * row["lm_step_ms"] + sum(row[name] for name in row if name.endswith("_ms") and name != "lm_step_ms")


def test_a_frame_step_costs_the_parts_and_the_rows_between_lie_on_a_line() -> None:
    model = CostModel.from_costs(SMALL)
    one, eight = (frame_ms(row) for row in SMALL["parts_by_batch"])
    assert model.frame_step_seconds(1) * 1000 == pytest.approx(one)
    assert model.frame_step_seconds(8) * 1000 == pytest.approx(eight)
    assert model.frame_step_seconds(4) * 1000 == pytest.approx(one + (eight - one) * 3 / 7)
    assert model.frame_step_seconds(64) == model.frame_step_seconds(8)  # flat past the measured rows (the default)
    linear = CostModel.from_costs(SMALL | {"past_measured_rows": "linear"})
    assert linear.frame_step_seconds(15) * 1000 == pytest.approx(eight + (eight - one))


def test_prefill_is_a_fixed_part_per_forward_and_a_part_per_token() -> None:
    model = CostModel.from_costs(SMALL)
    assert model.step_seconds(StepShape(prefill_chunks=(100,))) * 1000 == pytest.approx(20.0)
    half_diffusion = StepShape(decode_rows=1, frame_rows=1, diffusion_steps=5)
    assert model.step_seconds(half_diffusion) * 1000 == pytest.approx(frame_ms(SMALL["parts_by_batch"][0]) - 10.0)


@pytest.mark.skipif(not H200.exists(), reason="the shared device costs are not checked out beside this repository")
def test_the_h200_file_reads_as_generate_measured_it() -> None:
    costs = json.loads(H200.read_text())
    model = CostModel.from_file(H200)
    for row in costs["generate_by_batch"]:  # the whole-frame step, and the prefill of every prompt at once
        assert model.frame_step_seconds(row["batch_size"]) * 1000 <= row["steady_per_frame_ms"] * 1.001
        prompt = StepShape(prefill_chunks=(455 * row["batch_size"],))
        assert model.step_seconds(prompt) == pytest.approx(row["prefill_s"], rel=0.15)
    assert model.frame_step_seconds(256) == model.frame_step_seconds(64)  # flat past 64 rows: launch-bound
    assert any("past 64 rows" in line for line in model.assumptions)


def test_an_engine_step_takes_what_the_cost_file_says() -> None:
    model = CostModel.from_costs(SMALL)
    clock = VirtualClock(count_host=False)  # modelled time only: exact
    runner = SimulatedRunner(simulated_spec(rows=8, num_blocks=400), model, clock)
    engine = Engine(runner, EngineConfig(slots=8, prefill_chunk=64, policy="offline"), clock=clock)
    steps: list[StepTiming] = []
    engine.on_step(steps.append)
    for _ in range(5):
        engine.submit(GenerationRequest(PromptInputs(torch.zeros(1, 100, dtype=torch.long), None, None), 6))
    engine.run_until_idle()
    decode_only = [step for step in steps if not step.prefill_tokens]
    assert max(step.decode_rows for step in decode_only) >= 3  # steps of several rows were priced
    for step in decode_only:  # every row made a frame
        assert step.seconds == pytest.approx(model.frame_step_seconds(step.decode_rows))
    assert clock() == pytest.approx(runner.device_seconds)
    assert clock() == pytest.approx(sum(step.seconds for step in steps))


def test_the_host_work_is_counted_on_top_of_the_modelled_time() -> None:
    clock = VirtualClock(count_host=True)
    runner = SimulatedRunner(simulated_spec(rows=4, num_blocks=200), CostModel.free(), clock)
    engine = Engine(runner, EngineConfig(slots=4), clock=clock)
    engine.submit(GenerationRequest(PromptInputs(torch.zeros(1, 20, dtype=torch.long), None, None), 30))
    engine.run_until_idle()
    assert runner.device_seconds == 0.0 and clock() > 0.0  # the engine's own work took real time


def test_a_request_start_costs_its_prompt_embedding_where_the_file_measured_it() -> None:
    starts = {"request_starts": [{"tokens": 100, "ms": 300.0}, {"tokens": 200, "ms": 500.0}]}
    model = CostModel.from_costs(SMALL | starts)
    assert model.start_seconds(150) == pytest.approx(0.4)
    assert CostModel.from_costs(SMALL).start_seconds(150) == 0.0  # a file without starts: its prefill holds them
    clock = VirtualClock(count_host=False)
    runner = SimulatedRunner(simulated_spec(rows=2, num_blocks=100), model, clock)
    engine = Engine(runner, EngineConfig(slots=2), clock=clock)
    engine.submit(GenerationRequest(PromptInputs(torch.zeros(1, 100, dtype=torch.long), None, None), 1))
    engine.run_until_idle()
    prefill_and_frame = model.step_seconds(StepShape(frame_rows=1, prefill_chunks=(100,)))
    assert clock() == pytest.approx(0.3 + prefill_and_frame)


def test_a_start_follows_its_voice_samples_where_the_file_has_them_not_its_text() -> None:
    # One voice of 5 s and two padded to 7 s each, as a CPU measures them: the encoders' work is in the samples.
    starts = {
        "request_starts": [
            {"tokens": 100, "voice_samples": 120_000, "ms": 30.0},
            {"tokens": 101, "voice_samples": 120_000, "ms": 40.0},
            {"tokens": 250, "voice_samples": 336_000, "ms": 140.0},
        ]
    }
    model = CostModel.from_costs(SMALL | starts)
    assert model.start_seconds(100, 120_000) == pytest.approx(0.035)  # the median of a measured size
    assert model.start_seconds(500, 120_000) == pytest.approx(0.035)  # more text, the same voices: the same cost
    assert model.start_seconds(100, 228_000) == pytest.approx(0.0875)  # halfway between the sizes
    assert model.start_seconds(100, 0) == 0.0  # no voices to encode
    assert any("voice samples" in note for note in model.assumptions)
    clock = VirtualClock(count_host=False)
    runner = SimulatedRunner(simulated_spec(rows=1, num_blocks=100), model, clock)
    engine = Engine(runner, EngineConfig(slots=1), clock=clock)
    voices = torch.zeros(()).expand(2, 1, 168_000)  # two voices padded to 7 s: 336,000 samples
    engine.submit(GenerationRequest(PromptInputs(torch.zeros(1, 100, dtype=torch.long), voices, None), 1))
    engine.run_until_idle()
    prefill_and_frame = model.step_seconds(StepShape(frame_rows=1, prefill_chunks=(100,)))
    assert clock() == pytest.approx(0.140 + prefill_and_frame)


def test_a_seeded_runner_draws_each_start_from_the_measured_starts_with_their_spread() -> None:
    # A CPU's starts of one size are skewed (most near the median, a few twice it): the median alone would price
    # none of the slow ones that make the tail of time to first audio.
    measured = [30.0, 32.0, 34.0, 36.0, 80.0]
    starts = {"request_starts": [{"tokens": 100, "voice_samples": 120_000, "ms": ms} for ms in measured]}
    model = CostModel.from_costs(SMALL | starts)
    assert model.start_seconds(100, 120_000) == pytest.approx(0.034)  # no draw: the median
    assert model.start_seconds(100, 120_000, draw=0.0) == pytest.approx(0.030)  # the quickest
    assert model.start_seconds(100, 120_000, draw=0.999) == pytest.approx(0.080)  # the slowest
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        model.start_seconds(100, 120_000, draw=1.0)

    prefill_and_frame = model.step_seconds(StepShape(frame_rows=1, prefill_chunks=(100,)))

    def priced_starts(seed: int | None) -> list[float]:
        clock = VirtualClock(count_host=False)
        runner = SimulatedRunner(simulated_spec(rows=1, num_blocks=100), model, clock, start_seed=seed)
        engine = Engine(runner, EngineConfig(slots=1), clock=clock)
        voices = torch.zeros(()).expand(1, 1, 120_000)
        priced = []
        for _ in range(400):
            before = clock()
            engine.submit(GenerationRequest(PromptInputs(torch.zeros(1, 100, dtype=torch.long), voices, None), 1))
            engine.run_until_idle()
            priced.append(round((clock() - before - prefill_and_frame) * 1000, 6))
        return priced

    drawn = priced_starts(seed=3)
    assert set(drawn) == set(measured)  # each one a measured start, and every one of them drawn
    assert sum(drawn) / len(drawn) == pytest.approx(sum(measured) / len(measured), rel=0.1)  # their mean
    assert priced_starts(seed=3) == drawn  # a seed prices a run the same each time
    assert set(priced_starts(seed=None)) == {34.0}


def test_a_packed_prefill_pays_the_fixed_part_once_a_step_and_a_forward_per_chunk_once_a_chunk() -> None:
    model = CostModel.from_costs(SMALL)
    assert model.step_seconds(StepShape(prefill_chunks=(100, 300))) * 1000 == pytest.approx(50.0)  # 10 + 0.1/token
    model.packed_prefill = False  # the runner before it packed a step's chunks
    assert model.step_seconds(StepShape(prefill_chunks=(100, 300))) * 1000 == pytest.approx(60.0)

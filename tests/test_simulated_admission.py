"""Admission under overload, on a simulated device whose steps grow with their rows: the streams admitted stay on
time, the rest wait with a queue place and an estimate that holds. Modelled time only (a virtual clock)."""

from __future__ import annotations

import torch

from core.audio_rates import FRAMES_PER_SECOND
from models.segment_io import PromptInputs
from pipeline.engine.engine import Engine, EngineConfig
from pipeline.engine.requests import EventKind, GenerationRequest, RequestHandle
from pipeline.engine.simulated_device import CostModel, SimulatedRunner, StepShape, VirtualClock, simulated_spec

# A device where each row adds to a frame step: 1 row 40 ms, 8 rows 180 ms (a frame plays for 133 ms).
ROWS_COST = CostModel.from_costs(
    {
        "parts_by_batch": [
            {"batch_size": b, "lm_step_ms": lm, "diffusion_sampling_ms": 10.0 * f, "acoustic_decode_ms": 5.0 * f,
             "semantic_encode_ms": 5.0 * f, "connectors_ms": 0.0, "other_ms": 0.0}
            for b, lm, f in ((1, 5.0, 1.0), (8, 20.0, 5.0))
        ],
        "prefill_chunks": [{"tokens": 10, "ms": 1.0}, {"tokens": 100, "ms": 2.0}],
        "past_measured_rows": "linear",
    }
)  # fmt: skip
STREAMS, FRAMES = 12, 40


def run_overload(headroom: float | None) -> tuple[Engine, dict[int, list[float]], dict[int, float], dict[int, float]]:
    """Twelve streams at once on eight rows; returns the engine, each stream's frame times, start times, and the
    start each was first promised while it waited."""
    clock = VirtualClock(count_host=False)
    runner = SimulatedRunner(simulated_spec(rows=8, num_blocks=2000), ROWS_COST, clock)
    engine = Engine(runner, EngineConfig(slots=8, realtime_headroom=headroom), clock=clock)
    for rows in (1, 8):  # what a warm-up measures: a step's cost by its rows
        engine.policy.observe(rows, 0, ROWS_COST.frame_step_seconds(rows))
    handles: list[RequestHandle] = []
    for _ in range(STREAMS):
        prompt = PromptInputs(torch.zeros(1, 20, dtype=torch.long), None, None)
        handles.append(engine.submit(GenerationRequest(prompt, FRAMES, streaming=True, arrival=clock())))
    frames: dict[int, list[float]] = {handle.request_id: [] for handle in handles}
    started: dict[int, float] = {}
    promised: dict[int, float] = {}
    while engine.step():
        now = clock()
        for place in engine.queue_places():
            promised.setdefault(place.request_id, now + place.start_in_seconds)
        for handle in handles:
            for event in handle.drain():
                if event.kind is EventKind.STARTED:
                    started[handle.request_id] = now
                elif event.kind is EventKind.AUDIO:
                    frames[handle.request_id].append(now)
    return engine, frames, started, promised


def late_frames(times: list[float]) -> int:
    return sum(at > times[0] + k / FRAMES_PER_SECOND + 1e-9 for k, at in enumerate(times))


def test_admitted_streams_stay_on_time_and_the_rest_wait_for_an_honest_estimate() -> None:
    engine, frames, started, promised = run_overload(headroom=0.9)
    assert all(len(times) == FRAMES for times in frames.values())  # every stream was served in the end
    assert sum(late_frames(times) for times in frames.values()) == 0
    waited = [request_id for request_id in frames if request_id in promised]
    assert len(waited) >= STREAMS - 6  # rows were free, but a seventh stream would have made every step late
    for request_id in waited:  # an upper bound (every request runs to its budget here), and not a loose one
        assert started[request_id] <= promised[request_id] + 0.2
        assert promised[request_id] - started[request_id] <= 0.25 * promised[request_id]
    assert engine.pool.in_use == 0


def test_without_admission_control_the_same_load_makes_every_stream_stutter() -> None:
    _, frames, _, _ = run_overload(headroom=None)
    assert sum(late_frames(times) > 0 for times in frames.values()) >= STREAMS // 2


# A GPU's shape: a frame step costs 90 ms at any row count; a prompt chunk 19 ms + 0.04 ms a token.
FLAT_COST = {
    "parts_by_batch": [
        {"batch_size": b, "lm_step_ms": 10.0, "diffusion_sampling_ms": 40.0, "acoustic_decode_ms": 15.0,
         "semantic_encode_ms": 10.0, "connectors_ms": 0.0, "other_ms": 5.0}
        for b in (1, 16)
    ],
    "prefill_chunks": [{"tokens": 100, "ms": 23.0}, {"tokens": 200, "ms": 27.0}],
}  # fmt: skip


def first_audio_beside_a_thin_stream(packed_prefill: bool) -> tuple[list[float], list[float]]:
    """A stream makes its first frame, then three prompts arrive: the times of their first frames, and the
    playing stream's frames."""
    costs = CostModel.from_costs(FLAT_COST)
    costs.packed_prefill = packed_prefill
    clock = VirtualClock(count_host=False)
    engine = Engine(SimulatedRunner(simulated_spec(rows=16, num_blocks=2000), costs, clock), EngineConfig(slots=16))
    for rows in (1, 16):  # what a warm-up measures: a step's cost by its rows, and what prompt chunks add to it
        engine.policy.observe(rows, 0, costs.frame_step_seconds(rows))
    for chunks in ((100,), (200,), (100, 100)):
        shape = StepShape(decode_rows=1, frame_rows=1, prefill_chunks=chunks)
        engine.policy.observe(1, sum(chunks), costs.step_seconds(shape), chunks=len(chunks))

    def stream() -> RequestHandle:
        prompt = PromptInputs(torch.zeros(1, 100, dtype=torch.long), None, None)
        return engine.submit(GenerationRequest(prompt, 20, streaming=True, arrival=clock()))

    playing = stream()
    engine.step()  # its prompt and first frame: it now has 133 ms of audio ahead, and the next step must end by then
    newcomers = [stream() for _ in range(3)]
    frames: dict[int, list[float]] = {handle.request_id: [] for handle in (playing, *newcomers)}
    frames[playing.request_id].append(clock())
    playing.drain()
    while engine.step():
        for handle in (playing, *newcomers):
            frames[handle.request_id] += [clock() for e in handle.drain() if e.kind is EventKind.AUDIO]
    return [frames[handle.request_id][0] for handle in newcomers], frames[playing.request_id]


def test_a_packed_prefill_starts_every_prompt_the_thin_streams_step_has_time_for() -> None:
    # one forward for every chunk: 90 + 19 + 3 x 4 = 121 ms, within the playing stream's 133 ms less 5 ms
    firsts, playing = first_audio_beside_a_thin_stream(packed_prefill=True)
    assert len(set(firsts)) == 1
    assert late_frames(playing) == 0
    # a forward a chunk: two prompts would take 136 ms, so one goes first; once that step leaves the playing stream
    # more audio ahead, the other two go together; the playing stream is on time throughout
    firsts, playing = first_audio_beside_a_thin_stream(packed_prefill=False)
    assert firsts[0] < firsts[1] == firsts[2]
    assert late_frames(playing) == 0

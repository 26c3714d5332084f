"""Admission under overload, on a simulated device whose steps grow with their rows, or that has time beside a playing
stream for only so many prompts a step: the streams admitted stay on time and hear their first audio with the step
that admits them, the rest wait with a queue place and an estimate that holds. Modelled time only (a virtual
clock)."""

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
    serve(engine, clock, handles, frames, started, promised)
    return engine, frames, started, promised


def serve(
    engine: Engine,
    clock: VirtualClock,
    handles: list[RequestHandle],
    frames: dict[int, list[float]],
    started: dict[int, float],
    promised: dict[int, float],
) -> None:
    """Step until idle, gathering each stream's start (the beginning of the step that admitted it), its frames' times,
    and the start it was first promised while it waited."""
    began = clock()
    while engine.step():
        now = clock()
        for place in engine.queue_places():
            promised.setdefault(place.request_id, now + place.start_in_seconds)
        for handle in handles:
            for event in handle.drain():
                if event.kind is EventKind.STARTED:
                    started[handle.request_id] = began
                elif event.kind is EventKind.AUDIO:
                    frames[handle.request_id].append(now)
        began = now


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


def flat_device(packed_prefill: bool) -> tuple[Engine, VirtualClock]:
    """An engine on `FLAT_COST`'s device that knows what a warm-up measures: a step's cost by its rows, and what
    prompt chunks add to it."""
    costs = CostModel.from_costs(FLAT_COST)
    costs.packed_prefill = packed_prefill
    clock = VirtualClock(count_host=False)
    runner = SimulatedRunner(simulated_spec(rows=16, num_blocks=4000), costs, clock)
    engine = Engine(runner, EngineConfig(slots=16), clock=clock)
    for rows in (1, 16):
        engine.policy.observe(rows, 0, costs.frame_step_seconds(rows))
    for chunks in ((100,), (200,), (100, 100)):
        shape = StepShape(decode_rows=1, frame_rows=1, prefill_chunks=chunks)
        engine.policy.observe(1, sum(chunks), costs.step_seconds(shape), chunks=len(chunks))
    return engine, clock


def submit_stream(engine: Engine, clock: VirtualClock, frames: int, prompt_tokens: int = 100) -> RequestHandle:
    """A stream of `frames` frames after a prompt of `prompt_tokens` tokens."""
    prompt = PromptInputs(torch.zeros(1, prompt_tokens, dtype=torch.long), None, None)
    return engine.submit(GenerationRequest(prompt, frames, streaming=True, arrival=clock()))


def first_audio_beside_a_thin_stream(packed_prefill: bool) -> tuple[list[float], list[float]]:
    """A stream makes its first frame, then three prompts arrive: the times of their first frames, and the
    playing stream's frames."""
    engine, clock = flat_device(packed_prefill)

    def stream() -> RequestHandle:
        return submit_stream(engine, clock, 20)

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
    # a forward a chunk: two prompts would take 136 ms, so one goes first; and each stream that has just started has
    # 133 ms ahead itself, so they go one a step; the playing stream is on time throughout
    firsts, playing = first_audio_beside_a_thin_stream(packed_prefill=False)
    assert firsts[0] < firsts[1] < firsts[2]
    assert late_frames(playing) == 0


def prompts_beside_a_playing_stream(
    newcomers: int,
) -> tuple[dict[int, float], dict[int, list[float]], dict[int, float]]:
    """A stream plays; then `newcomers` streams arrive at once, more than a step beside it can prefill (a forward a
    prompt: 90 + 23 ms for one, 136 ms for two, and the playing stream has 133 ms ahead). Each stream's start,
    frame times, and the start it was first promised while it waited."""
    engine, clock = flat_device(packed_prefill=False)
    handles = [submit_stream(engine, clock, 60)]
    engine.step()
    handles += [submit_stream(engine, clock, 60) for _ in range(newcomers)]
    started: dict[int, float] = {handles[0].request_id: 0.0}
    frames: dict[int, list[float]] = {handle.request_id: [] for handle in handles}
    frames[handles[0].request_id].append(clock())
    handles[0].drain()
    promised: dict[int, float] = {}
    serve(engine, clock, handles, frames, started, promised)
    return started, frames, promised


def test_streams_wait_for_a_step_that_prefills_them_and_hear_their_first_audio_with_it() -> None:
    started, frames, promised = prompts_beside_a_playing_stream(newcomers=6)
    assert all(len(times) == 60 for times in frames.values())
    assert sum(late_frames(times) for times in frames.values()) == 0
    step_at_most = 0.09 + 0.023 + 0.005  # a decode step and one prompt's forward, with the margin
    for request_id, at in started.items():  # each admitted stream's first audio ends the step that admitted it
        assert frames[request_id][0] - at <= step_at_most + 1e-9, (request_id, frames[request_id][0] - at)
    assert len(promised) >= 4  # the rows were free: the prompts' prefill held them, and they were told when
    for request_id, at in promised.items():
        assert abs(started[request_id] - at) <= 0.25 * max(started[request_id], at) + step_at_most, (request_id, at)


def test_a_prompt_longer_than_a_step_prefills_starts_beside_a_playing_stream() -> None:
    engine, clock = flat_device(packed_prefill=True)
    playing = submit_stream(engine, clock, 150)
    engine.step()
    long = submit_stream(engine, clock, 10, prompt_tokens=3 * engine.budget.prefill_chunk)  # three steps' chunks
    handles = [playing, long]
    frames: dict[int, list[float]] = {handle.request_id: [] for handle in handles}
    serve(engine, clock, handles, frames, {}, {})
    # admitted with a chunk's worth while the other plays, never held for a step that never comes
    assert len(frames[long.request_id]) == 10 and frames[long.request_id][-1] < frames[playing.request_id][-1]
    assert frames[long.request_id][0] < 1.0
    assert late_frames(frames[playing.request_id]) == 0

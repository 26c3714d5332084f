"""The engine's request lifecycle with no model: a fake runner that honours the step records and checks them.

The fake runner makes every decode row a frame (or the token a request's script asks for), and checks on every
step what a real runner relies on: each entry it is told to write lies in a block its request holds, no block
is held by two requests, rows are each request's own. So these tests drive admission, growth, preemption,
finishing, cancelling, failing, retrying alone and a dying loop, and the K/V books after each.

Every test runs twice: with the fake runner, and with the simulated device (`pipeline.engine.simulated_device`)
choosing the tokens and taking modelled time on a virtual clock, inside the same checks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.segment_io import PromptInputs
from pipeline.engine.engine import Engine, EngineConfig
from pipeline.engine.kv_blocks import NULL_BLOCK, CacheSpan
from pipeline.engine.requests import FINAL_EVENTS, EventKind, GenerationRequest, RequestStatus
from pipeline.engine.simulated_device import CostModel, SimulatedRunner, VirtualClock
from pipeline.engine.step_records import (
    FastPath,
    KeyReads,
    RequestStart,
    RowOutcome,
    RunnerSpec,
    StepInput,
    StepMode,
)

FRAME, EOS, SPEECH_START, SPEECH_END = 1, 2, 3, 4
SAMPLES = 4


class FakeRunner:
    """A runner with no tensors worth the name: outcomes from a script per request, invariants asserted."""

    clock: Callable[[], float] = staticmethod(time.monotonic)  # the engine's clock (the simulated one's is virtual)

    def __init__(self, rows: int = 4, num_blocks: int = 64, block_size: int = 4, max_context: int = 4096) -> None:
        self.spec = RunnerSpec(rows, num_blocks, block_size, max_context, 2, frozenset({EOS}), FRAME, SPEECH_START)
        self.owner: dict[int, int] = {}  # row -> request
        self.scripts: dict[int, list[int]] = {}  # request id -> the tokens it chooses, in order (then frames)
        self.chosen: dict[int, int] = {}  # request id -> tokens chosen so far
        self.starts: list[RequestStart] = []
        self.steps: list[StepInput] = []
        self.fail: Callable[[StepInput], BaseException | None] = lambda step: None

    @property
    def unread(self) -> frozenset[int]:
        return frozenset()

    @property
    def fast_path(self) -> FastPath:
        return FastPath(StepMode.EAGER, "a fake runner")

    @property
    def key_reads(self) -> KeyReads:
        return KeyReads()

    def overlaps(self, diffusion_steps: set[int]) -> bool:
        return False

    def start_request(self, start: RequestStart) -> np.ndarray | None:
        assert self.owner.get(start.row) is None, f"row {start.row} is still {self.owner.get(start.row)}'s"
        self.owner[start.row] = start.request_id
        self.starts.append(start)
        if start.replay is None:
            return None
        self._check_holds(start.negative, start.negative.length)
        frames = sum(token == FRAME for token in start.replay.tokens)
        return np.zeros((frames, SAMPLES), dtype=np.float32)

    def finish_request(self, request_id: int, row: int) -> None:
        assert self.owner.get(row) == request_id
        del self.owner[row]

    def run(self, step: StepInput) -> list[RowOutcome]:
        if (error := self.fail(step)) is not None:
            raise error
        self.steps.append(step)
        held: dict[int, int] = {}
        outcomes = []
        for chunk in step.prefill:
            assert self.owner[chunk.row] == chunk.request_id
            self._check_holds(chunk.positive, chunk.positive.length + chunk.tokens, held, chunk.request_id)
            if chunk.frame is not None:
                self._check_holds(chunk.frame.negative, chunk.frame.negative.length + 1, held, chunk.request_id)
                outcomes.append(self._choose(chunk.request_id))
        for row in step.decode:
            assert self.owner[row.row] == row.request_id
            self._check_holds(row.positive, row.positive.length + 1, held, row.request_id)
            self._check_holds(row.frame.negative, row.frame.negative.length + 1, held, row.request_id)
            outcomes.append(self._choose(row.request_id))
        return self._outcomes(step, outcomes)

    def _outcomes(self, step: StepInput, chosen: list[RowOutcome]) -> list[RowOutcome]:
        """The step's outcomes: the fake runner's own choices."""
        return chosen

    def flush(self) -> list[RowOutcome]:
        return []

    def warm_up(self, diffusion_steps: int, max_keys: int) -> int:
        return 0

    def _choose(self, request_id: int) -> RowOutcome:
        step = self.chosen.get(request_id, 0)
        self.chosen[request_id] = step + 1
        script = self.scripts.get(request_id, [])
        token = script[step] if step < len(script) else FRAME
        if token != FRAME:
            return RowOutcome(request_id, token)
        return RowOutcome(request_id, FRAME, np.full(SAMPLES, step, dtype=np.float32), torch.full((2,), float(step)))

    def _check_holds(
        self, span: CacheSpan, entries: int, held: dict[int, int] | None = None, request_id: int = 0
    ) -> None:
        """Every visible position up to `entries` lies in a block the span holds; no block is another request's."""
        size = self.spec.block_size
        needed = range(span.visible_from // size, -(-entries // size))
        assert len(span.blocks) >= -(-entries // size), (span, entries)
        for logical in needed:
            assert span.blocks[logical] != NULL_BLOCK, (span, entries, logical)
        if held is not None:
            for block in span.blocks:
                if block != NULL_BLOCK:
                    assert held.setdefault(block, request_id) == request_id, f"block {block} shared"


# A small device: a frame step of 1 row 40 ms, of 4 rows 60 ms; prefill 5 ms a chunk and 0.1 ms a token.
SMALL_COSTS = CostModel.from_costs(
    {
        "parts_by_batch": [
            {"batch_size": b, "lm_step_ms": 5.0 * f, "diffusion_sampling_ms": 10.0 * f, "acoustic_decode_ms": 10.0 * f,
             "semantic_encode_ms": 5.0 * f, "connectors_ms": 0.0, "other_ms": 5.0 * f}
            for b, f in ((1, 1.0), (4, 1.5))
        ],
        "prefill_chunks": [{"tokens": 10, "ms": 6.0}, {"tokens": 100, "ms": 15.0}],
        "past_measured_rows": "linear",
    }
)  # fmt: skip


class SimulatedFake(FakeRunner):
    """The fake runner's checks around the simulated device, which chooses the tokens and takes modelled time."""

    def __init__(self, rows: int = 4, num_blocks: int = 64, block_size: int = 4, max_context: int = 4096) -> None:
        super().__init__(rows, num_blocks, block_size, max_context)
        self.clock = VirtualClock(count_host=False)
        self.device = SimulatedRunner(self.spec, SMALL_COSTS, self.clock, samples_per_frame=SAMPLES)
        self.scripts = self.device.scripts

    def start_request(self, start: RequestStart) -> np.ndarray | None:
        checked = super().start_request(start)
        replayed = self.device.start_request(start)
        assert (checked is None) == (replayed is None) and (checked is None or checked.shape == replayed.shape)
        return replayed

    def finish_request(self, request_id: int, row: int) -> None:
        super().finish_request(request_id, row)
        self.device.finish_request(request_id, row)

    def _outcomes(self, step: StepInput, chosen: list[RowOutcome]) -> list[RowOutcome]:
        before = self.clock()
        outcomes = self.device.run(step)
        assert [(o.request_id, o.token) for o in outcomes] == [(o.request_id, o.token) for o in chosen]
        assert self.clock() > before  # every step takes modelled time
        return outcomes


pytestmark = pytest.mark.parametrize("make_runner", [FakeRunner, SimulatedFake], ids=["fake", "simulated"])


def engine_with(runner: FakeRunner, config: EngineConfig) -> Engine:
    return Engine(runner, config, clock=runner.clock)


def request(prompt: int = 10, frames: int = 6, **scheduling: object) -> GenerationRequest:
    return GenerationRequest(PromptInputs(torch.zeros(1, prompt, dtype=torch.long), None, None), frames, **scheduling)


def events_of(handle) -> list:  # type: ignore[no-untyped-def]
    return handle.drain()


def final(events: list):  # type: ignore[no-untyped-def]
    return [event for event in events if event.kind in FINAL_EVENTS][-1]


def held_blocks(engine: Engine) -> int:
    return sum(state.positive.held + state.negative.held for state in engine.active.values())


def test_requests_join_run_and_leave_with_their_events_in_order(make_runner: type[FakeRunner]) -> None:
    runner = make_runner()
    engine = engine_with(runner, EngineConfig(slots=4, prefill_chunk=4))
    first = engine.submit(request(prompt=10, frames=5))
    engine.step()
    second = engine.submit(request(prompt=3, frames=3))
    engine.run_until_idle()
    for handle, frames in ((first, 5), (second, 3)):
        kinds = [event.kind for event in events_of(handle)]
        assert kinds == [EventKind.STARTED, EventKind.FIRST_AUDIO, *[EventKind.AUDIO] * frames, EventKind.FINISHED]
    assert engine.pool.in_use == 0 and sorted(engine.free_rows) == [0, 1, 2, 3] and runner.owner == {}


def test_a_request_ends_at_its_eos_or_its_budget(make_runner: type[FakeRunner]) -> None:
    runner = make_runner()
    engine = engine_with(runner, EngineConfig(slots=2))
    stops = engine.submit(request(frames=10))
    runner.scripts[stops.request_id] = [FRAME, FRAME, EOS]
    runs_out = engine.submit(request(frames=4))
    engine.run_until_idle()
    assert (final(events_of(stops)).reason, final(events_of(runs_out)).reason) == ("eos", "length")


def test_a_cancel_lands_between_steps_whether_waiting_or_running(make_runner: type[FakeRunner]) -> None:
    runner = make_runner(rows=1)
    engine = engine_with(runner, EngineConfig(slots=1))
    running, waiting = engine.submit(request(frames=50)), engine.submit(request(frames=5))
    for _ in range(3):
        engine.step()
    waiting.cancel()
    running.cancel()
    engine.step()
    assert final(events_of(running)).kind is EventKind.CANCELLED
    assert final(events_of(waiting)).reason == "cancelled while queued"
    assert engine.idle and engine.pool.in_use == 0 and runner.owner == {}


def test_a_step_that_fails_for_one_request_fails_that_one_alone(make_runner: type[FakeRunner]) -> None:
    runner = make_runner()
    engine = engine_with(runner, EngineConfig(slots=3, prefill_chunk=16))
    handles = [engine.submit(request(frames=8)) for _ in range(3)]
    bad = handles[1].request_id
    engine.step()
    engine.step()
    runner.fail = lambda step: (
        RuntimeError("boom") if bad in {r.request_id for r in [*step.prefill, *step.decode]} else None
    )
    engine.run_until_idle()
    kinds = [final(events_of(handle)).kind for handle in handles]
    assert kinds == [EventKind.FINISHED, EventKind.FAILED, EventKind.FINISHED]
    assert engine.pool.in_use == 0 and runner.owner == {}


def test_when_every_request_passes_alone_the_batch_is_halved(make_runner: type[FakeRunner]) -> None:
    runner = make_runner()
    engine = engine_with(runner, EngineConfig(slots=4, prefill_chunk=16))
    handles = [engine.submit(request(frames=8)) for _ in range(4)]
    engine.step()
    runner.fail = lambda step: RuntimeError("out of memory") if len(step.decode) > 2 else None
    engine.run_until_idle()
    streams = [events_of(handle) for handle in handles]
    assert [final(events).kind for events in streams] == [EventKind.FINISHED] * 4
    assert engine.budget.max_batch == 2
    for events in streams:  # each heard every frame once, in order, through the retries
        assert [event.frames for event in events if event.kind is EventKind.AUDIO] == list(range(1, 9))


def test_a_dead_loop_fails_every_request_and_returns_their_waits(make_runner: type[FakeRunner]) -> None:
    runner = make_runner(rows=1)
    engine = engine_with(runner, EngineConfig(slots=1))
    runner.fail = lambda step: KeyError("a bug")  # not a step error: the loop itself breaks
    handles = [engine.submit(request()) for _ in range(2)]
    engine.start()
    finals = []

    def wait_for_every_final_event() -> None:
        pending = list(handles)
        while pending:
            for event in engine.next_events(pending, 0.05):
                finals.append(event)
                if event.kind in FINAL_EVENTS:
                    pending = [handle for handle in pending if handle.request_id != event.request_id]

    waiter = threading.Thread(target=wait_for_every_final_event)
    waiter.start()
    waiter.join(10)
    assert not waiter.is_alive(), "next_events() never gave a dead engine's final events"
    failed = [event for event in finals if event.kind is EventKind.FAILED]
    assert len(failed) == 2 and all(event.reason == "KeyError: 'a bug'" for event in failed)
    assert engine.dead == "KeyError: 'a bug'"
    late = engine.submit(request())
    assert final(late.drain(1.0)).reason == "the engine stopped: KeyError: 'a bug'"


def test_a_dry_pool_preempts_the_least_important_most_recent_and_replays_it(make_runner: type[FakeRunner]) -> None:
    runner = make_runner(rows=3, num_blocks=12, block_size=4)
    engine = engine_with(runner, EngineConfig(slots=3, prefill_chunk=16))
    important = engine.submit(request(prompt=6, frames=12, priority=9))
    engine.step()
    later = engine.submit(request(prompt=6, frames=12, priority=5))
    engine.run_until_idle()
    assert engine.preemptions > 0
    replayed = [start for start in runner.starts if start.request_id == later.request_id and start.replay is not None]
    assert replayed, "the less important request was not the one preempted"
    for handle in (important, later):
        audio = [event for event in events_of(handle) if event.kind is EventKind.AUDIO]
        assert [event.frames for event in audio] == list(range(1, 13))  # every frame once, none lost or repeated
    assert engine.pool.in_use == 0


def test_an_interactive_request_preempts_batch_work_to_start_at_once(make_runner: type[FakeRunner]) -> None:
    runner = make_runner(rows=2)
    engine = engine_with(runner, EngineConfig(slots=2, prefill_chunk=16))
    batch = [engine.submit(request(frames=40, job="long", priority=5)) for _ in range(2)]
    for _ in range(3):
        engine.step()
    speech = engine.submit(request(frames=3, job="speech", interactive=True, priority=9))
    engine.step()
    assert speech.request_id in engine.active
    engine.run_until_idle()
    assert final(events_of(speech)).kind is EventKind.FINISHED
    assert all(final(events_of(handle)).kind is EventKind.FINISHED for handle in batch)


def test_rows_go_round_the_jobs(make_runner: type[FakeRunner]) -> None:
    """A job with many segments queued first does not keep another job's from the next free rows."""
    runner = make_runner(rows=2, num_blocks=256)
    engine = engine_with(runner, EngineConfig(slots=2, prefill_chunk=16))
    big = [engine.submit(request(frames=4 + i, job="big")) for i in range(6)]
    engine.step()
    assert sorted(engine.active) == sorted([big[0].request_id, big[1].request_id])
    small = engine.submit(request(frames=4, job="small"))
    engine.run_until_idle()
    started = [start.request_id for start in runner.starts]
    assert started.index(small.request_id) == 2  # the first row to free up is the small job's


def test_jobs_that_arrive_together_share_the_rows(make_runner: type[FakeRunner]) -> None:
    runner = make_runner(rows=2, num_blocks=256)
    engine = engine_with(runner, EngineConfig(slots=2, prefill_chunk=16))
    big = [engine.submit(request(frames=5, job="big")) for _ in range(4)]
    small = engine.submit(request(frames=5, job="small"))
    engine.step()
    assert sorted(engine.active) == sorted([big[0].request_id, small.request_id])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["submit", "step", "cancel", "fail"]),
            st.integers(1, 40),
            st.integers(0, 9),
            st.sampled_from([None, SPEECH_START, SPEECH_END]),
        ),
        min_size=1,
        max_size=60,
    )
)
def test_the_block_books_balance_after_any_sequence_of_operations(make_runner, operations) -> None:  # type: ignore[no-untyped-def]
    """Allocation, growth, hidden history, preemption, finishing, cancelling and failing never leak a block."""
    runner = make_runner(rows=3, num_blocks=40, block_size=2, max_context=256)
    engine = engine_with(runner, EngineConfig(slots=3, prefill_chunk=8))
    handles = []
    failing: set[int] = set()
    runner.fail = lambda step: (
        RuntimeError("injected") if failing & {r.request_id for r in [*step.prefill, *step.decode]} else None
    )
    for operation, size, priority, token in operations:
        if operation == "submit":
            handle = engine.submit(request(prompt=size, frames=size, priority=priority))
            if token is not None:
                runner.scripts[handle.request_id] = [FRAME, token, FRAME, token, FRAME]
            handles.append(handle)
        elif operation == "cancel" and handles:
            handles[size % len(handles)].cancel()
        elif operation == "fail" and handles:
            failing.add(handles[size % len(handles)].request_id)
        for _ in range(size % 4 + (operation == "step")):
            engine.step()
        assert engine.pool.in_use == held_blocks(engine)
        assert len(engine.active) + len(engine.free_rows) == 3
    failing.clear()
    engine.run_until_idle()
    assert engine.idle and engine.pool.in_use == 0 and runner.owner == {}
    for handle in handles:
        assert final(events_of(handle)).kind in FINAL_EVENTS


@pytest.mark.parametrize("bad", [0, 1])
def test_no_block_is_ever_shared_under_pressure(make_runner: type[FakeRunner], bad: int) -> None:
    """Four requests in a pool that holds about two: the fake runner asserts exclusive blocks on every step."""
    runner = make_runner(rows=4, num_blocks=24, block_size=2)
    engine = engine_with(runner, EngineConfig(slots=4, prefill_chunk=8))
    handles = [engine.submit(request(prompt=6 + bad, frames=10, priority=i)) for i in range(4)]
    engine.run_until_idle()
    assert engine.preemptions > 0
    assert all(final(events_of(handle)).kind is EventKind.FINISHED for handle in handles)


def test_a_requests_status_says_where_it_stands(make_runner: type[FakeRunner]) -> None:
    runner = make_runner(rows=1, num_blocks=64)
    engine = engine_with(runner, EngineConfig(slots=1, prefill_chunk=16))
    batch = engine.submit(request(frames=30, priority=5))
    engine.step()
    state = engine.active[batch.request_id]
    assert state.status is RequestStatus.RUNNING
    queued = engine.submit(request(frames=3))
    assert engine.waiting[queued.request_id].status is RequestStatus.WAITING
    queued_state = engine.waiting[queued.request_id]
    queued.cancel()
    speech = engine.submit(request(frames=3, interactive=True, priority=9))
    engine.step()  # the speech request takes the only row: the batch request gives it back
    assert (state.status, queued_state.status) == (RequestStatus.PREEMPTED, RequestStatus.CANCELLED)
    speech_state = engine.active[speech.request_id]
    engine.run_until_idle()
    assert (state.status, speech_state.status) == (RequestStatus.FINISHED, RequestStatus.FINISHED)

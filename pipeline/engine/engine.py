"""The serving engine: continuous batching of VibeVoice generations over a paged K/V pool.

The engine owns every request's life: it queues it, admits it when a row and K/V blocks are free (in the
order `scheduler.admission_order` gives; beside playing streams, also only while a step stays within real time
with one more row and the step about to run would prefill the new stream's whole prompt, so the streams admitted
stay on time and the rest wait with a place and an estimate, `queue_places`), grows its blocks a step at a
time, preempts it when the pool runs dry (and replays it later, exactly), cancels, fails and finishes it, and
turns the runner's outcomes into events. The runner (passed in: `ModelRunner`, which `pipeline.engine.factory`
builds beside the engine, or any object honouring `step_records`) only computes: each step the engine hands it a
`StepInput` built from the requests' state and gets plain `RowOutcome`s back.

The engine is driven either by a caller (`step()` / `run_until_idle()`, as tests and the CLI do) or by its
own background thread (`start()`), as a worker does; `submit()` and `cancel()` are safe from any thread.
If the loop itself fails (a bug, not a request's error), every request still waiting or running fails with
the reason and the engine is dead: `next_events()` hands over their final events, `dead` says why, and new
requests fail at once, so a worker can exit and be restarted instead of hanging its jobs. It knows nothing of
HTTP, queues or databases.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np
import torch

from core.audio_rates import FRAMES_PER_SECOND
from core.engine_defaults import ENGINE_SLOTS, KV_BLOCK_TOKENS, MAX_CUDA_GRAPHS
from pipeline.engine.kv_blocks import NULL_BLOCK, BlockPool, PoolExhausted
from pipeline.engine.requests import (
    EngineEvent,
    EventKind,
    GenerationRequest,
    Replay,
    RequestHandle,
    RequestState,
    RequestStatus,
)
from pipeline.engine.scheduler import (
    INTERACTIVE_SLOWDOWN,
    POLICIES,
    STALL_MARGIN_SECONDS,
    OfflinePolicy,
    OnlinePolicy,
    Policy,
    RequestView,
    StepBudget,
    admission_order,
    choose_victim,
)
from pipeline.engine.step_records import (
    DecodeRow,
    FastPath,
    FrameInputs,
    KeyReads,
    PrefillChunk,
    RequestStart,
    RowOutcome,
    RunnerSpec,
    StepInput,
    StepMode,
    WarmUpReport,
)

if TYPE_CHECKING:
    from models.loading import LoadedModel

logger = logging.getLogger(__name__)

STEP_ERRORS = (RuntimeError, torch.cuda.OutOfMemoryError)  # what a step may raise for one request's sake
NOISE_BLOCK = 16  # CFG noise pairs a request draws at a time


class Runner(Protocol):
    """What the engine needs of a model runner (`runner.ModelRunner`; tests use a fake one)."""

    spec: RunnerSpec

    @property
    def unread(self) -> frozenset[int]: ...

    @property
    def fast_path(self) -> FastPath: ...

    @property
    def key_reads(self) -> KeyReads: ...

    def overlaps(self, diffusion_steps: set[int]) -> bool: ...

    def start_request(self, start: RequestStart) -> np.ndarray | None: ...

    def finish_request(self, request_id: int, row: int) -> None: ...

    def run(self, step: StepInput) -> list[RowOutcome]: ...

    def flush(self) -> list[RowOutcome]: ...

    def warm_up(self, diffusion_steps: int, max_keys: int) -> int: ...


@runtime_checkable
class FastPathRunner(Runner, Protocol):
    """A runner with a step faster than its eager one (`runner.ModelRunner`), which `warm_up.prepare_to_serve`
    checks against the eager step and falls back from; a runner without one (a fake, a simulated device) is not."""

    dtype: torch.dtype

    def fall_back(self, why: str) -> StepMode: ...

    def eager_step(self) -> AbstractContextManager[None]: ...


@dataclass(frozen=True)
class EngineConfig:
    slots: int = ENGINE_SLOTS  # rows: requests in one step at once
    policy: str = "online"  # "online" (streams, time to first audio) or "offline" (throughput)
    prefill_chunk: int = 512  # prompt tokens one request may prefill in one step
    token_budget: int | None = None  # LM tokens per step; default: slots + prefill_chunk
    # The K/V pool: bytes (> 1) or a fraction (<= 1) of the GPU memory free once the model is loaded
    # (None: the runner's default); `kv_blocks` sets the block count itself (tests, benchmarks).
    kv_memory: float | None = None
    kv_blocks: int | None = None
    block_size: int = KV_BLOCK_TOKENS  # tokens per K/V block
    # Decode through the fixed-shape step (frame_step.py); None: on a GPU only.
    fixed_shapes: bool | None = None
    cuda_graphs: bool = True  # replay the fixed-shape step as CUDA graphs (on a GPU, with fixed_shapes)
    overlap: bool = True  # read a fixed-shape step back while the next one runs
    max_graphs: int = MAX_CUDA_GRAPHS  # decode-step CUDA graphs held at once (warm-up captures at most this many)
    # Online: a step holding interactive work takes at most this many times what its interactive rows alone take
    # (batch rows beyond that sit the step out); see `OnlinePolicy`.
    interactive_slowdown: float = INTERACTIVE_SLOWDOWN
    # Online: admit a request beside streams only while a step with one more row is predicted (from the steps
    # the engine ran) to take at most this share of a frame's playback time, so admitted streams stay on time
    # under overload and the rest wait with a queue place (`queue_places`); None: rows and memory alone decide.
    realtime_headroom: float | None = 0.9
    # Online: while a stream is thin, a step takes prompt chunks while its predicted time stays this far within the
    # thinnest stream's buffered audio (see `OnlinePolicy`).
    stall_margin_seconds: float = STALL_MARGIN_SECONDS

    def make_policy(self) -> Policy:
        if self.policy == "online":
            return OnlinePolicy(
                interactive_slowdown=self.interactive_slowdown, stall_margin_seconds=self.stall_margin_seconds
            )
        return OfflinePolicy()

    def budget(self) -> StepBudget:
        tokens = self.token_budget if self.token_budget is not None else self.slots + self.prefill_chunk
        return StepBudget(max_batch=self.slots, token_budget=tokens, prefill_chunk=self.prefill_chunk)


@dataclass(frozen=True)
class StepTiming:
    """One engine step as its listeners see it (`Engine.on_step`): for metrics, never for scheduling."""

    seconds: float  # the runner's call; with overlapped steps, about the time between two launches
    decode_rows: int
    prefill_tokens: int
    frames: int  # audio frames handed to requests by this step (with overlap, those of the step before)


StepListener = Callable[[StepTiming], None]


@dataclass(frozen=True)
class QueuePlace:
    """Where a waiting request stands: what a caller tells a listener instead of a stuttering stream."""

    request_id: int
    position: int  # 1: the next to get a row
    start_in_seconds: float  # estimate: every request ahead runs to its token budget at the recent step rate


@dataclass(frozen=True)
class EngineLoad:
    """How full the engine is: rows and K/V blocks in use, requests waiting, the longest generation it holds."""

    rows: int
    rows_in_use: int
    waiting: int
    kv_blocks: int  # blocks that can be handed out
    kv_blocks_in_use: int
    block_size: int
    longest_generation: int  # tokens (prompt and generated) one request can reach: context and pool allowing
    preemptions: int  # since the engine started
    fast_path: FastPath  # which decode step runs, and why
    key_reads: KeyReads  # K/V entries attention read against those its rows could see, since the start
    warm_up_seconds: float | None  # capturing graphs and checking the fast path (None: not prepared to serve)


class Engine:
    def __init__(
        self,
        runner: Runner,
        config: EngineConfig | None = None,
        loaded: LoadedModel | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`loaded` is the model `runner` runs, for callers that build prompts with its processor; the engine
        itself never touches it. `clock` (seconds) times steps, first audio and streams' buffers: a simulated
        device (`simulated_device.VirtualClock`) passes a virtual one, so a load runs faster than real time."""
        self.loaded = loaded
        self.clock = clock
        self.config = config or EngineConfig()
        if self.config.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.config.policy!r}; use one of {', '.join(POLICIES)}")
        self.runner = runner
        self.spec = runner.spec
        self.policy = self.config.make_policy()
        self.budget = replace(self.config.budget(), max_batch=min(self.config.slots, self.spec.rows))
        self.pool = BlockPool(self.spec.num_blocks, self.spec.block_size)
        self.active: dict[int, RequestState] = {}
        self.free_rows = list(range(self.spec.rows))  # a heap: the lowest free row goes first
        self.waiting: dict[int, RequestState] = {}  # insertion order; guarded by `lock` (submit adds from any thread)
        self.cancelled: set[int] = set()
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None
        self.stopping = False
        self.dead: str | None = None  # why the loop died, once it has
        self.preemptions = 0
        self.warm_up_report: WarmUpReport | None = None  # set by `warm_up.prepare_to_serve`
        self._admissions = itertools.count(1)
        self._step_listeners: list[StepListener] = []
        # Noise pairs drawn at once (a draw per pair cost more host time than the rest of a step's bookkeeping).
        self._noise_block = NOISE_BLOCK if (2 * self.spec.latent_dim) % 16 == 0 else 1
        self._step_seconds: float | None = None  # moving average of the time from one model step to the next
        # Whether the queue's head waits for a step that can prefill its whole prompt (`_prefills_at_once`), and
        # the prompt tokens a second the steps prefilled while one did: the rate such a queue drains at.
        self._held_for_prefill = False
        self._held_prefill_rate: float | None = None
        self._last_step_end: float | None = None
        logger.info(
            "engine ready",
            extra={
                "rows": self.spec.rows,
                "kv_blocks": self.pool.total,
                "block_size": self.spec.block_size,
                "policy": self.config.policy,
            },
        )

    # --- the caller's side ------------------------------------------------------------------------------------

    def warm_up(self, diffusion_steps: int = 10, max_keys: int = 8192) -> int:
        """Capture the decode step's CUDA graphs for every batch and key bucket up to `max_keys`; returns how many
        are held (the longer buckets are captured on first use)."""
        return self.runner.warm_up(diffusion_steps, min(max_keys, self.spec.max_context))

    @property
    def longest_generation(self) -> int:
        """Tokens (prompt plus new) one request may reach: the model's context, or what the whole pool holds
        when every token is a frame (both branches full)."""
        return min(self.spec.max_context, max(0, (self.pool.total // 2 - 1) * self.spec.block_size - 2))

    def room_after(self, prompt_tokens: int) -> int:
        """The most new tokens a request with this prompt may choose here: its context and the pool allowing
        (0 when even the prompt does not fit)."""
        low, high = 0, max(0, self.spec.max_context - prompt_tokens)
        while low < high:  # the largest count whose blocks fit the pool
            middle = (low + high + 1) // 2
            if self._blocks_alone(prompt_tokens, middle) <= self.pool.total:
                low = middle
            else:
                high = middle - 1
        return low

    def refusal(self, prompt_tokens: int, max_new_tokens: int) -> str | None:
        """Why a request of this size can never run here, or None when it can (alone, at worst)."""
        needed = prompt_tokens + max_new_tokens
        if needed > self.spec.max_context:
            return (
                f"the prompt ({prompt_tokens} tokens) plus up to {max_new_tokens} new tokens exceed the model's "
                f"context of {self.spec.max_context} tokens"
            )
        blocks = self._blocks_alone(prompt_tokens, max_new_tokens)
        if blocks > self.pool.total:
            return (
                f"the prompt ({prompt_tokens} tokens) plus up to {max_new_tokens} new tokens need {blocks} K/V blocks "
                f"and the pool holds {self.pool.total}; raise VOXCAST_ENGINE_KV_MEMORY"
            )
        return None

    def submit(self, request: GenerationRequest) -> RequestHandle:
        """Queue a request; its events arrive on the returned handle."""
        handle = RequestHandle(request, self.cancel)
        problem = self.dead and f"the engine stopped: {self.dead}"
        problem = problem or self.refusal(request.prompt.length, request.max_new_tokens)
        if request.resume is not None:
            problem = problem or self._resume_problem(request.resume)
        if problem is not None:
            handle.deliver(EngineEvent(request.request_id, EventKind.FAILED, reason=problem))
            return handle
        state = RequestState(request, handle)
        if request.resume is not None:
            state.tokens = list(request.resume.tokens)
            state.latents = list(request.resume.latents.float().cpu())
        with self.lock:
            self.waiting[request.request_id] = state
        self.wake.set()
        return handle

    def _resume_problem(self, resume: Replay) -> str | None:
        """Why `resume` cannot be replayed: it needs a latent of this model's size for each of its frame tokens."""
        frames = resume.tokens.count(self.spec.diffusion_token_id)
        if frames != len(resume.latents):
            return f"the resumed run has {frames} frame tokens but {len(resume.latents)} latents"
        if frames and resume.latents.shape[-1] != self.spec.latent_dim:
            size = resume.latents.shape[-1]
            return f"the resumed run's latents have {size} values and this model's {self.spec.latent_dim}"
        return None

    def cancel(self, request_id: int) -> None:
        with self.lock:
            self.cancelled.add(request_id)
        self.wake.set()

    @property
    def idle(self) -> bool:
        with self.lock:
            return not self.waiting and not self.active

    def load(self) -> EngineLoad:
        """A snapshot of the engine's occupancy, safe to take from any thread while it steps."""
        with self.lock:
            waiting = len(self.waiting)
        return EngineLoad(
            rows=self.spec.rows,
            rows_in_use=len(self.active),
            waiting=waiting,
            kv_blocks=self.pool.total,
            kv_blocks_in_use=self.pool.in_use,
            block_size=self.spec.block_size,
            longest_generation=self.longest_generation,
            preemptions=self.preemptions,
            fast_path=self.runner.fast_path,
            key_reads=self.runner.key_reads,
            warm_up_seconds=None if self.warm_up_report is None else self.warm_up_report.seconds,
        )

    def queue_places(self) -> list[QueuePlace]:
        """Every waiting request's place in the admission order and when it should get a row.

        The estimate lets every running request and every one ahead run to its token budget (prefill chunks
        included) at the recent seconds per step (before any, the learnt cost of a step of the rows in use; else 0):
        an upper bound where requests end early at their eos. While the queue waits for prefill rather than rows
        (`_prefills_at_once`), a request starts no sooner than the prompts admitted and ahead of it are prefilled at
        the rate the steps prefilled while it waited."""
        with self.lock:
            waiting = list(self.waiting.values())
        if not waiting:
            return []
        by_id = {state.request_id: state for state in waiting}
        order = admission_order([self._view(state) for state in waiting], [self._view(s) for s in self.active.values()])
        step = self._step_seconds or self._predicted_step(len(self.active)) or 0.0
        rows = self._admittable_rows(
            streams=any(state.request.streaming for state in (*waiting, *self.active.values()))
        )
        free_at = sorted(self._steps_left(state) * step for state in self.active.values())[:rows]
        free_at += [0.0] * (rows - len(free_at))
        heapq.heapify(free_at)
        rate = self._held_prefill_rate if self._held_for_prefill else None
        prompts_ahead = sum(state.prefill_length - state.prefilled for state in self.active.values())
        places = []
        for position, request_id in enumerate(order, 1):
            state = by_id[request_id]
            start = heapq.heappop(free_at)
            heapq.heappush(free_at, start + self._steps_left(state) * step)
            if rate:
                start = max(start, prompts_ahead / rate)
                prompts_ahead += self._to_prefill(state)
            places.append(QueuePlace(request_id, position, start))
        return places

    def _predicted_step(self, rows: int) -> float | None:
        """A decode step's seconds with `rows` rows as the online policy learnt them (None: not known)."""
        return self.policy.costs.estimate(max(rows, 1)) if isinstance(self.policy, OnlinePolicy) else None

    def _admittable_rows(self, streams: bool) -> int:
        """Rows that can be busy at once: the step's batch, or fewer where the headroom keeps streams on time."""
        rows = min(self.budget.max_batch, self.spec.rows)
        headroom = self.config.realtime_headroom
        if not streams or headroom is None or not isinstance(self.policy, OnlinePolicy):
            return rows
        for count in range(2, rows + 1):
            predicted = self._predicted_step(count)
            if predicted is not None and predicted > headroom / FRAMES_PER_SECOND:
                return count - 1
        return rows

    def _steps_left(self, state: RequestState) -> int:
        """Steps a request needs at most to finish: its prompt's chunks, then a token a step."""
        running = state.status is RequestStatus.RUNNING
        prompt = state.prefill_length - state.prefilled if running else state.request.prompt.length
        return -(-prompt // self.budget.prefill_chunk) + max(0, state.request.max_new_tokens - len(state.tokens))

    def on_step(self, listener: StepListener) -> None:
        """Call `listener` after every step that ran the model, on the stepping thread: it must be quick and never
        raise (a worker's metrics are one)."""
        self._step_listeners.append(listener)

    def next_events(self, handles: Sequence[RequestHandle], timeout: float) -> list[EngineEvent]:
        """The events of `handles` since the last call (each handle's in order).

        With the background thread running this waits up to `timeout` seconds for the first handle's next event
        (put the one likeliest to step first); otherwise it steps the engine once itself, so a caller without a
        thread (the CLI, tests) drives generation and sees progress as it happens. Raises RuntimeError when
        nothing steps and no event comes: a request that can never end.
        """
        stepped = self.thread is None and self.step()
        first_wait = 0.0 if self.thread is None else timeout
        events = [event for i, handle in enumerate(handles) for event in handle.drain(first_wait if i == 0 else 0.0)]
        if self.thread is None and not stepped and not events and handles:
            raise RuntimeError(f"engine is idle but requests {[h.request_id for h in handles]} never finished")
        return events

    def run_until_idle(self) -> None:
        while self.step():
            pass

    def start(self) -> None:
        """Step in a background thread until `stop()`."""
        self.thread = threading.Thread(target=self._loop, name="voxcast-engine", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stopping = True
        self.wake.set()
        if self.thread is not None:
            self.thread.join()

    # --- the loop ---------------------------------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            while not self.stopping:
                if not self.step():
                    self.wake.wait(timeout=0.5)
                    self.wake.clear()
        except Exception as error:  # a bug in the loop: nobody may wait on it forever
            self._die(f"{type(error).__name__}: {error}")

    def _die(self, reason: str) -> None:
        self.dead = reason
        logger.critical("the engine loop failed; every request fails", extra={"error": reason}, exc_info=True)
        with self.lock:
            states = [*self.waiting.values(), *self.active.values()]
            self.waiting.clear()
        self.active.clear()
        for state in states:
            state.status = RequestStatus.FAILED
            state.handle.deliver(EngineEvent(state.request_id, EventKind.FAILED, frames=state.frames, reason=reason))

    def step(self) -> bool:
        """Run one engine step; False when there was nothing to do."""
        self._drop_cancelled()
        now = self.clock()  # one instant for the step's decisions: a stream is admitted on the plan the step runs
        self._admit(now)
        if not self.active:
            self._last_step_end = None  # idle: the wait for work is no step's time
            self._record_all(self.runner.flush())  # a step still in flight holds only requests that have ended
            return False
        plan = self.policy.plan([self._view(state, now) for state in self.active.values()], self.budget)
        decode = [self.active[request_id] for request_id in plan.decode]
        if decode and not self.runner.overlaps({state.request.diffusion_steps for state in decode}):
            self._record_all(self.runner.flush())  # an eager step starts from every outcome read back
            decode = [state for state in decode if state.status is RequestStatus.RUNNING]
        prefill = [(self.active[request_id], tokens) for request_id, tokens in plan.prefill]
        prefill, decode = self._reserve(prefill, decode)
        if not prefill and not decode:
            return True
        step = self._step_input(prefill, decode)
        started = self.clock()
        try:
            outcomes = self.runner.run(step)
        except STEP_ERRORS:
            logger.warning("engine step failed; retrying its requests one by one", exc_info=True)
            self._retry_alone(len(prefill) + len(decode))
            return True
        ended = self.clock()
        seconds = ended - started
        prefill_tokens = sum(tokens for _, tokens in prefill)
        if self._last_step_end is not None:  # the engine was busy since: a step's whole time, host work included
            interval = ended - self._last_step_end
            self._step_seconds = interval if self._step_seconds is None else 0.9 * self._step_seconds + 0.1 * interval
            if self._held_for_prefill:
                rate, held = prefill_tokens / interval, self._held_prefill_rate
                self._held_prefill_rate = rate if held is None else 0.9 * held + 0.1 * rate
        self._last_step_end = ended
        self.policy.observe(len(decode), prefill_tokens, seconds, chunks=len(prefill))
        self._record_all(outcomes)
        if self._step_listeners:
            timing = StepTiming(seconds, len(decode), prefill_tokens, sum(outcome.made_frame for outcome in outcomes))
            for listener in self._step_listeners:
                listener(timing)
        return True

    def _view(self, state: RequestState, now: float | None = None) -> RequestView:
        """What the policies see of `state` at `now` (default: the clock's time)."""
        request = state.request
        return RequestView(
            request_id=request.request_id,
            arrival=request.arrival,
            prompt_remaining=state.prefill_length - state.prefilled,
            has_audio=state.frames > 0,
            streaming=request.streaming,
            buffered_seconds=state.buffered_seconds(self.clock() if now is None else now),
            job=request.job,
            interactive=request.interactive,
            priority=request.priority,
            admitted=state.admitted,
        )

    # --- admission and preemption -------------------------------------------------------------------------

    def _admit(self, now: float) -> None:
        """Admit waiting requests in the scheduler's order while a row and their blocks are free, for the step
        planned at `now`.

        An interactive request that finds no room preempts less important work, so it starts at this step.
        """
        with self.lock:
            waiting = list(self.waiting.values())
        self._held_for_prefill = False
        if not waiting or (not self.free_rows and not any(state.request.interactive for state in waiting)):
            return  # nobody can start: spare a long queue its ordering at every step
        active_views = [self._view(state, now) for state in self.active.values()]
        by_id = {state.request_id: state for state in waiting}
        for request_id in admission_order([self._view(state, now) for state in waiting], active_views):
            state = by_id[request_id]
            if state.request.interactive and not self._room_for(state, now):
                self._make_room(state, now)
            fits = self._fits(state)
            if not fits or not self._prefills_at_once(state, now):
                self._held_for_prefill = fits  # a row, blocks and the step's time were there: only its prefill held it
                return  # the others wait their turn: nobody jumps the queue by being smaller
            with self.lock:
                del self.waiting[request_id]
            self._start(state)

    def _room_for(self, state: RequestState, now: float) -> bool:
        return self._fits(state) and self._prefills_at_once(state, now)

    def _fits(self, state: RequestState) -> bool:
        """A row and the blocks to start are free, and a step with one more row keeps the streams on time."""
        return (
            bool(self.free_rows)
            and self._blocks_to_start(state) <= self.pool.free
            and self._keeps_streams_on_time(state)
        )

    def _prefills_at_once(self, state: RequestState, now: float) -> bool:
        """Online, beside playing streams: whether the step about to run would prefill a stream's whole prompt.

        On a device where a row costs next to nothing, rows never run out before prompts do: what limits how
        many streams can start is how much prompt a step may prefill and stay within the playing streams'
        buffers. A stream admitted past that would wait inside the engine, its first audio later than the
        listener should wait; held here instead, it keeps its place in the queue and is told when it starts
        (`queue_places`), and every admitted stream's first audio comes with the step that admits it. A prompt
        longer than one step ever prefills (a chunk, or the token budget left beside the rows) is admitted with a
        whole step's worth, so no prompt waits forever."""
        request = state.request
        if not request.streaming or request.interactive or not isinstance(self.policy, OnlinePolicy):
            return True
        if not any(s.request.streaming and s.frames for s in self.active.values()):
            return True  # nobody is playing: no buffer to keep, and the prompt goes at once anyway
        prompt = self._to_prefill(state)
        views = [self._view(s, now) for s in self.active.values()]
        views.append(replace(self._view(state, now), prompt_remaining=prompt))
        plan = self.policy.plan(views, self.budget)
        at_most = min(prompt, self.budget.prefill_chunk, self.budget.token_budget - len(plan.decode))
        if at_most <= 0:
            return True  # no step beside these rows prefills at all: holding it would not make one
        return any(request_id == state.request_id and tokens >= at_most for request_id, tokens in plan.prefill)

    def _keeps_streams_on_time(self, state: RequestState) -> bool:
        """Whether a step with one more row is predicted to stay within the headroom of a frame's playback time,
        when streams are (or would be) among the rows; an interactive request makes its own room instead."""
        headroom = self.config.realtime_headroom
        if headroom is None or state.request.interactive or not isinstance(self.policy, OnlinePolicy):
            return True
        if not self.active or (
            not state.request.streaming and not any(s.request.streaming for s in self.active.values())
        ):
            return True  # alone, a request always gets its row: else a slow device would never start anything
        predicted = self._predicted_step(min(len(self.active) + 1, self.budget.max_batch))
        return predicted is None or predicted <= headroom / FRAMES_PER_SECOND

    def _make_room(self, state: RequestState, now: float) -> None:
        """Preempt less important requests until `state` fits, or none is left to preempt."""
        importance = (int(state.request.interactive), state.request.priority)
        while not self._room_for(state, now):
            victim = choose_victim([self._view(s) for s in self.active.values()], below=importance)
            if victim is None:
                return
            self._preempt(self.active[victim], "an interactive request needed room")

    def _blocks_to_start(self, state: RequestState) -> int:
        """Blocks a request needs to be admitted: its whole prompt (and replay), and its visible negative entries."""
        prefill = self._to_prefill(state)
        frames, visible_from = self._negative_after(state.tokens)
        negative = self.pool.blocks_for(frames + 1) - visible_from // self.spec.block_size
        return self.pool.blocks_for(prefill + 1) + negative

    @staticmethod
    def _to_prefill(state: RequestState) -> int:
        """Tokens a request prefills when it starts: its prompt, plus the inputs of the tokens it replays."""
        return state.request.prompt.length + max(0, len(state.tokens) - 1)

    def _blocks_alone(self, prompt_tokens: int, max_new_tokens: int) -> int:
        """The most blocks a request can ever hold: both branches full (its negative one from the first frame)."""
        return self.pool.blocks_for(prompt_tokens + max_new_tokens + 1) + self.pool.blocks_for(max_new_tokens + 2)

    def _negative_after(self, tokens: Sequence[int]) -> tuple[int, int]:
        """(entries, visible start) of the negative branch after `tokens`: an entry a frame, hidden at speech starts."""
        frames = visible_from = 0
        for token in tokens:
            if token == self.spec.diffusion_token_id:
                frames += 1
            elif token == self.spec.speech_start_token_id:
                visible_from = frames
        return frames, visible_from

    def _start(self, state: RequestState) -> None:
        """Give `state` a row and blocks, and its runner a start: a fresh prompt, or a replay of what it made."""
        state.row = heapq.heappop(self.free_rows)  # lowest first keeps busy rows packed for the fixed-shape step
        state.admitted = next(self._admissions)
        state.generator = torch.Generator().manual_seed(state.request.seed)
        state.noise_queue.clear()
        frames, visible_from = self._negative_after(state.tokens)
        state.negative.length = frames
        state.negative.visible_from = visible_from
        state.negative.table.extend([NULL_BLOCK] * (visible_from // self.spec.block_size))  # wholly hidden: none held
        state.negative.grow(self.pool, frames + 1)
        state.prefill_length = self._to_prefill(state)
        state.positive.grow(self.pool, state.prefill_length + 1)
        state.prefilled = 0
        state.replayed = bool(state.tokens)
        self.active[state.request_id] = state
        state.status = RequestStatus.RUNNING
        replay = Replay(tuple(state.tokens), torch.stack(state.latents)) if state.tokens else None
        if replay is not None and not state.latents:
            replay = Replay(replay.tokens, torch.zeros(0, self.spec.latent_dim))
        start = RequestStart(
            state.request_id, state.row, state.request.prompt, state.generator, replay, state.negative.span()
        )
        audio = self.runner.start_request(start)
        self._draw_pairs(state.generator, len(state.latents))  # the noise `generate()` drew for the frames made
        if not state.started:
            state.started = True
            state.handle.deliver(EngineEvent(state.request_id, EventKind.STARTED))
        if audio is not None:
            self._deliver_replayed(state, audio)

    def _deliver_replayed(self, state: RequestState, audio: np.ndarray) -> None:
        """Hand over the replayed frames the caller does not have yet (a resumed job's, not a preempted request's)."""
        for frame in range(state.frames, len(audio)):
            self._deliver_frame(state, audio[frame], state.latents[frame])
        self._finish_if_done(state)

    def _preempt(self, state: RequestState, why: str) -> None:
        """Take the request's row and blocks back; it waits again and will replay what it made, losing nothing."""
        self.active.pop(state.request_id)
        state.status = RequestStatus.PREEMPTED
        self.runner.finish_request(state.request_id, state.admitted_row)
        self._release(state)
        state.preemptions += 1
        self.preemptions += 1
        where = {"request_id": state.request_id, "why": why, "tokens": len(state.tokens)}
        logger.info("request preempted", extra=where)
        with self.lock:
            self.waiting[state.request_id] = state

    def _release(self, state: RequestState) -> None:
        state.positive.release(self.pool)
        state.negative.release(self.pool)
        if state.row is not None:
            heapq.heappush(self.free_rows, state.row)
            state.row = None

    def _reserve(
        self, prefill: list[tuple[RequestState, int]], decode: list[RequestState]
    ) -> tuple[list[tuple[RequestState, int]], list[RequestState]]:
        """Grow every planned request's blocks for this step, preempting the least important when the pool is dry.

        Returns the plan without the requests preempted on the way.
        """
        unread = self.runner.unread
        needs: list[tuple[RequestState, int, int | None]] = [
            (state, state.positive.length + tokens, None) for state, tokens in prefill
        ]
        needs += [(state, state.positive.length + 1, 1 + (state.request_id in unread)) for state in decode]
        for state, positive, negative in needs:
            while state.status is RequestStatus.RUNNING:
                try:
                    state.positive.grow(self.pool, positive)
                    state.negative.grow(self.pool, state.negative.length + (1 if negative is None else negative))
                    break
                except PoolExhausted:
                    victim = choose_victim([self._view(s) for s in self.active.values()])
                    if victim is None:  # nothing admitted to take blocks from (the request itself is admitted)
                        raise
                    self._preempt(self.active[victim], "the K/V pool ran dry")
        return (
            [(state, tokens) for state, tokens in prefill if state.status is RequestStatus.RUNNING],
            [state for state in decode if state.status is RequestStatus.RUNNING],
        )

    # --- a step ---------------------------------------------------------------------------------------------

    def _step_input(self, prefill: list[tuple[RequestState, int]], decode: list[RequestState]) -> StepInput:
        """The step's record from the requests' state, then the state the launch itself settles: the positive
        entries written and the prompt positions consumed."""
        unread = self.runner.unread
        chunks = tuple(
            PrefillChunk(
                state.request_id,
                state.admitted_row,
                state.prefilled,
                tokens,
                state.positive.span(),
                self._frame_inputs(state, False) if self._chooses_after(state, tokens) else None,
            )
            for state, tokens in prefill
        )
        rows = tuple(
            DecodeRow(state.request_id, state.admitted_row, state.positive.span(), self._frame_inputs(state, carried))
            for state, carried in ((state, state.request_id in unread) for state in decode)
        )
        for state, tokens in prefill:
            state.prefilled += tokens
            state.positive.length += tokens
        for state in decode:
            state.positive.length += 1
        return StepInput(chunks, rows)

    @staticmethod
    def _chooses_after(state: RequestState, tokens: int) -> bool:
        """Whether a prefill chunk of `tokens` ends the prompt of a request that then chooses its first token
        (a replayed request does not: its next input is its last replayed token's)."""
        return state.prefilled + tokens >= state.prefill_length and not state.replayed

    def _frame_inputs(self, state: RequestState, carried: bool) -> FrameInputs:
        noise = self._noise(state, 0)
        return FrameInputs(
            state.negative.span(),
            noise,
            self._noise(state, 1) if carried else noise,
            state.request.cfg_scale,
            state.request.diffusion_steps,
            carried,
        )

    def _noise(self, state: RequestState, index: int) -> torch.Tensor:
        """The noise of the request's frame `index` frames from now, drawn in order and kept until used.

        `generate()` draws a CFG pair per frame and denoises the first. The fixed-shape step hands rows
        their noise before it knows which make a frame, so draws wait in the request's queue until one does.
        """
        while len(state.noise_queue) <= index:
            state.noise_queue.extend(self._draw_pairs(state.generator, self._noise_block))
        return state.noise_queue[index]

    def _draw_pairs(self, generator: torch.Generator | None, count: int) -> tuple[torch.Tensor, ...]:
        """The first of each of `count` CFG noise pairs, drawn as `count` draws of one pair would draw them.

        One draw of many pairs is the same numbers when a pair's values fill whole 16-value blocks (the CPU
        generator turns uniforms into normals 16 at a time): `_noise_block` is 1 where they do not."""
        if count <= 0:
            return ()
        if self._noise_block == 1:
            return tuple(torch.randn(2, self.spec.latent_dim, generator=generator)[0] for _ in range(count))
        return torch.randn(count, 2, self.spec.latent_dim, generator=generator, dtype=torch.float32)[:, 0].unbind(0)

    def _record_all(self, outcomes: Sequence[RowOutcome]) -> None:
        for outcome in outcomes:
            state = self.active.get(outcome.request_id)
            if state is not None:
                self._record(state, outcome)

    def _record(self, state: RequestState, outcome: RowOutcome) -> None:
        state.tokens.append(outcome.token)
        state.replayed = False
        if (frame := outcome.frame) is not None:
            audio, latent = frame
            state.negative.length += 1
            state.noise_queue.pop(0)
            state.latents.append(latent)
            self._deliver_frame(state, audio, latent)
        elif outcome.token == self.spec.speech_start_token_id:
            state.negative.hide_history(self.pool)  # the CFG branch restarts with the speech
        self._finish_if_done(state)

    def _deliver_frame(self, state: RequestState, audio: np.ndarray, latent: torch.Tensor) -> None:
        state.frames += 1
        end = state.tokens.index(self.spec.diffusion_token_id, state.tokens_handed) + 1
        tokens, state.tokens_handed = tuple(state.tokens[state.tokens_handed : end]), end
        if state.first_audio_at is None:
            state.first_audio_at = self.clock()
        if state.frames == 1:
            state.handle.deliver(EngineEvent(state.request_id, EventKind.FIRST_AUDIO, frames=1))
        event = EngineEvent(
            state.request_id, EventKind.AUDIO, frames=state.frames, audio=audio, latent=latent, tokens=tokens
        )
        state.handle.deliver(event)

    def _finish_if_done(self, state: RequestState) -> None:
        if state.tokens and state.tokens[-1] in self.spec.eos_token_ids:
            self._finish(state, EventKind.FINISHED, "eos")
        elif len(state.tokens) >= state.request.max_new_tokens:
            self._finish(state, EventKind.FINISHED, "length")

    def _finish(self, state: RequestState, kind: EventKind, reason: str) -> None:
        if state.status is not RequestStatus.RUNNING:
            return
        del self.active[state.request_id]
        state.status = RequestStatus(kind.value)
        if state.row is not None:
            self.runner.finish_request(state.request_id, state.row)
        self._release(state)
        state.handle.deliver(EngineEvent(state.request_id, kind, frames=state.frames, reason=reason))

    def _drop_cancelled(self) -> None:
        with self.lock:
            cancelled, self.cancelled = self.cancelled, set()
            queued = [self.waiting.pop(request_id) for request_id in cancelled if request_id in self.waiting]
        for state in queued:
            state.status = RequestStatus.CANCELLED
            state.handle.deliver(
                EngineEvent(state.request_id, EventKind.CANCELLED, frames=state.frames, reason="cancelled while queued")
            )
        for request_id in cancelled & self.active.keys():
            self._finish(self.active[request_id], EventKind.CANCELLED, "cancelled")

    def _retry_alone(self, batch: int) -> None:
        """After a failed step, fail only the requests that fail on their own (e.g. the one out of memory).

        The failed step's outcomes are lost, and the rows and blocks it touched stand wherever it stopped. So
        every active request is preempted (it replays what it made, as a resumed job does; its caller sees
        nothing of it), then started again and stepped alone until it chooses a token: one that fails alone
        fails with its error, the others go on batched. When all of them go through alone, the batch was too
        big: the step's batch cap is halved (down to 1) so it does not fail again at the next step.
        """
        self.runner.flush()  # whatever was in flight is lost with the failed step
        states = list(self.active.values())
        for state in states:
            self._preempt(state, "an engine step failed")
        failed = 0
        for state in states:
            with self.lock:
                del self.waiting[state.request_id]
            try:
                self._start(state)
                self._step_alone(state)
            except STEP_ERRORS as error:
                logger.error("request failed on its own", extra={"request_id": state.request_id, "error": str(error)})
                self.active.setdefault(state.request_id, state)  # it may have failed before `_start` took it
                state.status = RequestStatus.RUNNING
                self._finish(state, EventKind.FAILED, f"generation failed: {error}")
                failed += 1
        if failed == 0 and batch > 1:
            self.budget = replace(self.budget, max_batch=max(1, min(self.budget.max_batch, batch) // 2))
            logger.warning(
                "every request went through alone; batch cap lowered", extra={"max_batch": self.budget.max_batch}
            )

    def _step_alone(self, state: RequestState) -> None:
        """Step `state` by itself through its prefill until it chooses a token (or finishes)."""
        tokens = len(state.tokens)
        while state.status is RequestStatus.RUNNING and len(state.tokens) == tokens:
            plan = self.policy.plan([self._view(state)], self.budget)
            prefill = [(state, count) for _, count in plan.prefill]
            decode = [state] * len(plan.decode)
            prefill, decode = self._reserve(prefill, decode)
            self._record_all(self.runner.run(self._step_input(prefill, decode)) + self.runner.flush())

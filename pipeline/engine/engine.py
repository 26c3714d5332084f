"""The serving engine: continuous batching of VibeVoice generations.

Requests join and leave between steps. Each admitted request holds a slot (its caches live in the
runner); waiting requests get a slot as soon as one frees. Every step the policy picks what runs, the
runner runs it, and the engine turns the outcome into events and decides who has finished.

The engine is driven either by a caller (`step()` / `run_until_idle()`, as tests and the CLI do) or by its
own background thread (`start()`), as a worker does; `submit()` and `cancel()` are safe from any thread.
It knows nothing of HTTP, queues or databases.
"""

from __future__ import annotations

import collections
import heapq
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from pipeline.engine.requests import (
    FINAL_EVENTS,
    EngineEvent,
    EventKind,
    GenerationRequest,
    RequestHandle,
    RequestState,
    RowOutcome,
)
from pipeline.engine.runner import ModelRunner
from pipeline.engine.scheduler import POLICIES, RequestView, StepBudget
from pipeline.model_loading import LoadedModel

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineConfig:
    slots: int = 16
    max_context: int = 8192  # tokens per slot and branch: prompt + generated tokens
    policy: str = "online"  # "online" (streams, time to first audio) or "offline" (throughput)
    prefill_chunk: int = 512  # prompt tokens one request may prefill in one step
    token_budget: int | None = None  # LM tokens per step; default: slots + prefill_chunk
    # Decode through the fixed-shape step (frame_step.py); None: on a GPU only.
    fixed_shapes: bool | None = None
    cuda_graphs: bool = True  # replay the fixed-shape step as CUDA graphs (on a GPU, with fixed_shapes)
    overlap: bool = True  # read a fixed-shape step back while the next one runs

    def budget(self) -> StepBudget:
        tokens = self.token_budget if self.token_budget is not None else self.slots + self.prefill_chunk
        return StepBudget(max_batch=self.slots, token_budget=tokens, prefill_chunk=self.prefill_chunk)


class Engine:
    def __init__(self, loaded: LoadedModel, config: EngineConfig | None = None) -> None:
        self.loaded = loaded
        self.config = config or EngineConfig()
        if self.config.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.config.policy!r}; use one of {', '.join(POLICIES)}")
        self.policy = POLICIES[self.config.policy]()
        self.budget = self.config.budget()
        fixed = self.config.fixed_shapes if self.config.fixed_shapes is not None else loaded.device.type == "cuda"
        self.runner = ModelRunner(
            loaded,
            self.config.slots,
            self.config.max_context,
            fixed_shapes=fixed,
            cuda_graphs=self.config.cuda_graphs,
            overlap=self.config.overlap,
        )
        self.eos_token_ids = _eos_token_ids(loaded)
        self.active: dict[int, RequestState] = {}
        self.free_slots = list(range(self.config.slots))  # a heap: the lowest free slot goes first
        self.waiting: collections.deque[RequestHandle] = collections.deque()
        self.cancelled: set[int] = set()
        # Every active request's latents so far, to rebuild its slot after a failed step; None once it cannot
        # be rebuilt exactly (its speech ended mid-request).
        self.delivered: dict[int, list[torch.Tensor] | None] = {}
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None
        self.stopping = False
        logger.info(
            "engine ready",
            extra={
                "slots": self.config.slots,
                "cache_bytes": self.runner.cache_nbytes,
                "policy": self.config.policy,
                "fixed_shapes": fixed,
                "cuda_graphs": self.runner.fixed is not None and self.runner.fixed.captured.enabled,
            },
        )

    def warm_up(self, diffusion_steps: int = 10) -> int:
        """Capture the decode step's CUDA graphs for every batch and context bucket; returns how many are held."""
        return self.runner.warm_up(diffusion_steps, self.config.max_context)

    def submit(self, request: GenerationRequest) -> RequestHandle:
        """Queue a request; its events arrive on the returned handle."""
        handle = RequestHandle(request, self.cancel)
        needed = request.prompt.length + request.max_new_tokens
        if needed > self.config.max_context:
            handle.deliver(
                EngineEvent(
                    request.request_id,
                    EventKind.FAILED,
                    reason=f"the prompt ({request.prompt.length} tokens) plus up to {request.max_new_tokens} new "
                    f"tokens exceed the engine's context of {self.config.max_context} tokens",
                )
            )
            return handle
        with self.lock:
            self.waiting.append(handle)
        self.wake.set()
        return handle

    def cancel(self, request_id: int) -> None:
        with self.lock:
            self.cancelled.add(request_id)
        self.wake.set()

    @property
    def idle(self) -> bool:
        with self.lock:
            return not self.waiting and not self.active

    def step(self) -> bool:
        """Run one engine step; False when there was nothing to do."""
        self._drop_cancelled()
        self._admit()
        views = [self._view(state) for state in self.active.values()]
        if not views:
            self.runner.flush()  # a step still in flight holds only requests that have ended
            return False
        plan = self.policy.plan(views, self.budget)
        prefill = [(self.active[request_id], tokens) for request_id, tokens in plan.prefill]
        decode = [self.active[request_id] for request_id in plan.decode]
        try:
            outcomes = self.runner.run(prefill, decode)
        except (RuntimeError, torch.cuda.OutOfMemoryError):
            batch = len({id(s): s for s in [*decode, *(s for s, _ in prefill)]})
            logger.warning("engine step failed; retrying its requests one by one", exc_info=True)
            self._retry_alone(batch)
            return True
        now = time.monotonic()
        for outcome in outcomes:
            self._record(outcome, now)
        return True

    def wait(self, handles: Sequence[RequestHandle], on_event: Callable[[EngineEvent], None]) -> None:
        """Pass every event of `handles` to `on_event` until each has had its final one.

        With the background thread running this only waits; otherwise it steps the engine itself, so a
        caller without a thread (the CLI, tests) drives generation and sees progress as it happens.
        """
        pending = {handle.request_id: handle for handle in handles}
        while pending:
            stepped = self.thread is None and self.step()
            wait_seconds = 0.0 if self.thread is None else 0.05
            for request_id, handle in list(pending.items()):
                for event in handle.drain(wait_seconds if request_id == next(iter(pending)) else 0.0):
                    on_event(event)
                    if event.kind in FINAL_EVENTS:
                        del pending[request_id]
            if self.thread is None and not stepped and pending:
                raise RuntimeError(f"engine is idle but requests {sorted(pending)} never finished")

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

    def _loop(self) -> None:
        while not self.stopping:
            if not self.step():
                self.wake.wait(timeout=0.5)
                self.wake.clear()

    def _admit(self) -> None:
        while self.free_slots:
            with self.lock:
                if not self.waiting:
                    return
                handle = self.waiting.popleft()
            request = handle.request
            if request.request_id in self.cancelled:
                self.cancelled.discard(request.request_id)
                handle.deliver(EngineEvent(request.request_id, EventKind.CANCELLED, reason="cancelled while queued"))
                continue
            generator = torch.Generator().manual_seed(request.seed)
            # Lowest first keeps the busy slots packed at the bottom, which the fixed-shape step's rows cover.
            state = RequestState(request, handle, heapq.heappop(self.free_slots), generator)
            replayed = self.runner.admit(state)
            self.active[request.request_id] = state
            handle.deliver(EngineEvent(request.request_id, EventKind.STARTED))
            if replayed is not None:
                self._deliver_replayed(state, replayed)

    def _deliver_replayed(self, state: RequestState, audio: np.ndarray) -> None:
        """Hand over the frames a resumed request already had, so its caller gets the whole segment."""
        latents = state.request.resume_latents
        state.first_audio_at = time.monotonic()
        for frame, samples in enumerate(audio):
            state.frames += 1
            state.new_tokens += 1
            self._record_frame(state, samples, latents[frame].float().cpu())
        if state.new_tokens >= state.request.max_new_tokens:
            self._finish(state, EventKind.FINISHED, "length")

    def _retry_alone(self, batch: int) -> None:
        """After a failed step, fail only the requests that fail on their own (e.g. the one out of memory).

        The failed step's outcomes are lost, and the slots it touched (caches, streams, noise) stand wherever
        it stopped. So every active request is rebuilt from the frames it has delivered, as a resumed job is
        (`runner.admit` replays them; its caller sees nothing of it), then steps alone until it chooses a
        token: one that fails alone fails with its error, the others go on batched. When all of them go
        through alone, the batch was too big: the step's batch cap is halved (down to 1) so it does not
        fail again at the next step.
        """
        failed = 0
        for request_id in list(self.active):
            try:
                state = self._rebuild(self.active[request_id])
                outcomes: list[RowOutcome] = []
                for _ in range(state.prefill_length // self.budget.prefill_chunk + 2):  # its prefill, then a token
                    plan = self.policy.plan([self._view(state)], self.budget)
                    prefill = [(state, tokens) for _, tokens in plan.prefill]
                    outcomes = self.runner.run(prefill, [state] * len(plan.decode)) + self.runner.flush()
                    if outcomes:
                        break
            except (RuntimeError, torch.cuda.OutOfMemoryError) as error:
                logger.error("request failed on its own", extra={"request_id": request_id, "error": str(error)})
                self._finish(self.active[request_id], EventKind.FAILED, f"generation failed: {error}")
                failed += 1
                continue
            now = time.monotonic()
            for outcome in outcomes:
                self._record(outcome, now)
        if failed == 0 and batch > 1:
            self.budget = replace(self.budget, max_batch=max(1, min(self.budget.max_batch, batch) // 2))
            logger.warning(
                "every request went through alone; batch cap lowered", extra={"max_batch": self.budget.max_batch}
            )

    def _rebuild(self, state: RequestState) -> RequestState:
        """A fresh state for `state`'s request in the same slot, brought to where its delivered frames left it."""
        request_id = state.request.request_id
        latents = self.delivered.get(request_id, [])
        if latents is None:
            raise RuntimeError("the request's slot cannot be rebuilt after its speech ended; generate it again")
        request = replace(state.request, resume_latents=torch.stack(latents) if latents else None)
        self.runner.release(state.slot)
        rebuilt = RequestState(request, state.handle, state.slot, torch.Generator().manual_seed(request.seed))
        self.active[request_id] = rebuilt  # before admitting: a failure there fails this state, slot and all
        self.runner.admit(rebuilt)
        rebuilt.frames, rebuilt.first_audio_at = state.frames, state.first_audio_at
        rebuilt.new_tokens = state.new_tokens if latents else 0  # without frames it chooses its first token anew
        return rebuilt

    def _drop_cancelled(self) -> None:
        with self.lock:
            ids = self.cancelled & self.active.keys()
            self.cancelled -= ids
        for request_id in ids:
            self._finish(self.active[request_id], EventKind.CANCELLED, "cancelled")

    def _view(self, state: RequestState) -> RequestView:
        return RequestView(
            request_id=state.request.request_id,
            arrival=state.request.arrival,
            prompt_remaining=state.prefill_length - state.prefilled,
            has_audio=state.frames > 0,
            streaming=state.request.streaming,
            buffered_seconds=state.buffered_seconds(time.monotonic()),
        )

    def _record(self, outcome: RowOutcome, now: float) -> None:
        state = outcome.state
        state.new_tokens += 1
        if outcome.audio is None and state.frames > 0:
            self.delivered[state.request.request_id] = None  # replaying frames could not bring this token back
        if outcome.audio is not None:
            state.frames += 1
            if state.first_audio_at is None:
                state.first_audio_at = now
            self._record_frame(state, outcome.audio, outcome.latent)
        if outcome.token in self.eos_token_ids:
            self._finish(state, EventKind.FINISHED, "eos")
        elif state.new_tokens >= state.request.max_new_tokens:
            self._finish(state, EventKind.FINISHED, "length")

    def _record_frame(self, state: RequestState, audio: np.ndarray, latent: torch.Tensor) -> None:
        request_id = state.request.request_id
        kept = self.delivered.setdefault(request_id, [])
        if kept is not None:
            kept.append(latent)
        if state.frames == 1:
            state.handle.deliver(EngineEvent(request_id, EventKind.FIRST_AUDIO, frames=1))
        state.handle.deliver(EngineEvent(request_id, EventKind.AUDIO, frames=state.frames, audio=audio, latent=latent))

    def _finish(self, state: RequestState, kind: EventKind, reason: str) -> None:
        request_id = state.request.request_id
        if self.active.pop(request_id, None) is None:
            return
        self.delivered.pop(request_id, None)
        self.runner.release(state.slot)
        heapq.heappush(self.free_slots, state.slot)
        state.handle.deliver(EngineEvent(request_id, kind, frames=state.frames, reason=reason))


def _eos_token_ids(loaded: LoadedModel) -> frozenset[int]:
    """The tokens that end a generation: the generation config's eos ids, else the model's."""
    configured = loaded.model.generation_config.eos_token_id
    if configured is None:
        configured = loaded.model.config.eos_token_id
    return frozenset(configured if isinstance(configured, list) else [configured])

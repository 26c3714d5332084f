"""What a request to the engine is, what it reports back, and how far it has got.

A request is one generation (a segment of a podcast): its model inputs, a frame budget, its own seeded
random generator and its quality settings. The engine reports through events, in order: `started` (it was
given a row), `first_audio`, one `audio` per frame (24 kHz samples and the frame's latent), and exactly one
final event: `finished`, `cancelled` or `failed`. A request preempted and replayed sends none of them again.
"""

from __future__ import annotations

import enum
import itertools
import queue
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import torch

from core.audio_rates import FRAMES_PER_SECOND
from models.segment_io import PromptInputs
from pipeline.engine.kv_blocks import BranchBlocks

_ids = itertools.count(1)


class EventKind(enum.Enum):
    STARTED = "started"
    FIRST_AUDIO = "first_audio"
    AUDIO = "audio"
    FINISHED = "finished"
    CANCELLED = "cancelled"
    FAILED = "failed"


FINAL_EVENTS = frozenset({EventKind.FINISHED, EventKind.CANCELLED, EventKind.FAILED})


class RequestStatus(enum.Enum):
    """Where a request stands in the engine (after vLLM's `RequestStatus`): one field, changed where the engine
    admits, preempts, finishes, cancels or fails it, and asked instead of which collection holds the request."""

    WAITING = "waiting"  # queued, never admitted yet
    RUNNING = "running"  # holds a row and K/V blocks
    PREEMPTED = "preempted"  # gave them back; waits to replay what it made
    FINISHED = "finished"
    CANCELLED = "cancelled"
    FAILED = "failed"


@dataclass(frozen=True)
class EngineEvent:
    request_id: int
    kind: EventKind
    frames: int = 0  # frames produced so far
    audio: np.ndarray | None = None  # AUDIO: this frame's 3200 samples, float32 at 24 kHz
    latent: torch.Tensor | None = None  # AUDIO: this frame's acoustic latent [latent_dim], float32 CPU
    # AUDIO: the tokens chosen since the previous frame, ending with this frame's; what a resume needs besides the
    # latents, as a speech end or start between frames changes what follows.
    tokens: tuple[int, ...] = ()
    reason: str = ""  # FINISHED: "eos" or "length"; CANCELLED/FAILED: why


@dataclass(frozen=True)
class Replay:
    """What a request already made, to be brought back without generating it again."""

    tokens: tuple[int, ...]  # every token it chose, in order
    latents: torch.Tensor  # [frames, latent_dim]: the latent of each diffusion token among them, in order


@dataclass
class GenerationRequest:
    """One generation for the engine. `max_new_tokens` counts every chosen token, as `generate()` does."""

    prompt: PromptInputs
    max_new_tokens: int
    seed: int = 0
    cfg_scale: float = 1.3
    diffusion_steps: int = 10
    streaming: bool = False  # a listener plays it as it comes: schedule to keep ahead of real time
    # What an earlier, interrupted run of this request made (each `audio` event's tokens, and its latents): the
    # engine replays it instead of generating it again and carries on from the next token.
    resume: Replay | None = None
    # Scheduling: the requests of one job share `job` (they take rows in turn with other jobs'), interactive
    # work goes before batch work, and a higher `priority` (0 to 9) before a lower one.
    job: str | None = None
    interactive: bool = False
    priority: int = 5
    request_id: int = field(default_factory=lambda: next(_ids))
    arrival: float = field(default_factory=time.monotonic)


class RequestHandle:
    """The caller's side of a request: its events as they come, or the whole result at the end."""

    def __init__(self, request: GenerationRequest, cancel: Callable[[int], None]) -> None:
        self.request = request
        self._events: queue.SimpleQueue[EngineEvent] = queue.SimpleQueue()  # one put per frame: the lightest queue
        self._cancel = cancel

    @property
    def request_id(self) -> int:
        return self.request.request_id

    def cancel(self) -> None:
        """Stop the request at the next engine step; its final event will be `cancelled`."""
        self._cancel(self.request_id)

    def deliver(self, event: EngineEvent) -> None:
        self._events.put(event)

    def drain(self, wait_seconds: float = 0.0) -> list[EngineEvent]:
        """Events delivered so far, waiting up to `wait_seconds` for the first one."""
        events = []
        try:
            events.append(self._events.get(timeout=wait_seconds) if wait_seconds > 0 else self._events.get_nowait())
            while True:
                events.append(self._events.get_nowait())
        except queue.Empty:
            return events

    def events(self, timeout: float | None = None) -> Iterator[EngineEvent]:
        """Events until (and including) the final one; `timeout` bounds each wait, in seconds."""
        while True:
            event = self._events.get(timeout=timeout)
            yield event
            if event.kind in FINAL_EVENTS:
                return


@dataclass
class RequestState:
    """The engine's bookkeeping for a request, waiting or admitted (tensors live in the runner).

    `tokens` and `latents` are everything it has made (a resumed request starts with the frames it was given),
    which is what replays it exactly after a preemption; `frames` counts the frames its caller has been handed.
    """

    request: GenerationRequest
    handle: RequestHandle
    status: RequestStatus = RequestStatus.WAITING
    tokens: list[int] = field(default_factory=list)
    latents: list[torch.Tensor] = field(default_factory=list)
    row: int | None = None  # while admitted
    admitted: int = 0  # admission order (higher: more recent), for choosing whom to preempt
    generator: torch.Generator | None = None
    positive: BranchBlocks = field(default_factory=BranchBlocks)
    negative: BranchBlocks = field(default_factory=BranchBlocks)
    prefill_length: int = 0  # tokens to prefill: the prompt, plus the inputs of tokens being replayed
    prefilled: int = 0  # of those, already through the LM
    replayed: bool = False  # its next input after the prefill is its last replayed token's: no choice then
    frames: int = 0  # frames handed to the caller
    tokens_handed: int = 0  # of `tokens`, those up to the last frame handed to the caller
    first_audio_at: float | None = None
    started: bool = False  # `started` was sent
    preemptions: int = 0
    noise_queue: list[torch.Tensor] = field(default_factory=list)  # drawn for the next frames, oldest first

    @property
    def admitted_row(self) -> int:
        """The row of a request the engine holds admitted (its steps and its release need one)."""
        if self.row is None:
            raise RuntimeError(f"request {self.request_id} is not admitted: it holds no row")
        return self.row

    @property
    def request_id(self) -> int:
        return self.request.request_id

    @property
    def in_prefill(self) -> bool:
        return self.prefilled < self.prefill_length

    @property
    def audio_seconds(self) -> float:
        return self.frames / FRAMES_PER_SECOND

    def buffered_seconds(self, now: float) -> float:
        """Audio produced ahead of real-time playback that started at the first frame."""
        if self.first_audio_at is None:
            return 0.0
        return self.audio_seconds - (now - self.first_audio_at)

"""The generation seam: segments in, their frames and finished audio out, through the serving engine.

Everything that runs the model goes through `SegmentGeneration`: the CLI's render (`pipeline.podcast.render_podcast`)
and the worker's job (`workers.job_generation`) alike, regenerated turns included, by way of
`pipeline.podcast.PlanGeneration`. Segments given together run concurrently in the engine's batch; each keeps its
own seed, so its audio is what it would be alone (and what transformers' `generate()` gives for it: see
`models.reference`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from models.segment_io import GenerationSettings, SegmentAudio, prompt_inputs
from pipeline.engine.engine import Engine
from pipeline.engine.requests import FINAL_EVENTS, EngineEvent, EventKind, GenerationRequest, Replay, RequestHandle
from script_text.prompt import SegmentText

WAIT_SECONDS = 0.1  # the longest `updates` waits for an event when a background thread steps the engine


@dataclass(frozen=True)
class SegmentRequest:
    """One generation: the text to speak, a voice (24 kHz mono float32) per speaker, and a frame budget."""

    text: SegmentText
    voices: Mapping[int, np.ndarray]
    max_frames: int
    settings: GenerationSettings = field(default_factory=GenerationSettings)
    # What an interrupted run already made (the tokens and latents of its frames): the engine replays it and
    # generates only the rest; the result still holds every frame.
    resume: Replay | None = None
    # How the engine schedules it beside other work (see `GenerationRequest`): the job it belongs to, its
    # class and its priority.
    job: str | None = None
    interactive: bool = False
    priority: int = 5


class GenerationError(RuntimeError):
    """The engine failed or cancelled a segment (raised by callers that give up on the first `SegmentFailed`)."""


def frame_budget(engine: Engine, prompt_tokens: int, max_frames: int) -> int:
    """Frames a generation may make: its plan's budget, capped by what the engine can hold after its prompt (the
    model's context, the K/V pool), and at least one, so a prompt that leaves no room fails with the numbers."""
    return max(1, min(max_frames, engine.room_after(prompt_tokens)))


def submit_segment(engine: Engine, request: SegmentRequest, *, streaming: bool = False) -> RequestHandle:
    """Queue one segment in the engine; its frame budget is `generate()`'s `max_new_tokens`, capped by what the
    engine can hold after the prompt (the model's context, its K/V pool); a prompt that leaves nothing fails
    with the numbers."""
    if engine.loaded is None:
        raise ValueError("this engine was built without its model; build it with pipeline.engine.factory")
    settings = request.settings
    prompt = prompt_inputs(engine.loaded, request.text, request.voices)
    return engine.submit(
        GenerationRequest(
            prompt=prompt,
            max_new_tokens=frame_budget(engine, prompt.length, request.max_frames),
            seed=settings.seed,
            cfg_scale=settings.cfg_scale,
            diffusion_steps=settings.diffusion_steps,
            streaming=streaming,
            resume=request.resume,
            job=request.job,
            interactive=request.interactive,
            priority=request.priority,
        )
    )


@dataclass(frozen=True)
class SegmentFrame:
    """One more frame of a segment: its 3200 samples at 24 kHz, its latent [latent_dim], the tokens leading to it."""

    index: int  # the caller's key for the segment (its index in the plan)
    frames: int  # frames of the segment so far, this one included (a resumed segment's replay counts from 1)
    samples: np.ndarray
    latent: np.ndarray
    tokens: tuple[int, ...]  # chosen since the segment's previous frame, ending with this frame's


@dataclass(frozen=True)
class SegmentDone:
    """A segment the engine finished: every frame's audio and latent, together."""

    index: int
    result: SegmentAudio


@dataclass(frozen=True)
class SegmentFailed:
    index: int
    message: str  # names the segment, e.g. "segment 3 failed: generation failed: CUDA out of memory"


SegmentUpdate = SegmentFrame | SegmentDone | SegmentFailed


class SegmentGeneration:
    """Segments generating side by side in the engine; their frames and ends, as they come.

    Each segment's frames are collected here until its final event, which becomes one `SegmentDone` or
    `SegmentFailed`; the caller handles each as it ends, while the others carry on. All calls come from one thread.
    """

    def __init__(self, engine: Engine, handles: Mapping[int, RequestHandle], budgets: Mapping[int, int]) -> None:
        self.engine = engine
        self._handles = dict(handles)  # key -> handle, until its final event
        self._budgets = dict(budgets)  # key -> its frame budget
        self._admitted: set[int] = set()  # segments the engine has started (has given a row)
        self._audio: dict[int, list[np.ndarray]] = {key: [] for key in handles}
        self._latents: dict[int, list[torch.Tensor]] = {key: [] for key in handles}

    @classmethod
    def start(cls, engine: Engine, requests: Mapping[int, SegmentRequest]) -> SegmentGeneration:
        """Submit every request at once (keyed as the caller names its segments); if one cannot be submitted, none
        stays queued."""
        handles: dict[int, RequestHandle] = {}
        try:
            for key, request in requests.items():
                handles[key] = submit_segment(engine, request)
        except BaseException:
            for handle in handles.values():
                handle.cancel()
            raise
        return cls(engine, handles, {key: request.max_frames for key, request in requests.items()})

    @property
    def running(self) -> bool:
        """Whether a segment still has its final event to come."""
        return bool(self._handles)

    def updates(self, timeout: float = WAIT_SECONDS) -> list[SegmentUpdate]:
        """What the engine did since the last call (see `Engine.next_events`: a caller without the engine's thread
        steps it here).

        It waits on a segment that holds a row (they all get their frames at the end of an engine step), so a
        call returns about once a step while any of the segments generates.
        """
        if not self._handles:
            return []
        order = sorted(self._handles, key=lambda key: key not in self._admitted)
        keys = {handle.request_id: key for key, handle in self._handles.items()}
        events = self.engine.next_events([self._handles[key] for key in order], timeout)
        return [update for event in events for update in self._update(keys[event.request_id], event)]

    def cancel(self) -> None:
        """Stop every segment still generating, at the engine's next step."""
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()

    def _update(self, key: int, event: EngineEvent) -> list[SegmentUpdate]:
        if event.kind is EventKind.STARTED:
            self._admitted.add(key)
        elif event.kind is EventKind.AUDIO:
            assert event.audio is not None and event.latent is not None  # an AUDIO event carries its frame's both
            self._audio[key].append(event.audio)
            self._latents[key].append(event.latent)
            return [SegmentFrame(key, event.frames, event.audio, event.latent.numpy(), event.tokens)]
        elif event.kind in FINAL_EVENTS:
            del self._handles[key]
            self._admitted.discard(key)
            audio, latents = self._audio.pop(key), self._latents.pop(key)
            if event.kind is not EventKind.FINISHED:
                return [SegmentFailed(key, f"segment {key + 1} {event.kind.value}: {event.reason}")]
            return [SegmentDone(key, _segment_audio(audio, latents, self._budgets[key]))]
        return []


def _segment_audio(audio: list[np.ndarray], latents: list[torch.Tensor], max_frames: int) -> SegmentAudio:
    return SegmentAudio(
        audio=np.concatenate(audio) if audio else np.zeros(0, dtype=np.float32),
        latents=torch.stack(latents) if latents else torch.zeros(0, 0),
        frames=len(latents),
        reached_frame_budget=len(latents) >= max_frames,
    )

"""The generation seam: segments in, their audio and latents out, through the serving engine.

Planning, assembly, the CLI and the workers only see `SegmentRequest` and `SegmentAudio`. Segments given
together run concurrently in the engine's batch; each keeps its own seed, so its audio is what it would
be alone (and what transformers' `generate()` gives for it: see `pipeline.reference`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from pipeline.engine import Engine, EngineEvent, EventKind, GenerationRequest, PromptInputs, Replay, RequestHandle
from pipeline.model_loading import LoadedModel
from pipeline.prompt import SegmentText, build_prompt_text, voice_samples_in_prompt_order
from tokenizer.rates import SAMPLE_RATE

FrameCallback = Callable[[int], None]


@dataclass(frozen=True)
class GenerationSettings:
    """Quality knobs of one generation; defaults are the original demo's."""

    cfg_scale: float = 1.3
    diffusion_steps: int = 10
    seed: int = 0


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


@dataclass(frozen=True)
class SegmentAudio:
    """What one generation produced: 24 kHz mono float32 audio and one latent per 7.5 Hz frame."""

    audio: np.ndarray
    latents: torch.Tensor  # [frames, latent_dim], float32 on the CPU
    frames: int
    reached_frame_budget: bool

    @property
    def seconds(self) -> float:
        return len(self.audio) / SAMPLE_RATE


class GenerationError(RuntimeError):
    """The engine failed or cancelled a segment."""


def prompt_inputs(loaded: LoadedModel, text: SegmentText, voices: Mapping[int, np.ndarray]) -> PromptInputs:
    """Tokenise the prompt and prepare the voice samples with the checkpoint's own processor."""
    processor = loaded.processor
    prompt = build_prompt_text(text, processor.audio_bos_token, processor.audio_token, processor.audio_eos_token)
    samples = [np.asarray(voice, dtype=np.float32) for voice in voice_samples_in_prompt_order(text, voices)]
    batch = processor(text=[prompt], audio=samples, sampling_rate=SAMPLE_RATE, return_tensors="pt")
    return PromptInputs(batch["input_ids"], batch.get("input_values"), batch.get("padding_mask"))


def prompt_token_count(loaded: LoadedModel, text: SegmentText, voices: Mapping[int, np.ndarray]) -> int:
    """The prompt's length in tokens without preparing any audio: text tokens plus one per voice frame."""
    processor = loaded.processor
    prompt = build_prompt_text(text, processor.audio_bos_token, processor.audio_token, processor.audio_eos_token)
    samples = voice_samples_in_prompt_order(text, voices)
    hop = processor.feature_extractor.pad_to_multiple_of
    text_tokens = len(processor.tokenizer(prompt)["input_ids"]) - len(samples)  # placeholders become voice frames
    return text_tokens + sum(math.ceil(len(voice) / hop) for voice in samples)


# English dialogue, for measuring a tokenizer's rate (`chars_per_token`).
_RATE_SAMPLE = (
    "Welcome back to the show. Today we are talking about how small studios make long podcasts, what the new "
    "tools change for them, and why listeners still care most about a good conversation. Thanks for having me; "
    "it has been quite a week, and I think the short answer is that the promises were bold and the rollout bumpy."
)


def chars_per_token(loaded: LoadedModel) -> float:
    """Characters of English dialogue per token of the model's tokenizer (about 4 for Qwen2's): what lets a
    service without the tokenizer estimate a script's prompt length."""
    return len(_RATE_SAMPLE) / len(loaded.processor.tokenizer(_RATE_SAMPLE)["input_ids"])


def frame_budget(engine: Engine, prompt_tokens: int, max_frames: int) -> int:
    """Frames a generation may make: its plan's budget, capped by what the engine can hold after its prompt (the
    model's context, the K/V pool), and at least one, so a prompt that leaves no room fails with the numbers."""
    return max(1, min(max_frames, engine.room_after(prompt_tokens)))


def submit_segment(engine: Engine, request: SegmentRequest, *, streaming: bool = False) -> RequestHandle:
    """Queue one segment in the engine; its frame budget is `generate()`'s `max_new_tokens`, capped by what the
    engine can hold after the prompt (the model's context, its K/V pool); a prompt that leaves nothing fails
    with the numbers."""
    if engine.loaded is None:
        raise ValueError("this engine was built without its model; build it with Engine.for_model")
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


def generate_segments(
    engine: Engine,
    requests: Sequence[SegmentRequest],
    on_frame: Callable[[int, int], None] | None = None,
    on_latent: Callable[[int, torch.Tensor], None] | None = None,
    on_audio: Callable[[int, np.ndarray], None] | None = None,
) -> list[SegmentAudio]:
    """Generate all `requests` concurrently; `on_frame(index, frames_so_far)` reports each one's progress,
    `on_latent(index, latent)` hands over every frame's latent as it comes (to store it for resuming) and
    `on_audio(index, samples)` its audio (to play it before the segment ends).

    Raises GenerationError if any segment fails or is cancelled (the others are cancelled too).
    """
    handles = [submit_segment(engine, request) for request in requests]
    collected: list[list[EngineEvent]] = [[] for _ in handles]
    finals: dict[int, EngineEvent] = {}
    index_of = {handle.request_id: i for i, handle in enumerate(handles)}

    def on_event(event: EngineEvent) -> None:
        i = index_of[event.request_id]
        if event.kind is EventKind.AUDIO:
            collected[i].append(event)
            if on_latent is not None:
                on_latent(i, event.latent)
            if on_audio is not None:
                on_audio(i, event.audio)
            if on_frame is not None:
                on_frame(i, event.frames)
        elif event.kind in (EventKind.FINISHED, EventKind.CANCELLED, EventKind.FAILED):
            finals[i] = event

    try:
        engine.wait(handles, on_event)
    except BaseException:
        for handle in handles:
            handle.cancel()
        raise
    failed = [(i, event) for i, event in sorted(finals.items()) if event.kind is not EventKind.FINISHED]
    if failed:
        for handle in handles:
            handle.cancel()
        i, event = failed[0]
        raise GenerationError(f"segment {i + 1} {event.kind.value}: {event.reason}")
    return [_segment_audio(events, request) for events, request in zip(collected, requests, strict=True)]


def generate_segment(
    engine: Engine,
    request: SegmentRequest,
    on_frame: FrameCallback | None = None,
    on_latent: Callable[[torch.Tensor], None] | None = None,
    on_audio: Callable[[np.ndarray], None] | None = None,
) -> SegmentAudio:
    """One segment through the engine; `on_frame(frames_so_far)` reports progress, `on_latent(latent)` and
    `on_audio(samples)` hand over each frame's latent and audio."""
    report = None if on_frame is None else (lambda _, frames: on_frame(frames))
    keep = None if on_latent is None else (lambda _, latent: on_latent(latent))
    play = None if on_audio is None else (lambda _, samples: on_audio(samples))
    return generate_segments(engine, [request], report, keep, play)[0]


def _segment_audio(events: list[EngineEvent], request: SegmentRequest) -> SegmentAudio:
    latent_dim = 0 if not events else events[0].latent.shape[-1]
    return SegmentAudio(
        audio=np.concatenate([event.audio for event in events]) if events else np.zeros(0, dtype=np.float32),
        latents=torch.stack([event.latent for event in events]) if events else torch.zeros(0, latent_dim),
        frames=len(events),
        reached_frame_budget=len(events) >= request.max_frames,
    )

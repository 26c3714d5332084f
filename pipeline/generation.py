"""The generation seam: one segment in, its audio and latents out.

For now each segment runs through transformers' own `VibeVoiceForConditionalGeneration.generate()`.
The serving engine replaces this one function; everything around it (planning, assembly, the CLI and
the workers) only sees `SegmentRequest` and `SegmentAudio`.

Two things are added around `generate()`, both on the model instance for the duration of one call:
- the acoustic latents are recorded as the diffusion head produces them (`generate()` returns only audio),
  so a job can later resume or regenerate from them;
- the redundant token-level CFG pass is dropped: a generation config with `guidance_scale` set makes
  transformers add `UnbatchedClassifierFreeGuidanceLogitsProcessor`, a third LM pass per frame whose
  scores only reach VibeVoice's constrained choice among a handful of tokens. `guidance_scale` still
  drives the diffusion CFG, which is where VibeVoice uses it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers.generation import LogitsProcessorList, UnbatchedClassifierFreeGuidanceLogitsProcessor
from transformers.generation.streamers import BaseStreamer

from pipeline.model_loading import LoadedModel
from pipeline.prompt import SegmentText, build_prompt_text, voice_samples_in_prompt_order

SAMPLE_RATE = 24_000
FRAMES_PER_SECOND = 7.5
SAMPLES_PER_FRAME = 3200

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


class _FrameCounter(BaseStreamer):
    """Counts audio frames as `generate()` emits tokens: each audio-diffusion token is one frame."""

    def __init__(self, audio_token_id: int, on_frame: FrameCallback | None) -> None:
        self.audio_token_id = audio_token_id
        self.on_frame = on_frame
        self.frames = 0
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:  # generate() first streams the whole prompt
            self._prompt_seen = True
            return
        self.frames += int((value == self.audio_token_id).sum())
        if self.on_frame is not None:
            self.on_frame(self.frames)

    def end(self) -> None:
        """Nothing to flush: frames are reported as they come."""


def generate_segment(
    loaded: LoadedModel, request: SegmentRequest, on_frame: FrameCallback | None = None
) -> SegmentAudio:
    """Generate one segment with transformers' `generate()`; `on_frame(frames_so_far)` reports progress.

    Randomness (the σ-VAE noise on voice latents and each frame's initial diffusion noise) comes from the
    global torch generator, which is seeded from `request.settings.seed` so a segment can be reproduced.
    """
    model = loaded.model
    inputs = _model_inputs(loaded, request)
    counter = _FrameCounter(model.config.audio_token_id, on_frame)
    torch.manual_seed(request.settings.seed)
    with torch.inference_mode(), _recording_latents(model) as latents, _without_token_cfg_pass(model):
        audio = model.generate(
            **inputs,
            max_new_tokens=request.max_frames,
            guidance_scale=request.settings.cfg_scale,
            num_diffusion_steps=request.settings.diffusion_steps,
            streamer=counter,
        )[0]
    samples = np.zeros(0, dtype=np.float32) if audio is None else audio.float().cpu().numpy().reshape(-1)
    stacked = torch.cat(latents, dim=0) if latents else torch.zeros(0, model.config.audio_config.hidden_size)
    return SegmentAudio(
        audio=samples.astype(np.float32, copy=False),
        latents=stacked,
        frames=counter.frames,
        reached_frame_budget=counter.frames >= request.max_frames,
    )


def _model_inputs(loaded: LoadedModel, request: SegmentRequest) -> dict[str, torch.Tensor]:
    processor = loaded.processor
    prompt = build_prompt_text(
        request.text, processor.audio_bos_token, processor.audio_token, processor.audio_eos_token
    )
    voices = [
        np.asarray(voice, dtype=np.float32) for voice in voice_samples_in_prompt_order(request.text, request.voices)
    ]
    batch = processor(text=[prompt], audio=voices, sampling_rate=SAMPLE_RATE, return_tensors="pt")
    inputs = {}
    for name, value in batch.items():
        if isinstance(value, torch.Tensor):
            value = value.to(loaded.device)
            if value.is_floating_point():
                value = value.to(loaded.dtype)
        inputs[name] = value
    return inputs


@contextlib.contextmanager
def _recording_latents(model: torch.nn.Module) -> Iterator[list[torch.Tensor]]:
    """Collect every latent `generate()` samples, in order, as [n, latent_dim] float32 CPU tensors."""
    recorded: list[torch.Tensor] = []
    sample = model._sample_audio_latent

    def recording_sample(*args, **kwargs):  # type: ignore[no-untyped-def]
        latent = sample(*args, **kwargs)
        recorded.append(latent.reshape(-1, latent.shape[-1]).float().cpu())
        return latent

    model._sample_audio_latent = recording_sample
    try:
        yield recorded
    finally:
        del model._sample_audio_latent


@contextlib.contextmanager
def _without_token_cfg_pass(model: torch.nn.Module) -> Iterator[None]:
    get_processors = model._get_logits_processor

    def processors_without_token_cfg(*args, **kwargs) -> LogitsProcessorList:  # type: ignore[no-untyped-def]
        processors = get_processors(*args, **kwargs)
        return LogitsProcessorList(
            p for p in processors if not isinstance(p, UnbatchedClassifierFreeGuidanceLogitsProcessor)
        )

    model._get_logits_processor = processors_without_token_cfg
    try:
        yield
    finally:
        del model._get_logits_processor

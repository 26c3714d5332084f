"""The reference path: one segment through transformers' own `VibeVoiceForConditionalGeneration.generate()`.

voxcast serves through its engine (`pipeline.engine`); this path stays as the yardstick: parity tests
check the engine's audio against it, and benchmarks measure the engine's speed against it.

Two things are added around `generate()`, both on the model instance for the duration of one call:
- the acoustic latents are recorded as the diffusion head produces them (`generate()` returns only audio);
- by default, the redundant token-level CFG pass is dropped: a generation config with `guidance_scale`
  set makes transformers add `UnbatchedClassifierFreeGuidanceLogitsProcessor`, a third LM pass per frame
  whose scores only reach VibeVoice's constrained choice among a handful of tokens. `guidance_scale`
  still drives the diffusion CFG, which is where VibeVoice uses it. Benchmarks report both ways.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch
from transformers.generation import LogitsProcessorList, UnbatchedClassifierFreeGuidanceLogitsProcessor
from transformers.generation.streamers import BaseStreamer

from pipeline.generation import FrameCallback, SegmentAudio, SegmentRequest, prompt_inputs
from pipeline.model_loading import LoadedModel
from pipeline.prompt import build_prompt_text, voice_samples_in_prompt_order
from tokenizer.rates import SAMPLE_RATE


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


def reference_generate_segment(
    loaded: LoadedModel,
    request: SegmentRequest,
    on_frame: FrameCallback | None = None,
    *,
    token_cfg_pass: bool = False,
) -> SegmentAudio:
    """Generate one segment with transformers' `generate()`; `on_frame(frames_so_far)` reports progress.

    Randomness (the σ-VAE noise on voice latents and each frame's initial diffusion noise) comes from the
    global torch generator, seeded from `request.settings.seed`. `token_cfg_pass=True` keeps the third LM
    pass transformers adds for `guidance_scale`, as shipped.
    """
    model = loaded.model
    inputs = prompt_inputs(loaded, request.text, request.voices).as_model_kwargs(loaded.device, loaded.dtype)
    counter = _FrameCounter(model.config.audio_token_id, on_frame)
    torch.manual_seed(request.settings.seed)
    skip_token_cfg = contextlib.nullcontext() if token_cfg_pass else _without_token_cfg_pass(model)
    with torch.inference_mode(), _recording_latents(model) as latents, skip_token_cfg:
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


class _BatchFrameCounter(BaseStreamer):
    """Per-row frame callbacks for a static batch, up to each row's own frame budget."""

    def __init__(self, audio_token_id: int, budgets: list[int], on_frame: Callable[[int], None]) -> None:
        self.audio_token_id = audio_token_id
        self.budgets = budgets
        self.frames = [0] * len(budgets)
        self.on_frame = on_frame
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        for row, token in enumerate(value.reshape(-1).tolist()):
            if token == self.audio_token_id and self.frames[row] < self.budgets[row]:
                self.frames[row] += 1
                self.on_frame(row)

    def end(self) -> None:
        """Nothing to flush: frames are reported as they come."""


def hf_static_batch_generate(
    loaded: LoadedModel,
    requests: Sequence[SegmentRequest],
    on_frame: Callable[[int], None],
    *,
    token_cfg_pass: bool = False,
) -> None:
    """Run `requests` as one static `generate()` batch (left-padded prompts), as a batching demo would.

    The batch starts together and runs until its longest request is done; `on_frame(row)` reports each
    row's frames up to its own budget (frames a row makes past it are the static batch's waste). Used by
    benchmarks; the audio itself is not kept.
    """
    processor, model = loaded.processor, loaded.model
    prompts, voices = [], []
    for request in requests:
        inputs_text = request.text
        prompts.append(
            build_prompt_text(inputs_text, processor.audio_bos_token, processor.audio_token, processor.audio_eos_token)
        )
        voices += [np.asarray(v, dtype=np.float32) for v in voice_samples_in_prompt_order(inputs_text, request.voices)]
    side = processor.tokenizer.padding_side
    processor.tokenizer.padding_side = "left"
    try:
        batch = processor(text=prompts, audio=voices, sampling_rate=SAMPLE_RATE, return_tensors="pt", padding=True)
    finally:
        processor.tokenizer.padding_side = side
    inputs = {
        name: value.to(loaded.device, loaded.dtype) if value.is_floating_point() else value.to(loaded.device)
        for name, value in batch.items()
    }
    budgets = [request.max_frames for request in requests]
    counter = _BatchFrameCounter(model.config.audio_token_id, budgets, on_frame)
    skip_token_cfg = contextlib.nullcontext() if token_cfg_pass else _without_token_cfg_pass(model)
    with torch.inference_mode(), skip_token_cfg:
        model.generate(
            **inputs,
            max_new_tokens=max(budgets),
            guidance_scale=requests[0].settings.cfg_scale,
            num_diffusion_steps=requests[0].settings.diffusion_steps,
            streamer=counter,
        )

"""The reference path: one segment through transformers' own `VibeVoiceForConditionalGeneration.generate()`.

voxcast serves through its engine (`pipeline.engine`); this path stays as the yardstick: parity tests
check the engine's audio against it, and benchmarks measure the engine's speed against it.

Where transformers' port differs from the original VibeVoice generation loop, the reference follows the original
(the yardstick is the original; the port is only how it is run here). Around `generate()`, all on the model
instance for the duration of one call:
- the original's two rules the port lacks (`port_only=False`, the default):
  - after a speech-end token, the acoustic decoder's and semantic encoder's streaming caches are zeroed before
    they stream the next frame (the port carries them over);
  - the negative (CFG) branch's RoPE positions come from its attention mask, as the original's generation
    utilities (transformers 4.51) derive them: after a speech start, whose reset mask hides every entry the
    branch held, the new entries count from 0 again (the port counts on from the cache's length; the attention
    is the same but for rounding, which grows with the position);
- the acoustic latents are recorded as the diffusion head produces them (`generate()` returns only audio);
- by default, the redundant token-level CFG pass is dropped: a generation config with `guidance_scale`
  set makes transformers add `UnbatchedClassifierFreeGuidanceLogitsProcessor`, a third LM pass per frame
  whose scores only reach VibeVoice's constrained choice among a handful of tokens. `guidance_scale`
  still drives the diffusion CFG, which is where VibeVoice uses it. Benchmarks report both ways.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from transformers.generation import LogitsProcessorList, UnbatchedClassifierFreeGuidanceLogitsProcessor
from transformers.generation.streamers import BaseStreamer

from core.audio_rates import SAMPLE_RATE
from models.loading import LoadedModel
from models.segment_io import FrameCallback, SegmentAudio, SegmentInputs, prompt_inputs
from script_text.prompt import build_prompt_text, voice_samples_in_prompt_order


class _FrameCounter(BaseStreamer):
    """Counts audio frames as `generate()` emits tokens (each audio-diffusion token is one frame), and notes each
    speech end: `generate()` streams a token before it decodes that step's frame."""

    def __init__(self, audio_token_id: int, speech_end_token_id: int, on_frame: FrameCallback | None) -> None:
        self.audio_token_id = audio_token_id
        self.speech_end_token_id = speech_end_token_id
        self.on_frame = on_frame
        self.frames = 0
        self.streams_to_zero: set[str] = set()  # codec streams a speech end has ended and not yet zeroed
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:  # generate() first streams the whole prompt
            self._prompt_seen = True
            return
        if bool((value == self.speech_end_token_id).any()):
            self.streams_to_zero = {"acoustic", "semantic"}
        self.frames += int((value == self.audio_token_id).sum())
        if self.on_frame is not None:
            self.on_frame(self.frames)

    def end(self) -> None:
        """Nothing to flush: frames are reported as they come."""


def reference_generate_segment(
    loaded: LoadedModel,
    request: SegmentInputs,
    on_frame: FrameCallback | None = None,
    *,
    token_cfg_pass: bool = False,
    port_only: bool = False,
) -> SegmentAudio:
    """Generate one segment with transformers' `generate()` and the original's rules; `on_frame(frames_so_far)`
    reports progress.

    Randomness (the σ-VAE noise on voice latents and each frame's initial diffusion noise) comes from the
    global torch generator, seeded from `request.settings.seed`. `token_cfg_pass=True` keeps the third LM
    pass transformers adds for `guidance_scale`, as shipped; `port_only=True` runs the port without the
    original's rules (tests show where the two differ).
    """
    # The patched internals and `generate`'s VibeVoice keywords are outside transformers' declared types.
    model: Any = loaded.model
    inputs = prompt_inputs(loaded, request.text, request.voices).as_model_kwargs(loaded.device, loaded.dtype)
    counter = _FrameCounter(model.config.audio_token_id, model.config.audio_eos_token_id, on_frame)
    torch.manual_seed(request.settings.seed)
    skip_token_cfg = contextlib.nullcontext() if token_cfg_pass else _without_token_cfg_pass(model)
    originals_rules = contextlib.nullcontext() if port_only else _the_originals_rules(model, counter)
    with torch.inference_mode(), _recording_latents(model) as latents, skip_token_cfg, originals_rules:
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
def _recording_latents(model: Any) -> Iterator[list[torch.Tensor]]:
    """Collect every latent `generate()` samples, in order, as [n, latent_dim] float32 CPU tensors."""
    recorded: list[torch.Tensor] = []
    sample = model._sample_audio_latent

    def recording_sample(*args, **kwargs):
        latent = sample(*args, **kwargs)
        recorded.append(latent.reshape(-1, latent.shape[-1]).float().cpu())
        return latent

    model._sample_audio_latent = recording_sample
    try:
        yield recorded
    finally:
        del model._sample_audio_latent


@contextlib.contextmanager
def _the_originals_rules(model: Any, counter: _FrameCounter) -> Iterator[None]:
    """The original's codec reset at a speech end and its negative-branch positions, for one `generate()` call."""
    inner = model.model
    decode, encode = inner.audio_tower.decode, inner.semantic_tokenizer_encoder.forward
    step_negative = model._step_negative_branch

    def zeroed_after_speech_end(stream: str, call: Callable) -> Callable:
        def zero_then_call(*args, padding_cache=None, **kwargs):
            if stream in counter.streams_to_zero and padding_cache is not None:
                for layer in padding_cache.layers.values():
                    layer.cache.zero_()
            counter.streams_to_zero.discard(stream)
            return call(*args, padding_cache=padding_cache, **kwargs)

        return zero_then_call

    def negative_step_positioned_by_its_mask(*args, **kwargs):
        *leading, negative_model_kwargs, negative_forward = args
        mask = negative_model_kwargs["attention_mask"]
        positioned = {**negative_model_kwargs, "position_ids": mask.long().cumsum(-1) - 1}
        condition, negative_input_ids, negative_model_kwargs = step_negative(
            *leading, positioned, negative_forward, **kwargs
        )
        negative_model_kwargs.pop("position_ids", None)  # derived from the mask again at the next step
        return condition, negative_input_ids, negative_model_kwargs

    inner.audio_tower.decode = zeroed_after_speech_end("acoustic", decode)
    inner.semantic_tokenizer_encoder.forward = zeroed_after_speech_end("semantic", encode)
    model._step_negative_branch = negative_step_positioned_by_its_mask
    try:
        yield
    finally:  # back to the classes' methods
        del inner.audio_tower.decode, inner.semantic_tokenizer_encoder.forward, model._step_negative_branch


@contextlib.contextmanager
def _without_token_cfg_pass(model: Any) -> Iterator[None]:
    get_processors = model._get_logits_processor

    def processors_without_token_cfg(*args, **kwargs) -> LogitsProcessorList:
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
    requests: Sequence[SegmentInputs],
    on_frame: Callable[[int], None],
    *,
    token_cfg_pass: bool = False,
) -> None:
    """Run `requests` as one static `generate()` batch (left-padded prompts), as a batching demo would.

    The batch starts together and runs until its longest request is done; `on_frame(row)` reports each
    row's frames up to its own budget (frames a row makes past it are the static batch's waste). Used by
    benchmarks; the audio itself is not kept.
    """
    processor = loaded.processor
    model: Any = loaded.model  # `generate` with VibeVoice's keywords, which transformers' types do not declare
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

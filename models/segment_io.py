"""What one generation takes and gives, whichever path runs it (the engine, or transformers' `generate()`).

The prompt's token ids and voice samples come from the checkpoint's own processor (`prompt_inputs`); the
quality knobs are `GenerationSettings`; the result is `SegmentAudio`. The engine (`pipeline.engine`) and the
reference path (`models.reference`) both speak these, so a parity test compares like with like.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch

from core.audio_rates import SAMPLE_RATE
from script_text.prompt import SegmentText, build_prompt_text, voice_samples_in_prompt_order

if TYPE_CHECKING:  # a type only: the engine's requests carry `PromptInputs` without importing transformers
    from models.loading import LoadedModel

FrameCallback = Callable[[int], None]


@dataclass(frozen=True)
class PromptInputs:
    """The processor's output for one request: token ids, voice samples and their padding mask."""

    input_ids: torch.Tensor  # [1, prompt_tokens]
    input_values: torch.Tensor | None  # [voices, 1, samples] or None without voices
    padding_mask: torch.Tensor | None  # [voices, samples]

    @property
    def length(self) -> int:
        return int(self.input_ids.shape[1])

    @property
    def voice_samples(self) -> int:
        """The voices' samples as the encoders take them (each padded to the longest): what a start's work follows."""
        return 0 if self.input_values is None else self.input_values.numel()

    def as_model_kwargs(self, device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """The inputs as `generate()` takes them, on `device`, voice samples in `dtype`."""
        kwargs = {
            "input_ids": self.input_ids.to(device),
            "attention_mask": torch.ones_like(self.input_ids, device=device),
        }
        if self.input_values is not None:
            kwargs["input_values"] = self.input_values.to(device, dtype)
            assert self.padding_mask is not None  # the processor gives the mask with the voices' samples
            kwargs["padding_mask"] = self.padding_mask.to(device)
        return kwargs


@dataclass(frozen=True)
class GenerationSettings:
    """Quality knobs of one generation; defaults are the original demo's."""

    cfg_scale: float = 1.3
    diffusion_steps: int = 10
    seed: int = 0


class SegmentInputs(Protocol):
    """What any path needs to generate one segment (`pipeline.generation.SegmentRequest` is one): the text, a
    voice (24 kHz mono float32) per speaker, a frame budget and the quality knobs."""

    @property
    def text(self) -> SegmentText: ...

    @property
    def voices(self) -> Mapping[int, np.ndarray]: ...

    @property
    def max_frames(self) -> int: ...

    @property
    def settings(self) -> GenerationSettings: ...


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

"""Tiny random VibeVoice checkpoints with the real structure, for tests and for trying voxcast anywhere.

No machine of ours reaches a model hub, so tests build their own checkpoints: the same modules and file
layout as `vibevoice/VibeVoice-1.5B-hf` (or the original `microsoft/VibeVoice-1.5B`), with small sizes and
a byte-level BPE tokenizer trained on the spot. They load through exactly the code a user's checkpoint
takes. The acoustic tokenizer keeps its real 3200x downsampling, so 7.5 frames per second of 24 kHz audio
hold here too.

The language model is nudged to keep speaking: one hidden dimension carries a constant offset (from the
token embeddings and the connectors' output bias) and the LM head reads the audio-diffusion token from it.
A purely random LM would often end a segment at its first step, leaving nothing to test; with the nudge a
segment runs to its frame budget, so lengths are predictable. Everything else is random: the audio is noise.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    PreTrainedTokenizerFast,
    VibeVoiceAcousticTokenizerFeatureExtractor,
    VibeVoiceConfig,
    VibeVoiceForConditionalGeneration,
    VibeVoiceProcessor,
)

from pipeline.checkpoint_layout import original_config_from_hf, to_original_state_dict

Layout = Literal["hf", "original"]

SPECIAL_TOKENS = ("<|endoftext|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>")
VOCAB_SIZE = 384
SPEAKING_OFFSET = 8.0

_TRAINING_TEXT = """
Transform the text provided by various speakers into speech output, utilizing the distinct voice of each
respective speaker. Voice input: Speaker 0: Speaker 1: Speaker 2: Speaker 3: Text input: Speech output:
Welcome to the show. Today we talk about technology, science, music and the news of the week.
Hello and thank you for joining us. It's great to be here. What do you think about that?
The quick brown fox jumps over the lazy dog. 0123456789 , . ! ? ' " - ( ) : ;
"""


def tiny_config() -> VibeVoiceConfig:
    """A VibeVoice config with the real component structure at toy sizes."""
    tokenizer_sizes = {
        "num_filters": 4,
        "depths": [1, 1, 1, 1, 1, 1, 1],
        "downsampling_ratios": [2, 2, 4, 5, 5, 8],
        "kernel_size": 7,
    }
    return VibeVoiceConfig(
        text_config={
            "model_type": "qwen2",
            "vocab_size": VOCAB_SIZE,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 8192,
            "tie_word_embeddings": False,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        },
        audio_config={"model_type": "vibevoice_acoustic_tokenizer", "hidden_size": 8, **tokenizer_sizes},
        semantic_model_config={
            "model_type": "vibevoice_acoustic_tokenizer_encoder",
            "hidden_size": 16,
            **tokenizer_sizes,
        },
        diffusion_head_config={"num_hidden_layers": 1, "intermediate_size": 48},
    )


def train_tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with the special tokens VibeVoice's processor looks up by name."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(SPECIAL_TOKENS),
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_TRAINING_TEXT.split("\n"), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        model_max_length=8192,
    )


def build_tiny_model(
    tokenizer: PreTrainedTokenizerFast, seed: int = 0, config: VibeVoiceConfig | None = None
) -> VibeVoiceForConditionalGeneration:
    """Random weights (seeded) with special token ids taken from `tokenizer`, nudged to keep speaking.

    `config` defaults to the tiny sizes; benchmarks pass the real 1.5B config (speed does not depend on
    the weights' values) and build it under a `torch.device` context to allocate it on the GPU directly.
    """
    config = config or tiny_config()
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}
    config.pad_token_id = config.eos_token_id = ids["<|endoftext|>"]
    config.audio_bos_token_id = ids["<|vision_start|>"]
    config.audio_eos_token_id = ids["<|vision_end|>"]
    config.audio_token_id = ids["<|vision_pad|>"]
    config.text_config.pad_token_id = config.text_config.eos_token_id = config.eos_token_id
    torch.manual_seed(seed)
    model = VibeVoiceForConditionalGeneration(config).eval()
    _make_tokenizers_sensitive(model)
    _nudge_towards_speaking(model)
    model.generation_config.pad_token_id = config.pad_token_id
    model.generation_config.eos_token_id = config.eos_token_id
    return model


@torch.no_grad()
def _make_tokenizers_sensitive(model: VibeVoiceForConditionalGeneration) -> None:
    """Variance-preserving weights in the acoustic and semantic tokenizers.

    The default initialisation (std 0.02, layer scales of 1e-6) shrinks the signal at every one of the
    seven stages, so a random decoder's audio barely depends on its latents. Tests compare audio to prove
    latents equal; that needs audio that moves when the latents move.
    """
    inner = model.model
    for tower in (inner.audio_tower, inner.semantic_tokenizer_encoder):
        for name, parameter in tower.named_parameters():
            if name.endswith("gamma"):
                parameter.fill_(0.5)
            elif parameter.dim() > 1:
                fan_in = parameter[0].numel() if "convtr" not in name else parameter.shape[0] * parameter.shape[2]
                parameter.normal_(0.0, fan_in**-0.5)


@torch.no_grad()
def _nudge_towards_speaking(model: VibeVoiceForConditionalGeneration) -> None:
    config = model.config
    inner = model.model
    inner.language_model.embed_tokens.weight[:, 0] = SPEAKING_OFFSET
    inner.multi_modal_projector.linear_2.bias[0] = SPEAKING_OFFSET
    inner.semantic_connector.linear_2.bias[0] = SPEAKING_OFFSET
    model.lm_head.weight[config.audio_token_id, 0] = 1.0


def write_tiny_checkpoint(directory: str | Path, layout: Layout = "hf", seed: int = 0) -> Path:
    """Write a tiny random checkpoint to `directory` in the given layout and return the folder.

    `hf` is the transformers layout (`save_pretrained` of model and processor). `original` mimics
    `microsoft/VibeVoice-1.5B`: a `model_type: vibevoice` config with `acoustic_tokenizer_config`,
    `decoder_config` and friends, weights named `model.acoustic_tokenizer.*`, `model.prediction_head.*`,
    `model.acoustic_connector.*`, and a `preprocessor_config.json` as the original processor wrote it,
    naming the tokenizer to use by path instead of by hub id.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tiny_tokenizer()
    model = build_tiny_model(tokenizer, seed=seed)
    feature_extractor = VibeVoiceAcousticTokenizerFeatureExtractor()
    if layout == "hf":
        model.save_pretrained(directory)
        processor = VibeVoiceProcessor(feature_extractor, tokenizer)
        processor.save_pretrained(directory)
    elif layout == "original":
        _write_original_layout(directory, model, tokenizer)
    else:
        raise ValueError(f"unknown checkpoint layout {layout!r}; use 'hf' or 'original'")
    return directory


def _write_original_layout(
    directory: Path, model: VibeVoiceForConditionalGeneration, tokenizer: PreTrainedTokenizerFast
) -> None:
    from safetensors.torch import save_file

    # The original checkpoints ship no tokenizer: their processor config names the Qwen tokenizer to load
    # (`Qwen/Qwen2.5-1.5B`). The tiny one names a folder beside its config instead, resolved the same way.
    tokenizer_directory = directory / "qwen-tokenizer"
    state_dict = to_original_state_dict(model.state_dict())
    save_file({key: value.contiguous() for key, value in state_dict.items()}, directory / "model.safetensors")
    (directory / "config.json").write_text(json.dumps(original_config_from_hf(model.config), indent=2))
    (directory / "preprocessor_config.json").write_text(
        json.dumps(
            {
                "processor_class": "VibeVoiceProcessor",
                "speech_tok_compress_ratio": 3200,
                "db_normalize": True,
                "audio_processor": {
                    "feature_extractor_type": "VibeVoiceTokenizerProcessor",
                    "sampling_rate": 24000,
                    "normalize_audio": True,
                    "target_dB_FS": -25,
                    "eps": 1e-06,
                },
                "language_model_pretrained_name": tokenizer_directory.name,
            },
            indent=2,
        )
    )
    tokenizer.save_pretrained(tokenizer_directory)

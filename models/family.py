"""The published VibeVoice family: each member's language model, and which member a loaded checkpoint is.

The members share the speech tokenizers (7.5 frames a second) and the diffusion head's structure; they differ in
their Qwen2.5 language model, and so in their context: VibeVoice-1.5B holds 65,536 positions (about 90 minutes
of a podcast, as published), VibeVoice-Large 32,768 (about 45). The shapes here are the original code's configs
(`vibevoice/configs/qwen2.5_1.5b_64k.json`, `qwen2.5_7b_32k.json`), which the checkpoints' own configs repeat.

A checkpoint is recognised by what its tiny test copies keep of the published one (vocabulary, context, query
heads per K/V head), not by its hidden size: a tiny Large-shaped checkpoint is named VibeVoice-Large too, so the
limits a user meets are the ones the tests meet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from script_text.plan import ModelContext


@dataclass(frozen=True)
class FamilyMember:
    """One published member: its name and its Qwen2.5 language model's shapes."""

    name: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    max_position_embeddings: int  # the context: prompt (text and voices) plus frames of one generation
    tie_word_embeddings: bool
    qwen_tokenizer: str  # the tokenizer the original layout's `preprocessor_config.json` names by hub id

    @property
    def queries_per_key_value_head(self) -> int:
        return self.num_attention_heads // self.num_key_value_heads

    def text_config(self) -> dict[str, Any]:
        """The Qwen2 config of its language model, as transformers' `VibeVoiceConfig(text_config=...)` takes it."""
        return {
            "model_type": "qwen2",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": self.tie_word_embeddings,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        }

    def matches(self, text_config: Any) -> bool:
        """Whether a Qwen2 config (transformers' `text_config`) is this member's, at any hidden size."""
        heads, key_value_heads = text_config.num_attention_heads, text_config.num_key_value_heads
        return (
            text_config.vocab_size == self.vocab_size
            and text_config.max_position_embeddings == self.max_position_embeddings
            and heads % key_value_heads == 0
            and heads // key_value_heads == self.queries_per_key_value_head
        )


VIBEVOICE_1_5B = FamilyMember(
    name="VibeVoice-1.5B",
    hidden_size=1536,
    intermediate_size=8960,
    num_hidden_layers=28,
    num_attention_heads=12,
    num_key_value_heads=2,
    vocab_size=151_936,
    max_position_embeddings=65_536,
    tie_word_embeddings=True,
    qwen_tokenizer="Qwen/Qwen2.5-1.5B",
)
VIBEVOICE_LARGE = FamilyMember(
    name="VibeVoice-Large",
    hidden_size=3584,
    intermediate_size=18_944,
    num_hidden_layers=28,
    num_attention_heads=28,
    num_key_value_heads=4,
    vocab_size=152_064,
    max_position_embeddings=32_768,
    tie_word_embeddings=False,  # Qwen2.5-7B's head is its own weight, stored beside the embeddings
    qwen_tokenizer="Qwen/Qwen2.5-7B",
)
FAMILY = (VIBEVOICE_1_5B, VIBEVOICE_LARGE)
SIZES = {"1.5b": VIBEVOICE_1_5B, "7b": VIBEVOICE_LARGE}  # the benchmarks' `--size` names


def member_of(text_config: Any) -> FamilyMember | None:
    """The published member a checkpoint's language model is shaped as, or None for any other (a toy, a fine-tune
    with another vocabulary)."""
    return next((member for member in FAMILY if member.matches(text_config)), None)


def model_context(text_config: Any, source: str) -> ModelContext:
    """What one generation may hold on this model, named as a user knows it: the member's name, else its source."""
    member = member_of(text_config)
    return ModelContext(member.name if member else source, text_config.max_position_embeddings)

"""A tiny random instruct (chat) LLM checkpoint with the real Qwen2 structure, for tests and for trying
`voxcast script` anywhere.

Like `tiny_checkpoint` for VibeVoice: the same model class, file layout and chat-template mechanics as
`Qwen/Qwen2.5-1.5B-Instruct`, at toy sizes, with the byte-level BPE tokenizer trained on the spot (plus
Qwen's `<|im_start|>`/`<|im_end|>` chat tokens) so it loads through exactly the code a real checkpoint
takes. Its weights are random: whatever it says is garbage, which is what the tests of the drafting
stage's validation, retries and failure message need.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from models.tiny_checkpoint import train_tiny_tokenizer

CHAT_START, CHAT_END = "<|im_start|>", "<|im_end|>"

# Qwen2.5's ChatML layout, without its tool-calling branches.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def train_tiny_chat_tokenizer() -> PreTrainedTokenizerFast:
    """The tiny VibeVoice tokenizer with the chat tokens and template of a Qwen instruct model."""
    tokenizer = train_tiny_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": [CHAT_START, CHAT_END]})
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_instruct_model(tokenizer: PreTrainedTokenizerFast, seed: int = 0) -> Qwen2ForCausalLM:
    """Random Qwen2 weights (seeded) sized for `tokenizer`; a reply ends at `<|im_end|>` as Qwen's does."""
    end_id = tokenizer.convert_tokens_to_ids(CHAT_END)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        tie_word_embeddings=True,
        eos_token_id=end_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).eval()
    model.generation_config.eos_token_id = end_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def write_tiny_instruct_checkpoint(directory: str | Path, seed: int = 0) -> Path:
    """Write a tiny random instruct checkpoint (model, tokenizer, chat template) to `directory`; return it."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tiny_chat_tokenizer()
    build_tiny_instruct_model(tokenizer, seed=seed).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory

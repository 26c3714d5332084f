"""VibeVoice-Large (Qwen2.5-7B as the LM, 32K context) through the real loading code, in both checkpoint layouts.

Tiny checkpoints shaped after Large (`models.family.VIBEVOICE_LARGE`): its 152,064-token vocabulary, 32,768
positions, seven query heads per K/V head and an untied head, at hidden sizes that build in a second. Each loads and
generates frames through the engine, matching transformers' `generate()` for the same request; the published
shapes themselves are checked on the meta device (no memory), where the CPU could not hold the 9B model's weights.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import VibeVoiceForConditionalGeneration

from models.checkpoint_layout import hf_config_from_original, hf_key, original_config_from_hf, original_key
from models.family import VIBEVOICE_1_5B, VIBEVOICE_LARGE, member_of, model_context
from models.loading import LoadedModel, load_model
from models.reference import reference_generate_segment
from models.segment_io import GenerationSettings
from models.tiny_checkpoint import published_config, random_model_bytes, tiny_config, write_tiny_checkpoint
from pipeline.engine.engine import EngineConfig
from pipeline.engine.factory import engine_for_model
from pipeline.generation import SegmentDone, SegmentGeneration, SegmentRequest
from script_text.prompt import SegmentText
from tests.synthetic_audio import voice_like

FRAMES = 6
AUDIO_TOLERANCE = 1e-4  # as the engine's parity tests: float32 differs only in the order of additions


@pytest.fixture(scope="module")
def large_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny Large-shaped checkpoints in both layouts (attentive: every key moves the output, so a K/V head grouped
    wrongly would show in the audio)."""
    return {
        layout: write_tiny_checkpoint(
            tmp_path_factory.mktemp(f"large-{layout}"), layout=layout, attentive=True, member=VIBEVOICE_LARGE
        )
        for layout in ("hf", "original")
    }


@pytest.fixture(scope="module")
def large_models(large_checkpoints: dict[str, Path]) -> dict[str, LoadedModel]:
    return {layout: load_model(str(folder), device="cpu") for layout, folder in large_checkpoints.items()}


@pytest.fixture(params=["hf", "original"])
def large(request: pytest.FixtureRequest, large_models: dict[str, LoadedModel]) -> LoadedModel:
    return large_models[request.param]


def segment_request() -> SegmentRequest:
    text = SegmentText(((0, "Hello and welcome to the show."), (1, "Thanks, glad to be here.")))
    voices = {0: voice_like(1.5, 24_000, seed=0), 1: voice_like(2.0, 24_000, seed=1)}
    return SegmentRequest(text, voices, FRAMES, GenerationSettings(diffusion_steps=3))


def test_a_tiny_large_checkpoint_loads_with_larges_shapes(large: LoadedModel) -> None:
    text = large.model.config.text_config
    assert (text.vocab_size, text.max_position_embeddings) == (152_064, 32_768)
    assert text.num_attention_heads // text.num_key_value_heads == 7 and text.num_key_value_heads > 1
    assert large.model.lm_head.weight.shape == (152_064, text.hidden_size)
    # Qwen2.5-7B's head is its own weight: loaded from the checkpoint, not tied to the embeddings.
    assert not large.model.config.tie_word_embeddings
    assert large.model.lm_head.weight.data_ptr() != large.model.model.language_model.embed_tokens.weight.data_ptr()
    assert member_of(text) is VIBEVOICE_LARGE
    context = model_context(text, large.source)
    assert context.holds() == "VibeVoice-Large holds 32,768 tokens (about 45 minutes)"


def test_a_tiny_large_checkpoint_generates_as_transformers_does(large: LoadedModel) -> None:
    """Frames end to end through the engine (prompt with voices, LM, diffusion head, acoustic decoder), the same
    audio as `generate()` gives for the request alone."""
    engine = engine_for_model(large, EngineConfig(slots=2, kv_blocks=64))
    assert engine.spec.max_context == 32_768
    generation = SegmentGeneration.start(engine, {0: segment_request()})
    updates = []
    while generation.running:
        updates += generation.updates()
    (done,) = [update for update in updates if isinstance(update, SegmentDone)]
    result = done.result
    assert result.frames == FRAMES and np.isfinite(result.audio).all() and np.abs(result.audio).max() > 0
    reference = reference_generate_segment(large, segment_request())
    np.testing.assert_allclose(result.audio, reference.audio, atol=AUDIO_TOLERANCE)


def test_both_layouts_load_to_the_same_weights(large_models: dict[str, LoadedModel]) -> None:
    original, reference = large_models["original"], large_models["hf"]
    assert original.layout == "original"
    ours, theirs = original.model.state_dict(), reference.model.state_dict()
    assert ours.keys() == theirs.keys() and "lm_head.weight" in ours
    assert all(torch.equal(ours[key], theirs[key].to(torch.bfloat16).to(theirs[key].dtype)) for key in ours)


def test_the_original_large_checkpoint_is_stored_as_the_published_one(large_checkpoints: dict[str, Path]) -> None:
    """Its untied head stored beside the embeddings, its 32K decoder config, the 7B's Qwen tokenizer named."""
    folder = large_checkpoints["original"]
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert {"lm_head.weight", "model.language_model.embed_tokens.weight"} <= set(index["weight_map"])
    head = load_file(folder / index["weight_map"]["lm_head.weight"])["lm_head.weight"]
    assert head.shape[0] == 152_064 and head.dtype == torch.bfloat16
    config = json.loads((folder / "config.json").read_text())
    decoder = config["decoder_config"]
    assert (decoder["vocab_size"], decoder["max_position_embeddings"]) == (152_064, 32_768)
    assert not config["tie_word_embeddings"] and not decoder["tie_word_embeddings"]
    preprocessor = json.loads((folder / "preprocessor_config.json").read_text())
    assert preprocessor["language_model_pretrained_name"] == "Qwen/Qwen2.5-7B"
    assert (folder / "Qwen/Qwen2.5-7B" / "tokenizer.json").exists()


def test_the_published_large_shapes_and_their_original_layout() -> None:
    """The full-size config (built on the meta device: no memory): Qwen2.5-7B's shapes, every weight's name mapped
    to the original layout and back, and its original config.json read back to the same LM."""
    config = published_config(VIBEVOICE_LARGE)
    with torch.device("meta"):
        model = VibeVoiceForConditionalGeneration(config)
    attention = model.model.language_model.layers[0].self_attn
    assert attention.q_proj.weight.shape == (28 * 128, 3584) and attention.k_proj.weight.shape == (4 * 128, 3584)
    assert model.model.language_model.layers[0].mlp.up_proj.weight.shape == (18_944, 3584)
    assert len(model.model.language_model.layers) == 28
    assert model.model.diffusion_head.cond_proj.weight.shape[1] == 3584  # the head is as wide as the LM
    assert model.lm_head.weight.shape == (152_064, 3584)
    assert 9.0e9 < sum(parameter.numel() for parameter in model.parameters()) < 9.6e9  # "9B" on the model card
    names = list(model.state_dict())
    assert [hf_key(original_key(name)) for name in names] == names
    token_ids = {"pad": 151_643, "eos": 151_643, "audio_bos": 151_652, "audio_eos": 151_653, "audio": 151_654}
    read_back = hf_config_from_original(original_config_from_hf(config), token_ids).text_config
    for name in ("hidden_size", "num_attention_heads", "num_key_value_heads", "vocab_size", "tie_word_embeddings"):
        assert getattr(read_back, name) == getattr(config.text_config, name)
    assert read_back.max_position_embeddings == 32_768 and member_of(read_back) is VIBEVOICE_LARGE


def test_each_member_is_told_apart_by_what_its_tiny_copies_keep() -> None:
    assert member_of(tiny_config(VIBEVOICE_LARGE).text_config) is VIBEVOICE_LARGE
    assert member_of(tiny_config(VIBEVOICE_1_5B).text_config) is VIBEVOICE_1_5B
    assert member_of(published_config(VIBEVOICE_1_5B).text_config) is VIBEVOICE_1_5B
    toy = tiny_config().text_config  # the everyday tiny checkpoint: a 3,072-token toy, no member's
    assert member_of(toy) is None
    assert model_context(toy, "tiny-random").holds() == "tiny-random holds 65,536 tokens (about 90 minutes)"


def test_a_benchmark_knows_what_the_large_shapes_take_before_it_builds_them() -> None:
    """`bench/engine.py --size 7b` refuses a device with less room than this (about 19 GiB in bf16: 9B weights, and
    a float32 draw of the 152,064 x 3,584 head); the 1.5B's shapes take about a third."""
    large = random_model_bytes("7b", torch.bfloat16)
    assert 18 * 2**30 < large < 20 * 2**30
    assert 4 * 2**30 < random_model_bytes("1.5b", torch.bfloat16) < large / 2.5

"""Model loading: both checkpoint layouts, the key mapping, and refusals with clear messages."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import VibeVoiceConfig, VibeVoiceForConditionalGeneration

from models.checkpoint_layout import hf_key, original_key, original_key_mapping
from models.loading import ModelLoadError, choose_dtype, detect_layout, load_model
from models.segment_io import prompt_inputs
from script_text.prompt import SegmentText
from tests.synthetic_audio import voice_like
from tokenizer.voice_prompt import prepare_voice_samples


def test_hf_layout_loads_every_weight(tiny_hf_checkpoint: Path) -> None:
    loaded = load_model(str(tiny_hf_checkpoint), device="cpu")
    assert loaded.layout == "hf"
    assert loaded.dtype == torch.float32
    saved = load_file(tiny_hf_checkpoint / "model.safetensors")
    state = loaded.model.state_dict()
    assert set(saved) <= set(state)
    assert all(torch.equal(state[key], value) for key, value in saved.items())


def test_original_layout_loads_to_the_same_weights(tiny_hf_checkpoint: Path, tiny_original_checkpoint: Path) -> None:
    assert detect_layout(tiny_original_checkpoint) == "original"
    original = load_model(str(tiny_original_checkpoint), device="cpu")
    reference = load_model(str(tiny_hf_checkpoint), device="cpu")
    assert original.layout == "original"
    ours, theirs = original.model.state_dict(), reference.model.state_dict()
    assert ours.keys() == theirs.keys()
    # stored in bf16, as the published checkpoint is, and loaded in float32 on the CPU
    assert all(torch.equal(ours[key], theirs[key].to(torch.bfloat16).to(theirs[key].dtype)) for key in ours)
    assert original.model.lm_head.weight is original.model.model.language_model.embed_tokens.weight
    for name in ("audio_bos_token_id", "audio_eos_token_id", "audio_token_id", "eos_token_id", "tie_word_embeddings"):
        assert getattr(original.model.config, name) == getattr(reference.model.config, name)
    assert original.model.config.audio_config.vae_std == pytest.approx(reference.model.config.audio_config.vae_std)
    # the older `rope_theta` spelling is read (a dropped one would leave Qwen2's default of 10,000)
    assert original.model.config.text_config.rope_parameters == reference.model.config.text_config.rope_parameters
    depths = original.model.config.audio_config.depths
    assert depths == reference.model.config.audio_config.depths and len(set(depths)) > 1


def test_an_original_layout_folder_gets_the_end_of_text_ids_for_generate(tiny_original_checkpoint: Path) -> None:
    # The original layout ships no generation config; generate() stops at its eos id, so loading must set it.
    assert not (tiny_original_checkpoint / "generation_config.json").exists()
    loaded = load_model(str(tiny_original_checkpoint), device="cpu")
    end_of_text = loaded.processor.tokenizer.convert_tokens_to_ids("<|endoftext|>")
    generation = loaded.model.generation_config
    assert (generation.eos_token_id, generation.pad_token_id) == (end_of_text, end_of_text)


def test_original_checkpoint_is_stored_as_the_published_one(tiny_original_checkpoint: Path) -> None:
    """Sharded bf16 with an index, the tied head not stored, the older config keys, the tokenizer named by hub id."""
    index = json.loads((tiny_original_checkpoint / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1 and not (tiny_original_checkpoint / "model.safetensors").exists()
    weights = {key: value for shard in shards for key, value in load_file(tiny_original_checkpoint / shard).items()}
    assert set(weights) == set(index["weight_map"])
    assert {value.dtype for value in weights.values()} == {torch.bfloat16}
    assert "lm_head.weight" not in weights and "model.language_model.embed_tokens.weight" in weights
    config = json.loads((tiny_original_checkpoint / "config.json").read_text())
    decoder = config["decoder_config"]
    assert config["tie_word_embeddings"] and decoder["tie_word_embeddings"]
    assert decoder["rope_theta"] == 1000000.0 and decoder["rope_scaling"] is None and "rope_parameters" not in decoder
    assert (config["torch_dtype"], decoder["torch_dtype"]) == ("bfloat16", "bfloat16")
    assert config["acoustic_tokenizer_config"]["encoder_depths"] == "1-1-1-1-1-1-2"
    preprocessor = json.loads((tiny_original_checkpoint / "preprocessor_config.json").read_text())
    assert preprocessor["language_model_pretrained_name"] == "Qwen/Qwen2.5-1.5B"
    assert not (tiny_original_checkpoint / "tokenizer.json").exists()


def test_original_checkpoint_really_uses_original_names(tiny_original_checkpoint: Path) -> None:
    index = json.loads((tiny_original_checkpoint / "model.safetensors.index.json").read_text())
    keys = set(index["weight_map"])
    assert any(key.startswith("model.acoustic_tokenizer.") for key in keys)
    assert any(key.startswith("model.prediction_head.") for key in keys)
    assert any(key.startswith("model.acoustic_connector.") for key in keys)
    assert "model.speech_scaling_factor" in keys
    assert not any(key.startswith(("model.audio_tower.", "model.diffusion_head.")) for key in keys)
    config = json.loads((tiny_original_checkpoint / "config.json").read_text())
    assert config["model_type"] == "vibevoice" and "acoustic_tokenizer_config" in config


@pytest.mark.parametrize(
    ("original", "expected"),
    [
        # Names as they stand in microsoft/VibeVoice-1.5B, mapped as transformers' conversion script maps them.
        (
            "model.acoustic_tokenizer.encoder.downsample_layers.0.0.conv.conv.weight",
            "model.audio_tower.encoder.stem.conv.conv.weight",
        ),
        (
            "model.acoustic_tokenizer.encoder.stages.0.2.mixer.conv.conv.conv.weight",
            "model.audio_tower.encoder.stem.stage.2.mixer.conv.weight",
        ),
        (
            "model.acoustic_tokenizer.encoder.stages.6.7.ffn.linear1.bias",
            "model.audio_tower.encoder.conv_layers.5.stage.7.ffn.linear1.bias",
        ),
        ("model.acoustic_tokenizer.encoder.head.conv.conv.weight", "model.audio_tower.encoder.head.conv.weight"),
        (
            "model.acoustic_tokenizer.decoder.upsample_layers.4.0.convtr.convtr.weight",
            "model.audio_tower.decoder.conv_layers.3.convtr.convtr.weight",
        ),
        (
            "model.semantic_tokenizer.encoder.downsample_layers.6.0.conv.conv.bias",
            "model.semantic_tokenizer_encoder.conv_layers.5.conv.conv.bias",
        ),
        ("model.prediction_head.t_embedder.mlp.0.weight", "model.diffusion_head.timestep_proj.fc1.weight"),
        ("model.prediction_head.layers.3.adaLN_modulation.1.weight", "model.diffusion_head.layers.3.linear.weight"),
        ("model.prediction_head.final_layer.linear.weight", "model.diffusion_head.final_layer.linear_2.weight"),
        ("model.acoustic_connector.norm.weight", "model.multi_modal_projector.act.weight"),
        ("model.speech_bias_factor", "model.latent_bias_factor"),
        (
            "model.language_model.layers.27.self_attn.q_proj.weight",
            "model.language_model.layers.27.self_attn.q_proj.weight",
        ),
    ],
)
def test_known_original_names_map_to_transformers_names(original: str, expected: str) -> None:
    assert hf_key(original) == expected


def test_mapping_round_trips_every_weight_of_the_real_1_5b_architecture() -> None:
    with torch.device("meta"):
        model = VibeVoiceForConditionalGeneration(VibeVoiceConfig())
    names = list(model.state_dict())
    assert len(names) > 1000
    assert [hf_key(original_key(name)) for name in names] == names
    assert len({original_key(name) for name in names}) == len(names)


def test_key_mapping_rules_are_plain_literal_replacements() -> None:
    mapping = original_key_mapping()
    assert all("{" not in replacement and "\\" not in replacement for replacement in mapping.values())


@pytest.mark.parametrize("layout", ["hf", "original"])
def test_a_levelled_voice_reaches_the_model_as_it_is(
    layout: str, tiny_hf_checkpoint: Path, tiny_original_checkpoint: Path
) -> None:
    """Voices are levelled once, by `tokenizer.voice_prompt`, as the original processor levels them once: the
    checkpoint's processor (whose config asks its feature extractor to level too) passes them on untouched."""
    folder = tiny_hf_checkpoint if layout == "hf" else tiny_original_checkpoint
    loaded = load_model(str(folder), device="cpu")
    voice = prepare_voice_samples(voice_like(4.0, 44_100, seed=7), 44_100, source="voice").samples
    prompt = prompt_inputs(loaded, SegmentText(((0, "Hello there."),)), {0: voice})
    assert torch.equal(prompt.input_values[0, 0, : len(voice)], torch.from_numpy(voice))


def test_tiny_random_builds_on_the_fly() -> None:
    loaded = load_model("tiny-random", device="cpu")
    assert loaded.is_tiny_random
    assert loaded.model.config.audio_config.hop_length == 3200


def test_folder_without_config_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(str(tmp_path), device="cpu")


def test_other_model_type_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ModelLoadError, match="not a VibeVoice checkpoint.*'llama'"):
        load_model(str(tmp_path), device="cpu")


def test_checkpoint_with_a_missing_weight_is_refused(tiny_hf_checkpoint: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(tiny_hf_checkpoint, broken)
    weights = load_file(broken / "model.safetensors")
    del weights["model.diffusion_head.cond_proj.weight"]
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match="missing keys.*diffusion_head.cond_proj.weight"):
        load_model(str(broken), device="cpu")


def test_checkpoint_with_a_wrong_shape_is_refused(tiny_original_checkpoint: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(tiny_original_checkpoint, broken)
    config = json.loads((broken / "config.json").read_text())
    config["diffusion_head_config"]["head_ffn_ratio"] *= 2
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="mismatched keys"):
        load_model(str(broken), device="cpu")


def test_corrupt_config_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="cannot read the checkpoint config"):
        load_model(str(tmp_path), device="cpu")


def test_unreachable_hub_says_how_to_use_a_local_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(ModelLoadError) as raised:
        load_model("vibevoice/VibeVoice-1.5B-hf", device="cpu")
    message = str(raised.value)
    assert "cannot reach the Hugging Face hub" in message
    assert "--model /path/to/VibeVoice-1.5B-hf" in message
    assert "\n" not in message


def test_dtype_follows_the_device() -> None:
    assert choose_dtype(torch.device("cpu"), None) == torch.float32
    assert choose_dtype(torch.device("cuda"), None) == torch.bfloat16
    assert choose_dtype(torch.device("cpu"), "bfloat16") == torch.bfloat16
    with pytest.raises(ModelLoadError, match="unknown dtype"):
        choose_dtype(torch.device("cpu"), "float7")

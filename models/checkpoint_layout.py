"""The original Microsoft checkpoint layout and how it maps onto transformers' VibeVoice.

`microsoft/VibeVoice-1.5B` predates VibeVoice in transformers: its config has `model_type: vibevoice` with
`acoustic_tokenizer_config`, `semantic_tokenizer_config`, `decoder_config` and a `diffusion_head_config`
in the original vocabulary, and its weights are named after the original modules (`acoustic_tokenizer`,
`prediction_head`, `acoustic_connector`, `speech_scaling_factor`, nested `SConv1d` wrappers). The mapping
follows transformers' own conversion script (`convert_vibevoice_to_hf.py`); here it runs at load time,
so users can point voxcast at either layout without converting anything.

The reverse direction exists so tests can write a tiny checkpoint in the original layout and prove that
it loads with no missing or unexpected weights.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from transformers import VibeVoiceConfig

# Ordered (pattern, replacement) rules, applied one after the other to every original key; each match is
# replaced literally. `{index-1}` rules are expanded per stage: the original numbers the first
# down/up-sampling layer 0 and transformers calls it the `stem`, so layer N becomes `conv_layers.N-1`.
_ORIGINAL_TO_HF_RULES: tuple[tuple[str, str], ...] = (
    (r"semantic_tokenizer\.encoder\.downsample_layers\.0\.0\.conv\.", "semantic_tokenizer_encoder.stem.conv.conv."),
    (r"semantic_tokenizer\.encoder\.stages\.0\.", "semantic_tokenizer_encoder.stem.stage."),
    (
        r"semantic_tokenizer\.encoder\.downsample_layers\.{index}\.0\.conv\.",
        "semantic_tokenizer_encoder.conv_layers.{index-1}.conv.conv.",
    ),
    (r"semantic_tokenizer\.encoder\.stages\.{index}\.", "semantic_tokenizer_encoder.conv_layers.{index-1}.stage."),
    (r"semantic_tokenizer\.encoder\.head\.conv\.", "semantic_tokenizer_encoder.head."),
    (r"acoustic_tokenizer\.encoder\.downsample_layers\.0\.0\.conv\.", "audio_tower.encoder.stem.conv.conv."),
    (r"acoustic_tokenizer\.encoder\.stages\.0\.", "audio_tower.encoder.stem.stage."),
    (
        r"acoustic_tokenizer\.encoder\.downsample_layers\.{index}\.0\.conv\.",
        "audio_tower.encoder.conv_layers.{index-1}.conv.conv.",
    ),
    (r"acoustic_tokenizer\.encoder\.stages\.{index}\.", "audio_tower.encoder.conv_layers.{index-1}.stage."),
    (r"acoustic_tokenizer\.encoder\.head\.conv\.", "audio_tower.encoder.head."),
    (r"acoustic_tokenizer\.decoder\.upsample_layers\.0\.0\.conv\.conv\.", "audio_tower.decoder.stem.conv.conv."),
    (r"acoustic_tokenizer\.decoder\.stages\.0\.", "audio_tower.decoder.stem.stage."),
    (
        r"acoustic_tokenizer\.decoder\.upsample_layers\.{index}\.0\.convtr\.convtr\.",
        "audio_tower.decoder.conv_layers.{index-1}.convtr.convtr.",
    ),
    (r"acoustic_tokenizer\.decoder\.stages\.{index}\.", "audio_tower.decoder.conv_layers.{index-1}.stage."),
    (r"acoustic_tokenizer\.decoder\.head\.conv\.", "audio_tower.decoder.head."),
    (r"acoustic_tokenizer\.", "audio_tower."),
    (r"prediction_head\.t_embedder\.mlp\.0\.", "diffusion_head.timestep_proj.fc1."),
    (r"prediction_head\.t_embedder\.mlp\.2\.", "diffusion_head.timestep_proj.fc2."),
    (r"prediction_head\.layers\.{index}\.adaLN_modulation\.1\.", "diffusion_head.layers.{index}.linear."),
    (r"prediction_head\.final_layer\.adaLN_modulation\.1\.", "diffusion_head.final_layer.linear_1."),
    (r"prediction_head\.final_layer\.linear\.", "diffusion_head.final_layer.linear_2."),
    (r"prediction_head\.", "diffusion_head."),
    (r"acoustic_connector\.fc1\.", "multi_modal_projector.linear_1."),
    (r"acoustic_connector\.norm\.", "multi_modal_projector.act."),
    (r"acoustic_connector\.fc2\.", "multi_modal_projector.linear_2."),
    (r"semantic_connector\.fc1\.", "semantic_connector.linear_1."),
    (r"semantic_connector\.norm\.", "semantic_connector.act."),
    (r"semantic_connector\.fc2\.", "semantic_connector.linear_2."),
    (r"^model\.speech_scaling_factor", "model.latent_scaling_factor"),
    (r"^model\.speech_bias_factor", "model.latent_bias_factor"),
    (r"mixer\.conv\.conv\.conv\.", "mixer.conv."),
    (r"\.conv\.conv\.conv\.", ".conv.conv."),
)
# More stages than any VibeVoice tokenizer (7) or diffusion head (4) has; unused rules cost nothing.
_MAX_INDEX = 32


def original_key_mapping() -> dict[str, str]:
    """The original -> transformers renaming as ordered literal rules, fit for `from_pretrained(key_mapping=...)`."""
    mapping: dict[str, str] = {}
    for pattern, replacement in _ORIGINAL_TO_HF_RULES:
        if "{index" not in pattern:
            mapping[pattern] = replacement
            continue
        first = 1 if "{index-1}" in replacement else 0
        for index in range(first, _MAX_INDEX):
            expanded = replacement.replace("{index-1}", str(index - 1)).replace("{index}", str(index))
            mapping[pattern.replace("{index}", str(index))] = expanded
    return mapping


_COMPILED_MAPPING = tuple((re.compile(pattern), replacement) for pattern, replacement in original_key_mapping().items())


def hf_key(original_key_name: str) -> str:
    """The transformers name of one weight of the original layout (the rules applied as `from_pretrained` does)."""
    key = original_key_name
    for pattern, replacement in _COMPILED_MAPPING:
        match = pattern.search(key)
        if match is not None:
            key = key.replace(match.group(0), replacement, 1)
    return key


# Keys that mark each layout: enough to tell them apart without loading any tensor.
ORIGINAL_KEY_MARKERS = ("model.acoustic_tokenizer.", "model.prediction_head.", "model.acoustic_connector.")
HF_KEY_MARKERS = ("model.audio_tower.", "model.diffusion_head.", "model.multi_modal_projector.")

_ORIGINAL_TOKENIZER_KEYS_DROPPED = (
    "decoder_depths", "decoder_n_filters", "decoder_ratios", "std_dist_type", "fix_std", "pad_mode", "conv_bias",
    "causal", "mixer_layer", "layernorm", "disable_last_norm", "conv_norm", "corpus_normalize",
    "layernorm_elementwise_affine", "weight_init_value", "model_type",
)  # fmt: skip


def original_key(hf_name: str) -> str:
    """The original-layout name of one transformers weight (the inverse of `hf_key`)."""
    if hf_name == "model.latent_scaling_factor":
        return "model.speech_scaling_factor"
    if hf_name == "model.latent_bias_factor":
        return "model.speech_bias_factor"
    for hf_prefix, original_prefix in (
        ("model.audio_tower.encoder.", "model.acoustic_tokenizer.encoder."),
        ("model.semantic_tokenizer_encoder.", "model.semantic_tokenizer.encoder."),
    ):
        if hf_name.startswith(hf_prefix):
            return original_prefix + _original_conv_stack_key(hf_name.removeprefix(hf_prefix), "downsample")
    if hf_name.startswith("model.audio_tower.decoder."):
        rest = hf_name.removeprefix("model.audio_tower.decoder.")
        return "model.acoustic_tokenizer.decoder." + _original_conv_stack_key(rest, "upsample")
    if hf_name.startswith("model.diffusion_head."):
        return "model.prediction_head." + _original_head_key(hf_name.removeprefix("model.diffusion_head."))
    for hf_prefix, original_prefix in (
        ("model.multi_modal_projector.", "model.acoustic_connector."),
        ("model.semantic_connector.", "model.semantic_connector."),
    ):
        if hf_name.startswith(hf_prefix):
            rest = hf_name.removeprefix(hf_prefix)
            for hf_part, original_part in (("linear_1.", "fc1."), ("act.", "norm."), ("linear_2.", "fc2.")):
                if rest.startswith(hf_part):
                    return original_prefix + original_part + rest.removeprefix(hf_part)
    return hf_name


def _original_conv_stack_key(rest: str, sampling: str) -> str:
    """`stem.*` / `conv_layers.N.*` / `head.*` of an encoder or decoder, in original names."""
    if rest.startswith("head."):
        return "head.conv." + rest.removeprefix("head.")
    stem = re.match(r"stem\.(conv\.conv|stage)\.(.*)", rest)
    layer = re.match(r"conv_layers\.(\d+)\.(conv\.conv|convtr\.convtr|stage)\.(.*)", rest)
    if stem:
        stage_index, part, tail = 0, stem.group(1), stem.group(2)
    elif layer:
        stage_index, part, tail = int(layer.group(1)) + 1, layer.group(2), layer.group(3)
    else:
        raise ValueError(f"unexpected tokenizer weight name: {rest!r}")
    if part == "stage":
        return f"stages.{stage_index}." + tail.replace("mixer.conv.", "mixer.conv.conv.conv.")
    return f"{sampling}_layers.{stage_index}.0.{part}.{tail}"


def _original_head_key(rest: str) -> str:
    for hf_part, original_part in (
        ("timestep_proj.fc1.", "t_embedder.mlp.0."),
        ("timestep_proj.fc2.", "t_embedder.mlp.2."),
        ("final_layer.linear_1.", "final_layer.adaLN_modulation.1."),
        ("final_layer.linear_2.", "final_layer.linear."),
    ):
        if rest.startswith(hf_part):
            return original_part + rest.removeprefix(hf_part)
    return re.sub(r"^layers\.(\d+)\.linear\.", r"layers.\1.adaLN_modulation.1.", rest)


def to_original_state_dict(hf_state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """Rename a transformers VibeVoice state dict to the original layout."""
    return {original_key(key): value for key, value in hf_state_dict.items()}


def is_original_config(config: Mapping[str, Any]) -> bool:
    """True for the original layout's config.json (it names its acoustic tokenizer config this way)."""
    return config.get("model_type") == "vibevoice" and "acoustic_tokenizer_config" in config


def hf_config_from_original(config: Mapping[str, Any], token_ids: Mapping[str, int]) -> VibeVoiceConfig:
    """Build transformers' `VibeVoiceConfig` from an original-layout config.json.

    The original config holds no special token ids (the original processor looked them up in the Qwen
    tokenizer), so the caller passes them: `pad`, `eos`, `audio_bos`, `audio_eos`, `audio`.
    """
    head = dict(config["diffusion_head_config"])
    text_config = dict(config["decoder_config"])
    text_config["dtype"] = text_config.pop("torch_dtype", None) or "float32"
    text_config.setdefault("model_type", "qwen2")
    return VibeVoiceConfig(
        text_config=text_config,
        audio_config={
            "model_type": "vibevoice_acoustic_tokenizer",
            **_hf_tokenizer_config(config["acoustic_tokenizer_config"]),
        },
        semantic_model_config={
            "model_type": "vibevoice_acoustic_tokenizer_encoder",
            **_hf_tokenizer_config(config["semantic_tokenizer_config"]),
        },
        diffusion_head_config={
            "num_hidden_layers": head["head_layers"],
            "intermediate_size": int(head["head_ffn_ratio"] * head["hidden_size"]),
            "rms_norm_eps": head.get("rms_norm_eps", 1e-5),
        },
        pad_token_id=token_ids["pad"],
        eos_token_id=token_ids["eos"],
        audio_bos_token_id=token_ids["audio_bos"],
        audio_eos_token_id=token_ids["audio_eos"],
        audio_token_id=token_ids["audio"],
    )


def _hf_tokenizer_config(original: Mapping[str, Any]) -> dict[str, Any]:
    converted = {key: value for key, value in original.items() if key not in _ORIGINAL_TOKENIZER_KEYS_DROPPED}
    depths = converted.pop("encoder_depths", None)
    if isinstance(depths, str):
        depths = [int(depth) for depth in depths.split("-")]
    if depths is not None:
        converted["depths"] = list(depths)
    if "encoder_ratios" in converted:
        converted["downsampling_ratios"] = list(reversed(converted.pop("encoder_ratios")))
    if "encoder_n_filters" in converted:
        converted["num_filters"] = converted.pop("encoder_n_filters")
    if "vae_dim" in converted:
        converted["hidden_size"] = converted.pop("vae_dim")
    if "layernorm_eps" in converted:
        converted["rms_norm_eps"] = converted.pop("layernorm_eps")
    if original.get("std_dist_type") == "gaussian" and "fix_std" in original:
        # The original stores the σ-VAE noise as fix_std; transformers as the std of its per-sample scale.
        converted["vae_std"] = original["fix_std"] / 0.8
    return converted


def original_config_from_hf(config: VibeVoiceConfig, dtype: str = "bfloat16") -> dict[str, Any]:
    """An original-layout config.json for a transformers config (used to write tiny test checkpoints).

    Its `decoder_config` holds the keys the published one holds, in their older spelling (`rope_theta` and
    `rope_scaling` where transformers 5 writes `rope_parameters`), so loading must translate them.
    """
    text = _original_decoder_config(config.text_config, dtype)
    # transformers types each sub-config as `dict | PreTrainedConfig | None`; a VibeVoiceConfig holds all four built.
    audio: Any = config.audio_config
    semantic: Any = config.semantic_model_config
    head: Any = config.diffusion_head_config
    return {
        "model_type": "vibevoice",
        "architectures": ["VibeVoiceForConditionalGeneration"],
        "acoustic_tokenizer_config": _original_tokenizer_config(audio, "gaussian"),
        "semantic_tokenizer_config": _original_tokenizer_config(semantic, "none"),
        "acoustic_vae_dim": audio.hidden_size,
        "semantic_vae_dim": semantic.hidden_size,
        "decoder_config": text,
        "diffusion_head_config": {
            "model_type": "vibevoice_diffusion_head",
            "hidden_size": head.hidden_size,
            "head_layers": head.num_hidden_layers,
            "head_ffn_ratio": head.intermediate_size / head.hidden_size,
            "rms_norm_eps": head.rms_norm_eps,
            "latent_size": head.latent_size,
            "speech_vae_dim": head.latent_size,
            "prediction_type": "v_prediction",
            "diffusion_type": "ddpm",
            "ddpm_num_steps": 1000,
            "ddpm_num_inference_steps": 20,
            "ddpm_beta_schedule": "cosine",
            "ddpm_batch_mul": 4,
        },
        "tie_word_embeddings": config.tie_word_embeddings,
        "torch_dtype": dtype,
    }


def _original_decoder_config(text: Any, dtype: str) -> dict[str, Any]:
    """The Qwen2 decoder's config as `microsoft/VibeVoice-1.5B` spells it (transformers 4.51's keys)."""
    rope = dict(text.rope_parameters or {})
    rope_type = rope.pop("rope_type", "default")
    rope_theta = rope.pop("rope_theta", 10000.0)
    return {
        "attention_dropout": text.attention_dropout,
        "hidden_act": text.hidden_act,
        "hidden_size": text.hidden_size,
        "initializer_range": text.initializer_range,
        "intermediate_size": text.intermediate_size,
        "max_position_embeddings": text.max_position_embeddings,
        "max_window_layers": text.max_window_layers,
        "model_type": "qwen2",
        "num_attention_heads": text.num_attention_heads,
        "num_hidden_layers": text.num_hidden_layers,
        "num_key_value_heads": text.num_key_value_heads,
        "rms_norm_eps": text.rms_norm_eps,
        "rope_scaling": None if rope_type == "default" else {"rope_type": rope_type, **rope},
        "rope_theta": rope_theta,
        "sliding_window": None,
        "tie_word_embeddings": text.tie_word_embeddings,
        "torch_dtype": dtype,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": text.vocab_size,
    }


def _original_tokenizer_config(config: Any, std_dist_type: str) -> dict[str, Any]:
    ratios = list(reversed(list(config.downsampling_ratios)))
    return {
        "model_type": "vibevoice_acoustic_tokenizer" if std_dist_type == "gaussian" else "vibevoice_semantic_tokenizer",
        "channels": config.channels,
        "causal": True,
        "vae_dim": config.hidden_size,
        "fix_std": getattr(config, "vae_std", 0.625) * 0.8 if std_dist_type == "gaussian" else 0,
        "std_dist_type": std_dist_type,
        "mixer_layer": "depthwise_conv",
        "conv_norm": "none",
        "pad_mode": "constant",
        "disable_last_norm": True,
        "layernorm": "RMSNorm",
        "layernorm_eps": config.rms_norm_eps,
        "layernorm_elementwise_affine": True,
        "conv_bias": True,
        "layer_scale_init_value": config.layer_scale_init_value,
        "weight_init_value": 0.01,
        "encoder_n_filters": config.num_filters,
        "encoder_ratios": ratios,
        "encoder_depths": "-".join(str(depth) for depth in config.depths),
        "decoder_n_filters": config.num_filters,
        "decoder_ratios": ratios,
        "decoder_depths": None,
    }

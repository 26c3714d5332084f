"""Loading a VibeVoice model and its processor from a hub id, a local folder, or `tiny-random`.

Two checkpoint layouts load here: the transformers layout (`vibevoice/VibeVoice-1.5B-hf`), through
`from_pretrained` as is, and the original Microsoft layout (`microsoft/VibeVoice-1.5B`), whose config is
translated and whose weights are renamed while they load (see `checkpoint_layout`). Either way the load
must account for every weight: a missing or unexpected one means the folder is not what it claims to be,
and we refuse it rather than generate noise from half-random weights.
"""

from __future__ import annotations

import json
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import torch
from transformers import (
    AutoTokenizer,
    PreTrainedTokenizerBase,
    VibeVoiceAcousticTokenizerFeatureExtractor,
    VibeVoiceForConditionalGeneration,
    VibeVoiceProcessor,
)
from transformers.utils import logging as transformers_logging

from models.checkpoint_layout import hf_config_from_original, is_original_config, original_key_mapping
from models.family import model_context
from models.host_memory import keep_freed_memory
from script_text.plan import ModelContext

logger = logging.getLogger(__name__)

TINY_RANDOM = "tiny-random"
Layout = Literal["hf", "original"]

_HUB_FILE_PATTERNS = ["*.json", "*.safetensors", "*.jinja", "*.txt", "tokenizer*", "vocab*", "merges*"]


def quiet_transformers() -> None:
    """transformers' records through voxcast's handler, at voxcast's level (errors only unless it is verbose), and
    no progress bars unless verbose. Run when a module that loads or writes a model (this one, `tiny_checkpoint`)
    is imported, not when the package is: `segment_io`'s types, which the engine's requests carry, then come without
    transformers (see `core.logging`)."""
    verbose = logging.getLogger().getEffectiveLevel() <= logging.DEBUG
    transformers_logging.set_verbosity(logging.DEBUG if verbose else logging.ERROR)
    transformers_logging.disable_default_handler()
    transformers_logging.enable_propagation()
    if not verbose:
        transformers_logging.disable_progress_bar()


quiet_transformers()


class ModelLoadError(RuntimeError):
    """A model that could not be loaded; the message says why and what to do instead, in one line."""


@dataclass
class LoadedModel:
    """A model ready to generate, with what is needed to feed it and to describe it."""

    model: VibeVoiceForConditionalGeneration
    processor: VibeVoiceProcessor
    source: str
    layout: Layout
    device: torch.device
    dtype: torch.dtype

    def __post_init__(self) -> None:
        if self.device.type == "cpu":  # its tensor work reuses freed memory instead of faulting in fresh pages
            keep_freed_memory()

    @property
    def is_tiny_random(self) -> bool:
        return self.source == TINY_RANDOM

    @property
    def context(self) -> ModelContext:
        """Its context as a length limit, named as a user knows the model (`VibeVoice-Large`, else its source)."""
        return model_context(self.model.config.text_config, self.source)


def choose_device(requested: str | None) -> torch.device:
    """The requested device, else the first CUDA GPU when there is one, else the CPU."""
    if requested:
        return torch.device(requested)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def choose_dtype(device: torch.device, requested: str | None) -> torch.dtype:
    """bf16 on a GPU (what the checkpoints were trained in); float32 on a CPU, where bf16 is slow and inexact."""
    if requested:
        try:
            dtype = getattr(torch, requested)
        except AttributeError:
            dtype = None
        if not isinstance(dtype, torch.dtype):
            raise ModelLoadError(f"unknown dtype {requested!r}; use float32, bfloat16 or float16")
        return dtype
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def load_model(source: str, *, device: str | None = None, dtype: str | None = None) -> LoadedModel:
    """Load `source`: `tiny-random`, a local checkpoint folder, or a hub id (downloaded or from the cache)."""
    target_device = choose_device(device)
    target_dtype = choose_dtype(target_device, dtype)
    if source == TINY_RANDOM:
        from models.tiny_checkpoint import write_tiny_checkpoint

        with tempfile.TemporaryDirectory(prefix="voxcast-tiny-") as tiny_folder:
            loaded = load_checkpoint_folder(write_tiny_checkpoint(tiny_folder), target_device, target_dtype)
        loaded.source = TINY_RANDOM
        return loaded
    folder = Path(source).expanduser()
    if folder.exists():
        if not folder.is_dir():
            raise ModelLoadError(f"{source} is a file; expected a checkpoint folder or a hub id")
        return load_checkpoint_folder(folder, target_device, target_dtype, source=source)
    return load_checkpoint_folder(download_from_hub(source), target_device, target_dtype, source=source)


def download_from_hub(repo_id: str) -> Path:
    """The local snapshot of a hub repository: from the cache, or downloaded when the hub can be reached."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, RepositoryNotFoundError

    try:
        return Path(snapshot_download(repo_id, allow_patterns=_HUB_FILE_PATTERNS))
    except HFValidationError as error:
        raise ModelLoadError(f"{repo_id!r} is neither an existing folder nor a valid hub id (owner/name)") from error
    except RepositoryNotFoundError as error:
        raise ModelLoadError(f"no model {repo_id!r} on the Hugging Face hub; check the id or pass a folder") from error
    except Exception as error:  # connection refused, DNS, offline mode, timeouts: all mean "not reachable"
        raise ModelLoadError(
            f"cannot reach the Hugging Face hub to fetch {repo_id!r} and it is not in the local cache; "
            f"download it on a connected machine and pass its folder: --model /path/to/{repo_id.split('/')[-1]}"
        ) from error


def detect_layout(folder: Path) -> Layout:
    """Which checkpoint layout `folder` holds, from its config.json alone."""
    config = read_json(folder / "config.json", what="checkpoint config")
    if is_original_config(config):
        return "original"
    if config.get("model_type") == "vibevoice":
        return "hf"
    raise ModelLoadError(
        f"{folder} is not a VibeVoice checkpoint: config.json has model_type {config.get('model_type')!r}, "
        "expected 'vibevoice'"
    )


def load_checkpoint_folder(
    folder: Path, device: torch.device, dtype: torch.dtype, *, source: str | None = None
) -> LoadedModel:
    """Load either layout from a folder on disk, check that every weight was accounted for, and prepare it."""
    layout = detect_layout(folder)
    if layout == "hf":
        processor = _load_hf_processor(folder)
        model, info = _from_pretrained(folder, dtype=dtype)
    else:
        processor = _original_processor(folder)
        config = hf_config_from_original(
            read_json(folder / "config.json", what="checkpoint config"), _special_token_ids(processor.tokenizer)
        )
        model, info = _from_pretrained(folder, dtype=dtype, config=config, key_mapping=original_key_mapping())
        # Those folders ship no generation config: without the ids generate() would never stop at the end of text.
        model.generation_config.eos_token_id = config.eos_token_id
        model.generation_config.pad_token_id = config.pad_token_id
    _check_loading_info(folder, info)
    leave_levelling_to_the_voice_prompt(processor)
    model.to(device).eval()  # type: ignore[arg-type]  # transformers' wrapper around `to` misstates its arguments
    logger.info("model loaded", extra={"folder": str(folder), "layout": layout, "device": str(device)})
    return LoadedModel(model, processor, source or str(folder), layout, device, dtype)


def _from_pretrained(folder: Path, **kwargs: Any) -> tuple[VibeVoiceForConditionalGeneration, dict[str, Any]]:
    try:
        # Mismatched shapes are collected and refused by `_check_loading_info`, with the names of the weights.
        # Typed as returning the model alone; with `output_loading_info` it returns (model, info).
        return cast(
            tuple[VibeVoiceForConditionalGeneration, dict[str, Any]],
            VibeVoiceForConditionalGeneration.from_pretrained(
                folder, output_loading_info=True, ignore_mismatched_sizes=True, **kwargs
            ),
        )
    except (OSError, ValueError, RuntimeError) as error:
        raise ModelLoadError(f"cannot load the weights in {folder}: {_first_line(error)}") from error


def _check_loading_info(folder: Path, info: dict[str, Any]) -> None:
    problems = []
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        keys = sorted(str(key) for key in info.get(kind) or ())
        if keys:
            shown = ", ".join(keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")
            problems.append(f"{len(keys)} {kind.replace('_', ' ')} ({shown})")
    if problems:
        raise ModelLoadError(
            f"{folder} does not match the VibeVoice architecture its config describes: " + "; ".join(problems)
        )


def leave_levelling_to_the_voice_prompt(processor: VibeVoiceProcessor) -> None:
    """Voices reach the processor levelled once already (`tokenizer.voice_prompt`, to -25 dBFS as the original
    processor's one levelling does); its feature extractor would level them a second time, moving them by up to
    5e-6, so its own levelling is switched off whatever the checkpoint's processor config says."""
    processor.feature_extractor.normalize_audio = False


def _load_hf_processor(folder: Path) -> VibeVoiceProcessor:
    try:
        return VibeVoiceProcessor.from_pretrained(folder)
    except (OSError, ValueError, TypeError) as error:
        raise ModelLoadError(f"cannot load the processor files in {folder}: {_first_line(error)}") from error


def _original_processor(folder: Path) -> VibeVoiceProcessor:
    """The processor for an original-layout folder, built the way the original VibeVoice processor was.

    Those checkpoints ship no tokenizer; `preprocessor_config.json` names the Qwen tokenizer to use by hub id
    (`Qwen/Qwen2.5-1.5B`), taken from the hub cache, or from a folder of that name beside the config (for machines
    that never reach the hub). Tokenizer files inside the checkpoint folder win.
    """
    preprocessor_path = folder / "preprocessor_config.json"
    preprocessor = read_json(preprocessor_path, what="processor config") if preprocessor_path.exists() else {}
    if (folder / "tokenizer.json").exists() or (folder / "tokenizer_config.json").exists():
        tokenizer_source = str(folder)
    else:
        name = preprocessor.get("language_model_pretrained_name", "Qwen/Qwen2.5-1.5B")
        beside = folder / name
        tokenizer_source = str(beside) if beside.is_dir() else _tokenizer_from_hub(name, beside)
    try:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_source)
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"cannot load the tokenizer from {tokenizer_source}: {_first_line(error)}") from error
    audio = preprocessor.get("audio_processor", {})
    feature_extractor = VibeVoiceAcousticTokenizerFeatureExtractor(sampling_rate=audio.get("sampling_rate", 24000))
    return VibeVoiceProcessor(feature_extractor, tokenizer)


def _tokenizer_from_hub(name: str, beside: Path) -> str:
    """The hub cache's (or the hub's) copy of the tokenizer an original-layout folder names."""
    try:
        return str(download_from_hub(name))
    except ModelLoadError as error:
        raise ModelLoadError(
            f"the checkpoint uses the tokenizer {name!r}, which is neither in the Hugging Face cache nor reachable: "
            f"download it on a connected machine (huggingface-cli download {name}) or copy its files to {beside}"
        ) from error


def _special_token_ids(tokenizer: PreTrainedTokenizerBase) -> dict[str, int]:
    """VibeVoice reuses Qwen's vision tokens for speech; the original code looked them up by name too."""
    names = {
        "eos": "<|endoftext|>",
        "pad": "<|endoftext|>",
        "audio_bos": "<|vision_start|>",
        "audio_eos": "<|vision_end|>",
        "audio": "<|vision_pad|>",
    }
    ids = {}
    for role, token in names.items():
        token_id = tokenizer.convert_tokens_to_ids(token)
        if token_id is None or isinstance(token_id, list) or token_id == tokenizer.unk_token_id:  # one token: an int
            raise ModelLoadError(f"the tokenizer has no {token} token, which VibeVoice needs for {role}")
        ids[role] = token_id
    return ids


def read_json(path: Path, *, what: str) -> dict[str, Any]:
    """A JSON object from disk, or a ModelLoadError naming the file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as error:
        raise ModelLoadError(f"no {path.name} in {path.parent}: not a checkpoint folder ({what} missing)") from error
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelLoadError(f"cannot read the {what} {path}: {_first_line(error)}") from error
    if not isinstance(data, dict):
        raise ModelLoadError(f"the {what} {path} is not a JSON object")
    return data


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__

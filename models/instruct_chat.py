"""The script model: an instruct LLM run through transformers' `generate`, with its chat template.

Loaded like the VibeVoice model (`models.loading`): `tiny-random`, a local folder, or a hub id fetched once
into the Hugging Face cache, on the device and dtype `choose_device`/`choose_dtype` pick. Decoding is
greedy, so the same conversation gives the same reply; the first token is forced to open a JSON object,
which keeps preambles and code fences out of the reply without a grammar engine.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, cast

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    BatchEncoding,
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    StoppingCriteria,
    StoppingCriteriaList,
)

from models.loading import (
    TINY_RANDOM,
    ModelLoadError,
    choose_device,
    choose_dtype,
    download_from_hub,
    read_json,
)
from script_text.drafting.chat import ChatMessage

logger = logging.getLogger(__name__)

LOCAL_CHECKPOINT_HINT = (
    "pass a local instruct checkpoint folder with --script-model /path/to/Qwen2.5-1.5B-Instruct "
    "(or --script-model tiny-random to try the pipeline with a toy model)"
)


class ContextTooLongError(RuntimeError):
    """A conversation that does not fit in the model's context window."""


class TransformersChatModel:
    """A loaded instruct model and its tokenizer, answering chat conversations."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, source: str) -> None:
        # A causal LM: `generate` is its GenerationMixin's, which `PreTrainedModel` does not declare.
        self.model: Any = model
        self.tokenizer = tokenizer
        self._source = source

    @property
    def source(self) -> str:
        return self._source

    @property
    def is_tiny_random(self) -> bool:
        return self._source == TINY_RANDOM

    @property
    def context_tokens(self) -> int | None:
        """How many tokens (prompt and reply) the model can attend to, when its config says."""
        return getattr(self.model.config, "max_position_embeddings", None)

    @torch.inference_mode()
    def reply(
        self, messages: Sequence[ChatMessage], max_new_tokens: int, stop: Callable[[], bool] | None = None
    ) -> str:
        """The assistant's greedy reply, cut at `max_new_tokens`, where the context window ends, or when `stop`."""
        encoded = self.tokenizer.apply_chat_template(
            [{"role": message.role, "content": message.content} for message in messages],
            add_generation_prompt=True,
            return_tensors="pt",
            return_dict=True,
        )
        if not isinstance(encoded, BatchEncoding):  # what `return_dict=True` returns
            raise TypeError(f"the chat template gave {type(encoded).__name__}, not the tokens and their mask")
        inputs = encoded.to(self.model.device)
        prompt_length = inputs["input_ids"].shape[1]
        output = self.model.generate(
            **inputs,
            generation_config=self._greedy(self._room(prompt_length, max_new_tokens)),
            logits_processor=LogitsProcessorList([_OpenWithBrace(self._brace_token_ids, prompt_length)]),
            stopping_criteria=StoppingCriteriaList([_StopWhen(stop)] if stop is not None else []),
        )
        text = self.tokenizer.decode(output[0, prompt_length:], skip_special_tokens=True)
        if not isinstance(text, str):  # one sequence decodes to one string
            raise TypeError(f"decoding one reply gave {type(text).__name__}")
        return text

    def _room(self, prompt_length: int, max_new_tokens: int) -> int:
        """New tokens that fit after the prompt: `max_new_tokens`, or fewer at the end of the context."""
        if self.context_tokens is None:
            return max_new_tokens
        room = min(max_new_tokens, self.context_tokens - prompt_length)
        if room < 1:
            raise ContextTooLongError(
                f"the conversation is {prompt_length:,} tokens and {self.source} holds {self.context_tokens:,}; "
                "shorten the input"
            )
        return room

    def _greedy(self, max_new_tokens: int) -> GenerationConfig:
        """Greedy decoding with the checkpoint's stop tokens and repetition penalty (its sampling is dropped)."""
        defaults = self.model.generation_config
        return GenerationConfig(
            max_new_tokens=max_new_tokens,
            do_sample=False,
            repetition_penalty=defaults.repetition_penalty or 1.0,
            eos_token_id=defaults.eos_token_id,
            pad_token_id=self.tokenizer.pad_token_id if defaults.pad_token_id is None else defaults.pad_token_id,
        )

    @cached_property
    def _brace_token_ids(self) -> torch.Tensor:
        """Ids of the tokens whose text opens a JSON object ("{", ' {', '{"', ...)."""
        texts = self.tokenizer.batch_decode([[token_id] for token_id in range(len(self.tokenizer))])
        ids = [token_id for token_id, text in enumerate(texts) if text.lstrip().startswith("{")]
        return torch.tensor(ids, dtype=torch.long, device=self.model.device)


class _OpenWithBrace(LogitsProcessor):
    """At the first new token only, rule out every token that does not open a JSON object."""

    def __init__(self, allowed_ids: torch.Tensor, prompt_length: int) -> None:
        self.allowed_ids = allowed_ids
        self.prompt_length = prompt_length

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[1] != self.prompt_length or self.allowed_ids.numel() == 0:
            return scores
        forced = torch.full_like(scores, float("-inf"))
        forced[:, self.allowed_ids] = scores[:, self.allowed_ids]
        return cast(torch.FloatTensor, forced)  # transformers' signature names the legacy tensor type


class _StopWhen(StoppingCriteria):
    """Ends generation once `stop()` answers True (asked after every token)."""

    def __init__(self, stop: Callable[[], bool]) -> None:
        self.stop = stop

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: object) -> torch.BoolTensor:
        stopped = torch.full((input_ids.shape[0],), self.stop(), dtype=torch.bool, device=input_ids.device)
        return cast(torch.BoolTensor, stopped)  # transformers' signature names the legacy tensor type


def load_chat_model(source: str, *, device: str | None = None, dtype: str | None = None) -> TransformersChatModel:
    """Load the script model: `tiny-random`, a local instruct checkpoint folder, or a hub id."""
    target_device = choose_device(device)
    target_dtype = choose_dtype(target_device, dtype)
    if source == TINY_RANDOM:
        from models.tiny_instruct import write_tiny_instruct_checkpoint

        with tempfile.TemporaryDirectory(prefix="voxcast-tiny-instruct-") as scratch:
            return _load_folder(write_tiny_instruct_checkpoint(scratch), TINY_RANDOM, target_device, target_dtype)
    folder = Path(source).expanduser()
    if folder.exists():
        if not folder.is_dir():
            raise ModelLoadError(f"{source} is a file; expected an instruct checkpoint folder or a hub id")
        return _load_folder(folder, source, target_device, target_dtype)
    return _load_folder(_download(source), source, target_device, target_dtype)


def _download(repo_id: str) -> Path:
    try:
        return download_from_hub(repo_id)
    except ModelLoadError as error:
        # download_from_hub ends its message with advice for --model; keep its reason, give ours.
        reason = str(error).split(";", 1)[0]
        raise ModelLoadError(f"no script model available: {reason}; {LOCAL_CHECKPOINT_HINT}") from error


def _load_folder(folder: Path, source: str, device: torch.device, dtype: torch.dtype) -> TransformersChatModel:
    read_json(folder / "config.json", what="script model config")
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        # With `output_loading_info`, the model and what loading it found (typed as the model alone).
        loaded: Any = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, output_loading_info=True)
        model, info = loaded
    except (OSError, ValueError, KeyError, RuntimeError) as error:
        raise ModelLoadError(f"cannot load a script model from {folder}: {_first_line(error)}") from error
    missing = sorted(str(key) for key in info.get("missing_keys") or ())
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ModelLoadError(f"{folder} is missing {len(missing)} weights of its model ({shown})")
    if not tokenizer.chat_template:
        raise ModelLoadError(
            f"{folder} has no chat template, so it is not an instruct model; the script model must be one, "
            "such as Qwen/Qwen2.5-1.5B-Instruct"
        )
    model.to(device).eval()
    logger.info("script model loaded", extra={"folder": str(folder), "device": str(device)})
    return TransformersChatModel(model, tokenizer, source)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__

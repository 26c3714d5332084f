"""The two jobs of the drafting stage, and the retry loop they share.

* normalise: a rough transcript becomes a clean script. The deterministic parser goes first: input it
  accepts as is, or after `clean_transcript`, never reaches the model (unless `force_model`), so most
  tidy transcripts cost nothing. Otherwise the model rewrites the cleaned transcript.
* draft: an article or notes become a script for 1 to 4 named hosts, of a target length and tone.

Each model reply is read by `replies.script_from_reply` and the job's own checks. A rejected reply goes
back into the conversation with the reason, up to `ModelBudget.max_attempts` replies in all; then the job
fails with a `DraftingError` carrying the last reason. Every result is written out as `Name: text` lines
and parsed back, so `DraftedScript.script == parse_script(DraftedScript.text)` whichever path made it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from core.settings import MAX_ATTEMPTS_LIMIT, MIN_REPLY_TOKENS
from script_text.drafting.chat import ChatMessage, ChatModel
from script_text.drafting.cleanup import clean_transcript
from script_text.drafting.prompts import NAME_RULE, draft_messages, normalise_messages, retry_message
from script_text.drafting.replies import (
    ReplyError,
    check_cast,
    check_kept_words,
    is_speaker_label,
    script_from_reply,
    script_to_text,
)
from script_text.parser import MAX_SPEAKERS, Script, ScriptError, parse_script

logger = logging.getLogger(__name__)

WORDS_PER_MINUTE = 150  # conversational English; the target length of a draft
MIN_MINUTES, MAX_MINUTES = 1, 90
MAX_SOURCE_CHARS = 30_000  # notes or an article for a draft: about 7,500 tokens of prompt
MAX_MODEL_TRANSCRIPT_CHARS = 24_000  # a transcript the model rewrites in one reply (~25 minutes of talk)
MAX_TONE_CHARS = 120
DEFAULT_HOST_NAMES = ("Alice", "Bob", "Carol", "Dave")
DEFAULT_TONE = "warm, curious and clear, like two friends who read up on the topic"
REPLY_ECHO_CHARS = 2_000  # how much of a rejected reply goes back to the model with the reason
_REPLY_TOKEN_MARGIN = 256  # JSON punctuation, a welcome and a goodbye
_TOKENS_PER_DRAFT_WORD = 2  # ~1.3 tokens a word, plus each turn's JSON keys, with room to spare
_TRANSCRIPT_CHARS_PER_TOKEN = 3  # ~4 characters a token, leaving room for JSON keys

Via = Literal["parser", "cleanup", "model"]


class DraftInputError(ValueError):
    """A request the stage refuses before any model runs; `field` names what to change."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


class DraftCancelled(RuntimeError):
    """The job was cancelled between or during the model's replies; nothing was drafted."""


class AttemptObserver(Protocol):
    """Who follows a job's model replies: told when each starts and why one was rejected, asked whether to stop.

    The service's worker records each attempt for the user to watch; the CLI needs none (`None`).
    """

    def started(self, attempt: int) -> None: ...

    def rejected(self, attempt: int, reason: str) -> None: ...

    def cancelled(self) -> bool: ...


class DraftingError(RuntimeError):
    """The model gave no acceptable script within its attempts; the message ends with the last reason."""

    def __init__(self, message: str, attempts: int, last_problem: str) -> None:
        self.attempts = attempts
        self.last_problem = last_problem
        super().__init__(message)


@dataclass(frozen=True)
class ModelBudget:
    """How hard a job tries: model replies per job, and the longest reply in tokens."""

    max_attempts: int = 3
    max_new_tokens: int = 16_384

    def __post_init__(self) -> None:
        if not 1 <= self.max_attempts <= MAX_ATTEMPTS_LIMIT:
            raise DraftInputError(
                "max_attempts", f"attempts must be 1 to {MAX_ATTEMPTS_LIMIT}, not {self.max_attempts}"
            )
        if self.max_new_tokens < MIN_REPLY_TOKENS:
            raise DraftInputError(
                "max_new_tokens", f"a reply needs at least {MIN_REPLY_TOKENS} tokens, not {self.max_new_tokens}"
            )


@dataclass(frozen=True)
class DraftRequest:
    """What to draft: the hosts (their names, in speaking order), the length in minutes, and the tone."""

    names: tuple[str, ...]
    minutes: float
    tone: str = DEFAULT_TONE

    def __post_init__(self) -> None:
        _check_names(self.names)
        if not MIN_MINUTES <= self.minutes <= MAX_MINUTES:
            raise DraftInputError(
                "minutes", f"the length must be {MIN_MINUTES} to {MAX_MINUTES} minutes, not {self.minutes:g}"
            )
        if not self.tone.strip() or len(self.tone) > MAX_TONE_CHARS or "\n" in self.tone:
            raise DraftInputError("tone", f"the tone must be one line of 1 to {MAX_TONE_CHARS} characters")

    @property
    def target_words(self) -> int:
        return round(self.minutes * WORDS_PER_MINUTE)


@dataclass(frozen=True)
class DraftedScript:
    """A script the pipeline takes, the text it was written as, and how it came about."""

    script: Script
    text: str  # `Name: text` and `[pause: ...]` lines; parse_script(text) == script
    via: Via
    attempts: int  # model replies it took; 0 when no model ran
    notes: tuple[str, ...] = ()  # things worth a user's look, such as two names that may be one person

    @property
    def words(self) -> int:
        return sum(len(turn.text.split()) for turn in self.script.turns)


def default_host_names(hosts: int) -> tuple[str, ...]:
    """The first `hosts` default names (Alice, Bob, Carol, Dave)."""
    if not 1 <= hosts <= MAX_SPEAKERS:
        raise DraftInputError("hosts", f"a script has 1 to {MAX_SPEAKERS} hosts, not {hosts}")
    return DEFAULT_HOST_NAMES[:hosts]


def normalise_transcript(
    text: str,
    load_model: Callable[[], ChatModel],
    budget: ModelBudget,
    *,
    force_model: bool = False,
    observer: AttemptObserver | None = None,
) -> DraftedScript:
    """A clean script from a transcript: as parsed, as cleaned up, or as rewritten by the model.

    `load_model` is called only when the model is needed, so a transcript the parser takes needs none.
    """
    if not text.strip():
        raise DraftInputError("text", "the transcript is empty")
    cleaned = clean_transcript(text)
    if not force_model:
        tries: tuple[tuple[Via, str], ...] = (("parser", text), ("cleanup", cleaned))
        for via, candidate in tries:
            try:
                return _finished(parse_script(candidate), via, attempts=0)
            except ScriptError:
                continue
    if len(cleaned) > MAX_MODEL_TRANSCRIPT_CHARS:
        raise DraftInputError(
            "text",
            f"the transcript is {len(cleaned):,} characters after clean-up; the script model rewrites at most "
            f"{MAX_MODEL_TRANSCRIPT_CHARS:,} at a time: split it, or tag its speakers so the parser reads it",
        )
    words = len(cleaned.split())
    reply_tokens = min(budget.max_new_tokens, len(cleaned) // _TRANSCRIPT_CHARS_PER_TOKEN + _REPLY_TOKEN_MARGIN)

    def check(reply: str) -> Script:
        script = script_from_reply(reply)
        check_kept_words(script, words)
        return script

    script, attempts = ask_for_script(
        load_model(),
        normalise_messages(cleaned),
        check,
        max_attempts=budget.max_attempts,
        max_new_tokens=reply_tokens,
        observer=observer,
    )
    return _finished(script, "model", attempts)


def draft_script(
    source: str,
    request: DraftRequest,
    model: ChatModel,
    budget: ModelBudget,
    *,
    observer: AttemptObserver | None = None,
) -> DraftedScript:
    """A script of about `request.minutes` minutes for `request.names`, written by the model from `source`."""
    check_source_text(source)
    reply_tokens = min(budget.max_new_tokens, _TOKENS_PER_DRAFT_WORD * request.target_words + _REPLY_TOKEN_MARGIN)
    messages = draft_messages(source.strip(), request.names, request.minutes, request.target_words, request.tone)
    script, attempts = ask_for_script(
        model,
        messages,
        lambda reply: check_cast(script_from_reply(reply), request.names),
        max_attempts=budget.max_attempts,
        max_new_tokens=reply_tokens,
        observer=observer,
    )
    return _finished(script, "model", attempts)


def check_source_text(source: str) -> None:
    """Refuse draft material that is empty or longer than the prompt can hold."""
    if not source.strip():
        raise DraftInputError("text", "the source material is empty")
    if len(source) > MAX_SOURCE_CHARS:
        raise DraftInputError(
            "text", f"the source material is {len(source):,} characters; at most {MAX_SOURCE_CHARS:,} fit the prompt"
        )


def ask_for_script(
    model: ChatModel,
    messages: Sequence[ChatMessage],
    check: Callable[[str], Script],
    *,
    max_attempts: int,
    max_new_tokens: int,
    observer: AttemptObserver | None = None,
) -> tuple[Script, int]:
    """The first reply `check` accepts, and how many replies that took.

    A rejected reply stays in the conversation (its first REPLY_ECHO_CHARS characters, so retries cannot
    outgrow the context) followed by the reason, and the model is asked again. `observer` hears of every
    attempt and is asked before and during each reply whether the job was cancelled (`DraftCancelled`).
    """
    conversation = list(messages)
    shown = ""
    stop = observer.cancelled if observer is not None else None
    for attempt in range(1, max_attempts + 1):
        if stop is not None and stop():
            raise DraftCancelled(f"cancelled before attempt {attempt}")
        if observer is not None:
            observer.started(attempt)
        reply = model.reply(conversation, max_new_tokens, stop=stop)
        if stop is not None and stop():
            raise DraftCancelled(f"cancelled during attempt {attempt}")
        try:
            return check(reply), attempt
        except ReplyError as error:
            problem, shown = str(error), error.shown
        logger.info("script reply rejected", extra={"attempt": attempt, "problem": problem})
        if observer is not None:
            observer.rejected(attempt, shown)
        conversation += [ChatMessage("assistant", reply[:REPLY_ECHO_CHARS]), retry_message(problem)]
    raise DraftingError(
        f"the script model ({model.source}) gave no valid script in {max_attempts} "
        f"attempt{'s' if max_attempts != 1 else ''}; the last reply was rejected because {shown}",
        attempts=max_attempts,
        last_problem=shown,
    )


def look_alike_speakers(script: Script) -> list[tuple[str, str]]:
    """Pairs of speakers whose names may be one person: one name's words are all in the other's."""
    names = [speaker.name for speaker in script.speakers]
    pairs = []
    for index, first in enumerate(names):
        for second in names[index + 1 :]:
            words, other = set(first.casefold().split()), set(second.casefold().split())
            if words <= other or other <= words:
                pairs.append((first, second))
    return pairs


def _finished(script: Script, via: Via, attempts: int) -> DraftedScript:
    text = script_to_text(script)
    notes = tuple(
        f"{first!r} and {second!r} may be the same person; rerun with the script model to merge them"
        for first, second in (look_alike_speakers(script) if via != "model" else ())
    )
    return DraftedScript(script=parse_script(text), text=text, via=via, attempts=attempts, notes=notes)


def _check_names(names: Sequence[str]) -> None:
    """Hosts' names: 1 to 4, distinct, each one the parser reads as a speaker name."""
    if not 1 <= len(names) <= MAX_SPEAKERS:
        raise DraftInputError("names", f"a script has 1 to {MAX_SPEAKERS} hosts, not {len(names)}")
    for name in names:
        if not is_speaker_label(name):
            raise DraftInputError("names", f"{name!r} is not a usable name: {NAME_RULE}")
    folded = [name.casefold() for name in names]
    if len(set(folded)) != len(folded):
        raise DraftInputError("names", f"the hosts' names must differ: {', '.join(names)}")

"""Job planning: which generations a script becomes, and how long each may run.

Two modes:
- `whole`: the script in as few generations as possible, as VibeVoice was trained (best continuity of
  voices and turn-taking). Pause tags still split, since a pause is silence we insert, not speech.
  Turn timings inside a generation are estimated from each turn's share of the text.
- `turns`: every turn is its own generation, so turn timings are exact, pauses are exact and memory stays
  bounded by the longest turn. A turn longer than `max_segment_seconds` is cut at sentence ends into
  pieces (same speaker), each its own generation.

Durations are estimated from text length: English speech runs about 14 characters a second. Each
generation gets a frame budget well above its estimate so a normal reading never hits it, while a model
that never stops cannot run away.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from typing import Literal, cast

from core.audio_rates import FRAMES_PER_SECOND
from script_text.parser import Pause, Script, ScriptError, Speaker, Turn, parse_script
from script_text.prompt import SegmentText
from script_text.speech_text import normalize_for_speech

Mode = Literal["whole", "turns"]
MODES: tuple[Mode, ...] = ("whole", "turns")

CHARS_PER_SECOND = 14.0
# The longest episode, however it is split: VibeVoice-1.5B's published 90 minutes in one generation, the most any
# member holds. One generation is held to the loaded model's own context (`ModelContext`).
MAX_EPISODE_MINUTES = 90.0
# VibeVoice's published figures: 65,536 positions hold about 90 minutes of a podcast (1.5B), 32,768 about 45 (Large).
PUBLISHED_MINUTES_PER_TOKEN = 90.0 / 65_536
DEFAULT_MAX_SEGMENT_SECONDS = 120.0
SEEDS = 2**31  # seeds run 0 to 2**31 - 1: what a 32-bit database column holds
# Budget = 2x the estimate + 5 s: room for slow, expressive reading, and a hard stop for a runaway model.
_BUDGET_FACTOR = 2.0
_BUDGET_SLACK_SECONDS = 5.0
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")


class EpisodeTooLong(ScriptError):
    """A plan past the planner's ceiling (`MAX_EPISODE_MINUTES`); `minutes` is its estimated audio.

    Its own type so that a server holding jobs to less (`VOXCAST_MAX_JOB_AUDIO_MINUTES`) can answer with its
    own limit and setting, whichever of the two a script passes.
    """

    def __init__(self, minutes: float) -> None:
        self.minutes = minutes
        super().__init__(
            f"the script would run about {minutes:.0f} minutes; at most {MAX_EPISODE_MINUTES:.0f} minutes "
            "of audio per episode"
        )

    def __reduce__(self) -> tuple[type[EpisodeTooLong], tuple[float]]:  # type: ignore[override]
        return type(self), (self.minutes,)


@dataclass(frozen=True)
class ModelContext:
    """The loaded model as a length limit: its name (`VibeVoice-Large`, else where it was loaded from) and its
    context in tokens, which one generation's prompt (text and voices) and frames together never exceed."""

    name: str
    tokens: int

    @property
    def minutes(self) -> float:
        """About how many minutes of a podcast the context holds, by the family's published figures."""
        return self.tokens * PUBLISHED_MINUTES_PER_TOKEN

    def holds(self) -> str:
        """The limit in words, for a refusal: 'VibeVoice-Large holds 32,768 tokens (about 45 minutes)'."""
        return f"{self.name} holds {self.tokens:,} tokens (about {self.minutes:.0f} minutes)"


@dataclass(frozen=True)
class PlannedTurn:
    """A script turn (or a piece of a long one) inside a segment."""

    index: int  # turn number in the script, 0-based
    speaker: int  # index into Plan.speakers
    text: str
    line: int


@dataclass(frozen=True)
class Segment:
    """One generation."""

    index: int
    turns: tuple[PlannedTurn, ...]

    @property
    def estimated_seconds(self) -> float:
        return estimate_seconds(" ".join(turn.text for turn in self.turns))

    @property
    def estimated_frames(self) -> int:
        """Frames of speech expected (7.5 a second): its share of `Plan.estimated_frames`, for progress and ETAs."""
        return math.ceil(self.estimated_seconds * FRAMES_PER_SECOND)

    @property
    def max_frames(self) -> int:
        budget = self.estimated_seconds * _BUDGET_FACTOR + _BUDGET_SLACK_SECONDS
        return math.ceil(budget * FRAMES_PER_SECOND)

    @property
    def text(self) -> SegmentText:
        """What the model reads: each turn's text with numbers, dates, symbols and URLs spelled out.

        Transcripts and chapters keep the text as written (`turns`)."""
        return SegmentText(tuple((turn.speaker, normalize_for_speech(turn.text)) for turn in self.turns))

    @property
    def text_hash(self) -> str:
        """SHA-256 of what the segment says: each turn's speaker, its text as written and as the model reads it.

        Stored with a segment's audio, so audio kept from an earlier run is never paired with other words (after
        an upgrade that reads or spells a script differently, say): a run whose plan hashes a segment otherwise
        generates it again."""
        said = [
            [turn.speaker, turn.text, spoken] for turn, (_, spoken) in zip(self.turns, self.text.lines, strict=True)
        ]
        return hashlib.sha256(json.dumps(said, ensure_ascii=False).encode("utf-8")).hexdigest()


def context_refusal(context: ModelContext, segment: Segment, segments: int, prompt_tokens: int) -> str | None:
    """Why `segment` (one of `segments`) cannot be generated in one pass on the model, or None when it fits: its
    prompt (`prompt_tokens`: text and voices) and its estimated frames past the model's context. The estimate, not
    the frame budget: a budget past the context is cut to it, but speech past it would be lost."""
    needed = prompt_tokens + segment.estimated_frames
    if needed <= context.tokens:
        return None
    return (
        f"{context.holds()}; generation {segment.index + 1} of {segments} (lines {segment.turns[0].line} to "
        f"{segment.turns[-1].line}, about {segment.estimated_seconds / 60:.1f} minutes of audio) needs about "
        f"{needed:,} tokens ({prompt_tokens:,} of prompt and {segment.estimated_frames:,} of audio)"
    )


@dataclass(frozen=True)
class Silence:
    """A pause from the script, inserted between generations."""

    seconds: float
    line: int


@dataclass(frozen=True)
class Plan:
    mode: Mode
    speakers: tuple[Speaker, ...]
    items: tuple[Segment | Silence, ...]

    @property
    def segments(self) -> tuple[Segment, ...]:
        return tuple(item for item in self.items if isinstance(item, Segment))

    @property
    def estimated_seconds(self) -> float:
        return sum(item.estimated_seconds if isinstance(item, Segment) else item.seconds for item in self.items)

    @property
    def estimated_frames(self) -> int:
        """Expected frames of speech across all segments, for progress bars and ETAs."""
        return sum(segment.estimated_frames for segment in self.segments)


def segment_seed(seed: int, index: int) -> int:
    """The seed of a plan's segment `index` when its episode is seeded `seed`: `seed + index`, wrapped below 2**31.

    The one rule for it (a render, a job's segment rows, a regeneration's new seeds all use it), so a segment
    generated alone (a resumed job, a regenerated turn) comes out as in the full run.
    """
    return (seed + index) % SEEDS


def estimate_seconds(text: str) -> float:
    """Expected speaking time of `text`, at least one second."""
    return max(1.0, len(text) / CHARS_PER_SECOND)


def plan_script(
    script: Script, mode: Mode = "whole", *, max_segment_seconds: float = DEFAULT_MAX_SEGMENT_SECONDS
) -> Plan:
    """Turn a parsed script into generations and silences, refusing episodes beyond the length limit
    (`EpisodeTooLong`)."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
    turns = [
        PlannedTurn(index, item.speaker, item.text, item.line)
        for index, item in enumerate(item for item in script.items if isinstance(item, Turn))
    ]
    groups = _whole_groups(script, turns) if mode == "whole" else _turn_groups(script, turns, max_segment_seconds)
    items: list[Segment | Silence] = []
    for group in groups:
        if isinstance(group, Silence):
            items.append(group)
        else:
            items.append(Segment(index=sum(isinstance(item, Segment) for item in items), turns=tuple(group)))
    plan = Plan(mode=mode, speakers=script.speakers, items=tuple(items))
    minutes = plan.estimated_seconds / 60
    if minutes > MAX_EPISODE_MINUTES:
        raise EpisodeTooLong(minutes)
    return plan


def plan_job(script_text: str, mode: str, max_segment_seconds: float) -> Plan:
    """A stored job's plan, from its script text and the mode and segment length it was submitted with: the plan its
    workers generate and the api describes (`GET /v1/jobs/{id}/plan`). Raises `ScriptError` (with the line) for a
    script the api should have refused."""
    return plan_script(parse_script(script_text), cast(Mode, mode), max_segment_seconds=max_segment_seconds)


def _whole_groups(script: Script, turns: list[PlannedTurn]) -> list[list[PlannedTurn] | Silence]:
    """Consecutive turns share a generation; every pause closes one."""
    groups: list[list[PlannedTurn] | Silence] = [[]]
    turn_iter = iter(turns)
    for item in script.items:
        if isinstance(item, Pause):
            groups.append(Silence(item.seconds, item.line))
            groups.append([])
        else:
            current = groups[-1]
            assert isinstance(current, list)
            current.append(next(turn_iter))
    return [group for group in groups if not (isinstance(group, list) and not group)]


def _turn_groups(
    script: Script, turns: list[PlannedTurn], max_segment_seconds: float
) -> list[list[PlannedTurn] | Silence]:
    groups: list[list[PlannedTurn] | Silence] = []
    turn_iter = iter(turns)
    for item in script.items:
        if isinstance(item, Pause):
            groups.append(Silence(item.seconds, item.line))
        else:
            groups += [[piece] for piece in _split_long_turn(next(turn_iter), max_segment_seconds)]
    return groups


def _split_long_turn(turn: PlannedTurn, max_segment_seconds: float) -> list[PlannedTurn]:
    """Pieces of a turn no longer than the bound, cut at sentence ends (a single long sentence stays whole)."""
    max_chars = max_segment_seconds * CHARS_PER_SECOND
    if len(turn.text) <= max_chars:
        return [turn]
    pieces: list[str] = []
    for sentence in _SENTENCE_END.split(turn.text):
        if pieces and len(pieces[-1]) + 1 + len(sentence) <= max_chars:
            pieces[-1] = f"{pieces[-1]} {sentence}"
        else:
            pieces.append(sentence)
    return [PlannedTurn(turn.index, turn.speaker, piece, turn.line) for piece in pieces]

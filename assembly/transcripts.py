"""The episode's side files from its turn timings: chapter marks, SubRip and WebVTT subtitles, the chapters JSON
(Podcasting 2.0's JSON chapters format, what podcast apps read) and the turns JSON (every turn's timing, what the
studio draws and regenerations are numbered by)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from script_text.timeline import TimedTurn, check_span

_TITLE_MAX_WORDS = 8
_CUE_LINE_WIDTH = 80
# The Podcasting 2.0 JSON chapters format (podcast namespace, `chapters/jsonChapters.md`), version 1.2.
CHAPTERS_JSON_VERSION = "1.2.0"
CHAPTERS_MEDIA_TYPE = "application/json+chapters"
_TURNS_JSON_VERSION = 1


@dataclass(frozen=True)
class Chapter:
    """A navigation mark for podcast players."""

    title: str
    start: float
    end: float

    def __post_init__(self) -> None:
        check_span(f"chapter {self.title!r}", self.start, self.end)


def _chapter_title(turn: TimedTurn) -> str:
    """Speaker plus the opening words of the turn, which is what listeners skim for."""
    words = turn.text.split()
    if not words:
        return turn.speaker_name
    snippet = " ".join(words[:_TITLE_MAX_WORDS])
    if len(words) > _TITLE_MAX_WORDS:
        snippet = snippet.rstrip(",;:.-") + "…"
    return f"{turn.speaker_name}: {snippet}"


def chapters_from_turns(turns: Sequence[TimedTurn], *, min_chapter_seconds: float = 60.0) -> tuple[Chapter, ...]:
    """Split the episode into chapters at turn boundaries.

    A chapter closes at the first turn that starts at least min_chapter_seconds
    after the chapter began, so chapters never cut a turn in half. The first
    chapter starts at 0 (covering any intro silence) and the last ends with the
    final turn, so together they cover the whole spoken timeline without gaps.
    """
    if min_chapter_seconds < 0:
        raise ValueError(f"min_chapter_seconds must be >= 0, got {min_chapter_seconds}")
    if not turns:
        return ()
    openers = [turns[0]]
    starts = [0.0]
    for turn in turns[1:]:
        if turn.start - starts[-1] >= min_chapter_seconds:
            openers.append(turn)
            starts.append(turn.start)
    ends = [*starts[1:], turns[-1].end]
    return tuple(
        Chapter(title=_chapter_title(opener), start=start, end=end)
        for opener, start, end in zip(openers, starts, ends, strict=True)
    )


def _timestamp(seconds: float, decimal_mark: str) -> str:
    """HH:MM:SS<mark>mmm; hours grow past two digits rather than wrapping."""
    total_ms = round(seconds * 1000)
    hours, rest = divmod(total_ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{decimal_mark}{millis:03d}"


def _wrap(text: str) -> str:
    """Fold long lines; collapsing newlines also keeps blank lines out of a cue, which would end it."""
    return textwrap.fill(text, width=_CUE_LINE_WIDTH)


def format_srt(turns: Sequence[TimedTurn]) -> str:
    """SubRip subtitles, one numbered cue per turn, text prefixed by the speaker."""
    cues = [
        f"{number}\n"
        f"{_timestamp(turn.start, ',')} --> {_timestamp(turn.end, ',')}\n"
        f"{_wrap(f'{turn.speaker_name}: {turn.text}')}\n"
        for number, turn in enumerate(turns, start=1)
    ]
    return "\n".join(cues)


def _vtt_escape(text: str) -> str:
    """WebVTT cue text is markup: bare &, < and > would be read as tags or entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def format_vtt(turns: Sequence[TimedTurn]) -> str:
    """WebVTT subtitles; speakers go in voice spans so players can style or label them."""
    cues = [
        f"{_timestamp(turn.start, '.')} --> {_timestamp(turn.end, '.')}\n"
        f"<v {_vtt_escape(turn.speaker_name)}>{_vtt_escape(_wrap(turn.text))}\n"
        for turn in turns
    ]
    return "\n".join(["WEBVTT\n", *cues])


def _ms(seconds: float) -> float:
    return round(seconds, 3)


def chapters_document(chapters: Sequence[Chapter], **episode: str) -> dict[str, Any]:
    """The chapters JSON in Podcasting 2.0's format: `version`, and each chapter's `startTime`, `endTime` (seconds) and
    `title`; `episode` adds the format's optional episode fields (`title`, `podcastName`, `author`, `fileName`)."""
    return {
        "version": CHAPTERS_JSON_VERSION,
        **episode,
        "chapters": [{"startTime": _ms(c.start), "endTime": _ms(c.end), "title": c.title} for c in chapters],
    }


def chapters_from_document(document: dict[str, Any]) -> tuple[Chapter, ...]:
    """The chapters a stored chapters JSON holds: Podcasting 2.0's format, or the one episodes were written in before
    (`start`/`end` beside every turn's timing), which older jobs keep."""
    marks = document.get("chapters", [])
    if marks and "startTime" not in marks[0]:
        return tuple(Chapter(title=m["title"], start=m["start"], end=m["end"]) for m in marks)
    return tuple(Chapter(title=m["title"], start=m["startTime"], end=m["endTime"]) for m in marks)


def turns_document(seconds: float, turns: Sequence[TimedTurn]) -> dict[str, Any]:
    """The turns JSON: the episode's length and every turn's timing (what Listen draws; `index` is what a regeneration
    names)."""
    return {
        "version": _TURNS_JSON_VERSION,
        "duration": _ms(seconds),
        "turns": [
            {
                "index": t.index,
                "speaker": t.speaker_name,
                "text": t.text,
                "start": _ms(t.start),
                "end": _ms(t.end),
            }
            for t in turns
        ],
    }

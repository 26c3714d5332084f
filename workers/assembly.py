"""Turn generated speech into the finished episode files.

The synthesis workers hand over one float32 mono track plus the timing of every
script turn. This module levels the track to podcast loudness, derives chapter
marks and subtitles from the turn timings, and writes the audio and its side
files (SRT, WebVTT, chapters JSON) so that a reader never sees a half-written
or mismatched set.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import shutil
import textwrap
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torchaudio.functional as AF

from core.storage import write_durably
from pipeline.timeline import TimedTurn, check_span
from workers.audio_encoding import encode_in_child

SAMPLE_RATE = 24_000
TARGET_LUFS = -16.0
PEAK_CEILING_DBFS = -1.0

AUDIO_FORMATS: dict[str, tuple[str, str | None]] = {
    ".wav": ("WAV", "PCM_16"),
    ".flac": ("FLAC", "PCM_16"),
    ".mp3": ("MP3", "MPEG_LAYER_III"),
    ".ogg": ("OGG", "VORBIS"),
    ".opus": ("OGG", "OPUS"),
}

# BS.1770 gates in 400 ms blocks; anything shorter has no defined loudness.
_MIN_LOUDNESS_SECONDS = 0.4
_TITLE_MAX_WORDS = 8
_CUE_LINE_WIDTH = 80
_CHAPTERS_JSON_VERSION = 1


class OutputError(ValueError):
    """The episode cannot be written as requested (bad extension, unusable audio)."""


def _require_mono(audio: np.ndarray) -> None:
    """The whole pipeline is mono; a stray channel axis would silently skew loudness and duration."""
    if audio.ndim != 1:
        raise ValueError(f"expected mono (1-D) audio, got shape {audio.shape}")


@dataclass(frozen=True)
class Chapter:
    """A navigation mark for podcast players."""

    title: str
    start: float
    end: float

    def __post_init__(self) -> None:
        check_span(f"chapter {self.title!r}", self.start, self.end)


# eq=False: field-wise equality would compare numpy arrays, which is ambiguous and
# unhashable; identity semantics are the honest choice for a large audio buffer.
@dataclass(frozen=True, eq=False)
class Episode:
    """The assembled episode: mono audio at SAMPLE_RATE plus its timeline."""

    audio: np.ndarray
    turns: tuple[TimedTurn, ...]
    chapters: tuple[Chapter, ...]

    def __post_init__(self) -> None:
        _require_mono(self.audio)

    @property
    def seconds(self) -> float:
        return len(self.audio) / SAMPLE_RATE


@dataclass(frozen=True)
class EpisodeFiles:
    """Where write_episode put each file."""

    audio: Path
    srt: Path
    vtt: Path
    chapters: Path
    more_audio: tuple[Path, ...] = ()  # the same episode in other formats, when asked for


def audio_format_for(path: Path) -> tuple[str, str | None]:
    """Map a file extension (case-insensitive) to soundfile's (format, subtype)."""
    try:
        return AUDIO_FORMATS[path.suffix.lower()]
    except KeyError:
        allowed = ", ".join(sorted(AUDIO_FORMATS))
        raise OutputError(f"unsupported audio extension {path.suffix!r} for {path}; use one of: {allowed}") from None


def normalize_loudness(audio: np.ndarray, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Level audio to TARGET_LUFS, then pull it under PEAK_CEILING_DBFS if needed.

    The ceiling wins over the loudness target: a spiky track ends up quieter than
    TARGET_LUFS rather than clipping. Silence and clips too short to measure are
    returned unchanged (as a float32 copy) because their loudness is undefined.
    """
    _require_mono(audio)
    out = np.array(audio, dtype=np.float32, copy=True)
    if len(out) < _MIN_LOUDNESS_SECONDS * sample_rate:
        return out
    measured = float(AF.loudness(torch.from_numpy(out).unsqueeze(0), sample_rate))
    if not math.isfinite(measured):
        return out
    scaled = out.astype(np.float64) * 10.0 ** ((TARGET_LUFS - measured) / 20.0)
    peak = float(np.max(np.abs(scaled)))
    ceiling = 10.0 ** (PEAK_CEILING_DBFS / 20.0)
    if peak > ceiling:
        scaled *= ceiling / peak
    return scaled.astype(np.float32)


def silence(seconds: float) -> np.ndarray:
    """Float32 zeros for pauses between turns, rounded to whole samples."""
    if seconds < 0:
        raise ValueError(f"silence length must be >= 0 seconds, got {seconds}")
    return np.zeros(round(seconds * SAMPLE_RATE), dtype=np.float32)


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


def _chapters_document(episode: Episode) -> dict[str, Any]:
    return {
        "version": _CHAPTERS_JSON_VERSION,
        "duration": _ms(episode.seconds),
        "chapters": [{"title": c.title, "start": _ms(c.start), "end": _ms(c.end)} for c in episode.chapters],
        "turns": [
            {
                "index": t.index,
                "speaker": t.speaker_name,
                "text": t.text,
                "start": _ms(t.start),
                "end": _ms(t.end),
            }
            for t in episode.turns
        ],
    }


def _pcm_ready(audio: np.ndarray) -> np.ndarray:
    """Validate and clip: encoders wrap or distort samples outside [-1, 1]."""
    if len(audio) == 0:
        raise OutputError("episode has no audio samples; refusing to write an empty file")
    bad = int(np.count_nonzero(~np.isfinite(audio)))
    if bad:
        raise OutputError(f"episode audio has {bad} non-finite samples (NaN/inf)")
    return np.clip(audio, -1.0, 1.0).astype(np.float32)


def _sibling_temp(target: Path, purpose: str) -> Path:
    """A hidden, unique name in the target's folder, so os.replace stays on one filesystem."""
    return target.with_name(f".{target.name}.{secrets.token_hex(6)}.{purpose}")


Stager = Callable[[Path], object]  # creates the given temporary file with a target's content


def _stage(target: Path, stage: Stager) -> Path:
    """Create a temporary file for target through `stage` (flushed to disk); return its path."""
    temp = _sibling_temp(target, "tmp")
    try:
        stage(temp)
    except BaseException as exc:
        temp.unlink(missing_ok=True)
        exc.add_note(f"while writing {target}")
        raise
    return temp


def _backup(target: Path) -> Path | None:
    """Keep the current content of target reachable so a failed commit can restore it."""
    if not target.is_file():
        return None
    backup = _sibling_temp(target, "bak")
    try:
        os.link(target, backup)
    except OSError:  # filesystems without hard links
        shutil.copy2(target, backup)
    return backup


def _commit(staged: Sequence[tuple[Path, Path]]) -> None:
    """Move each (temp, target) into place, all or nothing.

    If a later replace fails, the targets already replaced get their previous
    content back (or are removed if they did not exist), so the side files never
    disagree with the audio.
    """
    backups: list[Path] = []
    committed: list[tuple[Path, Path | None]] = []
    try:
        for temp, target in staged:
            backup = _backup(target)
            if backup is not None:
                backups.append(backup)
            os.replace(temp, target)
            committed.append((target, backup))
    except BaseException:
        for target, backup in reversed(committed):
            if backup is None:
                target.unlink(missing_ok=True)
            else:
                os.replace(backup, target)
        raise
    finally:
        for backup in backups:
            backup.unlink(missing_ok=True)


def _text_stager(text: str, target: Path) -> Stager:
    encoded = text.encode("utf-8")
    return lambda temp: write_durably(temp, lambda handle: handle.write(encoded), target=target, exclusive=True)


def _audio_stager(samples: np.ndarray, target: Path) -> Stager:
    fmt, subtype = audio_format_for(target)
    return lambda temp: encode_in_child(samples, temp, fmt, subtype, target=target)


def _collect(encoding: list[tuple[Path, Future[Path]]], staged: list[tuple[Path, Path]]) -> BaseException | None:
    """Wait for every encoder; add each staged file to `staged`; return the first failure, if any."""
    failure = None
    for target, future in encoding:
        error = future.exception()
        if error is None:
            staged.append((future.result(), target))
        elif failure is None:
            failure = error
    return failure


def write_episode(episode: Episode, audio_path: Path, *more_audio: Path) -> EpisodeFiles:
    """Write the audio (in each format asked) and its .srt, .vtt and .chapters.json beside it, atomically as a set.

    `more_audio` are the same episode in other formats, in the same folder under the same name (the side
    files are shared). Everything is validated and rendered before the first byte hits disk; each file is
    written to a temporary sibling and only then moved into place. The formats are encoded side by side,
    each in a process of its own (`workers.audio_encoding`), so an encoder that crashes fails this call
    with `EncoderCrashed` and nothing else. On any error the temporaries are removed and files from an
    earlier run stay as they were.
    """
    audio_paths = [Path(audio_path), *map(Path, more_audio)]
    for path in audio_paths:
        audio_format_for(path)
        if (path.parent, path.stem) != (audio_paths[0].parent, audio_paths[0].stem):
            raise OutputError(f"{path} is not beside {audio_paths[0]} under the same name; side files are shared")
    samples = _pcm_ready(episode.audio)
    first = audio_paths[0]
    files = EpisodeFiles(
        audio=first,
        srt=first.with_suffix(".srt"),
        vtt=first.with_suffix(".vtt"),
        chapters=first.with_name(f"{first.stem}.chapters.json"),
        more_audio=tuple(audio_paths[1:]),
    )
    chapters = json.dumps(_chapters_document(episode), ensure_ascii=False, indent=2) + "\n"
    texts = [
        (files.srt, _text_stager(format_srt(episode.turns), files.srt)),
        (files.vtt, _text_stager(format_vtt(episode.turns), files.vtt)),
        (files.chapters, _text_stager(chapters, files.chapters)),
    ]
    first.parent.mkdir(parents=True, exist_ok=True)
    staged: list[tuple[Path, Path]] = []
    try:
        with ThreadPoolExecutor(max_workers=min(len(audio_paths), os.cpu_count() or 1)) as encoders:
            encoding = [(path, encoders.submit(_stage, path, _audio_stager(samples, path))) for path in audio_paths]
            try:
                for target, stage in texts:
                    staged.append((_stage(target, stage), target))
            finally:  # leaving the pool waits for every encoder, so nothing is cleaned up under a running one
                failure = _collect(encoding, staged)
        if failure is not None:
            raise failure
        _commit(staged)
    finally:
        for temp, _ in staged:
            temp.unlink(missing_ok=True)
    return files

"""Writing the finished episode: the audio in each format asked and its side files, atomically as a set.

`write_episode` validates and renders everything before the first byte hits disk, writes each file to a
temporary sibling (each audio format encoded in a process of its own, `assembly.audio_encoding`) and moves
them into place all or nothing, so a reader never sees a half-written or mismatched set.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from assembly.audio_encoding import encode_in_child
from assembly.transcripts import Chapter, chapters_document, format_srt, format_vtt, turns_document
from core.audio_formats import AUDIO_FORMATS, AudioFormatSpec
from core.audio_rates import SAMPLE_RATE
from core.pcm import require_mono
from core.storage import write_durably
from script_text.timeline import TimedTurn


class OutputError(ValueError):
    """The episode cannot be written as requested (bad extension, unusable audio)."""


# eq=False: field-wise equality would compare numpy arrays, which is ambiguous and
# unhashable; identity semantics are the honest choice for a large audio buffer.
@dataclass(frozen=True, eq=False)
class Episode:
    """The assembled episode: mono audio at SAMPLE_RATE plus its timeline."""

    audio: np.ndarray
    turns: tuple[TimedTurn, ...]
    chapters: tuple[Chapter, ...]

    def __post_init__(self) -> None:
        require_mono(self.audio)

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
    turns: Path
    more_audio: tuple[Path, ...] = ()  # the same episode in other formats, when asked for


def audio_format_for(path: Path) -> tuple[str, str | None]:
    """Map a file extension (case-insensitive) to soundfile's (format, subtype)."""
    spec = _format_of(path)
    return spec.container, spec.subtype


def _format_of(path: Path) -> AudioFormatSpec:
    """The format a file's extension (any case) names; `OutputError` listing the others for one it does not."""
    spec = AUDIO_FORMATS.get(path.suffix.lower().removeprefix("."))
    if spec is None:
        allowed = ", ".join(sorted(f".{name}" for name in AUDIO_FORMATS))
        raise OutputError(f"unsupported audio extension {path.suffix!r} for {path}; use one of: {allowed}")
    return spec


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


def _json_text(document: object) -> str:
    return json.dumps(document, ensure_ascii=False, indent=2) + "\n"


def _text_stager(text: str, target: Path) -> Stager:
    encoded = text.encode("utf-8")
    return lambda temp: write_durably(temp, lambda handle: handle.write(encoded), target=target, exclusive=True)


def _audio_stager(samples: np.ndarray, target: Path, kbps: Mapping[str, int]) -> Stager:
    spec = _format_of(target)
    level = mode = None
    if spec.bitrates is not None and (rate := spec.kbps(kbps)) is not None:
        level, mode = spec.bitrates.compression_level(rate), spec.bitrates.mode
    return lambda temp: encode_in_child(
        samples, temp, spec.container, spec.subtype, target=target, compression_level=level, bitrate_mode=mode
    )


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


def write_episode(
    episode: Episode, audio_path: Path, *more_audio: Path, kbps: Mapping[str, int] | None = None
) -> EpisodeFiles:
    """Write the audio (in each format asked) and its .srt, .vtt, .chapters.json and .turns.json beside it, atomically
    as a set.

    `more_audio` are the same episode in other formats, in the same folder under the same name (the side
    files are shared). `kbps` picks a lossy format's bitrate by its name (`{"mp3": 96}`), one of
    `AudioFormatSpec.bitrates.choices`; a format not named gets its default. Everything is validated and rendered
    before the first byte hits disk; each file is written to a temporary sibling and only then moved into place.
    The formats are encoded side by side,
    each in a process of its own (`assembly.audio_encoding`), so an encoder that crashes fails this call
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
        turns=first.with_name(f"{first.stem}.turns.json"),
        more_audio=tuple(audio_paths[1:]),
    )
    texts = [
        (files.srt, _text_stager(format_srt(episode.turns), files.srt)),
        (files.vtt, _text_stager(format_vtt(episode.turns), files.vtt)),
        (files.turns, _text_stager(_json_text(turns_document(episode.seconds, episode.turns)), files.turns)),
        (files.chapters, _text_stager(_json_text(chapters_document(episode.chapters)), files.chapters)),
    ]
    first.parent.mkdir(parents=True, exist_ok=True)
    staged: list[tuple[Path, Path]] = []
    try:
        with ThreadPoolExecutor(max_workers=min(len(audio_paths), os.cpu_count() or 1)) as encoders:
            encoding = [
                (path, encoders.submit(_stage, path, _audio_stager(samples, path, kbps or {}))) for path in audio_paths
            ]
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

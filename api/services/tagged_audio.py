"""An episode's MP3 as it is published: its ID3 tag, built from what is true when it is served, then its audio.

Tags are written when the episode is served, not when it is assembled: a show's title, author or artwork, and an
episode's title or number, change after the audio is made (and a finished job can join a show later), and rewriting
every episode's file for that (in an object store, a download and an upload of each) would leave files and feed
out of step while it ran. The stored MP3 stays as the worker wrote it; the tag (`assembly.id3_tags`) goes in front
of its audio frames as it is sent, so the length in the feed, the bytes sent, and Range requests all agree. The same
tag contents give the same bytes: a file's length and ETag change only when what it says does. Its words are written
as `core.text_rules.publishable` leaves them (a NUL would end an ID3 text frame early).

What each tag needs from the store (a file's first bytes, its chapters, a show's artwork) is read once per version
of that file and kept in this process.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import TypedDict

from api.downloads import StoredTail, Validators
from api.services.artwork import ARTWORK_MEDIA_TYPES
from assembly.id3_tags import ID3_HEADER_BYTES, EpisodeTags, id3_tag, id3_tag_size
from assembly.transcripts import Chapter, chapters_from_document
from core.file_store import FileStore, StoredFile
from core.models import Episode, Job, Show
from core.storage import DataFolder
from core.text_rules import publishable

EPISODE_MP3 = "episode.mp3"
EPISODE_CHAPTERS = "episode.chapters.json"


@dataclass(frozen=True)
class TaggedMp3:
    """The published file: `tag`, then the stored MP3's audio frames (`tail`)."""

    tag: bytes
    tail: StoredTail
    validators: Validators

    @property
    def size(self) -> int:
        return len(self.tag) + self.tail.length


def tagged_mp3(data: DataFolder, job: Job, episode: Episode | None) -> TaggedMp3:
    """The job's MP3 with its tags (the episode's and its show's, when it is one); FileNotFoundError when the job has
    no MP3 stored (not done, or removed)."""
    files = data.files
    mp3_path = data.job(job.id).output(EPISODE_MP3)
    mp3 = _stat(files, mp3_path)
    show = episode.show if episode is not None else None
    tags = EpisodeTags(
        title=publishable(episode.title if episode is not None else job.title or "") or "Untitled",
        seconds=job.audio_seconds or 0.0,
        chapters=episode_chapters(data, job)[0],
        show=publishable(show.title) if show is not None else None,
        author=publishable(show.author) if show is not None else None,
        number=episode.number if episode is not None else None,
        description=publishable(episode.description) if episode is not None and episode.description else None,
        **_artwork_tags(data, show),
    )
    tag = id3_tag(tags)
    tail = StoredTail(files, mp3_path, mp3.size, _audio_start(files, mp3_path, mp3))
    changed = max([mp3.modified, *_changes(episode)])
    return TaggedMp3(tag, tail, Validators.of(tag + mp3.version.encode(), changed))


def episode_chapters(data: DataFolder, job: Job) -> tuple[tuple[Chapter, ...], StoredFile]:
    """The job's chapter marks, from its stored chapters JSON (read once per version), and what the store says of that
    file; FileNotFoundError when it has none."""
    path = data.job(job.id).output(EPISODE_CHAPTERS)
    stored = _stat(data.files, path)
    return _chapters(data.files, path, stored.size, stored.version), stored


def _changes(episode: Episode | None) -> list[datetime]:
    return [] if episode is None else [episode.updated_at, episode.show.updated_at]


class _ArtworkTags(TypedDict, total=False):
    artwork: bytes
    artwork_type: str


def _artwork_tags(data: DataFolder, show: Show | None) -> _ArtworkTags:
    if show is None or show.artwork_format is None:
        return {}
    path = data.show_artwork(show.id, show.artwork_format)
    stored = data.files.stat(path)
    if stored is None:
        return {}
    return {
        "artwork": read_small_file(data.files, path, stored.size, stored.version),
        "artwork_type": ARTWORK_MEDIA_TYPES[show.artwork_format],
    }


def _stat(files: FileStore, path: Path) -> StoredFile:
    stored = files.stat(path)
    if stored is None:
        raise FileNotFoundError(path)
    return stored


def _audio_start(files: FileStore, path: Path, mp3: StoredFile) -> int:
    """Where the stored MP3's audio frames start: past an ID3 tag of its own, which the published tag replaces."""
    return _id3_size(files, path, mp3.version) if mp3.size >= ID3_HEADER_BYTES else 0


@lru_cache(maxsize=4096)
def _id3_size(files: FileStore, path: Path, version: str) -> int:
    return id3_tag_size(b"".join(files.read_range(path, 0, ID3_HEADER_BYTES - 1)))


@lru_cache(maxsize=4096)
def _chapters(files: FileStore, path: Path, size: int, version: str) -> tuple[Chapter, ...]:
    return chapters_from_document(json.loads(read_whole(files, path, size)))


@lru_cache(maxsize=8)
def read_small_file(files: FileStore, path: Path, size: int, version: str) -> bytes:
    """A whole small file (an artwork) at one version, kept for the next reader of that version."""
    return read_whole(files, path, size)


def read_whole(files: FileStore, path: Path, size: int) -> bytes:
    """A whole file of `size` bytes, from wherever it is kept."""
    return b"".join(files.read_range(path, 0, size - 1)) if size else b""

"""A finished job's files, fetched from the api for the Listen screen: audio, transcripts, chapters, and the two
takes of each segment a regeneration replaced."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from api.schemas import JobView
from assembly.transcripts import chapters_from_document
from webui.api_client import StudioApi
from webui.files import StudioFiles, episode_file_name

# What the player plays, of the formats a job has: the smallest that every browser plays first.
_PLAYER_PREFERENCE = ("mp3", "opus", "ogg", "wav", "flac")


@dataclass(frozen=True)
class EpisodeFiles:
    """Audio by format, transcripts, chapters and turn timings (the files, and `chapters_data`: the chapters and the
    turns together, for the transcript on the page)."""

    audio: dict[str, Path]
    srt: Path
    vtt: Path
    chapters: Path
    turns: Path
    chapters_data: dict[str, Any]

    @property
    def all(self) -> list[Path]:
        return [*self.audio.values(), self.srt, self.vtt, self.chapters, self.turns]

    @property
    def playable(self) -> Path:
        return next(self.audio[fmt] for fmt in (*_PLAYER_PREFERENCE, *self.audio) if fmt in self.audio)


async def fetch_episode(api: StudioApi, files: StudioFiles, job: JobView) -> EpisodeFiles:
    """Download a done job's files, named after its title, into the studio's folder for the job.

    Fetched every time, not reused: a regenerated turn rewrites them.
    """
    assert job.outputs is not None, "only a done job has files"
    folder = files.job_folder(job.id)
    audio = {
        audio_format: await api.download(url, folder / episode_file_name(job, audio_format))
        for audio_format, url in job.outputs.audio.items()
    }
    srt = await api.download(job.outputs.srt, folder / episode_file_name(job, "srt"))
    vtt = await api.download(job.outputs.vtt, folder / episode_file_name(job, "vtt"))
    chapters = await api.download(job.outputs.chapters, folder / episode_file_name(job, "chapters.json"))
    turns = await api.download(job.outputs.turns, folder / episode_file_name(job, "turns.json"))
    return EpisodeFiles(audio, srt, vtt, chapters, turns, episode_timeline(chapters, turns))


def episode_timeline(chapters: Path, turns: Path) -> dict[str, Any]:
    """`{"chapters": [{"title", "start", "end"}], "turns": [...]}` from the chapters file (Podcasting 2.0's format)
    and the turns file, as the Listen screen draws them."""
    marks = chapters_from_document(json.loads(chapters.read_text(encoding="utf-8")))
    timeline = json.loads(turns.read_text(encoding="utf-8"))
    return {**timeline, "chapters": [{"title": m.title, "start": m.start, "end": m.end} for m in marks]}


@dataclass(frozen=True)
class TakePair:
    """A regenerated segment's audio before and after, to hear side by side before keeping one."""

    segment: int
    previous: Path
    new: Path


async def fetch_takes(api: StudioApi, files: StudioFiles, job: JobView) -> list[TakePair]:
    """Both takes of each segment the job's last regeneration replaced; none when it keeps no earlier take.

    Fetched every time: keeping a take, or another regeneration, changes what they hold.
    """
    if job.previous_take is None:
        return []
    folder = files.job_folder(job.id)
    pairs = []
    for segment in job.previous_take.segments:
        previous = await api.download(segment.audio, folder / f"take-{segment.index:04d}-previous.flac")
        new_url = f"/v1/jobs/{job.id}/segments/{segment.index}/audio"
        new = await api.download(new_url, folder / f"take-{segment.index:04d}-new.flac")
        pairs.append(TakePair(segment.index, previous, new))
    return pairs

"""Following a job as it moves: queue position, progress and the audio made so far, from the api's events.

`follow_job` turns the job's server-sent events into snapshots the Generate screen draws. It keeps the live
audio chunks and downloads each finished segment as soon as the api announces it, and turns both into parts
to play in episode order (`webui.live_audio`), so the page can play the episode, in either mode, while the
rest of it is generating. While the job waits in its queue it asks for the job every few seconds: the event
stream announces state changes, not a queue position that moves because other jobs started.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from api.schemas import JobStreamEvent, JobView, SegmentReady
from core.job_events import AudioEvent, ProgressEvent
from core.job_states import FINAL_STATES, JobState
from core.progress_estimate import past_estimate, shown_share
from webui.api_client import StudioApi, StudioApiError
from webui.files import StudioFiles
from webui.live_audio import LiveAudio, LivePart, part_label

_QUEUED_POLL_SECONDS = 2.0
_PROGRESS_INTERVAL_SECONDS = 0.25  # at most four progress redraws a second


@dataclass(frozen=True)
class ProgressFigures:
    """How far a job is: frames (7.5 a second of audio) and seconds of audio against the plan, and the ETA."""

    frames_done: int
    frames_planned: int
    audio_seconds_done: float
    audio_seconds_planned: float
    segments_done: int
    segments_total: int
    eta_seconds: float | None

    @classmethod
    def of_job(cls, job: JobView) -> ProgressFigures:
        progress = job.progress
        return cls(
            progress.frames_done,
            progress.frames_planned,
            progress.audio_seconds_done,
            progress.audio_seconds_planned,
            progress.segments_done,
            progress.segments_total,
            progress.eta_seconds,
        )

    def with_event(self, event: ProgressEvent) -> ProgressFigures:
        """These figures updated by a `progress` event (whose `segment` is the one being generated)."""
        return replace(
            self,
            frames_done=event.frames_done,
            frames_planned=event.frames_planned,
            audio_seconds_done=event.audio_seconds_done,
            audio_seconds_planned=event.audio_seconds_planned,
            segments_total=event.segments,
            eta_seconds=event.eta_seconds,
        )

    def percent(self, *, done: bool) -> int:
        """The share to show, as a whole percent: 100 only when `done` (`core.progress_estimate`)."""
        return round(shown_share(self.frames_done, self.frames_planned, done=done) * 100)

    @property
    def past_estimate(self) -> bool:
        """Generation ran past the plan's estimate: it is finishing, by an amount nobody knows."""
        return past_estimate(self.frames_done, self.frames_planned)


@dataclass(frozen=True)
class JobSnapshot:
    """The job as last seen, its progress, the parts of its audio ready to play (in episode order), and how many
    of its segments are stored (they may finish out of order: in `turns` mode they generate side by side)."""

    job: JobView
    progress: ProgressFigures
    parts: tuple[LivePart, ...] = field(default=())
    segments_stored: int = 0
    workers: int | None = None  # live workers, as `/health` says while the job waits in its queue (None: not asked)

    @property
    def is_final(self) -> bool:
        return self.job.state in FINAL_STATES


async def follow_job(
    api: StudioApi, files: StudioFiles, job_id: str, *, live_folder: Path | None = None
) -> AsyncIterator[JobSnapshot]:
    """Snapshots of the job from now until it ends; the last one is final (done, failed or cancelled).

    A snapshot comes first, on every state change, on every new part of audio to play (written in `live_folder`;
    without one neither live audio nor segments are fetched), and for progress at most four times a second. The
    job's plan, from the api, labels the parts with their speaker and words. Raises StudioApiError when the api
    cannot be reached or loses the job.
    """
    listen = live_folder is not None
    events: asyncio.Queue[JobStreamEvent | StudioApiError | None] = asyncio.Queue()
    reader = asyncio.create_task(_read_events(api, job_id, events, listen=listen))
    try:
        job = await api.job(job_id)
        plan = await api.job_plan(job_id) if listen else None
        live = LiveAudio(live_folder or files.job_folder(job_id), files.url, partial(part_label, plan))
        if listen:
            for index, path in await _stored_segments(api, files, job):
                live.add_stored(index, path)
        workers = (await api.health()).workers if job.state == JobState.QUEUED else None
        snapshot = JobSnapshot(job, ProgressFigures.of_job(job), tuple(live.parts), live.segments_stored, workers)
        yield snapshot
        last_progress = 0.0
        while not snapshot.is_final:
            try:
                item = await asyncio.wait_for(events.get(), _QUEUED_POLL_SECONDS)
            except TimeoutError:
                if snapshot.job.state == JobState.QUEUED:
                    queued = replace(snapshot, job=await api.job(job_id), workers=(await api.health()).workers)
                    if queued != snapshot:
                        snapshot = queued
                        yield snapshot
                continue
            if isinstance(item, StudioApiError):
                raise item
            if item is None:
                snapshot = await _after_stream_ended(api, snapshot)
                yield snapshot
                return
            if isinstance(item, JobView):
                snapshot = replace(snapshot, job=item, progress=ProgressFigures.of_job(item))
                yield snapshot
            elif isinstance(item, SegmentReady) and listen:
                live.add_stored(item.index, await _fetch_segment(api, files, job_id, item.index, item.audio))
                snapshot = replace(snapshot, parts=tuple(live.parts), segments_stored=live.segments_stored)
                yield snapshot
            elif isinstance(item, AudioEvent) and live.add_chunk(item):
                snapshot = replace(snapshot, parts=tuple(live.parts))
                yield snapshot
            elif isinstance(item, ProgressEvent):
                snapshot = replace(snapshot, progress=snapshot.progress.with_event(item))
                if snapshot.job.state == JobState.QUEUED:
                    snapshot = replace(snapshot, job=snapshot.job.model_copy(update={"state": JobState.RUNNING}))
                if time.monotonic() - last_progress >= _PROGRESS_INTERVAL_SECONDS:
                    last_progress = time.monotonic()
                    yield snapshot
    finally:
        reader.cancel()


async def _read_events(
    api: StudioApi, job_id: str, events: asyncio.Queue[JobStreamEvent | StudioApiError | None], *, listen: bool
) -> None:
    """Move the job's events into `events`, then None when the stream ends (or the error that ended it)."""
    try:
        async for event in api.job_events(job_id, audio=listen):
            await events.put(event)
    except StudioApiError as error:
        await events.put(error)
        return
    await events.put(None)


async def _after_stream_ended(api: StudioApi, snapshot: JobSnapshot) -> JobSnapshot:
    """The stream ends after a final state; if it ended early, the job as the api has it now."""
    job = await api.job(snapshot.job.id)
    if job.state not in FINAL_STATES:
        raise StudioApiError("the connection to the job's progress was lost; open the job again from History")
    return replace(snapshot, job=job, progress=ProgressFigures.of_job(job))


async def _stored_segments(api: StudioApi, files: StudioFiles, job: JobView) -> tuple[tuple[int, Path], ...]:
    """Segments a running job finished before we started following it (a reopened or resumed job)."""
    if job.state != JobState.RUNNING or job.progress.segments_done == 0:
        return ()
    found = []
    for index in range(job.progress.segments_total):
        try:
            path = f"/v1/jobs/{job.id}/segments/{index}/audio"
            found.append((index, await _fetch_segment(api, files, job.id, index, path)))
        except StudioApiError:
            continue  # not finished yet
    return tuple(found)


async def _fetch_segment(api: StudioApi, files: StudioFiles, job_id: str, index: int, path: str) -> Path:
    """Fetched on every event, not reused: a regenerated turn replaces a segment's audio."""
    return await api.download(path, files.job_folder(job_id) / f"segment-{index:04d}.flac")

"""Running one job on a worker: claim it, generate the segments not yet stored, assemble the outputs.

A segment is the unit of durability: its audio and latents are written to the job's folder, then its row
is marked done, so a rerun (after a crash, a kill or a lost broker) generates only what is missing. The
job's heartbeat is refreshed from a side thread, so a long segment never looks like a dead worker; every
frame checks the job's cancel flag, so a cancel lands within one step. Listeners hear a segment while it
generates: its frames go out as `audio` events every few frames (`workers.live_audio`).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import numpy as np

from core.db import Database
from core.job_events import EventPublisher, ProgressEvent, SegmentEvent, StateEvent
from core.job_scripts import read_script
from core.models import JobState
from core.settings import Settings
from core.storage import SAMPLE_RATE, DataFolder, JobFolder, atomic_write, read_audio, write_audio
from pipeline.plan import Plan, Segment
from pipeline.podcast import PlacedSegment
from pipeline.timeline import TimedTurn
from workers import job_records
from workers.assembly import Episode, chapters_from_turns, normalize_loudness, write_episode
from workers.job_records import ClaimedJob, SegmentRecord
from workers.job_runner import (
    GenerationModel,
    estimated_frames,
    generate_plan_segment,
    lay_out_episode,
    plan_job,
    shared_model,
)
from workers.live_audio import LiveAudio

logger = logging.getLogger(__name__)

PROGRESS_INTERVAL_SECONDS = 0.5


class JobCancelled(Exception):
    """The job's cancel flag was set; raised from the frame callback to stop the generation."""


class LeaseLost(Exception):
    """Another worker holds the job now (this one was presumed dead); stop without touching the job."""


@dataclass(frozen=True)
class WorkerServices:
    """What a worker process shares among its task threads."""

    settings: Settings
    database: Database
    data: DataFolder
    events: EventPublisher

    def model(self) -> GenerationModel:
        settings = self.settings
        return shared_model(
            settings.worker_model or settings.model,
            settings.device,
            settings.dtype,
            slots=settings.engine_slots,
            max_context=settings.engine_max_context,
        )


def process_name() -> str:
    """This worker process: "<host>:<pid>", as the admin's worker list shows it."""
    return f"{socket.gethostname()}:{os.getpid()}"


def holder_name() -> str:
    """Who holds a job: host, process and thread, so two deliveries in one process are told apart too."""
    return f"{process_name()}:{threading.get_ident()}"


def execute_job(services: WorkerServices, job_id: str, revision: int | None = None) -> None:
    """Run the job unless it is finished, cancelled or held by a live worker (then do nothing).

    With `revision` (a regenerated turn), only while the job is at that revision. Either way the run
    generates exactly the segments not stored (a regeneration set its turn's back to pending) and assembles
    the episode again from all of them.
    """
    job = job_records.claim_job(
        services.database, job_id, holder_name(), services.settings.stale_after_seconds, revision=revision
    )
    if job is None:
        logger.info("job not claimed: finished, cancelled or held elsewhere", extra={"job_id": job_id})
        return
    logger.info("job claimed", extra={"job_id": job_id, "holder": job.holder, "revision": job.revision})
    services.events.publish(job.id, StateEvent(state=JobState.RUNNING))
    with _Heartbeat(services, job) as heartbeat:
        try:
            audio_seconds = _run(services, job, heartbeat)
        except JobCancelled:
            _finish(services, job, JobState.CANCELLED)
        except LeaseLost:
            logger.warning("job taken over by another worker; stopping", extra={"job_id": job.id})
        except Exception as error:
            logger.exception("job failed", extra={"job_id": job.id})
            _finish(services, job, JobState.FAILED, error=_describe(error))
        else:
            _finish(services, job, JobState.DONE, audio_seconds=audio_seconds)


def _describe(error: Exception) -> str:
    return str(error) or type(error).__name__


def _finish(
    services: WorkerServices,
    job: ClaimedJob,
    state: JobState,
    *,
    error: str | None = None,
    audio_seconds: float | None = None,
) -> None:
    if job_records.finish_job(services.database, job, state, error=error, audio_seconds=audio_seconds):
        services.events.publish(job.id, StateEvent(state=state, error=error))
        logger.info("job ended", extra={"job_id": job.id, "state": str(state), "error": error})


def _run(services: WorkerServices, job: ClaimedJob, heartbeat: _Heartbeat) -> float:
    folder = services.data.job(job.id)
    plan = plan_job(read_script(folder, job.revision), job.mode, job.max_segment_seconds)
    planned = [(segment.index, estimated_frames(segment)) for segment in plan.segments]
    records = job_records.prepare_segments(services.database, job, planned, plan.estimated_frames)
    voices = {speaker: read_audio(folder.voice(speaker)) for speaker in job.speakers}
    watcher = _FrameWatcher(services, job, heartbeat, plan)
    stored: dict[int, PlacedSegment] = {}
    for segment, record in zip(plan.segments, records, strict=True):
        kept = _stored_segment(services.data, record)
        if kept is None:
            kept = _generate(services, job, folder, plan, segment, record.seed, voices, watcher)
        else:
            logger.info("segment already stored; not regenerated", extra={"job_id": job.id, "segment": segment.index})
            watcher.skip(record.frames)
        stored[segment.index] = kept
    audio, turns = lay_out_episode(plan, stored)
    _write_outputs(folder, job.formats, audio, turns)
    return len(audio) / SAMPLE_RATE


def _stored_segment(data: DataFolder, record: SegmentRecord) -> PlacedSegment | None:
    if not record.done or record.audio_path is None:
        return None
    path = data.resolve(record.audio_path)
    if not path.is_file():
        return None
    return PlacedSegment(audio=read_audio(path), turns=tuple(TimedTurn(*turn) for turn in record.turns))


def _generate(
    services: WorkerServices,
    job: ClaimedJob,
    folder: JobFolder,
    plan: Plan,
    segment: Segment,
    seed: int,
    voices: dict[int, np.ndarray],
    watcher: _FrameWatcher,
) -> PlacedSegment:
    job_records.record_segment_started(services.database, job, segment.index)
    watcher.start_segment(segment.index)
    partial = _PartialLatents(folder.segment_partial_latents(segment.index))
    live = LiveAudio(services.events, job.id, segment.index, services.settings.stream_chunk_frames)
    resume = partial.stored()
    if resume is not None:
        job_records.record_segment_resumed(services.database, job, segment.index, len(resume))
        logger.info("segment resumed", extra={"job_id": job.id, "segment": segment.index, "frames": len(resume)})
    generated = generate_plan_segment(
        services.model(),
        plan,
        segment,
        voices,
        cfg_scale=job.cfg_scale,
        diffusion_steps=job.diffusion_steps,
        seed=seed,
        on_frame=watcher,
        on_latent=partial.add,
        on_audio=live.add,
        resume_latents=resume,
    )
    live.flush()
    audio_path = write_audio(folder.segment_audio(segment.index), generated.audio, "FLOAT")
    latents_path = atomic_write(
        folder.segment_latents(segment.index), lambda handle: np.save(handle, generated.latents)
    )
    turns = tuple((t.index, t.speaker_name, t.text, t.start, t.end) for t in generated.turns)
    record = SegmentRecord(
        index=segment.index,
        done=True,
        frames=generated.frames,
        seed=seed,
        audio_path=services.data.relative(audio_path),
        turns=turns,
    )
    frames_done, segments_done = watcher.end_segment(generated.frames)
    job_records.record_segment_done(
        services.database,
        job,
        record,
        generated.seconds,
        services.data.relative(latents_path),
        frames_done,
        segments_done,
    )
    partial.discard()
    services.events.publish(job.id, SegmentEvent(index=segment.index, seconds=round(generated.seconds, 3)))
    logger.info("segment stored", extra={"job_id": job.id, "segment": segment.index, "frames": generated.frames})
    return PlacedSegment(audio=generated.audio, turns=generated.turns)


def _write_outputs(
    folder: JobFolder, formats: tuple[str, ...], audio: np.ndarray, turns: tuple[TimedTurn, ...]
) -> None:
    """Every requested audio format, each with its transcript and chapters, written atomically."""
    episode = Episode(audio=normalize_loudness(audio), turns=turns, chapters=chapters_from_turns(turns))
    for audio_format in formats:
        write_episode(episode, folder.output(f"episode.{audio_format}"))


class _PartialLatents:
    """The latents of the segment being generated, rewritten atomically every `every` frames.

    A worker killed mid-segment leaves them behind; the next attempt replays them (the engine rebuilds its
    caches from them, and hands them back through `add` like new frames) and generates only the frames
    after, instead of the whole segment again. Stored latents are only trusted when they came from the same
    segment, seed and revision: the file is discarded when the segment is done, and a regenerated turn
    resets its segments before they run again.
    """

    every = 8  # ~1 s of audio

    def __init__(self, path: Path) -> None:
        self.path = path
        self.latents: list[np.ndarray] = []

    def stored(self) -> np.ndarray | None:
        if not self.path.is_file():
            return None
        try:
            stored = np.load(self.path)
        except (OSError, ValueError) as error:
            logger.warning("unreadable partial latents ignored", extra={"path": str(self.path), "error": str(error)})
            return None
        return stored if len(stored) else None

    def add(self, latent: np.ndarray) -> None:
        self.latents.append(latent)
        if len(self.latents) % self.every == 0:
            snapshot = np.stack(self.latents)
            atomic_write(self.path, lambda handle: np.save(handle, snapshot))

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)


class _FrameWatcher:
    """The per-frame callback: stops on cancel or a lost lease, reports progress at most twice a second."""

    def __init__(self, services: WorkerServices, job: ClaimedJob, heartbeat: _Heartbeat, plan: Plan) -> None:
        self.services = services
        self.job = job
        self.heartbeat = heartbeat
        self.frames_planned = plan.estimated_frames
        self.segments = len(plan.segments)
        self.frames_before = 0  # frames of segments finished (or found stored) before the current one
        self.segments_done = 0
        self.segment = 0
        self.generated_frames = 0  # generated in this attempt, for the speed behind the ETA
        self.started = time.monotonic()
        self.last_report = 0.0

    def skip(self, frames: int) -> None:
        self.frames_before += frames
        self.segments_done += 1

    def start_segment(self, index: int) -> None:
        self.segment = index
        self._report(self.frames_before, force=True)

    def end_segment(self, frames: int) -> tuple[int, int]:
        self.frames_before += frames
        self.generated_frames += frames
        self.segments_done += 1
        self._report(self.frames_before, force=True, record=False)
        return self.frames_before, self.segments_done

    def __call__(self, frames_in_segment: int) -> None:
        if self.heartbeat.lost.is_set():
            raise LeaseLost(self.job.id)
        if job_records.cancel_requested(self.services.database, self.job.id):
            raise JobCancelled(self.job.id)
        self._report(self.frames_before + frames_in_segment, frames_in_segment=frames_in_segment)

    def _report(
        self, frames_done: int, *, force: bool = False, record: bool = True, frames_in_segment: int = 0
    ) -> None:
        now = time.monotonic()
        if not force and now - self.last_report < PROGRESS_INTERVAL_SECONDS:
            return
        self.last_report = now
        if record:
            job_records.record_progress(self.services.database, self.job, frames_done, self.segments_done)
        event = ProgressEvent(
            state=JobState.RUNNING,
            frames_done=frames_done,
            frames_planned=self.frames_planned,
            segment=self.segment,
            segments=self.segments,
            eta_seconds=self._eta(frames_done, self.generated_frames + frames_in_segment, now),
        )
        self.services.events.publish(self.job.id, event)

    def _eta(self, frames_done: int, generated: int, now: float) -> float | None:
        elapsed = now - self.started
        if generated <= 0 or elapsed <= 0:
            return None
        return round(max(0, self.frames_planned - frames_done) * elapsed / generated, 1)


class _Heartbeat:
    """Refreshes the job's heartbeat every `heartbeat_seconds` until the job ends; notices a lost lease."""

    def __init__(self, services: WorkerServices, job: ClaimedJob) -> None:
        self.services = services
        self.job = job
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{job.id}", daemon=True)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        while not self._stop.wait(self.services.settings.heartbeat_seconds):
            try:
                held = job_records.beat(self.services.database, self.job)
            except Exception:  # a database blip must not kill the job; the next beat retries
                logger.warning("heartbeat failed", extra={"job_id": self.job.id}, exc_info=True)
                continue
            if not held:
                self.lost.set()
                return

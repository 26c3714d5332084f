"""The database side of running a job: claim it, prove it is alive, record progress and segments, end it.

Every change a worker makes to a job row is a conditional UPDATE naming the worker that holds it, so two
deliveries of the same message (a redelivery, a sweeper's re-enqueue) can never both run the job: the
second finds it held, finished or cancelled, and does nothing. That is what makes the task idempotent.
It is also why each function here is one transaction that can simply run again when the database drops
its connection mid-way (`retry_on_disconnect`): a job does not fail because a write met a brief restart.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, update

from core.db import Database, retry_on_disconnect
from core.models import Job, JobSegment, JobState, SegmentState, utc_now


@dataclass(frozen=True)
class ClaimedJob:
    """A job this worker now holds, with what it needs to run it."""

    id: str
    holder: str
    mode: str
    cfg_scale: float
    diffusion_steps: int
    seed: int
    max_segment_seconds: float
    formats: tuple[str, ...]
    speakers: tuple[int, ...]  # speaker indices that have a voice in the job's inputs
    revision: int  # which revision's script to generate (0: as submitted)


@dataclass(frozen=True)
class SegmentRecord:
    """What the database knows of one segment of a job's plan."""

    index: int
    done: bool
    frames: int
    seed: int  # the segment's own seed (the job's seed + index, unless a regeneration drew another)
    audio_path: str | None
    turns: tuple[tuple[int, str, str, float, float], ...]  # (turn index, speaker, text, start, end) in the segment


@retry_on_disconnect
def claim_job(
    database: Database, job_id: str, holder: str, stale_after: float, revision: int | None = None
) -> ClaimedJob | None:
    """Take the job if it is queued, or running under a holder silent for `stale_after` seconds; else None.

    With `revision`, only while the job is at that revision: a regeneration's message that a newer one
    superseded finds nothing to do. A queued job whose cancel was requested is marked cancelled here instead.
    """
    now = utc_now()
    claimable = (Job.state == JobState.QUEUED) | (
        (Job.state == JobState.RUNNING) & (Job.heartbeat_at < now - timedelta(seconds=stale_after))
    )
    if revision is not None:
        claimable = claimable & (Job.revision == revision)
    with database.session() as session:
        session.execute(
            update(Job)
            .where(Job.id == job_id, Job.cancel_requested.is_(True), claimable)
            .values(state=JobState.CANCELLED, finished_at=now, worker=None)
        )
        claimed = session.execute(
            update(Job)
            .where(Job.id == job_id, Job.cancel_requested.is_(False), claimable)
            .values(state=JobState.RUNNING, worker=holder, heartbeat_at=now, attempts=Job.attempts + 1, error=None)
        )
        if claimed.rowcount != 1:
            return None
        job = session.get_one(Job, job_id)
        if job.started_at is None:
            job.started_at = now
        generation = job.generation
        return ClaimedJob(
            id=job.id,
            holder=holder,
            mode=job.mode,
            cfg_scale=float(generation["cfg_scale"]),
            diffusion_steps=int(generation["diffusion_steps"]),
            seed=int(generation["seed"]),
            max_segment_seconds=float(generation["max_segment_seconds"]),
            formats=tuple(job.formats),
            speakers=tuple(int(speaker) for speaker in job.voices),
            revision=job.revision,
        )


@retry_on_disconnect
def beat(database: Database, job: ClaimedJob) -> bool:
    """Refresh the job's heartbeat; False when this worker no longer holds it (a sweeper handed it on)."""
    with database.session() as session:
        result = session.execute(
            update(Job)
            .where(Job.id == job.id, Job.worker == job.holder, Job.state == JobState.RUNNING)
            .values(heartbeat_at=utc_now())
        )
        return result.rowcount == 1


@retry_on_disconnect
def cancel_requested(database: Database, job_id: str) -> bool:
    with database.session() as session:
        return bool(session.scalar(select(Job.cancel_requested).where(Job.id == job_id)))


@retry_on_disconnect
def prepare_segments(
    database: Database, job: ClaimedJob, planned: list[tuple[int, int]], frames_planned: int
) -> list[SegmentRecord]:
    """Make sure a row exists for every planned (segment index, planned frames); return them all in order."""
    with database.session() as session:
        existing = {row.index: row for row in session.scalars(select(JobSegment).where(JobSegment.job_id == job.id))}
        for index, frames in planned:
            if index not in existing:
                row = JobSegment(
                    job_id=job.id,
                    index=index,
                    frames_planned=frames,
                    seed=job.seed + index,
                    revision=job.revision,
                    turns=[],
                )
                session.add(row)
                existing[index] = row
        session.execute(
            update(Job).where(Job.id == job.id).values(frames_planned=frames_planned, segments_total=len(planned))
        )
        session.flush()
        return [_record(existing[index]) for index, _ in planned]


def _record(row: JobSegment) -> SegmentRecord:
    return SegmentRecord(
        index=row.index,
        done=row.state == SegmentState.DONE,
        frames=row.frames,
        seed=row.seed,
        audio_path=row.audio_path,
        turns=tuple(tuple(turn) for turn in row.turns),
    )


@retry_on_disconnect
def record_progress(database: Database, job: ClaimedJob, frames_done: int, segments_done: int) -> None:
    with database.session() as session:
        session.execute(
            update(Job)
            .where(Job.id == job.id, Job.worker == job.holder)
            .values(frames_done=frames_done, segments_done=segments_done, heartbeat_at=utc_now())
        )


@retry_on_disconnect
def record_segment_started(database: Database, job: ClaimedJob, index: int) -> None:
    with database.session() as session:
        session.execute(
            update(JobSegment)
            .where(JobSegment.job_id == job.id, JobSegment.index == index)
            .values(started_at=utc_now(), attempts=JobSegment.attempts + 1, resumed_from_frame=0)
        )


@retry_on_disconnect
def record_segment_resumed(database: Database, job: ClaimedJob, index: int, frames: int) -> None:
    """Note that this attempt at a segment replays `frames` frames an earlier attempt stored."""
    with database.session() as session:
        session.execute(
            update(JobSegment)
            .where(JobSegment.job_id == job.id, JobSegment.index == index)
            .values(resumed_from_frame=frames)
        )


@retry_on_disconnect
def record_segment_done(
    database: Database,
    job: ClaimedJob,
    record: SegmentRecord,
    seconds: float,
    latents_path: str,
    frames_done: int,
    segments_done: int,
) -> None:
    """Mark a segment stored (its files are already in place) and move the job's progress on, in one commit."""
    with database.session() as session:
        session.execute(
            update(JobSegment)
            .where(JobSegment.job_id == job.id, JobSegment.index == record.index)
            .values(
                state=SegmentState.DONE,
                frames=record.frames,
                seconds=seconds,
                audio_path=record.audio_path,
                latents_path=latents_path,
                turns=[list(turn) for turn in record.turns],
                finished_at=utc_now(),
            )
        )
        session.execute(
            update(Job)
            .where(Job.id == job.id, Job.worker == job.holder)
            .values(frames_done=frames_done, segments_done=segments_done, heartbeat_at=utc_now())
        )


@retry_on_disconnect
def finish_job(
    database: Database,
    job: ClaimedJob,
    state: JobState,
    *,
    error: str | None = None,
    audio_seconds: float | None = None,
) -> bool:
    """End the job in a final state; False when this worker no longer held it."""
    values: dict[str, object] = {"state": state, "finished_at": utc_now(), "error": error, "worker": None}
    if audio_seconds is not None:
        values["audio_seconds"] = audio_seconds
    with database.session() as session:
        result = session.execute(
            update(Job)
            .where(Job.id == job.id, Job.worker == job.holder, Job.state == JobState.RUNNING)
            .values(**values)
        )
        return result.rowcount == 1


@retry_on_disconnect
def requeue_stale_jobs(database: Database, stale_after: float, now: datetime | None = None) -> list[Job]:
    """Put back in the queue every running job whose holder has been silent for `stale_after` seconds."""
    now = now or utc_now()
    with database.session() as session:
        stale = session.scalars(
            update(Job)
            .where(Job.state == JobState.RUNNING, Job.heartbeat_at < now - timedelta(seconds=stale_after))
            .values(state=JobState.QUEUED, worker=None, enqueued_at=now)
            .returning(Job)
        ).all()
        return list(stale)

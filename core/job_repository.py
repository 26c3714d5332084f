"""The database side of running a job: claim it, prove it is alive, record progress and segments, end it.

Every change a worker makes to a job row is a conditional UPDATE naming the worker that holds it, so two
deliveries of the same message (a redelivery, a sweeper's re-enqueue) can never both run the job: the
second finds it held, finished or cancelled, and does nothing. That is what makes the task idempotent.
It is also why each function here is one transaction that can simply run again when the database drops
its connection mid-way (`retry_on_disconnect`): a job does not fail because a write met a brief restart.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, update

from core.db import Database, retry_on_disconnect
from core.job_states import JobState, SegmentState
from core.models import Job, JobSegment, utc_now


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
    kbps: dict[str, int]  # lossy formats' bitrates as the job asked (the others: their defaults)
    speakers: tuple[int, ...]  # speaker indices that have a voice in the job's inputs
    revision: int  # which revision's script to generate (0: as submitted)
    worker_deaths: int  # earlier attempts that ended with their worker dead (a suspect runs alone)
    queue: str  # "interactive" or "batch": its generations are scheduled as interactive work or not
    priority: int  # 0..9
    waited_seconds: float  # from its submission (or its last requeue) to this claim


@dataclass(frozen=True)
class PlannedSegment:
    """A segment of a job's plan as its row starts: its index, the frames it is expected to make, its seed, and the
    hash of what it says (`script_text.plan.Segment.text_hash`)."""

    index: int
    frames: int
    seed: int
    text_hash: str


@dataclass(frozen=True)
class SegmentRecord:
    """What the database knows of one segment of a job's plan."""

    index: int
    done: bool
    frames: int
    seed: int  # the segment's own seed (`segment_seed(job seed, index)`, unless a regeneration drew another)
    audio_path: str | None
    turns: tuple[tuple[int, str, str, float, float], ...]  # (turn index, speaker, text, start, end) in the segment
    revision: int = 0  # the job's revision that last set it to generate (a regenerated turn's is the job's newest)
    # Its words changed since its row was written (its audio, or the frames of an interrupted attempt, were of other
    # words): generated again from the start.
    text_changed: bool = False


@dataclass(frozen=True)
class CancelledAtClaim:
    """A job `claim_job` found queued with its cancel asked for (its worker died before it stopped): cancelled now."""

    id: str


@retry_on_disconnect
def claim_job(
    database: Database, job_id: str, holder: str, stale_after: float, revision: int | None = None
) -> ClaimedJob | CancelledAtClaim | None:
    """Take the job if it is queued, or running under a holder silent for `stale_after` seconds; else None.

    With `revision`, only while the job is at that revision: a regeneration's message that a newer one
    superseded finds nothing to do. A queued job whose cancel was requested is marked cancelled here instead
    (`CancelledAtClaim`: the caller records what its folder holds).
    """
    now = utc_now()
    claimable = (Job.state == JobState.QUEUED) | (
        (Job.state == JobState.RUNNING) & (Job.heartbeat_at < now - timedelta(seconds=stale_after))
    )
    if revision is not None:
        claimable = claimable & (Job.revision == revision)
    with database.session() as session:
        cancelled = session.execute(
            update(Job)
            .where(Job.id == job_id, Job.cancel_requested.is_(True), claimable)
            .values(state=JobState.CANCELLED, finished_at=now, worker=None)
        )
        if cancelled.rowcount == 1:
            return CancelledAtClaim(job_id)
        claimed = session.execute(
            update(Job)
            .where(Job.id == job_id, Job.cancel_requested.is_(False), claimable)
            .values(
                state=JobState.RUNNING,
                worker=holder,
                waiting=True,  # until its worker lets it run (`mark_started`): a death before that is not its own
                heartbeat_at=now,
                attempts=Job.attempts + 1,
                error=None,
            )
        )
        if claimed.rowcount != 1:
            return None
        job = session.get_one(Job, job_id)
        # A first attempt waited since its submission; a later one (a requeue, a regeneration) since it was sent again.
        queued_since = job.created_at if job.started_at is None else (job.enqueued_at or job.created_at)
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
            kbps=dict(generation.get("kbps") or {}),
            speakers=tuple(int(speaker) for speaker in job.voices),
            revision=job.revision,
            worker_deaths=job.worker_deaths,
            queue=job.queue,
            priority=job.priority,
            waited_seconds=max(0.0, (now - queued_since).total_seconds()),
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
def mark_started(database: Database, job: ClaimedJob) -> None:
    """The held job runs now, beside the worker's others or alone (`Quarantine`): from here a death of its worker
    is counted against it. Claimed, it was waiting, and a death then was not its own."""
    with database.session() as session:
        session.execute(update(Job).where(Job.id == job.id, Job.worker == job.holder).values(waiting=False))


@retry_on_disconnect
def cancel_requested(database: Database, job_ids: Collection[str]) -> set[str]:
    """Which of `job_ids` have had their cancel asked for; a read that never waits for writers (it runs often)."""
    with database.reading() as session:
        return set(session.scalars(select(Job.id).where(Job.id.in_(job_ids), Job.cancel_requested.is_(True))))


@retry_on_disconnect
def prepare_segments(database: Database, job: ClaimedJob, planned: list[PlannedSegment]) -> list[SegmentRecord]:
    """Make sure a row exists for every planned segment (a row already there keeps its seed); return them in order.

    A row whose text hash differs from the plan's is set back to pending (its stored audio, or an interrupted
    attempt's frames, said other words) and its record says so; a row stored before hashes were kept (none) takes
    the plan's.
    """
    with database.session() as session:
        existing = {row.index: row for row in session.scalars(select(JobSegment).where(JobSegment.job_id == job.id))}
        changed = set()
        for segment in planned:
            row = existing.get(segment.index)
            if row is None:
                row = JobSegment(
                    job_id=job.id,
                    index=segment.index,
                    frames_planned=segment.frames,
                    seed=segment.seed,
                    revision=job.revision,
                    turns=[],
                    text_hash=segment.text_hash,
                )
                session.add(row)
                existing[segment.index] = row
            elif row.text_hash is None:
                row.text_hash = segment.text_hash
            elif row.text_hash != segment.text_hash:
                changed.add(segment.index)
                row.text_hash, row.frames_planned = segment.text_hash, segment.frames
                row.state, row.audio_path, row.latents_path, row.frames, row.seconds, row.turns = (
                    SegmentState.PENDING, None, None, 0, 0.0, []
                )  # fmt: skip
        session.flush()
        return [_record(existing[segment.index], segment.index in changed) for segment in planned]


@retry_on_disconnect
def record_planned(database: Database, job: ClaimedJob, frames_planned: int, segments_total: int) -> None:
    """What this run of the job is for, as its progress counts it (`workers.job_progress`)."""
    with database.session() as session:
        session.execute(
            update(Job).where(Job.id == job.id).values(frames_planned=frames_planned, segments_total=segments_total)
        )


def _record(row: JobSegment, text_changed: bool) -> SegmentRecord:
    return SegmentRecord(
        index=row.index,
        done=row.state == SegmentState.DONE,
        frames=row.frames,
        seed=row.seed,
        audio_path=row.audio_path,
        turns=tuple(tuple(turn) for turn in row.turns),
        revision=row.revision,
        text_changed=text_changed,
    )


@retry_on_disconnect
def record_progress(
    database: Database, job: ClaimedJob, frames_done: int, segments_done: int, eta_seconds: float | None
) -> None:
    now = utc_now()
    with database.session() as session:
        session.execute(
            update(Job)
            .where(Job.id == job.id, Job.worker == job.holder)
            .values(
                frames_done=frames_done,
                segments_done=segments_done,
                heartbeat_at=now,
                eta_seconds=eta_seconds,
                eta_at=now,
            )
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
    storage_bytes: int | None = None,
) -> bool:
    """End the job in a final state, with the bytes its folder holds now; False when this worker no longer held it."""
    values: dict[str, object] = {"state": state, "finished_at": utc_now(), "error": error, "worker": None}
    if storage_bytes is not None:
        values["storage_bytes"] = storage_bytes
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
def hand_back_job(database: Database, job: ClaimedJob) -> bool:
    """Queue the held job again because its worker was asked to stop (a planned stop, not a death): `handbacks` + 1,
    `worker_deaths` unchanged, its stored segments and partial frames kept for the next attempt.

    False when this worker no longer holds it, or when its cancel was asked for meanwhile (the caller ends it as
    cancelled instead: a job queued again with its cancel pending would only be cancelled by the next claim).
    """
    with database.session() as session:
        result = session.execute(
            update(Job)
            .where(
                Job.id == job.id,
                Job.worker == job.holder,
                Job.state == JobState.RUNNING,
                Job.cancel_requested.is_(False),
            )
            .values(**_handed_back(utc_now()))
        )
        return result.rowcount == 1


@retry_on_disconnect
def hand_back_process_jobs(database: Database, process: str) -> list[AbandonedJob]:
    """Queue again every job still running under `process` ("<host>:<pid>"): a worker stopped on purpose that had not
    handed them all back by the end of its stop's budget (killed by its supervisor, or ending by its own bound). The
    stop was asked for, so these are hand-backs, not deaths. A job whose cancel is pending is cancelled by its next
    claim."""
    with database.session() as session:
        rows = session.execute(
            update(Job)
            .where(Job.state == JobState.RUNNING, Job.worker.startswith(f"{process}:", autoescape=True))
            .values(**_handed_back(utc_now()))
            .returning(Job.id, Job.queue, Job.priority, Job.worker_deaths)
        ).all()
    return [AbandonedJob(*row, failed=False) for row in rows]


def _handed_back(now: datetime) -> dict[str, object]:
    """A running job's row, queued again after a planned stop of its worker."""
    return {
        "state": JobState.QUEUED,
        "worker": None,
        "waiting": False,
        "enqueued_at": now,
        "handbacks": Job.handbacks + 1,
    }


@dataclass(frozen=True)
class AbandonedJob:
    """A running job whose worker is gone, and what became of it: queued again, or failed by the guard."""

    id: str
    queue: str
    priority: int
    worker_deaths: int
    failed: bool


def worker_deaths_error(deaths: int) -> str:
    """Why the poison-job guard failed a job, and what to do about it."""
    return (
        f"the worker died {deaths} times while running this job (the limit is VOXCAST_MAX_WORKER_DEATHS={deaths}), "
        "so it is not run again; the worker's log shows how it died; an admin can retry the job"
    )


@retry_on_disconnect
def release_abandoned_jobs(
    database: Database,
    *,
    max_worker_deaths: int,
    stale_after: float | None = None,
    dead_process: str | None = None,
    now: datetime | None = None,
) -> list[AbandonedJob]:
    """Take back every running job whose worker is gone; each that was running counts one more worker death.

    A worker is gone when its job's heartbeat is older than `stale_after` seconds (a kill, a crash, a hang),
    or when it is `dead_process` ("<host>:<pid>", a process its supervisor saw end). A job below
    `max_worker_deaths` is queued again (its stored segments are kept); one that reaches it is failed with
    `worker_deaths_error`, so a job that crashes every worker it meets cannot take the service down forever.
    A job that was claimed but not yet running (`waiting`: its worker had not let it start, as `Quarantine` holds a
    job while a suspect runs alone) had no part in the death: it is queued again without one.
    """
    now = now or utc_now()
    gone = Job.state == JobState.RUNNING
    if dead_process is not None:
        gone = gone & Job.worker.startswith(f"{dead_process}:", autoescape=True)
    if stale_after is not None:
        gone = gone & (Job.heartbeat_at < now - timedelta(seconds=stale_after))
    running = gone & Job.waiting.is_(False)
    last_chance = Job.worker_deaths + 1 >= max_worker_deaths
    deaths = Job.worker_deaths + 1
    requeued = {"state": JobState.QUEUED, "worker": None, "waiting": False, "enqueued_at": now}
    with database.session() as session:
        failed = session.execute(
            update(Job)
            .where(running, last_chance)
            .values(
                state=JobState.FAILED,
                worker=None,
                worker_deaths=deaths,
                finished_at=now,
                error=worker_deaths_error(max_worker_deaths),
            )
            .returning(Job.id, Job.queue, Job.priority, Job.worker_deaths)
        ).all()
        queued = session.execute(
            update(Job)
            .where(running, ~last_chance)
            .values(**requeued, worker_deaths=deaths)
            .returning(Job.id, Job.queue, Job.priority, Job.worker_deaths)
        ).all()
        queued += session.execute(
            update(Job)
            .where(gone, Job.waiting.is_(True))
            .values(**requeued)
            .returning(Job.id, Job.queue, Job.priority, Job.worker_deaths)
        ).all()
    return [AbandonedJob(*row, failed=True) for row in failed] + [AbandonedJob(*row, failed=False) for row in queued]

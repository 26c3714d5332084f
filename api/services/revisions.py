"""A done job's next revision: queued again with some segments back to pending (a regeneration), or none (a kept
earlier take, `api.services.takes`), on condition that nothing moved it meanwhile."""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.orm import Session

from api.errors import Conflict
from core.job_states import JobState, SegmentState
from core.models import Job, JobSegment, utc_now


def removed_message(job: Job) -> str:
    removed = job.intermediates_removed_at
    when = removed.strftime("%Y-%m-%d %H:%M UTC") if removed is not None else "meanwhile"
    return (
        f"job {job.id} can no longer be regenerated: the retention policy (VOXCAST_KEEP_INTERMEDIATES_DAYS) removed "
        f"its segments on {when}; its episode and side files are still there"
    )


def start_revision(
    session: Session, job: Job, revision: int, seeds: dict[int, int], text_hashes: dict[int, str]
) -> None:
    """Queue the job again at `revision` with the given segments pending under new seeds (and the hashes of their new
    words); 409 if it moved on."""
    now = utc_now()
    moved = session.execute(
        update(Job)
        .where(
            Job.id == job.id,
            Job.state == JobState.DONE,
            Job.revision == revision - 1,
            Job.intermediates_removed_at.is_(None),
        )
        .values(
            state=JobState.QUEUED,
            revision=revision,
            frames_done=0,
            segments_done=0,
            audio_seconds=None,
            error=None,
            cancel_requested=False,
            started_at=None,
            finished_at=None,
            enqueued_at=now,
        )
    )
    if moved.rowcount != 1:
        session.refresh(job)
        if job.intermediates_removed_at is not None:
            raise Conflict(removed_message(job))
        raise Conflict(f"job {job.id} changed while the request was read (another regeneration?); try again")
    for index, seed in seeds.items():
        session.execute(
            update(JobSegment)
            .where(JobSegment.job_id == job.id, JobSegment.index == index)
            .values(
                state=SegmentState.PENDING,
                seed=seed,
                revision=revision,
                text_hash=text_hashes[index],
                started_at=None,
                finished_at=None,
            )
        )
    session.refresh(job)

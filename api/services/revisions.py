"""A done job's next revision: queued again with some segments back to pending (a regeneration), or none (a kept
earlier take, `api.services.takes`), on condition that nothing moved it meanwhile."""

from __future__ import annotations

from sqlalchemy.orm import Session

from api.errors import Conflict
from core import job_repository
from core.models import Job


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
    try:
        moved = job_repository.regenerate(session, job.id, revision, seeds, text_hashes)
    except job_repository.IllegalTransition as error:
        raise Conflict(f"job {job.id} is {error.current}; only a done job can be regenerated") from None
    if not moved:
        session.refresh(job)
        if job.intermediates_removed_at is not None:
            raise Conflict(removed_message(job))
        raise Conflict(f"job {job.id} changed while the request was read (another regeneration?); try again")
    session.refresh(job)

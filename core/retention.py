"""The retention policy: how long a job that has ended keeps its intermediates, and itself (`VOXCAST_KEEP_*_DAYS`).

Intermediates are each segment's audio and latents: what regenerating a turn needs (and resuming, and assembling
the episode again); the episode and its side files do not. `keep_intermediates_days` after a job ends they are
removed and the job records when, so it says it can no longer be regenerated; `keep_jobs_days` after, the whole
job goes (`core.job_deletion`). Both are off by default.

Every removal is claimed in the database first, on condition that the job has still ended and still holds what
is to be removed, so that workers applying the policy side by side, and a regeneration or a retry starting
meanwhile, never meet. The files go after the claim; a crash in between leaves them, and a later pass removes
them (it looks at the jobs claimed in the last `LEFTOVER_WINDOW`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import select

from core.db import Database
from core.job_deletion import JobNotEnded, delete_job
from core.job_repository import purge_intermediates
from core.job_states import FINAL_STATES
from core.models import Job
from core.settings import Settings
from core.storage import DataFolder
from core.storage_usage import record_job_bytes

logger = logging.getLogger(__name__)

LEFTOVER_WINDOW = timedelta(hours=1)


@dataclass
class RetentionPass:
    """What one pass removed: jobs whose intermediates went, and jobs deleted whole."""

    intermediates_removed: list[str] = field(default_factory=list)
    jobs_deleted: list[str] = field(default_factory=list)


def apply_retention(settings: Settings, database: Database, data: DataFolder, now: datetime) -> RetentionPass:
    """Remove what the policy no longer keeps at `now` (the sweeper passes the clock; tests pass a later one)."""
    done = RetentionPass()
    if settings.keep_jobs_days is not None:
        cutoff = now - timedelta(days=settings.keep_jobs_days)
        for job_id in _ended_before(database, cutoff):
            if _delete_whole(database, data, job_id, cutoff):
                done.jobs_deleted.append(job_id)
    if settings.keep_intermediates_days is not None:
        cutoff = now - timedelta(days=settings.keep_intermediates_days)
        for job_id in _ended_before(database, cutoff, holding_intermediates=True):
            if _remove_intermediates(database, data, job_id, now):
                done.intermediates_removed.append(job_id)
        _remove_leftovers(database, data, now)
    if done.intermediates_removed or done.jobs_deleted:
        logger.info(
            "retention applied",
            extra={"intermediates_removed": len(done.intermediates_removed), "jobs_deleted": len(done.jobs_deleted)},
        )
    return done


def _ended_before(database: Database, cutoff: datetime, *, holding_intermediates: bool = False) -> list[str]:
    query = select(Job.id).where(Job.state.in_(FINAL_STATES), Job.finished_at < cutoff)
    if holding_intermediates:
        query = query.where(Job.intermediates_removed_at.is_(None))
    with database.reading() as session:
        return list(session.scalars(query))


def _delete_whole(database: Database, data: DataFolder, job_id: str, cutoff: datetime) -> bool:
    with database.session() as session:
        job = session.get(Job, job_id)
        if job is None or job.finished_at is None or job.finished_at >= cutoff:
            return False  # deleted by someone else, or running again since it was listed
        try:
            delete_job(session, data, job)
        except JobNotEnded:
            return False
    return True


def _remove_intermediates(database: Database, data: DataFolder, job_id: str, now: datetime) -> bool:
    if not purge_intermediates(database, job_id, now):
        return False
    _remove_segments(database, data, job_id)
    return True


def _remove_segments(database: Database, data: DataFolder, job_id: str) -> None:
    """Remove the job's segments folder, and record the bytes its folder holds without it."""
    folder = data.job(job_id)
    data.files.remove(folder.segments)
    with database.session() as session:
        record_job_bytes(session, data, job_id)


def _remove_leftovers(database: Database, data: DataFolder, now: datetime) -> None:
    """Segments left by a pass that crashed between its claim and its removal."""
    query = select(Job.id).where(Job.state.in_(FINAL_STATES), Job.intermediates_removed_at >= now - LEFTOVER_WINDOW)
    with database.reading() as session:
        claimed = list(session.scalars(query))
    for job_id in claimed:
        if data.files.holds(data.job(job_id).segments):
            _remove_segments(database, data, job_id)

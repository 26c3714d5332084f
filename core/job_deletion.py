"""Deleting a job that has ended: its files and its rows, in an order that a crash at any point cannot leave half-done.

1. The job's folder moves into the data folder's trash, in one rename: none of its files is served from then on.
2. Its rows (the job, then its segments) are deleted, on condition that it has still ended.
3. The trash copy is removed, then the store's copy (`core.file_store`: an S3 bucket's objects), and the caller
   commits.

A crash after step 1 leaves the job's row with its files in the trash: deleting it again, or the sweeper
(`empty_trash`), carries on; the sweeper also removes a trash copy whose job has no row any more. A crash before
the commit leaves the rows of a job without files, which deleting it again finishes.
Only a job that has ended may be deleted: nothing writes to its folder any more.
"""

from __future__ import annotations

import logging
import os
import shutil

from sqlalchemy import select
from sqlalchemy.orm import Session

from core import job_repository
from core.db import Database
from core.job_states import FINAL_STATES
from core.models import Job
from core.storage import DataFolder

logger = logging.getLogger(__name__)


class JobNotEnded(Exception):
    """The job is queued or running: it must be cancelled (or end) before it can be deleted."""


def delete_job(session: Session, data: DataFolder, job: Job) -> None:
    """Delete `job` (which has ended) with all its files, in `session`'s transaction. Safe to call again after a crash.

    The trash copy goes before the caller commits: a crash or a failed commit in between leaves the rows of a job
    whose files are gone, which deleting again finishes like any other step.
    """
    job_id = job.id
    if job.state not in FINAL_STATES:
        raise JobNotEnded(job_id)
    folder, trash = data.job(job_id).root, data.trash(job_id)
    if folder.exists():
        if trash.exists():
            shutil.rmtree(trash)  # an earlier attempt's copy; the folder is the newer one
        trash.parent.mkdir(parents=True, exist_ok=True)
        os.replace(folder, trash)
    try:
        # (no row: deleted meanwhile by another request or a sweeper; what is left of it goes below)
        job_repository.delete_rows(session, job_id)
    except job_repository.IllegalTransition:
        # retried by an admin between the check and now: it runs again, with its files
        if trash.exists() and not folder.exists():
            os.replace(trash, folder)
        raise JobNotEnded(job_id) from None
    session.flush()
    shutil.rmtree(trash, ignore_errors=True)
    data.files.remove(data.job(job_id).root)  # the store's copy (with the folder alone: nothing is left there)
    logger.info("job deleted", extra={"job_id": job_id})


def empty_trash(database: Database, data: DataFolder) -> list[str]:
    """Finish every delete a crash interrupted; returns the ids of the jobs whose files it removed."""
    root = data.trash_root
    if not root.is_dir():
        return []
    finished = []
    for entry in sorted(root.iterdir()):
        job_id = entry.name
        with database.session() as session:
            job = session.scalar(select(Job).where(Job.id == job_id))
            if job is None:
                shutil.rmtree(entry, ignore_errors=True)
            elif job.state in FINAL_STATES:
                delete_job(session, data, job)
            else:
                continue
        logger.info("interrupted delete finished", extra={"job_id": job_id})
        finished.append(job_id)
    return finished

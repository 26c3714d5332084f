"""Cancelling a job or a script job: one rule for both kinds of row.

A queued row is cancelled at once; a running one gets `cancel_requested`, which its worker reads (a job at its
next engine step, a script job between tokens of the model's reply) and ends it as cancelled; a finished one is a
conflict. Both updates are conditional on the state, so a cancel racing the worker's claim or end never
leaves a row cancelled while it runs or running after it ended.
"""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.orm import Session

from api.errors import Conflict
from core import job_repository
from core.job_states import JobState
from core.models import Job, ScriptJob, utc_now


def request_cancel(session: Session, row: Job | ScriptJob, noun: str) -> None:
    """Cancel `row` (a "job" or a "script job", as `noun` names it in the conflict's message); `row` is refreshed.

    A job's row moves through its repository (`core.job_repository.cancel`); a script job's here, by the same rule."""
    if row.job_state in (JobState.DONE, JobState.FAILED):
        raise Conflict(f"{noun} {row.id} is already {row.state}; there is nothing to cancel")
    if isinstance(row, Job):
        try:
            job_repository.cancel(session, row.id)
        except job_repository.IllegalTransition as error:  # it ended between the read and the cancel
            raise Conflict(f"{noun} {row.id} is already {error.current}; there is nothing to cancel") from None
        session.refresh(row)
        return
    model = ScriptJob
    session.execute(
        update(model)
        .where(model.id == row.id, model.state == JobState.QUEUED)
        .values(state=JobState.CANCELLED, cancel_requested=True, finished_at=utc_now())
    )
    session.execute(
        update(model).where(model.id == row.id, model.state == JobState.RUNNING).values(cancel_requested=True)
    )
    session.refresh(row)

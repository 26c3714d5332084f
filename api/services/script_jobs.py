"""Script jobs: check a draft or clean-up request, answer the deterministic ones at once, queue the rest.

Every rule on the input is the drafting stage's own (`script_text.drafting`): hosts, names, minutes, tone,
material length, transcript length for the model. A transcript that the parser reads as sent, or after the
deterministic clean-up, needs no model: it is answered in the request, stored as done (201). Anything
else is stored as queued and sent to the scripts queue (202); a broker that does not take the message
leaves nothing stored (503), so no job waits for a message that was never sent.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import TypeVar, cast

from sqlalchemy import Table, select
from sqlalchemy.orm import Session

from api.deps import ApiServices, Caller
from api.errors import Conflict, InvalidInput, Problem
from api.schemas import ScriptAttemptView, ScriptDraftCreate, ScriptNormaliseCreate, ScriptView
from api.services.cancellation import request_cancel
from api.services.job_limits import check_in_flight
from api.services.ownership import owned_row
from api.services.worker_report import RedisUnavailable
from core.db import rows_changed
from core.job_states import FINAL_STATES, JobState
from core.models import ScriptJob, utc_now
from core.storage import new_id
from script_text.drafting import (
    ChatModel,
    DraftedScript,
    DraftInputError,
    DraftRequest,
    ModelBudget,
    default_host_names,
    normalise_transcript,
)
from script_text.drafting.jobs import DEFAULT_TONE, check_source_text
from script_text.parser import parse_script
from workers.celery_app import enqueue_script

logger = logging.getLogger(__name__)
# A declarative class's `__table__` is its `Table`; SQLAlchemy types it as any `FromClause`.
_SCRIPT_JOBS = cast(Table, ScriptJob.__table__)

_T = TypeVar("_T")
DEFAULT_HOSTS = 2
# Text is what a person can type or paste: line breaks and tabs, nothing else below U+0020 (NUL and escape
# codes have no place in notes, and PostgreSQL refuses to store NUL).
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class _ModelNeeded(Exception):
    """The parser and the clean-up could not read the transcript: it goes to the scripts workers."""


def submit_script(
    services: ApiServices, caller: Caller, request: ScriptDraftCreate | ScriptNormaliseCreate
) -> tuple[ScriptView, bool]:
    """Check and store a script job; the view, and whether it was queued (False: answered at once)."""
    settings = services.settings
    if isinstance(request, ScriptDraftCreate):
        source, finished = _checked_draft(request), None
        options = _draft_options(request)
    else:
        source = _checked_text(request.transcript, "transcript", settings.max_script_chars)
        options = {"force_model": request.force_model}
        finished = _without_model(source, request.force_model, settings.script_max_attempts)
    job = ScriptJob(
        id=new_id(),
        owner_id=caller.key_id,
        task=request.task,
        source=source,
        options=options,
        max_attempts=settings.script_max_attempts,
        attempt_log=[],
        notes=[],
        cancel_requested=False,
        deliveries=0,
        created_at=utc_now(),
    )
    if finished is not None:
        job.state, job.started_at, job.finished_at = JobState.DONE, job.created_at, job.created_at
        job.script, job.via, job.notes = finished.text, finished.via, list(finished.notes)
    with services.database.session() as session:
        if finished is None:
            check_in_flight(
                session, ScriptJob, caller.key_id, settings.max_jobs_in_flight, "script jobs",
                single_user=settings.single_user,
            )  # fmt: skip
        session.add(job)
    if finished is not None:
        return script_view(job), False
    try:
        enqueue_script(services.celery, settings.redis_namespace, job.id)
    except Exception as error:
        with services.database.session() as session:
            session.execute(_SCRIPT_JOBS.delete().where(ScriptJob.id == job.id))
        logger.warning("could not queue a script job; nothing kept", extra={"script_id": job.id, "error": str(error)})
        raise RedisUnavailable(
            "the job queue (Redis) did not take the script job, so nothing was stored; try again shortly"
        ) from error
    logger.info("script job queued", extra={"script_id": job.id, "task": job.task})
    return script_view(job), True


def owned_script(session: Session, caller: Caller, script_id: str) -> ScriptJob:
    """The script job if this key may see it (its own, or any for an admin); otherwise NotFound, as if absent."""
    return owned_row(session, caller, ScriptJob, script_id, f"no script job {script_id}")


def list_scripts(session: Session, caller: Caller, *, state: str | None, limit: int, offset: int) -> list[ScriptView]:
    """This key's script jobs, newest first."""
    query = select(ScriptJob).where(ScriptJob.owner_id == caller.key_id)
    if state is not None:
        query = query.where(ScriptJob.state == state)
    query = query.order_by(ScriptJob.created_at.desc(), ScriptJob.id).limit(limit).offset(offset)
    return [script_view(job) for job in session.scalars(query)]


def cancel_script(session: Session, caller: Caller, script_id: str) -> ScriptView:
    """A queued job is cancelled at once; a running one stops within a fraction of a second of the model's reply."""
    job = owned_script(session, caller, script_id)
    request_cancel(session, job, "script job")
    logger.info("script job cancel requested", extra={"script_id": script_id, "state": job.state})
    return script_view(job)


def delete_script(session: Session, caller: Caller, script_id: str) -> None:
    """Delete a script job that has ended (it has no files: its row is all of it)."""
    job = owned_script(session, caller, script_id)
    deleted = session.execute(
        _SCRIPT_JOBS.delete().where(
            ScriptJob.id == script_id, ScriptJob.state.in_([state.value for state in FINAL_STATES])
        )
    )
    if rows_changed(deleted) != 1:
        raise Conflict(
            f"script job {script_id} is {job.state}; cancel it first (DELETE /v1/scripts/{script_id}), then delete "
            "it once it is cancelled"
        )


def script_view(job: ScriptJob) -> ScriptView:
    script = parse_script(job.script) if job.script is not None else None
    options = job.options
    return ScriptView(
        id=job.id,
        task=job.task,
        state=job.state,
        names=options.get("names"),
        minutes=options.get("minutes"),
        tone=options.get("tone"),
        force_model=options.get("force_model"),
        attempts=[ScriptAttemptView(**entry) for entry in job.attempt_log],
        max_attempts=job.max_attempts,
        script=job.script,
        via=job.via,
        speakers=[speaker.name for speaker in script.speakers] if script is not None else [],
        words=sum(len(turn.text.split()) for turn in script.turns) if script is not None else None,
        notes=list(job.notes),
        error=job.error,
        cancel_requested=job.cancel_requested,
        handbacks=job.handbacks,
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        owner_id=job.owner_id,
    )


def _checked_draft(request: ScriptDraftCreate) -> str:
    text = _checked_text(request.material, "material", None)
    _as_problem(lambda: check_source_text(text), "material")  # empty, or longer than the prompt holds
    return text


def _draft_options(request: ScriptDraftCreate) -> dict[str, object]:
    """Names, minutes and tone as the drafting stage takes them, checked by its rules (422 naming the field)."""

    def names() -> tuple[str, ...]:
        if request.names is None:
            return default_host_names(DEFAULT_HOSTS if request.hosts is None else request.hosts)
        if request.hosts is not None and request.hosts != len(request.names):
            raise DraftInputError(
                "names", f"{len(request.names)} names were given for {request.hosts} hosts; give one name a host"
            )
        return tuple(request.names)

    hosts = _as_problem(names, "hosts")
    tone = DEFAULT_TONE if request.tone is None else _checked_text(request.tone, "tone", None)
    draft = _as_problem(lambda: DraftRequest(names=hosts, minutes=request.minutes, tone=tone), "hosts")
    return {"names": list(draft.names), "minutes": draft.minutes, "tone": draft.tone}


def _without_model(transcript: str, force_model: bool, max_attempts: int) -> DraftedScript | None:
    """The script the parser or the clean-up reads from the transcript; None when it needs the model."""

    def needs_model() -> ChatModel:
        raise _ModelNeeded

    try:
        return _as_problem(
            lambda: normalise_transcript(transcript, needs_model, ModelBudget(max_attempts), force_model=force_model),
            "transcript",
        )
    except _ModelNeeded:
        return None


def _checked_text(text: str, field: str, max_chars: int | None) -> str:
    """Notes or a transcript: printable text within its length (422 naming the field and what to do)."""
    if max_chars is not None and len(text) > max_chars:
        raise InvalidInput(
            [
                Problem(
                    field,
                    f"the {field} is {len(text):,} characters; at most {max_chars:,} are allowed "
                    "(VOXCAST_MAX_SCRIPT_CHARS): split it",
                )
            ]
        )
    if bad := _CONTROL.search(text):
        line = text.count("\n", 0, bad.start()) + 1
        raise InvalidInput(
            [
                Problem(
                    field,
                    f"the {field} has a control character (U+{ord(bad[0]):04X}) on line {line}; only text, line "
                    "breaks and tabs are allowed",
                    line=line,
                )
            ]
        )
    return text


def _as_problem(check: Callable[[], _T], default_field: str) -> _T:
    """Run a drafting-stage check; its `DraftInputError` becomes a 422 naming the api's field for it."""
    try:
        return check()
    except DraftInputError as error:
        field = {"text": default_field}.get(error.field, error.field)
        raise InvalidInput([Problem(field, str(error))]) from error

"""Running one script job on a scripts worker: claim it, ask the script model, record every attempt, store the script.

The drafting stage (`script_text.drafting`) does the work; this module gives it the job's input and an
`AttemptObserver` that writes each attempt (and the reason a reply was rejected) into the row as it happens,
and answers its "cancelled?" from the row (read at most every `CANCEL_CHECK_SECONDS`), so a cancel ends a
reply within a fraction of a second. Every change is followed by a "changed" message on the job's channel
for the api's event stream; the row is the record, the message only says when to look.

A job is claimed only from `queued`, so a message delivered twice runs it once. While it runs, its row's
heartbeat is refreshed every `heartbeat_seconds`; a scripts worker that dies mid-job leaves it `running` under
its node name, and a sweeper takes it back (`workers.script_sweeper`): the next worker of that name at once, any
scripts worker once the heartbeat is stale. A run whose job was taken back meanwhile stops at its next check and
writes nothing more.

A scripts worker asked to stop (SIGTERM, Ctrl-C, its server gone) hands its jobs back: each reply stops at its next
"cancelled?" as a cancel would, and the job is queued again to start over (`ScriptHandedBack`; `handbacks` + 1, which
the guard against workers that keep dying does not count), its message sent again by the task.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, select, update
from sqlalchemy.orm import Session

from core.db import Database, rows_changed
from core.job_events import EventPublisher
from core.job_states import JobState
from core.models import ScriptJob, utc_now
from core.settings import Settings
from models.loading import ModelLoadError
from script_text.drafting import (
    ChatModel,
    DraftCancelled,
    DraftingError,
    DraftInputError,
    DraftRequest,
    ModelBudget,
    draft_script,
    normalise_transcript,
)
from script_text.drafting.jobs import DraftedScript
from workers.heartbeat import Heartbeat

logger = logging.getLogger(__name__)

CANCEL_CHECK_SECONDS = 0.25


@dataclass(frozen=True)
class ScriptServices:
    """What a scripts worker process shares between its task threads."""

    settings: Settings
    database: Database
    events: EventPublisher
    model: IdleModel  # the process's script model, loaded on first use
    # When this process started (before it took any message): the jobs its node name held before are a dead one's.
    started_at: datetime = field(default_factory=utc_now)
    stopping: threading.Event = field(default_factory=threading.Event)  # a planned stop: every job hands itself back


class ScriptHandedBack(Exception):
    """The script job was queued again because its scripts worker is stopping on purpose; the task sends it again."""


class RowObserver:
    """The drafting stage's `AttemptObserver` for one job: attempts go into its row, cancels come from it."""

    def __init__(self, services: ScriptServices, script_id: str, lost: threading.Event) -> None:
        self.services = services
        self.script_id = script_id
        self.lost = lost  # set by the heartbeat once a sweeper took the job back: the run stops as if cancelled
        self._checked_at = 0.0
        self._cancelled = False

    def started(self, attempt: int) -> None:
        self._change_log(lambda log: [*log, {"attempt": attempt, "rejected": None}])

    def rejected(self, attempt: int, reason: str) -> None:
        self._change_log(
            lambda log: [entry if entry["attempt"] != attempt else {**entry, "rejected": reason} for entry in log]
        )

    def cancelled(self) -> bool:
        """Whether the job's cancel was asked for (or the job is no longer this worker's, or the worker stops); the row
        is read at most every CANCEL_CHECK_SECONDS."""
        if self.lost.is_set() or self.services.stopping.is_set():
            return True
        if not self._cancelled and time.monotonic() - self._checked_at >= CANCEL_CHECK_SECONDS:
            with self.services.database.reading() as session:
                self._cancelled = bool(
                    session.scalar(select(ScriptJob.cancel_requested).where(ScriptJob.id == self.script_id))
                )
            self._checked_at = time.monotonic()
        return self._cancelled

    def _change_log(self, change: Callable[[list[Any]], list[Any]]) -> None:
        with self.services.database.session() as session:
            job = session.get(ScriptJob, self.script_id)
            if job is not None:
                job.attempt_log = change(list(job.attempt_log))
        self.services.events.script_changed(self.script_id)


def run_script_job(services: ScriptServices, script_id: str, worker: str) -> None:
    """Run the job if it is still queued; its outcome (script, failure or cancel) is stored in its row."""
    if not _claim(services.database, script_id, worker):
        logger.info("script job not queued; nothing to do", extra={"script_id": script_id})
        return
    services.events.script_changed(script_id)
    with services.database.reading() as session:
        job = session.get_one(ScriptJob, script_id)
        task, source, options, max_attempts = job.task, job.source, dict(job.options), job.max_attempts
    budget = ModelBudget(max_attempts, services.settings.script_max_new_tokens)
    heartbeat = Heartbeat(
        f"heartbeat-{script_id}",
        services.settings.heartbeat_seconds,
        functools.partial(_beat, services.database, script_id, worker),
        {"script_id": script_id},
    )
    observer = RowObserver(services, script_id, heartbeat.lost)
    try:
        with heartbeat, services.model.held() as load_model:
            if task == "draft":
                request = DraftRequest(names=tuple(options["names"]), minutes=options["minutes"], tone=options["tone"])
                result = draft_script(source, request, load_model(), budget, observer=observer)
            else:
                result = normalise_transcript(
                    source, load_model, budget, force_model=options["force_model"], observer=observer
                )
    except DraftCancelled:
        if services.stopping.is_set() and _hand_back(services, script_id, worker):
            raise ScriptHandedBack(script_id) from None
        _finish(services, script_id, worker, JobState.CANCELLED, error=None)
    except (DraftingError, DraftInputError) as error:
        _finish(services, script_id, worker, JobState.FAILED, error=str(error))
    except ModelLoadError as error:
        _finish(services, script_id, worker, JobState.FAILED, error=f"the script model did not load: {error}")
    except Exception as error:
        logger.exception("script job failed", extra={"script_id": script_id})
        error_line = f"the scripts worker failed: {type(error).__name__}"
        _finish(services, script_id, worker, JobState.FAILED, error=error_line)
    else:
        _finish(services, script_id, worker, JobState.DONE, error=None, result=result)


def _claim(database: Database, script_id: str, worker: str) -> bool:
    now = utc_now()
    with database.session() as session:
        claimed = session.execute(
            update(ScriptJob)
            .where(ScriptJob.id == script_id, ScriptJob.state == JobState.QUEUED)
            .values(
                state=JobState.RUNNING,
                worker=worker,
                started_at=now,
                heartbeat_at=now,
                deliveries=ScriptJob.deliveries + 1,
            )
        )
        return rows_changed(claimed) == 1


def _held(script_id: str, worker: str) -> ColumnElement[bool]:
    """The job's row while `worker` runs it (and no sweeper took it back)."""
    return (ScriptJob.id == script_id) & (ScriptJob.state == JobState.RUNNING) & (ScriptJob.worker == worker)


def _hand_back(services: ScriptServices, script_id: str, worker: str) -> bool:
    """Queue the held job again to start over, as its worker stops on purpose; False when it is no longer this
    worker's or its cancel was asked for (then it ends cancelled)."""
    with services.database.session() as session:
        handed_back = session.execute(
            update(ScriptJob)
            .where(_held(script_id, worker), ScriptJob.cancel_requested.is_(False))
            .values(state=JobState.QUEUED, worker=None, attempt_log=[], handbacks=ScriptJob.handbacks + 1)
        )
    if rows_changed(handed_back) != 1:
        return False
    logger.info("script job handed back: its scripts worker stops", extra={"script_id": script_id})
    services.events.script_changed(script_id)
    return True


def _beat(database: Database, script_id: str, worker: str) -> bool:
    """Refresh the job's heartbeat; False once `worker` no longer holds it."""
    with database.session() as session:
        return (
            rows_changed(
                session.execute(update(ScriptJob).where(_held(script_id, worker)).values(heartbeat_at=utc_now()))
            )
            == 1
        )


def _finish(
    services: ScriptServices,
    script_id: str,
    worker: str,
    state: JobState,
    *,
    error: str | None,
    result: DraftedScript | None = None,
) -> None:
    """Store the outcome, unless a sweeper took the job back meanwhile (its new run's row is not this run's to end)."""
    with services.database.session() as session:
        job = session.scalar(select(ScriptJob).where(_held(script_id, worker)))
        if job is None:
            logger.warning(
                "script job was taken back while it ran; its outcome is dropped", extra={"script_id": script_id}
            )
            return
        _store_outcome(session, job, state, error, result)
    logger.info("script job ended", extra={"script_id": script_id, "state": state.value})
    services.events.script_changed(script_id)


def _store_outcome(
    session: Session, job: ScriptJob, state: JobState, error: str | None, result: DraftedScript | None
) -> None:
    job.state, job.error, job.finished_at, job.worker = state, error, utc_now(), None
    if result is not None:
        job.script, job.via, job.notes = result.text, result.via, list(result.notes)


class IdleModel:
    """The process's script model: loaded on first use, kept while used, let go after `idle_seconds` unused.

    Letting go gives its memory back to the GPU (the speech model's worker shares it); the next job loads it
    again. A load that fails is not kept: the next job tries again, and says why if it fails too.
    """

    def __init__(self, load: Callable[[], ChatModel], idle_seconds: float) -> None:
        self._load = load
        self._idle_seconds = idle_seconds
        self._lock = threading.Lock()
        self._model: ChatModel | None = None
        self._users = 0
        self._last_used = time.monotonic()
        threading.Thread(target=self._reap, name="voxcast-script-model-reaper", daemon=True).start()

    @contextlib.contextmanager
    def held(self) -> Iterator[Callable[[], ChatModel]]:
        """The loader for one job; the model is not let go while a job holds it."""
        with self._lock:
            self._users += 1
        try:
            yield self._get
        finally:
            with self._lock:
                self._users -= 1
                self._last_used = time.monotonic()

    def _get(self) -> ChatModel:
        with self._lock:
            if self._model is None:
                self._model = self._load()
            return self._model

    def _reap(self) -> None:
        while True:
            time.sleep(min(self._idle_seconds, 30.0))
            with self._lock:
                idle = self._users == 0 and time.monotonic() - self._last_used >= self._idle_seconds
                if self._model is not None and idle:
                    self._model = None
                    _free_accelerator_memory()
                    logger.info("script model let go after being idle", extra={"idle_s": self._idle_seconds})


def _free_accelerator_memory() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()

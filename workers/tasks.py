"""The worker's Celery tasks and its process life: migrate, load the engine, serve its metrics, start the sweeper,
announce itself; on a planned stop, hand its jobs back and end.

`run_job` is idempotent and keyed by job id (the task id is the job id): a delivery for a job that is
finished, cancelled or held by a live worker does nothing, and a rerun generates only the segments not
yet stored. `regenerate_job` is the same run keyed by job id and revision: it claims the job only at the
revision its message names, then generates the segments a regenerated turn set back to pending.
Acknowledgement is late (see `workers.celery_app`), so a worker killed mid-job leaves the message for another
delivery, and the sweeper re-enqueues it sooner.

A planned stop (SIGTERM or SIGINT: Celery's warm shutdown; or `voxcast serve` gone, `workers.lifeline`) is not a
crash: Celery stops taking messages at once, every running job hands itself back within about an engine step
(`execute_job` raises `HandedBack`: the job is queued again, its frames stored, no worker death counted) and its
task sends its message again; a message taken as the stop began goes back untouched (`Reject`). Then the process
ends without the interpreter's slow teardown (`lifeline.end_process`). The stop is bounded, alone as under serve
(`core.stop_budget.WORKER_STOP_SECONDS` from the signal): what the worker still holds then it hands back in the
database and sends again, and it ends (`lifeline.end_within`), so that no container runtime's SIGKILL charges a death.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import redis
from celery import signals
from celery.exceptions import Reject

from core.db import Database, DatabaseUnavailable, database_url, upgrade_database
from core.file_store import StoreUnavailable
from core.job_events import EventPublisher
from core.job_repository import hand_back_process_jobs
from core.job_states import queue_kind
from core.logging import configure_logging
from core.settings import Settings
from core.stop_budget import WORKER_STOP_SECONDS
from core.storage import DataFolder
from workers.cancel_watch import CancelWatch
from workers.celery_app import RUN_JOB_TASK, create_celery_app, enqueue_job
from workers.job_execution import execute_job
from workers.job_stops import EngineDied, HandedBack
from workers.lifeline import end_process, end_within, watch_lifeline
from workers.presence import Presence
from workers.regeneration import REGENERATE_TASK
from workers.supervisor import EXIT_ENGINE_DEAD, EXIT_MODEL_NOT_LOADED
from workers.sweeper import Sweeper, drop_deliveries_of, send_back
from workers.worker_services import WorkerServices, process_name

logger = logging.getLogger(__name__)

app = create_celery_app(Settings.from_env())  # the speech worker's app: `celery -A workers.tasks worker`


@functools.cache
def worker_services() -> WorkerServices:
    """This process's services, built once from the environment's settings."""
    settings = Settings.from_env()
    database = Database.from_settings(settings)
    return WorkerServices(
        settings=settings,
        database=database,
        data=DataFolder.from_settings(settings),
        events=EventPublisher.from_url(settings.redis_url, settings.redis_namespace),
        cancels=CancelWatch(database),
    )


@functools.cache
def worker_presence() -> Presence:
    """This process's announcement in the admin's worker list."""
    return Presence(worker_services())


@app.task(name=RUN_JOB_TASK)
def run_job(job_id: str) -> None:
    _execute_or_exit(job_id)


@app.task(name=REGENERATE_TASK)
def regenerate_job(job_id: str, revision: int) -> None:
    _execute_or_exit(job_id, revision)


def _execute_or_exit(job_id: str, revision: int | None = None) -> None:
    """Run the job; if the engine died under it, end this process at once with `EXIT_ENGINE_DEAD`.

    A dead engine fails every request it held and every new one, so no job of this process can run: the
    process exits, its supervisor (serve's, or the container runtime) starts a new one, and the jobs it held,
    still running under its name in the database, are taken back and run again (`workers.supervisor`; the
    sweeper when no supervisor saw the exit). None is marked failed: they were not at fault.
    """
    services = worker_services()
    if services.stopping.is_set():
        raise Reject("this worker is stopping; the message goes back to the queue", requeue=True)
    try:
        execute_job(services, job_id, revision=revision)
    except HandedBack as handed:
        _send_again(services, handed)
    except DatabaseUnavailable as error:
        # The database did not answer within its budget (`VOXCAST_DATABASE_RETRY_SECONDS`): the message goes back to
        # the queue, and whatever this worker held is handed back by a sweeper once the database answers again.
        logger.warning(
            "the database does not answer; the job's message goes back", extra={"job_id": job_id, "error": str(error)}
        )
        raise Reject(str(error), requeue=True) from error
    except EngineDied as error:
        logger.critical(
            "the engine died; this worker exits so that it is restarted and its jobs run again",
            extra={"job_id": job_id, "error": str(error), "exit_status": EXIT_ENGINE_DEAD},
        )
        end_process(EXIT_ENGINE_DEAD)


def _send_again(services: WorkerServices, handed: HandedBack) -> None:
    """The handed-back job's message, sent again before this one is acknowledged (a run of a regeneration goes as
    `run_job`: it generates the segments its regeneration set back to pending, as the sweeper's does)."""
    job = handed.job
    try:
        # This delivery goes first: were it still unacknowledged when the process ends (the stop's bound reached
        # before the acknowledgement), serve's next start would put it back beside the new message.
        with redis.Redis.from_url(services.settings.redis_url) as client:
            drop_deliveries_of(client, services.settings.redis_namespace, [job.id])
        enqueue_job(app, services.settings.redis_namespace, job.id, queue_kind(job.queue), job.priority)
    except Exception:  # the broker is gone: the job is queued in the database, where a sweeper finds it
        logger.warning("could not send a handed-back job again", extra={"job_id": job.id}, exc_info=True)


@signals.setup_logging.connect
def _setup_logging(**_: Any) -> None:
    settings = Settings.from_env()
    configure_logging(settings.log_level, settings.log_format)


@signals.worker_init.connect
def _migrate_and_load_model(**_: Any) -> None:
    """Migrate, then start the engine before the worker connects to the broker.

    So no job pays for the load, and a worker whose model does not load (a corrupt or incomplete checkpoint,
    a wrong path) takes no job at all: it says why in one line and exits with `EXIT_MODEL_NOT_LOADED`,
    leaving the queue to workers that can run it, instead of failing every job it is handed.
    """
    settings = Settings.from_env()
    configure_logging(settings.log_level, settings.log_format)  # Celery sets logging up only after this signal
    watch_lifeline()  # from here on, a serve that ends ends this worker too (even while its model loads)
    upgrade_database(database_url(settings), settings.start_wait_seconds)
    services = worker_services()
    try:
        services.data.files.check()
    except StoreUnavailable as error:
        logger.critical(
            "cannot reach the job files' store; this worker stops and takes no job", extra={"error": str(error)}
        )
        raise SystemExit(EXIT_MODEL_NOT_LOADED) from error
    try:
        engine = services.engine()
    except Exception as error:
        logger.critical(
            "cannot load the model; this worker stops and takes no job",
            extra={"model": settings.worker_model or settings.model, "error": f"{type(error).__name__}: {error}"},
        )
        raise SystemExit(EXIT_MODEL_NOT_LOADED) from error
    services.metrics.watch(engine)
    if settings.worker_metrics_port is not None:
        services.metrics.serve(settings.worker_metrics_host, settings.worker_metrics_port)


@signals.worker_ready.connect
def _start_sweeper_and_presence(**_: Any) -> None:
    services = worker_services()
    sweeper = Sweeper(services.settings, services.database, app, interval=services.settings.heartbeat_seconds)
    sweeper.start()
    worker_presence().start()
    logger.info("worker ready", extra={"model": services.settings.worker_model or services.settings.model})


@signals.worker_shutting_down.connect
def _hand_back_jobs(**_: Any) -> None:
    """A planned stop began (Celery has stopped taking messages): every running job hands itself back, and the stop is
    bounded from now (a second signal changes nothing)."""
    services = worker_services()
    if not services.stopping.is_set():
        services.hand_back_jobs()
        end_within(WORKER_STOP_SECONDS, _hand_back_the_rest)


def _hand_back_the_rest() -> None:
    """The planned stop ran out of time: every job still running here is queued again and sent again (no death)."""
    services = worker_services()
    held = hand_back_process_jobs(services.database, process_name())
    send_back(services.settings, services.database, app, held, "the worker's stop ran out of time")


@signals.worker_shutdown.connect
def _withdraw_and_end(sender: Any = None, **_: Any) -> None:
    """Celery's warm shutdown is over (every task returned, every message acknowledged): withdraw, and end now."""
    worker_presence().stop()
    end_process(getattr(sender, "exitcode", None) or 0)

"""The worker's Celery tasks and its process life: migrate, load the engine, start the sweeper, announce itself.

`run_job` is idempotent and keyed by job id (the task id is the job id): a delivery for a job that is
finished, cancelled or held by a live worker does nothing, and a rerun generates only the segments not
yet stored. `regenerate_job` is the same run keyed by job id and revision: it claims the job only at the
revision its message names, then generates the segments a regenerated turn set back to pending.
Acknowledgement is late (see `workers.celery_app`), so a worker killed mid-job leaves the message for another
delivery, and the sweeper re-enqueues it sooner.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from celery import signals

from core.db import Database, database_url, upgrade_database
from core.job_events import EventPublisher
from core.logging import configure_logging
from core.settings import Settings
from core.storage import DataFolder
from workers.celery_app import RUN_JOB_TASK, app
from workers.job_execution import WorkerServices, execute_job
from workers.presence import Presence
from workers.regeneration import REGENERATE_TASK
from workers.sweeper import Sweeper

logger = logging.getLogger(__name__)

EXIT_MODEL_NOT_LOADED = 3  # the worker's exit status when its model does not load


@functools.cache
def worker_services() -> WorkerServices:
    """This process's services, built once from the environment's settings."""
    settings = Settings.from_env()
    return WorkerServices(
        settings=settings,
        database=Database.from_settings(settings),
        data=DataFolder(settings.data_dir),
        events=EventPublisher.from_url(settings.redis_url, settings.redis_namespace),
    )


@functools.cache
def worker_presence() -> Presence:
    """This process's announcement in the admin's worker list."""
    return Presence(worker_services())


@app.task(name=RUN_JOB_TASK)
def run_job(job_id: str) -> None:
    execute_job(worker_services(), job_id)


@app.task(name=REGENERATE_TASK)
def regenerate_job(job_id: str, revision: int) -> None:
    execute_job(worker_services(), job_id, revision=revision)


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
    upgrade_database(database_url(settings))
    try:
        worker_services().model()
    except Exception as error:
        logger.critical(
            "cannot load the model; this worker stops and takes no job",
            extra={"model": settings.worker_model or settings.model, "error": f"{type(error).__name__}: {error}"},
        )
        raise SystemExit(EXIT_MODEL_NOT_LOADED) from error


@signals.worker_ready.connect
def _start_sweeper_and_presence(**_: Any) -> None:
    services = worker_services()
    sweeper = Sweeper(services.settings, services.database, app, interval=services.settings.heartbeat_seconds)
    sweeper.start()
    worker_presence().start()
    logger.info("worker ready", extra={"model": services.settings.worker_model or services.settings.model})


@signals.worker_shutdown.connect
def _withdraw(**_: Any) -> None:
    worker_presence().stop()

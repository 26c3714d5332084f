"""A scripts worker: a Celery worker of its own that consumes only the `scripts` queue and runs script jobs.

    celery -A workers.script_worker worker --pool threads --concurrency 1 --queues <namespace>.scripts

(`cli.serve.scripts_worker_command` builds it; `voxcast serve` runs one beside the speech worker.) It is a
process apart from the speech worker, so drafting and audio never wait for each other's task threads, and
it never loads the speech model: its one model is the script model (`VOXCAST_SCRIPT_MODEL`), loaded on
the first job and let go after `VOXCAST_SCRIPT_MODEL_IDLE_SECONDS` without one (`script_execution.IdleModel`).
On a GPU host both models share the GPU; to keep drafting off it, run the scripts worker on another host
(or with `VOXCAST_DEVICE=cpu`): it needs only the broker, the database and the script model.

A planned stop (SIGTERM or SIGINT, or `voxcast serve` gone: `workers.lifeline`) hands its script jobs back to the
queue (`script_execution.ScriptHandedBack`) and ends the process at once, as the speech worker does (`workers.tasks`).
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from celery import signals
from celery.exceptions import Reject

from core.db import Database, database_url, upgrade_database
from core.job_events import EventPublisher
from core.logging import configure_logging
from core.settings import Settings
from script_text.drafting import ChatModel
from workers.celery_app import RUN_SCRIPT_TASK, create_celery_app, enqueue_script, scripts_node_name
from workers.lifeline import end_process, watch_lifeline
from workers.script_execution import IdleModel, ScriptHandedBack, ScriptServices, run_script_job
from workers.script_sweeper import ScriptSweeper

logger = logging.getLogger(__name__)

app = create_celery_app(Settings.from_env(), include=("workers.script_worker",))


@functools.cache
def script_services() -> ScriptServices:
    """This process's services, built once from the environment's settings."""
    settings = Settings.from_env()

    def load() -> ChatModel:
        from models.instruct_chat import load_chat_model

        return load_chat_model(settings.script_model, device=settings.device, dtype=settings.dtype)

    return ScriptServices(
        settings=settings,
        database=Database.from_settings(settings),
        events=EventPublisher.from_url(settings.redis_url, settings.redis_namespace),
        model=IdleModel(load, settings.script_model_idle_seconds),
    )


@app.task(name=RUN_SCRIPT_TASK, bind=True)
def run_script(task: Any, script_id: str) -> None:
    services = script_services()
    if services.stopping.is_set():
        raise Reject("this scripts worker is stopping; the message goes back to the queue", requeue=True)
    try:
        run_script_job(services, script_id, worker=task.request.hostname or scripts_node_name())
    except ScriptHandedBack:
        try:
            enqueue_script(app, services.settings.redis_namespace, script_id)
        except Exception:  # the broker is gone: the job is queued in the database, where a sweeper finds it
            logger.warning(
                "could not send a handed-back script job again", extra={"script_id": script_id}, exc_info=True
            )


@signals.setup_logging.connect
def _setup_logging(**_: Any) -> None:
    settings = Settings.from_env()
    configure_logging(settings.log_level, settings.log_format)


@signals.worker_init.connect
def _migrate(**_: Any) -> None:
    settings = Settings.from_env()
    configure_logging(settings.log_level, settings.log_format)  # Celery sets logging up only after this signal
    watch_lifeline()
    script_services()  # its start time is now, before it takes any message
    upgrade_database(database_url(settings), settings.start_wait_seconds)


@signals.worker_ready.connect
def _sweep_and_announce(sender: Any = None, **_: Any) -> None:
    """Start the sweeper (its first round takes back what a previous process of this name held); then ready."""
    services = script_services()
    name = getattr(sender, "hostname", None) or scripts_node_name()
    namespace = services.settings.redis_namespace
    ScriptSweeper(
        services.settings,
        services.database,
        lambda script_id: enqueue_script(app, namespace, script_id),
        name,
        services.started_at,
    ).start()
    logger.info("scripts worker ready", extra={"node": name, "script_model": services.settings.script_model})


@signals.worker_shutting_down.connect
def _hand_back_jobs(**_: Any) -> None:
    """A planned stop began: every running script job hands itself back at its next check."""
    script_services().stopping.set()


@signals.worker_shutdown.connect
def _end(sender: Any = None, **_: Any) -> None:
    """Celery's warm shutdown is over: end now (`lifeline.end_process`)."""
    end_process(getattr(sender, "exitcode", None) or 0)

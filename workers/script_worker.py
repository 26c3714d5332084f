"""A scripts worker: a Celery worker of its own that consumes only the `scripts` queue and runs script jobs.

    celery -A workers.script_worker worker --pool threads --concurrency 1 --queues <namespace>.scripts

(`cli.serve.scripts_worker_command` builds it; `voxcast serve` runs one beside the speech worker.) It is a
process apart from the speech worker, so drafting and audio never wait for each other's task threads, and
it never loads the speech model: its one model is the script model (`VOXCAST_SCRIPT_MODEL`), loaded on
the first job and let go after `VOXCAST_SCRIPT_MODEL_IDLE_SECONDS` without one (`script_execution.IdleModel`).
On a GPU host both models share the GPU; to keep drafting off it, run the scripts worker on another host
(or with `VOXCAST_DEVICE=cpu`): it needs only the broker, the database and the script model.
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
from pipeline.drafting import ChatModel
from workers.celery_app import RUN_SCRIPT_TASK, create_celery_app, enqueue_script, scripts_node_name
from workers.script_execution import IdleModel, ScriptServices, run_script_job
from workers.script_sweeper import ScriptSweeper

logger = logging.getLogger(__name__)

app = create_celery_app(Settings.from_env(), include=("workers.script_worker",))


@functools.cache
def script_services() -> ScriptServices:
    """This process's services, built once from the environment's settings."""
    settings = Settings.from_env()

    def load() -> ChatModel:
        from pipeline.drafting.transformers_chat import load_chat_model

        return load_chat_model(settings.script_model, device=settings.device, dtype=settings.dtype)

    return ScriptServices(
        settings=settings,
        database=Database.from_settings(settings),
        events=EventPublisher.from_url(settings.redis_url, settings.redis_namespace),
        model=IdleModel(load, settings.script_model_idle_seconds),
    )


@app.task(name=RUN_SCRIPT_TASK, bind=True)
def run_script(task: Any, script_id: str) -> None:
    run_script_job(script_services(), script_id, worker=task.request.hostname or scripts_node_name())


@signals.setup_logging.connect
def _setup_logging(**_: Any) -> None:
    settings = Settings.from_env()
    configure_logging(settings.log_level, settings.log_format)


@signals.worker_init.connect
def _migrate(**_: Any) -> None:
    settings = Settings.from_env()
    configure_logging(settings.log_level, settings.log_format)  # Celery sets logging up only after this signal
    upgrade_database(database_url(settings))


@signals.worker_ready.connect
def _sweep_and_announce(sender: Any = None, **_: Any) -> None:
    """Start the sweeper (its first round takes back what a previous process of this name held); then ready."""
    services = script_services()
    name = getattr(sender, "hostname", None) or scripts_node_name()
    namespace = services.settings.redis_namespace
    ScriptSweeper(
        services.settings, services.database, lambda script_id: enqueue_script(app, namespace, script_id), name
    ).start()
    logger.info("scripts worker ready", extra={"node": name, "script_model": services.settings.script_model})

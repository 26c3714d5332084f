"""The message that regenerates a turn of a finished job: its task name, and how the api sends it.

The api imports this module, never `workers.tasks` (which needs the model). The message carries the job id
and the revision the regeneration created; the worker's task claims the job only at that revision, so a
stale or repeated message does nothing. Its Celery task id is the job id, like `voxcast.run_job`'s, so the
sweeper sees the job's message in the broker and does not send another; should it still send one (the
broker lost this message), `run_job` does the same work, since what to generate is in the database: the
segments left pending and the revision's script.
"""

from __future__ import annotations

from celery import Celery

from core.job_states import QueueKind
from workers.celery_app import broker_priority, queue_name

REGENERATE_TASK = "voxcast.regenerate_job"


def enqueue_regeneration(
    app: Celery, namespace: str, job_id: str, revision: int, kind: QueueKind, priority: int
) -> None:
    """Send the regeneration of `job_id` at `revision` to the job's own queue, at its priority."""
    app.send_task(
        REGENERATE_TASK,
        args=[job_id, revision],
        task_id=job_id,
        queue=queue_name(namespace, kind),
        priority=broker_priority(priority),
    )

"""The Celery app: Redis as the broker, configured for long GPU jobs that must survive a worker's death.

- `acks_late` + `reject_on_worker_lost`: a message is acknowledged only when its job has ended, so a worker
  killed mid-job leaves the message to be delivered again.
- prefetch 1: a worker holds no more messages than it has task threads, so waiting jobs stay in the queue
  where another worker (or a higher-priority job) can have them.
- the visibility timeout sits above the longest job: Redis redelivers an unacknowledged message after it,
  and a job still running must not be handed out twice. A worker that died is found sooner by the
  sweeper (`workers.sweeper`), which watches job heartbeats in the database.
- two queues, `interactive` and `batch`, each bound to a direct exchange of its own name (left to Celery, both
  would be bound to the default queue's exchange and key, and a message routed by exchange would land in both),
  and ten priorities (Redis serves priority 0 first; voxcast's job priority runs the other way, 9 most urgent,
  and is flipped when sent). A worker consumes `interactive` first.
- a third queue, `scripts`, carries script jobs (drafting, transcript clean-up) to the scripts workers
  (`workers.script_worker`): processes of their own, so a long draft never holds a task thread an audio job
  needs and a queue of audio jobs never starves drafting.
- task events on (sent, received, started, succeeded, failed) and worker heartbeats, so `celery flower` or
  `celery events` (neither a dependency) show the workers and their tasks: docs/deploy.md says how.
- every key, queue and channel carries the `redis_namespace` prefix, so installations (or test sessions)
  can share one Redis.

The api imports this module (to send tasks by name) but never the tasks themselves, which need the model; the speech
worker's app is built in `workers.tasks` (`celery -A workers.tasks worker`), the scripts worker's in
`workers.script_worker`, so importing this module builds no app.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Literal

import redis
from celery import Celery
from kombu import Exchange, Queue
from kombu.transport.redis import Channel

from core.job_states import QUEUE_KINDS, QueueKind
from core.settings import Settings

RUN_JOB_TASK = "voxcast.run_job"
RUN_SCRIPT_TASK = "voxcast.run_script"
SCRIPTS_QUEUE: Literal["scripts"] = "scripts"
MAX_PRIORITY = 9
_VISIBILITY_MARGIN_SECONDS = 1800


def queue_name(namespace: str, kind: QueueKind | Literal["scripts"]) -> str:
    return f"{namespace}.{kind}"


def task_queue(namespace: str, kind: QueueKind | Literal["scripts"]) -> Queue:
    """The queue as a worker declares it: bound to a direct exchange of its own, under its own name as the key."""
    name = queue_name(namespace, kind)
    return Queue(name, Exchange(name, type="direct"), routing_key=name)


def broker_priority(job_priority: int) -> int:
    """Redis serves 0 first; a voxcast job with priority 9 is the most urgent."""
    return MAX_PRIORITY - job_priority


def broker_key_prefix(namespace: str) -> str:
    return f"{namespace}:"


def priority_list_keys(namespace: str, kind: QueueKind | Literal["scripts"]) -> list[str]:
    """The Redis lists holding a queue's waiting messages, one per priority (kombu's naming)."""
    name = broker_key_prefix(namespace) + queue_name(namespace, kind)
    return [name] + [f"{name}{Channel.sep}{step}" for step in range(1, MAX_PRIORITY + 1)]


def create_celery_app(settings: Settings, include: Sequence[str] = ("workers.tasks",)) -> Celery:
    """The app every process shares; `include` names the task modules a worker of it imports (and runs)."""
    app = Celery("voxcast")
    app.conf.update(
        broker_url=settings.redis_url,
        broker_transport="workers.broker_transport:Transport",  # kombu's Redis transport, repaired (see there)
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            "visibility_timeout": int(settings.longest_job_seconds) + _VISIBILITY_MARGIN_SECONDS,
            "global_keyprefix": broker_key_prefix(settings.redis_namespace),
            "priority_steps": list(range(MAX_PRIORITY + 1)),
            "queue_order_strategy": "priority",
        },
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        task_queues=[task_queue(settings.redis_namespace, kind) for kind in (*QUEUE_KINDS, SCRIPTS_QUEUE)],
        task_default_queue=queue_name(settings.redis_namespace, "batch"),
        worker_hijack_root_logger=False,
        worker_send_task_events=True,
        task_send_sent_event=True,
        include=list(include),
    )
    return app


def enqueue_job(app: Celery, namespace: str, job_id: str, kind: QueueKind, priority: int) -> None:
    """Send the job's task; the task id is the job id, so a duplicate message is recognisably the same job."""
    app.send_task(
        RUN_JOB_TASK,
        args=[job_id],
        task_id=job_id,
        queue=queue_name(namespace, kind),
        priority=broker_priority(priority),
    )


def requeue_unacknowledged(settings: Settings) -> int:
    """Put every message a worker took and did not acknowledge back in its queue, at once; how many there were.

    Only for a broker no worker consumes from (a private Redis as `voxcast serve` starts it): a message is
    unacknowledged while its worker runs it, so on a broker in use this would run jobs twice.
    """
    tags = redis.Redis.from_url(settings.redis_url).hkeys(broker_key_prefix(settings.redis_namespace) + "unacked")
    app = create_celery_app(settings, include=())
    with app.connection_for_write() as connection:
        for tag in tags:
            connection.default_channel.qos.restore_by_tag(tag)  # its own queue, priority and all, as kombu does it
    return len(tags)


def scripts_node_name() -> str:
    """The Celery node name of this host's scripts worker, and the name its script jobs are held under."""
    return f"voxcast-scripts@{socket.gethostname()}"


def enqueue_script(app: Celery, namespace: str, script_id: str) -> None:
    """Send a script job's task to the scripts queue; like a job's, its task id is its id."""
    app.send_task(RUN_SCRIPT_TASK, args=[script_id], task_id=script_id, queue=queue_name(namespace, SCRIPTS_QUEUE))

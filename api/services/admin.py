"""Admin views: how deep each queue is, in the broker and in the database."""

from __future__ import annotations

import redis
from sqlalchemy import func, select
from starlette.concurrency import run_in_threadpool

from api.deps import ApiServices
from api.schemas import QueueDepth, QueueReport
from core.job_states import QUEUE_KINDS, JobState
from core.models import Job
from workers.celery_app import priority_list_keys


async def queue_report(services: ApiServices) -> QueueReport:
    counts = await run_in_threadpool(_counts_by_queue, services)
    queues = []
    for kind in QUEUE_KINDS:
        queues.append(
            QueueDepth(
                queue=kind,
                waiting_in_broker=await broker_depth(services, kind),
                queued=counts.get((kind, JobState.QUEUED.value), 0),
                running=counts.get((kind, JobState.RUNNING.value), 0),
            )
        )
    return QueueReport(queues=queues)


def _counts_by_queue(services: ApiServices) -> dict[tuple[str, str], int]:
    with services.database.session() as session:
        rows = session.execute(
            select(Job.queue, Job.state, func.count())
            .where(Job.state.in_([JobState.QUEUED, JobState.RUNNING]))
            .group_by(Job.queue, Job.state)
        ).all()
    return {(queue, state): count for queue, state, count in rows}


async def broker_depth(services: ApiServices, kind: str) -> int | None:
    """Messages waiting in the broker for queue `kind`, over every priority; None when Redis does not answer."""
    try:
        total = 0
        for key in priority_list_keys(services.settings.redis_namespace, kind):  # type: ignore[arg-type]
            total += await services.redis.llen(key)
        return total
    except (redis.RedisError, OSError):
        return None

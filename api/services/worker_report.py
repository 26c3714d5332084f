"""Admin view of the workers: the statuses they announce in Redis (`core.worker_presence`), with their jobs.

The statuses expire by themselves, so the list holds only workers seen within the last few heartbeats; the
jobs each one runs come from the database, where a running job names the process that holds it.
"""

from __future__ import annotations

import redis
from sqlalchemy import select
from starlette.concurrency import run_in_threadpool

from api.deps import ApiServices
from api.errors import ApiError
from api.schemas import WorkerList, WorkerView
from api.services.job_limits import GenerationLimits
from core.job_states import JobState
from core.models import Job
from core.worker_presence import WorkerStatus, worker_key_pattern
from script_text.plan import ModelContext


class RedisUnavailable(ApiError):
    status_code = 503


async def worker_list(services: ApiServices) -> WorkerList:
    statuses = await announced_workers(services)
    running = await run_in_threadpool(_running_jobs, services)
    workers = [
        WorkerView(
            **status.model_dump(),
            running_jobs=sorted(job_id for job_id, holder in running if holder.startswith(f"{status.name}:")),
        )
        for status in sorted(statuses, key=lambda status: status.name)
    ]
    supervised = services.supervisor.status() if services.supervisor is not None else None
    return WorkerList(workers=workers, supervised=supervised)


async def announced_workers(services: ApiServices) -> list[WorkerStatus]:
    """Every worker seen within the last few heartbeats; `RedisUnavailable` when Redis does not answer."""
    pattern = worker_key_pattern(services.settings.redis_namespace)
    try:
        keys = [key async for key in services.redis.scan_iter(match=pattern)]
        values = await services.redis.mget(keys) if keys else []
    except (redis.RedisError, OSError) as error:
        raise RedisUnavailable(f"workers announce themselves in Redis, which does not answer: {error}") from error
    return [WorkerStatus.model_validate_json(value) for value in values if value is not None]  # None: just expired


def _running_jobs(services: ApiServices) -> list[tuple[str, str]]:
    """(job id, holder) of every running job."""
    with services.database.session() as session:
        rows = session.execute(select(Job.id, Job.worker).where(Job.state == JobState.RUNNING, Job.worker.is_not(None)))
        return [(job_id, holder) for job_id, holder in rows if holder is not None]  # none is: the query says so


async def generation_limits(services: ApiServices) -> GenerationLimits | None:
    """What the most capable live worker can hold in one generation; None when none is announced (or Redis
    does not answer: the workers then refuse what they cannot hold, with the same numbers)."""
    try:
        workers = await announced_workers(services)
    except RedisUnavailable:
        return None
    if not workers:
        return None
    best = max(workers, key=lambda worker: worker.longest_generation_tokens)
    context = None if best.context_tokens is None else ModelContext(best.model_name, best.context_tokens)
    return GenerationLimits(best.longest_generation_tokens, best.chars_per_token, context)

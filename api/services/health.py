"""What `/health` reports: each part the service needs, checked now with a short timeout, and one verdict."""

from __future__ import annotations

import socket

import anyio
from sqlalchemy import text
from starlette.concurrency import run_in_threadpool

from api.deps import ApiServices
from api.schemas import HealthView, SupervisedWorkerHealth
from api.services.worker_report import announced_workers
from core.worker_presence import WorkerStatus

CHECK_SECONDS = 1.0


async def health_report(services: ApiServices) -> HealthView:
    database = await _database_problem(services)
    announced: list[WorkerStatus] = []
    try:
        with anyio.fail_after(CHECK_SECONDS):
            await services.redis.ping()
            announced = await announced_workers(services)
        redis = "ok"
    except Exception as error:  # a timeout, RedisUnavailable, a connection error: reported, not raised
        redis = f"does not answer: {error or type(error).__name__}"
    supervised = None
    if services.supervisor is not None:
        status = services.supervisor.status()
        ready = any(worker.pid == status.pid and worker.hostname == socket.gethostname() for worker in announced)
        supervised = SupervisedWorkerHealth(
            # running but not announced yet: still loading its model
            state="starting" if status.state == "running" and not ready else status.state,
            restarts=status.restarts,
            last_exit=status.last_exit,
            next_start_in_seconds=status.next_start_in_seconds,
        )
    stalled = [f"{worker.name}: {loop}" for worker in announced for loop in worker.stalled_loops]
    if database != "ok":
        verdict = "down"
    elif redis != "ok" or not announced or stalled or (supervised is not None and supervised.state != "running"):
        verdict = "degraded"
    else:
        verdict = "ok"
    return HealthView(
        status=verdict,
        database=database,
        redis=redis,
        workers=len(announced),
        stalled_loops=stalled,
        supervised_worker=supervised,
    )


async def _database_problem(services: ApiServices) -> str:
    def check() -> None:
        with services.database.session() as session:
            session.execute(text("SELECT 1"))

    try:
        with anyio.fail_after(CHECK_SECONDS * 5):
            await run_in_threadpool(check)
    except Exception as error:  # reported, not raised
        return f"does not answer: {error or type(error).__name__}"
    return "ok"

"""Admin routes (admin keys only): every job with filters, queue depth, storage usage, cancel, retry, re-prioritise."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool

from api.deps import AdminKey, ServicesDep, SessionDep
from api.params import JobId, Offset, OwnerId
from api.schemas import JobList, JobView, PriorityChange, QueueReport, UsageList
from api.services import jobs
from api.services.admin import queue_report
from api.services.storage_quota import usage_view
from core.job_states import JobState
from core.storage_usage import every_key_usage

router = APIRouter(prefix="/v1/admin", tags=["admin"])


@router.get("/jobs", response_model=JobList, summary="All jobs, newest first")
def list_all_jobs(
    session: SessionDep,
    admin: AdminKey,
    state: Annotated[JobState | None, Query()] = None,
    queue: Annotated[Literal["interactive", "batch"] | None, Query()] = None,
    owner_id: OwnerId = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Offset = 0,
) -> JobList:
    found = jobs.list_jobs(session, admin, state=state, queue=queue, owner_id=owner_id, limit=limit, offset=offset)
    return JobList(jobs=found)


@router.get("/queues", response_model=QueueReport, summary="Jobs waiting and running per queue")
async def queues(admin: AdminKey, services: ServicesDep) -> QueueReport:
    return await queue_report(services)


@router.get("/usage", response_model=UsageList, summary="Every key's storage usage, the largest first")
def every_usage(session: SessionDep, admin: AdminKey, services: ServicesDep) -> UsageList:
    quota = services.settings.max_storage_bytes
    return UsageList(keys=[usage_view(usage, quota) for usage in every_key_usage(session, services.data)])


@router.post("/jobs/{job_id}/cancel", response_model=JobView)
def cancel(job_id: JobId, session: SessionDep, admin: AdminKey, services: ServicesDep) -> JobView:
    return jobs.cancel_job(services, session, admin, job_id)


@router.post("/jobs/{job_id}/retry", response_model=JobView, summary="Queue a failed or cancelled job again")
async def retry(job_id: JobId, admin: AdminKey, services: ServicesDep) -> JobView:
    return await run_in_threadpool(jobs.retry_job, services, job_id)


@router.post("/jobs/{job_id}/priority", response_model=JobView, summary="Change a job's priority (0..9)")
async def reprioritise(job_id: JobId, change: PriorityChange, admin: AdminKey, services: ServicesDep) -> JobView:
    return await run_in_threadpool(jobs.reprioritise_job, services, job_id, change.priority)

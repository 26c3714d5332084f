"""Admin route: the live workers, their devices and engine slots. The logic is in `api.services.worker_report`."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import AdminKey, ServicesDep
from api.schemas import WorkerList
from api.services.worker_report import worker_list

router = APIRouter(prefix="/v1/admin", tags=["admin"])


@router.get("/workers", response_model=WorkerList, summary="Live workers: device, model, engine slots in use, jobs")
async def workers(admin: AdminKey, services: ServicesDep) -> WorkerList:
    return await worker_list(services)

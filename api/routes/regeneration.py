"""Regenerating one turn of a finished job. The logic is in `api.services.regeneration`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Response
from starlette.concurrency import run_in_threadpool

from api.deps import CurrentKey, ServicesDep
from api.params import MAX_DATABASE_INT, JobId
from api.schemas import JobView, RegenerationPlan, RegenerationView, TakeChoice, TurnRegeneration
from api.services.regeneration import plan_regeneration, regenerate_turn
from api.services.takes import choose_take
from api.services.worker_report import generation_limits

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

TurnIndex = Annotated[int, Path(ge=0, le=MAX_DATABASE_INT, description="0-based, as `index` in chapters.json's turns")]
OptionalChange = Annotated[TurnRegeneration | None, Body()]  # absent: a new seed, the same words


@router.post(
    "/{job_id}/turns/{turn}/regenerate",
    status_code=202,
    response_model=RegenerationView,
    summary="Generate one turn of a done job again (new seed, optionally new text); the episode is rebuilt",
)
async def regenerate(
    job_id: JobId,
    turn: TurnIndex,
    response: Response,
    caller: CurrentKey,
    services: ServicesDep,
    change: OptionalChange = None,
) -> RegenerationView:
    limits = await generation_limits(services)
    change = change or TurnRegeneration()
    regeneration = await run_in_threadpool(regenerate_turn, services, caller, job_id, turn, change, limits)
    response.headers["Location"] = f"/v1/jobs/{job_id}"
    return regeneration


@router.post(
    "/{job_id}/turns/{turn}/regeneration-plan",
    response_model=RegenerationPlan,
    summary="What regenerating a turn would generate again (in `whole` mode, other turns too) and about how long",
)
async def plan(
    job_id: JobId,
    turn: TurnIndex,
    caller: CurrentKey,
    services: ServicesDep,
    change: OptionalChange = None,
) -> RegenerationPlan:
    limits = await generation_limits(services)
    return await run_in_threadpool(
        plan_regeneration, services, caller, job_id, turn, change or TurnRegeneration(), limits
    )


@router.post(
    "/{job_id}/takes",
    response_model=JobView,
    summary="After a regeneration, keep the new take or the one it replaced (then the episode is assembled again)",
)
async def choose(job_id: JobId, choice: TakeChoice, caller: CurrentKey, services: ServicesDep) -> JobView:
    return await run_in_threadpool(choose_take, services, caller, job_id, choice.keep)

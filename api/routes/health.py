"""Health: `/healthz` says the process answers (liveness); `/health` says whether it can serve, and what is missing.

Neither needs a key: an orchestrator or a load balancer calls them. `/health` is `503` only when the api
cannot do its own work (the database does not answer); a missing worker or Redis makes it `degraded` with
a `200`, since restarting the api would not bring either back. The logic is in `api.services.health`.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from api.deps import ServicesDep
from api.schemas import HealthView
from api.services.health import health_report

router = APIRouter(tags=["health"])


@router.get("/healthz", include_in_schema=False)
def alive() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/health",
    response_model=HealthView,
    responses={503: {"model": HealthView, "description": "the database does not answer"}},
    summary="Whether the service can take and run jobs: database, Redis, live workers, the supervised worker",
)
async def health(services: ServicesDep) -> JSONResponse:
    report = await health_report(services)
    return JSONResponse(report.model_dump(mode="json"), status_code=503 if report.status == "down" else 200)

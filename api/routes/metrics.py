"""Prometheus metrics of the installation, for an admin key: the logic is in `api.services.metrics`.

On the api's own port, behind an admin key (a Prometheus scrape sends it with `authorization: {credentials: ...}`)
rather than on a port of its own: one address to secure and to reach, and the metrics name keys' jobs and the
installation's hosts, which are an admin's to see.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from api.deps import AdminKey, ServicesDep
from api.services.metrics import metrics_text

router = APIRouter(tags=["admin"])


@router.get("/metrics", include_in_schema=False)
async def metrics(admin: AdminKey, services: ServicesDep) -> Response:
    return Response(await metrics_text(services), media_type=CONTENT_TYPE_LATEST)

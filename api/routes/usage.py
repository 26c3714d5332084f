"""Storage usage: what the calling key keeps in the service (`core.storage_usage`), against its quota."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import CurrentKey, ServicesDep, SessionDep
from api.schemas import UsageView
from api.services.storage_quota import usage_view
from core.models import ApiKey
from core.storage_usage import key_usage

router = APIRouter(prefix="/v1", tags=["usage"])


@router.get("/usage", response_model=UsageView, summary="This key's bytes stored, jobs, voices and minutes of audio")
def usage(session: SessionDep, caller: CurrentKey, services: ServicesDep) -> UsageView:
    found = key_usage(session, services.data, session.get_one(ApiKey, caller.key_id))
    return usage_view(found, services.settings.max_storage_bytes)

"""The per-key storage quota at the door: a job or a voice that would take its key past `max_storage_bytes` is
refused (507) with the quota, the usage and what to do, before any of it is kept (see `core.storage_usage`).

Two requests of one key arriving together may both pass: the quota bounds a key's storage to within one request.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from api.deps import ApiServices, Caller
from api.errors import StorageQuotaExceeded
from api.schemas import UsageView
from core.byte_sizes import megabytes
from core.models import ApiKey
from core.storage_usage import KeyUsage, key_usage


def check_storage_quota(session: Session, services: ApiServices, caller: Caller, adding: int, what: str) -> None:
    """507 when `adding` more bytes would take the caller's key past its quota (0: no quota)."""
    quota = services.settings.max_storage_bytes
    if quota <= 0:
        return
    usage = key_usage(session, services.data, session.get_one(ApiKey, caller.key_id))
    if usage.bytes + adding > quota:
        raise StorageQuotaExceeded(
            f"{what} needs about {megabytes(adding)} and this key already uses {megabytes(usage.bytes)} of its "
            f"{megabytes(quota)} storage quota (VOXCAST_MAX_STORAGE_BYTES); delete jobs it no longer needs "
            "(DELETE /v1/jobs/{id}?purge=true) or ask an admin for a larger quota"
        )


def usage_view(usage: KeyUsage, quota: int) -> UsageView:
    return UsageView(
        key_id=usage.key_id,
        key_name=usage.key_name,
        bytes=usage.bytes,
        jobs=usage.jobs,
        voices=usage.voices,
        audio_minutes=round(usage.audio_minutes, 2),
        quota_bytes=quota if quota > 0 else None,
    )

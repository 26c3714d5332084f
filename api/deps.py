"""What routes receive: the process's services, a database session, and the calling API key.

`SessionDep` is function-scoped: its transaction commits when the route function returns, before a file
download or an event stream starts, so a long response never holds the database.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated

import redis.asyncio
from celery import Celery
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.errors import Forbidden, NotAuthenticated, TooManyRequests
from api.rate_limit import RateLimiter
from core.api_keys import find_api_key, local_admin_key
from core.db import Database
from core.settings import Settings
from core.storage import DataFolder
from core.worker_presence import WorkerSupervision


@dataclass(frozen=True)
class ApiServices:
    """Created once when the app starts; shared by every request."""

    settings: Settings
    database: Database
    data: DataFolder
    celery: Celery
    redis: redis.asyncio.Redis
    limiter: RateLimiter
    # set once a stop signal came: a request that waits (a speech request) answers 503 before the stop cuts it off
    stopping: threading.Event
    supervisor: WorkerSupervision | None = None  # the worker `voxcast serve` supervises beside this api, if any


@dataclass(frozen=True)
class Caller:
    """The API key a request acts as."""

    key_id: int
    is_admin: bool


def get_services(request: Request) -> ApiServices:
    return request.app.state.services


ServicesDep = Annotated[ApiServices, Depends(get_services)]


def get_base_url(services: ServicesDep, request: Request) -> str:
    """The address clients reach the api at, for absolute URLs (a feed's): `VOXCAST_PUBLIC_URL`, else this request's."""
    return (services.settings.public_url or str(request.base_url)).rstrip("/")


BaseUrl = Annotated[str, Depends(get_base_url)]


def get_session(services: ServicesDep) -> Iterator[Session]:
    with services.database.session() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session, scope="function")]

_bearer = HTTPBearer(auto_error=False, description="an API key from `voxcast keys create`")


async def get_caller(
    services: ServicesDep, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Caller:
    """The key behind the request, once it is known and within its requests per minute (else 401, 429)."""
    caller = await run_in_threadpool(_find_caller, services, credentials)
    wait = await services.limiter.seconds_to_wait(caller.key_id)
    if wait:
        raise TooManyRequests(
            f"this key sent more than {services.limiter.per_minute} requests in a minute "
            f"(VOXCAST_MAX_REQUESTS_PER_MINUTE); retry in {wait} s",
            retry_after_seconds=wait,
        )
    return caller


def _find_caller(services: ApiServices, credentials: HTTPAuthorizationCredentials | None) -> Caller:
    """The key behind the request, looked up in a transaction of its own.

    Not the route's `SessionDep`: routes that open their own transactions would wait on it (SQLite has one
    writer at a time), so it must end before the route runs.
    """
    if not services.settings.single_user and credentials is None:
        raise NotAuthenticated("send an API key as 'Authorization: Bearer <key>' (create one: voxcast keys create)")
    with services.database.session() as session:
        if services.settings.single_user:
            return Caller(key_id=local_admin_key(session).id, is_admin=True)
        assert credentials is not None
        key = find_api_key(session, credentials.credentials)
        if key is None:
            raise NotAuthenticated("unknown or revoked API key")
        return Caller(key_id=key.id, is_admin=key.is_admin)


CurrentKey = Annotated[Caller, Depends(get_caller)]


def require_admin(caller: CurrentKey) -> Caller:
    if not caller.is_admin:
        raise Forbidden("this route needs an admin key (voxcast keys create --admin)")
    return caller


AdminKey = Annotated[Caller, Depends(require_admin)]

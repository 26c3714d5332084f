"""The FastAPI app: `create_app(settings)` wires routers, error handlers and the process's services.

At start the app migrates the database to the newest schema and connects to Redis lazily (a Redis that is
down makes job events fall back to database reads and sends wait for the sweeper; it does not stop the
api). `uvicorn --factory api.app:app_from_env --http api.http_protocol:BoundedHttpToolsProtocol` serves it
with settings from the environment and a bounded request head, as `voxcast serve` does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis.asyncio
from fastapi import APIRouter, FastAPI

from api.body_limits import BodyLimitMiddleware
from api.deps import ApiServices
from api.errors import ERROR_RESPONSES, install_error_handlers
from api.feed_cors import FeedCorsMiddleware
from api.rate_limit import RateLimiter
from api.routes import (
    admin,
    admin_workers,
    feeds,
    health,
    jobs,
    metrics,
    regeneration,
    scripts,
    shows,
    speech,
    usage,
    voices,
)
from core.db import Database, database_url, upgrade_database
from core.logging import configure_logging
from core.settings import Settings
from core.storage import DataFolder
from core.worker_presence import WorkerSupervision
from workers.celery_app import create_celery_app

logger = logging.getLogger(__name__)


def create_app(
    settings: Settings, supervisor: WorkerSupervision | None = None, stopping: threading.Event | None = None
) -> FastAPI:
    """The api; `supervisor` is the worker supervision of `voxcast serve`, reported in `/health` and the admin view;
    `stopping` is set by the server on a stop signal (`cli.serve`), so that requests that wait end in time."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        upgrade_database(database_url(settings), settings.start_wait_seconds)
        data = DataFolder.from_settings(settings)
        data.files.check()  # a store that cannot be reached stops the api at start, saying which and why
        redis_client = redis.asyncio.Redis.from_url(settings.redis_url)
        services = ApiServices(
            settings=settings,
            database=Database.from_settings(settings),
            data=data,
            celery=create_celery_app(settings),
            redis=redis_client,
            limiter=RateLimiter(redis_client, settings.redis_namespace, settings.max_requests_per_minute),
            supervisor=supervisor,
            stopping=stopping or threading.Event(),
        )
        app.state.services = services
        logger.info("api ready", extra={"single_user": settings.single_user})
        try:
            yield
        finally:
            await services.redis.aclose()
            services.database.dispose()

    app = FastAPI(
        title="voxcast",
        summary="Speaker-tagged scripts in, multi-speaker podcasts out.",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.add_middleware(BodyLimitMiddleware, settings=settings)
    app.add_middleware(FeedCorsMiddleware)  # the feed routes only: any origin may read a feed and its files
    install_error_handlers(app)
    routers: tuple[APIRouter, ...] = (
        jobs.router,
        regeneration.router,
        scripts.router,
        speech.router,
        voices.router,
        usage.router,
    )
    routers += (shows.router,)
    routers += (admin.router, admin_workers.router, metrics.router)
    for router in routers:
        app.include_router(router, responses=ERROR_RESPONSES)
    app.include_router(health.router)
    app.include_router(feeds.router, responses={404: ERROR_RESPONSES[404]})  # a token, no key

    return app


def app_from_env() -> FastAPI:
    """The app with settings from `VOXCAST_*` variables, logging configured (for `uvicorn --factory`)."""
    settings = Settings.from_env()
    configure_logging(settings.log_level, settings.log_format)
    return create_app(settings)

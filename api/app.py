"""The FastAPI app: `create_app(settings)` wires routers, error handlers and the process's services.

At start the app migrates the database to the newest schema and connects to Redis lazily (a Redis that is
down makes job events fall back to database reads and sends wait for the sweeper; it does not stop the
api). `uvicorn --factory api.app:app_from_env` serves it with settings from the environment.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis.asyncio
from fastapi import FastAPI

from api.deps import ApiServices
from api.errors import install_error_handlers
from api.routes import admin, admin_workers, jobs, regeneration, speech, voices
from core.db import Database, database_url, upgrade_database
from core.logging import configure_logging
from core.settings import Settings
from core.storage import DataFolder
from workers.celery_app import create_celery_app

logger = logging.getLogger(__name__)

# Room for a script and up to four voice files in one request; each file is held to max_upload_bytes.
_REQUEST_OVERHEAD_BYTES = 2 * 1024 * 1024
_MAX_VOICE_FILES = 4


def create_app(settings: Settings) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        upgrade_database(database_url(settings))
        services = ApiServices(
            settings=settings,
            database=Database.from_settings(settings),
            data=DataFolder(settings.data_dir),
            celery=create_celery_app(settings),
            redis=redis.asyncio.Redis.from_url(settings.redis_url),
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
        max_body_size=_MAX_VOICE_FILES * settings.max_upload_bytes + _REQUEST_OVERHEAD_BYTES,
    )
    install_error_handlers(app)
    routers = (jobs.router, regeneration.router, speech.router, voices.router, admin.router, admin_workers.router)
    for router in routers:
        app.include_router(router)

    @app.get("/healthz", include_in_schema=False)
    def health() -> dict[str, str]:
        return {"status": "ok"}

    return app


def app_from_env() -> FastAPI:
    """The app with settings from `VOXCAST_*` variables, logging configured (for `uvicorn --factory`)."""
    settings = Settings.from_env()
    configure_logging(settings.log_level, settings.log_format)
    return create_app(settings)

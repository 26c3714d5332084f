"""The api's errors and how they reach a client: a status code and a `detail` that says what to change.

Input problems are 422 with FastAPI's shape, `{"detail": [{"loc": [...], "msg": ..., "type": ...}]}`, plus
`field` (the dotted name of what to fix) and, for scripts, `line`. Someone else's job or voice is a 404,
exactly like one that does not exist, so ids cannot be probed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import kombu.exceptions
import redis
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as SQLAlchemyTimeoutError

from api.params import ARTWORK_VERSION_PATTERN, FEED_TOKEN_PATTERN, ID_PATTERN
from api.schemas import PRINTABLE_TEXT, ErrorMessage, ValidationErrors
from core.db import DatabaseUnavailable, is_transient
from core.storage import is_disk_full

logger = logging.getLogger(__name__)

# What a pattern means, for the 422 of a value that does not match it (pydantic would quote the regex).
_PATTERN_RULES = {
    ID_PATTERN: "an id is 32 lowercase hex digits",
    FEED_TOKEN_PATTERN: "a feed token is the 43 URL-safe characters of the show's feed_url",
    ARTWORK_VERSION_PATTERN: "an artwork version is the 16 hex digits of the show's artwork URL",
    PRINTABLE_TEXT: "only printable text is allowed: no control characters (NUL, line breaks, escape codes)",
}


# The error answers every route may give, for the OpenAPI document (a route's own 2xx are in its decorator).
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorMessage, "description": "a body that cannot be parsed (malformed JSON or multipart)"},
    401: {"model": ErrorMessage, "description": "no API key, or an unknown or revoked one"},
    403: {"model": ErrorMessage, "description": "an admin route called with a key that is not an admin's"},
    404: {"model": ErrorMessage, "description": "no such job, voice or file for this key (another key's is a 404 too)"},
    409: {"model": ErrorMessage, "description": "the job is not in a state that allows this"},
    413: {"model": ErrorMessage, "description": "the body or an uploaded file is over its size limit"},
    415: {"model": ErrorMessage, "description": "a body of a media type the route does not take"},
    422: {"model": ValidationErrors, "description": "invalid input, each problem naming its field"},
    429: {"model": ErrorMessage, "description": "too many jobs in flight, or requests in a minute (Retry-After)"},
    503: {"model": ErrorMessage, "description": "the database or Redis does not answer right now (Retry-After)"},
    507: {
        "model": ErrorMessage,
        "description": "the server's disk is full, or the key's storage quota would be passed: nothing was stored",
    },
}


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a request: which field (dotted), what is wrong, and the script line if any."""

    field: str
    message: str
    kind: str = "value_error"
    line: int | None = None

    def as_detail(self) -> dict[str, object]:
        detail: dict[str, object] = {
            "type": self.kind,
            "loc": ["body", *self.field.split(".")],
            "field": self.field,
            "msg": self.message,
        }
        if self.line is not None:
            detail["line"] = self.line
        return detail


class ApiError(Exception):
    """An error with an HTTP status and a message for the client."""

    status_code = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def headers(self) -> dict[str, str] | None:
        """Response headers the status needs (WWW-Authenticate, Retry-After); none by default."""
        return None


class NotFound(ApiError):
    status_code = 404


class Conflict(ApiError):
    status_code = 409


class TooManyJobs(ApiError):
    status_code = 429


class TooManyRequests(ApiError):
    """The key spent its requests per minute; `Retry-After` says when the next one is admitted."""

    status_code = 429

    def __init__(self, message: str, retry_after_seconds: int) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_seconds)}


class ContentTooLarge(ApiError):
    """A request body or an uploaded file over its size limit (RFC 9110's 413 Content Too Large)."""

    status_code = 413


class StorageQuotaExceeded(ApiError):
    """What the request would store takes the key past its storage quota (`VOXCAST_MAX_STORAGE_BYTES`)."""

    status_code = 507


class NotAuthenticated(ApiError):
    status_code = 401

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": "Bearer"}


class Forbidden(ApiError):
    status_code = 403


class ServerStopping(ApiError):
    """The api is stopping (a restart, a deploy) while the request waited: 503, to be sent again once it is back."""

    status_code = 503

    def headers(self) -> dict[str, str] | None:
        return {"Retry-After": str(DEPENDENCY_RETRY_AFTER_SECONDS)}


class InvalidInput(Exception):
    """One or more `Problem`s with what the client sent; answered with 422."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        super().__init__("; ".join(problem.message for problem in problems))
        self.problems = tuple(problems)


# How soon a client may try again while a dependency is away: a restart or a failover takes seconds.
DEPENDENCY_RETRY_AFTER_SECONDS = 5


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(InvalidInput, _invalid_input)
    app.add_exception_handler(RequestValidationError, _request_validation_error)
    app.add_exception_handler(OSError, _storage_error)
    for database_error in (DBAPIError, SQLAlchemyTimeoutError, DatabaseUnavailable):
        app.add_exception_handler(database_error, _database_away)
    for broker_error in (redis.RedisError, kombu.exceptions.OperationalError):
        app.add_exception_handler(broker_error, _broker_away)


def _dependency_away(dependency: str) -> JSONResponse:
    """503 with `Retry-After`, one line naming what is away: the request changed nothing, and may be sent again."""
    detail = (
        f"{dependency} does not answer right now, so nothing was done; try again in a few seconds "
        "(GET /health says what is down)"
    )
    headers = {"Retry-After": str(DEPENDENCY_RETRY_AFTER_SECONDS)}
    return JSONResponse({"detail": detail}, status_code=503, headers=headers)


async def _database_away(_request: Request, error: Exception) -> JSONResponse:
    """The database answered "not now" (`core.db.is_transient`): 503. Any other database error is a fault of ours and
    goes on to the server's 500."""
    if not isinstance(error, DatabaseUnavailable) and not is_transient(error):
        raise error
    logger.warning("the database does not answer; 503", extra={"error": str(getattr(error, "orig", error))[:200]})
    return _dependency_away("the database")


async def _broker_away(_request: Request, error: Exception) -> JSONResponse:
    """Redis (the job queue and the live events) did not answer: 503."""
    logger.warning("Redis does not answer; 503", extra={"error": str(error)[:200]})
    return _dependency_away("the job queue (Redis)")


async def _storage_error(_request: Request, error: Exception) -> JSONResponse:
    """A full disk or spent quota is the server's condition, not a bug: 507, and the client may retry later.

    Any other OS error is a fault of ours and goes on to the server's 500.
    """
    if not is_disk_full(error):
        raise error
    logger.error("disk full while storing a request", extra={"error": str(error)})
    detail = "the server's disk is full, so nothing was stored; try again later (an operator must free space)"
    return JSONResponse({"detail": detail}, status_code=507)


async def _api_error(_request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, ApiError)
    return JSONResponse({"detail": error.message}, status_code=error.status_code, headers=error.headers())


async def _invalid_input(_request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, InvalidInput)
    return JSONResponse({"detail": [problem.as_detail() for problem in error.problems]}, status_code=422)


async def _request_validation_error(_request: Request, error: Exception) -> JSONResponse:
    """FastAPI's own 422, with `field` added so every 422 names what to fix the same way."""
    assert isinstance(error, RequestValidationError)
    details = []
    for item in error.errors():
        location = [str(part) for part in item.get("loc", ())]
        names = location[1:] if location[:1] in (["body"], ["query"], ["path"], ["header"]) else location
        message = item.get("msg")
        if item.get("type") == "string_pattern_mismatch":
            message = _PATTERN_RULES.get(str(item.get("ctx", {}).get("pattern")), message)
        details.append(
            {
                "type": item.get("type"),
                "loc": item.get("loc"),
                "field": ".".join(names),
                "msg": message,
            }
        )
    return JSONResponse({"detail": details}, status_code=422)

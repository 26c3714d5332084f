"""The api's errors and how they reach a client: a status code and a `detail` that says what to change.

Input problems are 422 with FastAPI's shape, `{"detail": [{"loc": [...], "msg": ..., "type": ...}]}`, plus
`field` (the dotted name of what to fix) and, for scripts, `line`. Someone else's job or voice is a 404,
exactly like one that does not exist, so ids cannot be probed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse


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


class NotFound(ApiError):
    status_code = 404


class Conflict(ApiError):
    status_code = 409


class TooManyJobs(ApiError):
    status_code = 429


class NotAuthenticated(ApiError):
    status_code = 401


class Forbidden(ApiError):
    status_code = 403


class InvalidInput(Exception):
    """One or more `Problem`s with what the client sent; answered with 422."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        super().__init__("; ".join(problem.message for problem in problems))
        self.problems = tuple(problems)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(InvalidInput, _invalid_input)
    app.add_exception_handler(RequestValidationError, _request_validation_error)


async def _api_error(_request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, ApiError)
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(error, NotAuthenticated) else None
    return JSONResponse({"detail": error.message}, status_code=error.status_code, headers=headers)


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
        details.append(
            {
                "type": item.get("type"),
                "loc": item.get("loc"),
                "field": ".".join(names),
                "msg": item.get("msg"),
            }
        )
    return JSONResponse({"detail": details}, status_code=422)

"""Request body limits per route, enforced while the body streams in.

Starlette spools a multipart upload to a temporary file before a route sees it, so a limit checked in the
route comes after the whole body was received and stored. This middleware counts the bytes as they
arrive instead: a `Content-Length` over the route's limit is refused before the body is stored, and a body
without one (chunked) is cut off at the limit. Either way the answer is `413` with a sentence naming the
limit and the setting behind it, and the connection is closed.

A client that sends its whole body before it reads (most do, unless they ask for `100-continue`) would see
a reset connection instead of that answer if the server closed while it was still sending. So up to one more
limit's worth of what is still coming is read and dropped before answering (as nginx's lingering close
does); a body larger than twice the limit, or one a client holds back waiting for `100 Continue`, is
answered at once.

Limits: a voice upload, `max_upload_bytes` plus room for the form around it; a show's artwork, 8 MiB and its form;
a job submission, its script
and up to four voice files; a script job, its notes or transcript (as long as a script may be); every other
`/v1` route, 1 MiB of JSON; anything else (the studio, when `voxcast serve` mounts it), as much as a job
submission.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.services.artwork import MAX_ARTWORK_BYTES
from core.byte_sizes import byte_size
from core.settings import Settings
from script_text.parser import MAX_SPEAKERS

MAX_VOICE_FILES_PER_JOB = MAX_SPEAKERS  # one voice per speaker at most
# A multipart envelope: boundaries, part headers, the form's short text fields.
FORM_OVERHEAD_BYTES = 64 * 1024
# The longest script however it is sent: JSON may spell an astral character as two \\uXXXX escapes.
SCRIPT_BYTES_PER_CHAR = 12
SMALL_BODY_BYTES = 1024 * 1024  # the largest other body, a regenerated turn's text, is 20,000 characters


@dataclass(frozen=True)
class BodyLimit:
    """The most bytes a route's body may have, and what to tell a client that sent more."""

    max_bytes: int
    rule: str  # what the limit is made of, naming the settings behind it


def body_limit(settings: Settings, method: str, path: str) -> BodyLimit:
    """The limit of the route at `method` `path`."""
    upload = settings.max_upload_bytes
    job = (
        MAX_VOICE_FILES_PER_JOB * (upload + FORM_OVERHEAD_BYTES)
        + SCRIPT_BYTES_PER_CHAR * settings.max_script_chars
        + FORM_OVERHEAD_BYTES
    )
    if method == "POST" and path.rstrip("/") == "/v1/voices":
        return BodyLimit(
            upload + FORM_OVERHEAD_BYTES,
            f"a voice file may be at most {byte_size(upload)} (VOXCAST_MAX_UPLOAD_BYTES)",
        )
    if method == "POST" and path.rstrip("/") == "/v1/jobs":
        return BodyLimit(
            job,
            f"a job carries a script (VOXCAST_MAX_SCRIPT_CHARS) and up to {MAX_VOICE_FILES_PER_JOB} voice files "
            f"of at most {byte_size(upload)} each (VOXCAST_MAX_UPLOAD_BYTES)",
        )
    if method == "POST" and path.rstrip("/") == "/v1/scripts":
        return BodyLimit(
            SCRIPT_BYTES_PER_CHAR * settings.max_script_chars + FORM_OVERHEAD_BYTES,
            "a script job carries notes or a transcript of at most VOXCAST_MAX_SCRIPT_CHARS characters",
        )
    if method == "PUT" and path.startswith("/v1/shows/") and path.rstrip("/").endswith("/artwork"):
        return BodyLimit(
            MAX_ARTWORK_BYTES + FORM_OVERHEAD_BYTES, f"a show's artwork may be at most {byte_size(MAX_ARTWORK_BYTES)}"
        )
    if path.startswith("/v1/"):
        return BodyLimit(SMALL_BODY_BYTES, "it takes a small JSON body")
    return BodyLimit(job, "as much as a job submission")


class _BodyOverLimit(Exception):
    """Raised into the app from `receive` once the body passed its limit; the middleware answers 413."""


class BodyLimitMiddleware:
    """Counts each request's body against its route's `BodyLimit` and answers 413 past it."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = body_limit(self.settings, scope["method"], scope["path"])
        headers = Headers(scope=scope)
        declared = _content_length(headers)
        if declared is not None and declared > limit.max_bytes:
            if declared <= 2 * limit.max_bytes and headers.get("expect", "").lower() != "100-continue":
                await _drop_body(receive, limit.max_bytes)
            await _refuse(send, limit)
            return
        received = 0
        over = False
        started = False

        async def counted_receive() -> Message:
            nonlocal received, over
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit.max_bytes:
                    over = True
                    raise _BodyOverLimit
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if over:
                return  # the app's own answer to the broken read; the 413 below replaces it
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted_receive, guarded_send)
        except Exception:
            if not over:
                raise
        if over and not started:
            await _drop_body(receive, limit.max_bytes)
            await _refuse(send, limit)


def _content_length(headers: Headers) -> int | None:
    value = headers.get("content-length")
    return int(value) if value is not None and value.isdigit() else None


async def _drop_body(receive: Receive, budget: int) -> None:
    """Read and drop what the client is still sending, up to `budget` bytes, so it gets to read the answer."""
    while budget > 0:
        message = await receive()
        if message["type"] != "http.request":
            return
        budget -= len(message.get("body", b""))
        if not message.get("more_body", False):
            return


async def _refuse(send: Send, limit: BodyLimit) -> None:
    message = f"the request body is larger than the {byte_size(limit.max_bytes)} this route accepts: {limit.rule}"
    body = json.dumps({"detail": message}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),  # the rest of the body is never read, so the connection cannot be reused
    ]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})

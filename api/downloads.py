"""File downloads whose `Range` handling follows RFC 9110 where Starlette's refuses.

Starlette's `FileResponse` serves single and multiple byte ranges and answers 416 when none can be
satisfied, but answers 400 to a `Range` it cannot parse, which RFC 9110 (section 14.2) does not allow for
one unit: "a server MUST ignore a Range header field that contains a range unit it does not understand",
and it may ignore an invalid one. It also answers 416 when only some of several ranges lie past the end.
`RangedFileResponse` hands it a cleaned header instead: an unknown unit, a malformed or inverted range,
or more than MAX_RANGES ranges drop the header (the whole file, 200); ranges past the end are left out
when others remain (206 for the rest); only a set that is all past the end stays, for a 416.

A file kept in an S3 bucket (`core.file_store.S3Files`) is served by `StoreRangeResponse` with the same cleaned
header, streamed from the bucket; `stored_file` picks the response for wherever the file is kept.

A podcast feed and its files are served by `ValidatedResponse`, with HTTP validators and conditional requests as
podcast apps use them, whatever the store: a body built in the api (a feed, an ID3 tag) followed by a stored file.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import formatdate, parsedate_to_datetime
from pathlib import Path

from starlette.datastructures import Headers
from starlette.responses import FileResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from core.file_store import FileStore, LocalFiles

MAX_RANGES = 16
_SPEC = re.compile(r"(\d*)-(\d*)")
_MAX_DIGITS = 18  # beyond any file's size; longer numbers are capped rather than parsed


def usable_range(header: str, size: int) -> str | None:
    """The `Range` value to serve `size` bytes by: None to ignore the header, else a byte-range set."""
    unit, equals, ranges = header.partition("=")
    if not equals or unit.strip().lower() != "bytes":
        return None
    specs = [spec.strip() for spec in ranges.split(",") if spec.strip()]  # empty list elements are allowed
    if not 1 <= len(specs) <= MAX_RANGES:
        return None
    written, satisfiable = [], []
    for spec in specs:
        match = _SPEC.fullmatch(spec)
        if match is None or match[0] == "-":
            return None
        first, last = _number(match[1]), _number(match[2])
        if first is not None and last is not None and last < first:
            return None
        normalised = f"{'' if first is None else first}-{'' if last is None else last}"
        written.append(normalised)
        if (first is not None and first < size) or (first is None and last):
            satisfiable.append(normalised)
    return f"bytes={','.join(satisfiable or written)}"


def _number(digits: str) -> int | None:
    """The value of a range's digits; None when absent, capped past any file size when very long."""
    if not digits:
        return None
    significant = digits.lstrip("0") or "0"
    return int(significant) if len(significant) <= _MAX_DIGITS else 10**_MAX_DIGITS


class RangedFileResponse(FileResponse):
    """A `FileResponse` that serves the `Range` header `usable_range` makes of the client's."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = scope.get("headers", [])
        header = next((value for name, value in headers if name == b"range"), None)
        if header is not None:
            usable = usable_range(header.decode("latin-1"), os.stat(self.path).st_size)
            kept = [(name, value) for name, value in headers if name != b"range"]
            if usable is not None:
                kept.append((b"range", usable.encode("latin-1")))
            scope = {**scope, "headers": kept}
        await super().__call__(scope, receive, send)


class StoreRangeResponse(Response):
    """A file from an object store (`core.file_store.S3Files`), streamed from it with `Range` as RFC 9110 allows.

    One satisfiable range is a `206` of that range, read from the store as it is sent; a set that is all past the
    end is a `416`; no header, or several ranges (which a server may ignore), is the whole file (`200`), streamed.
    """

    def __init__(self, files: FileStore, path: Path, size: int, media_type: str, filename: str | None) -> None:
        super().__init__(media_type=media_type)
        self.files, self.path, self.size, self.filename = files, path, size, filename

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        header = next((value for name, value in scope.get("headers", []) if name == b"range"), None)
        usable = None if header is None else usable_range(header.decode("latin-1"), self.size)
        spans = [] if usable is None else _spans(usable, self.size)
        headers = {"accept-ranges": "bytes"}
        if self.filename is not None:
            headers["content-disposition"] = f'attachment; filename="{self.filename}"'
        if usable is not None and not spans:
            response: Response = Response(status_code=416, headers={**headers, "content-range": f"bytes */{self.size}"})
        elif len(spans) == 1:
            first, last = spans[0]
            headers |= {"content-range": f"bytes {first}-{last}/{self.size}", "content-length": str(last - first + 1)}
            body = self.files.read_range(self.path, first, last)
            response = StreamingResponse(body, status_code=206, media_type=self.media_type, headers=headers)
        else:
            headers["content-length"] = str(self.size)
            body = self.files.read_range(self.path, 0, self.size - 1) if self.size else iter(())
            response = StreamingResponse(body, media_type=self.media_type, headers=headers)
        await response(scope, receive, send)


def _spans(usable: str, size: int) -> list[tuple[int, int]]:
    """The satisfiable (first, last) byte positions of a range set `usable_range` made."""
    spans = []
    for spec in usable.removeprefix("bytes=").split(","):
        first, _, last = spec.partition("-")
        if not first:  # a suffix: the last N bytes
            if int(last) > 0 and size > 0:
                spans.append((max(0, size - int(last)), size - 1))
        elif int(first) < size:
            spans.append((int(first), min(size - 1, int(last)) if last else size - 1))
    return spans


def stored_file(files: FileStore, path: Path, media_type: str, filename: str | None = None) -> Response:
    """The response that serves a stored file with `Range`: from this machine's folder, or from the object store;
    `FileNotFoundError` when it is in neither."""
    if isinstance(files, LocalFiles):
        if not path.is_file():
            raise FileNotFoundError(path)
        return RangedFileResponse(path, media_type=media_type, filename=filename)
    size = files.size(path)
    if size is None:
        raise FileNotFoundError(path)
    return StoreRangeResponse(files, path, size, media_type, filename)


@dataclass(frozen=True)
class Validators:
    """A response's HTTP validators (RFC 9110, section 8.8): a strong `ETag` and `Last-Modified`, and the conditional
    requests they answer: `If-None-Match`/`If-Modified-Since` (a `304`), `If-Range` (a range only while it holds).

    `last_modified` is kept to the microsecond, as the store or the database has it, while an HTTP date has whole
    seconds. A date a client sends is compared with the exact time, so a change later in the same second as a copy
    the client holds is never taken for that copy: `If-Modified-Since: 09:30:15` is a `304` only for a body last
    changed at 09:30:15.000 or earlier. The date sent is the change's second rounded up (the first date that
    covers the change), but never later than the answer's `Date` (RFC 9110, 8.8.2.1), which is the answer's time
    to the second (`sent_at`): within the change's second it is that time, which a later request compares as
    earlier than the change, so that copy is sent again once."""

    etag: str  # quoted: '"…"'
    last_modified: datetime  # aware, exact

    @classmethod
    def of(cls, content_version: bytes, last_modified: datetime) -> Validators:
        """Validators for a body that `content_version` identifies (the body itself, or what it is made of)."""
        return cls(f'"{hashlib.sha256(content_version).hexdigest()[:32]}"', last_modified)

    def sent_last_modified(self, now: datetime) -> datetime:
        """The Last-Modified of an answer whose `Date` is `now` (a whole second): never later than it."""
        return min(_whole_second_up(self.last_modified), now)

    def headers(self, now: datetime) -> dict[str, str]:
        """The `Date`, `ETag` and `Last-Modified` of an answer sent at `now`, to the second (see `sent_at`)."""
        return {
            "date": formatdate(now.timestamp(), usegmt=True),
            "etag": self.etag,
            "last-modified": formatdate(self.sent_last_modified(now).timestamp(), usegmt=True),
        }

    def not_modified(self, request: Headers) -> bool:
        """Whether a GET or HEAD with these headers is answered `304` (RFC 9110, 13.2.2: `If-None-Match` first; only
        without it does `If-Modified-Since` count)."""
        if_none_match = request.get("if-none-match")
        if if_none_match is not None:
            tags = [tag.strip().removeprefix("W/") for tag in if_none_match.split(",")]
            return "*" in tags or self.etag in tags
        since = _http_date(request.get("if-modified-since"))
        return since is not None and self.last_modified <= since

    def range_applies(self, request: Headers, now: datetime) -> bool:
        """Whether a `Range` is served in an answer sent at `now`: without `If-Range`, or with one naming this version:
        its ETag, or a date that exactly matches the Last-Modified this answer sends, when that is strong (RFC 9110,
        13.1.5); otherwise the whole body is sent."""
        if_range = request.get("if-range")
        if if_range is None:
            return True
        if if_range.strip().startswith(('"', "W/")):
            return if_range.strip() == self.etag
        sent = self.sent_last_modified(now)
        # A date is a strong validator only when it is at least a second before the Date (RFC 9110, 8.8.2.2).
        return sent < now and _http_date(if_range) == sent


def sent_at() -> datetime:
    """Now, to the second, as an answer's `Date` says it: an answer that sends validators sends this `Date` too, so
    its Last-Modified is checked against the Date the client reads (a server's own Date can lag the clock by up to a
    second: uvicorn refreshes it once a second, and `api.http_protocol` sends the answer's own instead)."""
    return datetime.now(UTC).replace(microsecond=0)


def _whole_second_up(moment: datetime) -> datetime:
    """`moment` rounded up to a whole second: the earliest HTTP date not before it."""
    whole = moment.replace(microsecond=0)
    return whole if whole == moment else whole + timedelta(seconds=1)


def _http_date(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


@dataclass(frozen=True)
class StoredTail:
    """A stored file from byte `skip` on (`skip` leaves out what a prefix replaces, such as an older ID3 tag)."""

    files: FileStore
    path: Path
    size: int  # the whole file's
    skip: int = 0

    @property
    def length(self) -> int:
        return self.size - self.skip

    def read(self, first: int, last: int) -> Iterator[bytes]:
        """Bytes `first` to `last` (inclusive) of the tail."""
        return self.files.read_range(self.path, self.skip + first, self.skip + last)


class ValidatedResponse(Response):
    """A body made of `head` (bytes built for this response: a feed, an ID3 tag) and then, optionally, a stored file's
    tail, served as podcast apps expect of an enclosure and a feed, from this machine's folder or an object store:
    `ETag` and `Last-Modified` on every answer, `304` to a conditional GET or HEAD that still holds, `HEAD` without
    a body, and one `Range` (`206`; `416` when all of it lies past the end; several ranges, which a server may
    ignore, the whole body) as `usable_range` cleans it."""

    def __init__(
        self,
        head: bytes,
        tail: StoredTail | None,
        media_type: str,
        validators: Validators,
        extra_headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(media_type=media_type)
        self.head, self.tail, self.validators = head, tail, validators
        self.extra_headers = dict(extra_headers or {})
        self.size = len(head) + (tail.length if tail is not None else 0)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Headers(scope=scope)
        now = sent_at()
        headers = {"accept-ranges": "bytes", **self.extra_headers, **self.validators.headers(now)}
        if self.validators.not_modified(request):
            await Response(status_code=304, headers=headers)(scope, receive, send)
            return
        header = request.get("range") if self.validators.range_applies(request, now) else None
        usable = None if header is None else usable_range(header, self.size)
        spans = [] if usable is None else _spans(usable, self.size)
        if usable is not None and not spans:
            headers["content-range"] = f"bytes */{self.size}"
            await Response(status_code=416, headers=headers)(scope, receive, send)
            return
        status, (first, last) = (206, spans[0]) if len(spans) == 1 else (200, (0, self.size - 1))
        if status == 206:
            headers["content-range"] = f"bytes {first}-{last}/{self.size}"
        headers["content-length"] = str(last - first + 1 if self.size else 0)
        body = iter(()) if scope["method"] == "HEAD" or not self.size else self._body(first, last)
        response = StreamingResponse(body, status_code=status, media_type=self.media_type, headers=headers)
        await response(scope, receive, send)

    def _body(self, first: int, last: int) -> Iterator[bytes]:
        """Bytes `first` to `last` (inclusive) of head + tail."""
        head = len(self.head)
        if first < head:
            yield self.head[first : min(last + 1, head)]
        if self.tail is not None and last >= head:
            yield from self.tail.read(max(first, head) - head, last - head)

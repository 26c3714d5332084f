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
"""

from __future__ import annotations

import os
import re
from pathlib import Path

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

"""File downloads whose `Range` handling follows RFC 9110 where Starlette's refuses.

Starlette's `FileResponse` serves single and multiple byte ranges and answers 416 when none can be
satisfied, but answers 400 to a `Range` it cannot parse, which RFC 9110 (section 14.2) does not allow for
one unit: "a server MUST ignore a Range header field that contains a range unit it does not understand",
and it may ignore an invalid one. It also answers 416 when only some of several ranges lie past the end.
`RangedFileResponse` hands it a cleaned header instead: an unknown unit, a malformed or inverted range,
or more than MAX_RANGES ranges drop the header (the whole file, 200); ranges past the end are left out
when others remain (206 for the rest); only a set that is all past the end stays, for a 416.
"""

from __future__ import annotations

import os
import re

from starlette.responses import FileResponse
from starlette.types import Receive, Scope, Send

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

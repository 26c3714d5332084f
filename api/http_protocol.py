"""The HTTP/1.1 protocol the api is served with: uvicorn's httptools protocol, with a bounded request head.

httptools (llhttp) sets no limit on a request's line and headers, and uvicorn keeps what it is sent: a
client could make the api hold a 10 MB header, or 100,000 header lines, before any route runs. This
protocol counts the bytes that arrive while a request's head is incomplete, and the head once parsed,
and answers `431 Request Header Fields Too Large` and closes the connection when the head passes
MAX_HEAD_BYTES or MAX_HEADER_FIELDS. Real clients send a few KiB at most (a bearer key, cookies).

It also lets an answer's own `Date` (or any other header uvicorn adds to every answer) replace uvicorn's: uvicorn
refreshes its `Date` once a second, so it can be up to a second behind the clock, and an answer that sends
`Last-Modified` (`api.downloads.ValidatedResponse`) sends the `Date` it checked it against (RFC 9110 8.8.2.1: never
a Last-Modified later than the Date).

`voxcast serve` runs uvicorn with it; by hand: `uvicorn --factory api.app:app_from_env --http
api.http_protocol:BoundedHttpToolsProtocol`.
"""

from __future__ import annotations

import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

MAX_HEAD_BYTES = 64 * 1024
MAX_HEADER_FIELDS = 100
PROTOCOL_PATH = "api.http_protocol:BoundedHttpToolsProtocol"  # for uvicorn's --http
_REFUSAL = json.dumps(
    {
        "detail": f"the request line and headers may take at most {MAX_HEAD_BYTES // 1024} KiB "
        f"in at most {MAX_HEADER_FIELDS} header fields"
    }
).encode()


class _HeadTooLarge(Exception):
    """Raised from a parser callback; httptools turns it into a parse error that `send_400_response` sees."""


class _ServerHeaders(list[tuple[bytes, bytes]]):
    """The headers uvicorn puts on every answer (`Date`, `Server`), less those the answer sets itself.

    uvicorn's cycle writes `default_headers + the answer's headers`: this list's `+` drops its own of the names the
    answer has, so the answer's `Date` is the only one."""

    def __add__(self, answers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:  # type: ignore[override]
        own = {name.lower() for name, _ in answers}
        return [(name, value) for name, value in self if name not in own] + list(answers)


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, refusing request heads over MAX_HEAD_BYTES or MAX_HEADER_FIELDS with 431."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # the next bytes belong to a request line or headers
        self._head_bytes = 0
        self._head_too_large = False

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)
        if self._in_head and self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
            self._refuse()

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value)
        if len(self.headers) > MAX_HEADER_FIELDS:
            self._head_too_large = True
            raise _HeadTooLarge

    def on_headers_complete(self) -> None:
        self._in_head = False
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > MAX_HEAD_BYTES:
            self._head_too_large = True
            raise _HeadTooLarge
        super().on_headers_complete()
        if self.cycle is not None:
            self.cycle.default_headers = _ServerHeaders(self.cycle.default_headers)

    def on_message_complete(self) -> None:
        self._in_head = True
        self._head_bytes = 0
        super().on_message_complete()

    def send_400_response(self, msg: str) -> None:
        if self._head_too_large:
            self._refuse()
        else:
            super().send_400_response(msg)

    def _refuse(self) -> None:
        """Answer 431 and close: the rest of the head is never read."""
        self._head_too_large = True
        head = [STATUS_LINE[431]]
        for name, value in self.server_state.default_headers:
            head.extend([name, b": ", value, b"\r\n"])
        head.extend(
            [
                b"content-type: application/json\r\n",
                b"content-length: " + str(len(_REFUSAL)).encode("ascii") + b"\r\n",
                b"connection: close\r\n",
                b"\r\n",
                _REFUSAL,
            ]
        )
        self.transport.write(b"".join(head))
        self.transport.close()

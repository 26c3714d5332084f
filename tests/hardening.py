"""What the hostile-input suites share: a PostgreSQL database of their own, the record a refused request must
leave untouched, raw HTTP for what httpx will not send, and hostile audio files built byte by byte."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import struct
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx


@dataclass(frozen=True)
class Footprint:
    """What a request may leave behind: rows per table and every file under the data folder."""

    rows: dict[str, int]
    files: frozenset[str]


def footprint(stack) -> Footprint:  # type: ignore[no-untyped-def]
    from sqlalchemy import func, select

    from core.models import Job, JobSegment, ScriptJob, Voice

    with stack.database().session() as session:
        rows = {
            model.__name__: session.scalar(select(func.count()).select_from(model))
            for model in (Voice, Job, JobSegment, ScriptJob)
        }
    data = Path(stack.env["VOXCAST_DATA_DIR"])
    files = frozenset(
        str(path.relative_to(data))
        for path in data.rglob("*")
        if path.is_file() and not path.name.startswith("voxcast.db")  # SQLite's own files, when it is SQLite
    )
    return Footprint(rows=rows, files=files)


def assert_healthy(stack) -> None:  # type: ignore[no-untyped-def]
    assert stack.api.poll() is None, "the api process died"
    assert httpx.get(f"{stack.base_url}/healthz", timeout=10).status_code == 200


def assert_refused(response: httpx.Response, status: int, *words: str, field: str | None = None) -> str:
    """The response is `status` with a message that holds `words` (and names `field`); returns the message."""
    assert response.status_code == status, (response.status_code, response.text[:500])
    detail = response.json()["detail"]
    text = detail if isinstance(detail, str) else " ".join(problem["msg"] for problem in detail)
    assert text.strip(), "an error must say what is wrong"
    for word in words:
        assert word in text, (word, text[:500])
    if field is not None:
        assert isinstance(detail, list), text
        assert field in [problem["field"] for problem in detail], text
    return text


@contextlib.contextmanager
def leaves_nothing(stack) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """The block's request leaves no row and no file behind, and the api still answers afterwards."""
    before = footprint(stack)
    yield
    assert_healthy(stack)
    assert footprint(stack) == before


# --- raw HTTP -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RawExchange:
    response: bytes  # what the server sent before it closed (or five seconds passed)
    sent: int  # bytes of the streamed part the server let through before it answered

    @property
    def status(self) -> int:
        return int(self.response.split(b" ", 2)[1]) if self.response.startswith(b"HTTP/1.1 ") else 0

    @property
    def body(self) -> dict:
        return json.loads(self.response.partition(b"\r\n\r\n")[2])


def raw_exchange(base_url: str, head: bytes, stream: Iterable[bytes] = (), limit_seconds: float = 20) -> RawExchange:
    """Send `head`, then the `stream` pieces one by one until the server answers; read that answer.

    httpx sends a whole body before it reads, so it cannot show that a server answered mid-upload; this
    stops sending as soon as the server's first byte is readable, and counts how much got through first.
    """
    host, port = base_url.removeprefix("http://").split(":")
    sent = 0
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        deadline = time.monotonic() + limit_seconds
        try:
            connection.sendall(head)
            for piece in stream:
                if select.select([connection], [], [], 0)[0] or time.monotonic() > deadline:
                    break
                connection.sendall(piece)
                sent += len(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed while we were still sending: read what it said
        return RawExchange(response=_read_until_closed(connection), sent=sent)


def _read_until_closed(connection: socket.socket) -> bytes:
    received = b""
    connection.settimeout(5)
    with contextlib.suppress(TimeoutError, ConnectionResetError):
        while chunk := connection.recv(65536):
            received += chunk
    return received


def chunked(pieces: Iterable[bytes]) -> Iterator[bytes]:
    """Pieces framed for `Transfer-Encoding: chunked` (without the final empty chunk: the stream never ends)."""
    for piece in pieces:
        yield b"%x\r\n%s\r\n" % (len(piece), piece)


# --- audio files with hostile headers --------------------------------------------------------------------


def wav_bytes(
    data: bytes,
    *,
    channels: int = 1,
    rate: int = 16_000,
    bits: int = 16,
    data_size: int | None = None,
    float_format: bool = False,
) -> bytes:
    """A WAV file whose header says what the arguments say, whatever `data` really holds."""
    block = min(0xFFFF, channels * bits // 8)
    fmt = struct.pack("<HHIIHH", 3 if float_format else 1, channels, rate, min(rate * block, 0xFFFFFFFF), block, bits)
    size = len(data) if data_size is None else data_size
    riff = min(36 + size, 0xFFFFFFFF)
    return (
        b"RIFF"
        + struct.pack("<I", riff)
        + b"WAVEfmt "
        + struct.pack("<I", 16)
        + fmt
        + b"data"
        + struct.pack("<I", size)
        + data
    )


def flac_without_length(flac: bytes) -> bytes:
    """The FLAC with its STREAMINFO total-samples field zeroed ('unknown'), as a streaming encoder writes it."""
    patched = bytearray(flac)
    field = int.from_bytes(patched[18:26], "big") & ~((1 << 36) - 1)  # STREAMINFO's last 36 bits before the MD5
    patched[18:26] = field.to_bytes(8, "big")
    return bytes(patched)

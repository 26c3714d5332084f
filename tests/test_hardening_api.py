"""The api against hostile clients, every route taken from its own OpenAPI document: missing, invalid, revoked
and other owners' keys, ids of the wrong shape, numbers past the database, oversized request heads and
bodies, malformed bodies, hostile Range headers, the per-key request rate (held across two api processes
through Redis), the per-job limits from settings, and schemathesis generating requests from the schema.

One stack for the module: a uvicorn api, a Celery worker, Redis, PostgreSQL when it answers (else SQLite)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import redis.asyncio
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from sqlalchemy import update

from api.rate_limit import RateLimiter
from core.models import ApiKey
from tests.conftest import ROOT, free_port
from tests.hardening import assert_healthy, assert_refused, chunked, leaves_nothing, raw_exchange
from tests.service_client import upload_voice, wait_for

FAST = {"diffusion_steps": 2, "seed": 5}
SCRIPT_LIMIT = 3000
MINUTES_LIMIT = 1.0
RATE_LIMIT = 30  # requests per minute on the two extra api processes of the rate test


@pytest.fixture(scope="module")
def stack(postgres_or_sqlite_url: str | None, make_service_stack):  # type: ignore[no-untyped-def]
    settings_ = {
        "max_upload_bytes": str(1024 * 1024),
        "max_script_chars": str(SCRIPT_LIMIT),
        "max_job_audio_minutes": str(MINUTES_LIMIT),
        "max_requests_per_minute": "100000",  # schemathesis sends hundreds a minute; the rate test has its own apis
    }
    if postgres_or_sqlite_url is not None:
        settings_["database_url"] = postgres_or_sqlite_url
    return make_service_stack(**settings_).start()


@pytest.fixture(scope="module")
def bob(stack) -> httpx.Client:  # type: ignore[no-untyped-def]
    return stack.client(stack.mint_key("bob"))


@pytest.fixture(scope="module")
def admin_key(stack) -> str:  # type: ignore[no-untyped-def]
    return stack.mint_key("ops", admin=True)


@pytest.fixture(scope="module")
def alice_voice(alice: httpx.Client, voice_wav: Path) -> str:
    return upload_voice(alice, voice_wav, "alice")


@pytest.fixture(scope="module")
def alice_job(alice: httpx.Client, alice_voice: str) -> dict:
    body = {"script": "Alice: Hello there.\nBob: Hi.\n", "voices": {"Alice": alice_voice, "Bob": alice_voice}}
    response = alice.post("/v1/jobs", json={**body, "formats": ["wav"], "settings": FAST})
    assert response.status_code == 202, response.text
    job = wait_for(alice, response.json()["id"], {"done", "failed"})
    assert job["state"] == "done", job["error"]
    return job


@pytest.fixture(scope="module")
def alice_script(alice: httpx.Client) -> str:
    """A script job of alice's (a transcript the parser reads: done at once)."""
    response = alice.post("/v1/scripts", json={"task": "normalise", "transcript": "Alice: Hello.\nBob: Hi.\n"})
    assert response.status_code == 201, response.text
    return response.json()["id"]


@pytest.fixture(scope="module")
def alice_show(alice: httpx.Client) -> str:
    show = {"title": "Alice's", "description": "A show.", "author": "Alice", "language": "en", "category": "Technology"}
    response = alice.post("/v1/shows", json=show)
    assert response.status_code == 201, response.text
    return response.json()["id"]


# A route whose body is required gets a well-formed one (as httpx keywords), so that a refusal is for the id.
WELL_FORMED_BODIES: dict[tuple[str, str], dict] = {
    ("PATCH", "/v1/voices/{id}"): {"json": {"name": "bob's name for it"}},
    ("POST", "/v1/jobs/{id}/takes"): {"json": {"keep": "previous"}},
    ("PATCH", "/v1/shows/{id}"): {"json": {"title": "bob's title for it"}},
    ("PUT", "/v1/jobs/{id}/episode"): {"json": {"show_id": "0" * 32, "title": "bob's episode"}},
    ("PUT", "/v1/shows/{id}/artwork"): {"files": {"file": ("cover.png", b"not an image", "image/png")}},
}


@pytest.fixture(scope="module")
def operations(stack, alice_job: dict, alice_voice: str, alice_script: str, alice_show: str) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """Every keyed (method, path) of the api, from its OpenAPI document, with alice's ids filled in (`/health`,
    for orchestrators, and a show's feed files, for podcast apps that reach them by the feed's token, are the routes
    that need no key)."""
    values = {
        "job_id": alice_job["id"],
        "voice_id": alice_voice,
        "script_id": alice_script,
        "show_id": alice_show,
        "audio_format": "wav",
        "transcript_format": "srt",
        "index": "0",
        "turn": "0",
    }
    schema = httpx.get(f"{stack.base_url}/openapi.json").json()
    found = []
    public = [
        (method, path)
        for path, methods in schema["paths"].items()
        for method, op in methods.items()
        if not op.get("security")
    ]
    assert [(method, path) for method, path in public if not path.startswith("/feeds/")] == [("get", "/health")]
    assert {path for _, path in public if path.startswith("/feeds/")} == set(FEED_PATHS), public
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            if not operation.get("security"):
                continue
            found.append((method.upper(), re.sub(r"\{(\w+)\}", lambda match: values[match[1]], path)))
    assert len(found) >= 20, found
    return found


# --- keys -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        b"Bearer",
        b"Bearer vxc_not-a-key",
        b"Basic dXNlcjpwYXNz",
        b"Bearer " + b"k" * 8000,
        b"Bearer \xff\xfe\xe9x",
    ],
    ids=["missing", "empty", "unknown", "basic auth", "8 kB", "non-ASCII bytes"],
)
def test_every_route_refuses_a_missing_or_invalid_key(
    stack, operations: list[tuple[str, str]], authorization: bytes | None
) -> None:  # type: ignore[no-untyped-def]
    headers = {} if authorization is None else {"Authorization": authorization}
    with leaves_nothing(stack):
        for method, path in operations:
            response = httpx.request(method, stack.base_url + path, headers=headers, timeout=30)
            assert response.status_code == 401, (method, path, response.status_code, response.text[:200])
            assert response.headers["www-authenticate"] == "Bearer"
            assert "API key" in response.json()["detail"]


def test_a_revoked_key_is_refused_everywhere(stack, operations: list[tuple[str, str]]) -> None:  # type: ignore[no-untyped-def]
    key = stack.mint_key("leaver")
    with stack.database().session() as session:
        session.execute(update(ApiKey).where(ApiKey.name == "leaver").values(revoked_at=datetime.now(UTC)))
    client = stack.client(key)
    for method, path in operations:
        assert_refused(client.request(method, path), 401, "unknown or revoked API key")


def test_another_owners_ids_are_404_on_every_route(
    stack,
    operations: list[tuple[str, str]],
    alice: httpx.Client,
    bob: httpx.Client,
    alice_job: dict,
    alice_voice: str,
    alice_script: str,
    alice_show: str,
) -> None:  # type: ignore[no-untyped-def]
    alices = (alice_job["id"], alice_voice, alice_script, alice_show)
    with leaves_nothing(stack):
        for method, path in operations:
            body = WELL_FORMED_BODIES.get((method, re.sub(r"/[0-9a-f]{32}", "/{id}", path)), {})
            response = bob.request(method, path, **body)
            if path.startswith("/v1/admin/"):
                assert_refused(response, 403, "admin key")
            elif any(alices_id in path for alices_id in alices):
                assert_refused(response, 404, "no ")
            else:  # lists and creations: never anything of alice's
                assert response.status_code < 500, (method, path, response.text[:200])
                assert not any(alices_id in response.text for alices_id in alices), (method, path)
        speech = bob.post("/v1/audio/speech", json={"model": "tts-1", "input": "hi", "voice": alice_voice})
        assert_refused(speech, 422, "no voice", field="voice")
        job = bob.post("/v1/jobs", json={"script": "Alice: hi", "voices": {"Alice": alice_voice}})
        assert_refused(job, 422, "no voice", field="voices.Alice")
    assert alice.get(f"/v1/jobs/{alice_job['id']}").json()["state"] == "done"
    assert alice.get(f"/v1/voices/{alice_voice}").status_code == 200


# The routes a podcast app reaches with no key: the show's feed token in the path is what admits it.
FEED_PATHS = (
    "/feeds/{token}.xml",
    "/feeds/{token}.html",  # the show's public page, the feed's channel link
    "/feeds/{token}/artwork/{version}.{extension}",
    "/feeds/{token}/episodes/{job_id}.mp3",
    "/feeds/{token}/episodes/{job_id}.json",
    "/feeds/{token}/episodes/{job_id}.{kind}",
)


@pytest.mark.parametrize(
    ("token", "status"),
    [("A" * 43, 404), ("a" * 42, 422), ("%00" * 43, 422), ("x" * 5000, 422), ("%F0%9F%92%A9" * 11, 422)],
    ids=["unknown", "42 characters", "NUL", "5,000 characters", "emoji"],
)
def test_a_feed_token_that_is_not_a_shows_reaches_nothing(
    stack, alice_job: dict, alice_show: str, token: str, status: int
) -> None:  # type: ignore[no-untyped-def]
    """However a guessed token is written, every feed route answers 404 (a token of the right shape) or 422 (one of
    another shape), with or without a key, and changes nothing."""
    values = {"job_id": alice_job["id"], "version": "0" * 16, "extension": "jpg", "kind": "vtt", "token": token}
    with leaves_nothing(stack):
        for template in FEED_PATHS:
            path = re.sub(r"\{(\w+)\}", lambda match: values[match[1]], template)
            for method in ("GET", "HEAD"):
                response = httpx.request(method, stack.base_url + path, timeout=30)
                assert response.status_code == status, (method, path, response.status_code, response.text[:200])
                if method == "GET" and status == 422:
                    assert_refused(response, 422, "a feed token is the 43 URL-safe characters")


# --- ids and numbers ------------------------------------------------------------------------------------

WRONG_IDS = {
    "short": "abc",
    "uppercase": "A" * 32,
    "31 hex digits": "0" * 31,
    "33 hex digits": "0" * 33,
    "NUL": "%00",
    "SQL": "%27%20OR%201%3D1%20--",
    "5,000 characters": "a" * 5000,
    "emoji": "%F0%9F%92%A9" * 8,
    "dot dot": "..",
}


@pytest.mark.parametrize("wrong", list(WRONG_IDS.values()), ids=list(WRONG_IDS))
def test_ids_of_the_wrong_shape_are_refused_on_every_route(
    stack,
    operations: list[tuple[str, str]],
    admin_key: str,
    alice_job: dict,
    alice_voice: str,
    alice_script: str,
    alice_show: str,
    wrong: str,
) -> None:  # type: ignore[no-untyped-def]
    admin = stack.client(admin_key)  # an admin reaches every route, so only the id can be what is refused
    alices = (alice_job["id"], alice_voice, alice_script, alice_show)
    with leaves_nothing(stack):
        for method, path in operations:
            if not any(alices_id in path for alices_id in alices):
                continue
            hostile = path
            for alices_id in alices:
                hostile = hostile.replace(alices_id, wrong)
            response = admin.request(method, hostile)
            if response.status_code in (404, 405):  # ".." moves the path to a route that does not exist
                assert response.json()["detail"] in ("Not Found", "Method Not Allowed"), (method, hostile)
            else:
                assert_refused(response, 422, "an id is 32 lowercase hex digits")


def test_ids_of_the_right_shape_that_do_not_exist_are_404(alice: httpx.Client) -> None:
    absent = "0123456789abcdef" * 2
    assert_refused(alice.get(f"/v1/jobs/{absent}"), 404, f"no job {absent}")
    assert_refused(alice.get(f"/v1/voices/{absent}/preview.wav"), 404, f"no voice {absent}")


@pytest.mark.parametrize("number", [str(2**31), str(2**64), "9" * 100, "-1", "1e3", "NaN", "0x10"])
def test_numbers_past_what_the_database_holds_are_422(
    stack, alice: httpx.Client, admin_key: str, alice_job: dict, number: str
) -> None:  # type: ignore[no-untyped-def]
    admin = stack.client(admin_key)
    with leaves_nothing(stack):
        for client, path in [
            (alice, f"/v1/jobs/{alice_job['id']}/segments/{number}/audio"),
            (alice, f"/v1/jobs?offset={number}"),
            (admin, f"/v1/admin/jobs?owner_id={number}"),
            (admin, f"/v1/admin/jobs?offset={number}"),
        ]:
            assert_refused(client.get(path), 422, "")
        assert_refused(alice.post(f"/v1/jobs/{alice_job['id']}/turns/{number}/regenerate"), 422, "")


# --- request heads and bodies ---------------------------------------------------------------------------


def _rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status)[1])  # type: ignore[index]


@pytest.mark.parametrize(
    "head",
    [
        b"GET /v1/jobs HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n",
        b"GET /v1/jobs HTTP/1.1\r\nHost: t\r\n" + b"".join(b"X-%d: a\r\n" % n for n in range(101)) + b"\r\n",
        b"GET /v1/jobs?" + b"q" * 70_000 + b" HTTP/1.1\r\nHost: t\r\n\r\n",
    ],
    ids=["a 70 kB header", "101 headers", "a 70 kB URL"],
)
def test_oversized_request_heads_are_431(stack, head: bytes) -> None:  # type: ignore[no-untyped-def]
    exchange = raw_exchange(stack.base_url, head)
    assert exchange.status == 431, exchange.response[:200]
    assert "64 KiB" in exchange.body["detail"] and "100 header fields" in exchange.body["detail"]
    assert_healthy(stack)


def test_an_endless_header_is_cut_off_without_the_api_holding_it(stack) -> None:  # type: ignore[no-untyped-def]
    before = _rss_kib(stack.api.pid)
    piece = b"a" * 65_536
    exchange = raw_exchange(
        stack.base_url, b"GET /v1/jobs HTTP/1.1\r\nHost: t\r\nX-Endless: ", (piece for _ in range(200 * 16))
    )
    assert exchange.sent < 40 * 1024 * 1024  # of 200 MiB offered: the api stopped reading after 64 KiB
    assert exchange.status in (431, 0)  # 0: the reset beat the answer to a client that was still sending
    assert _rss_kib(stack.api.pid) - before < 20 * 1024
    assert_healthy(stack)


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("/v1/admin/jobs/{job}/priority", "larger than the 1 MiB this route accepts: it takes a small JSON body"),
        ("/v1/jobs", "a job carries a script (VOXCAST_MAX_SCRIPT_CHARS) and up to 4 voice files"),
    ],
    ids=["a small JSON route", "a job"],
)
@pytest.mark.parametrize("framing", ["declared", "chunked"])
def test_bodies_over_a_routes_limit_are_413_before_they_are_read(
    stack, admin_key: str, alice_job: dict, path: str, words: str, framing: str
) -> None:  # type: ignore[no-untyped-def]
    length = b"Content-Length: 100000000" if framing == "declared" else b"Transfer-Encoding: chunked"
    head = (
        b"POST " + path.format(job=alice_job["id"]).encode() + b" HTTP/1.1\r\nHost: t\r\n"
        b"Authorization: Bearer "
        + admin_key.encode()
        + b"\r\nContent-Type: application/json\r\n"
        + length
        + b"\r\n\r\n"
    )
    piece = b"x" * 65_536
    stream = (piece for _ in range(1600)) if framing == "declared" else chunked(piece for _ in range(1600))
    with leaves_nothing(stack):
        exchange = raw_exchange(stack.base_url, head, stream)
    assert exchange.status == 413, exchange.response[:300]
    assert words in exchange.body["detail"]
    assert exchange.sent < 64 * 1024 * 1024  # of 100 MB offered


# (id, method, path template, content type, body, status, words)
MALFORMED = [
    ("job as text/plain", "POST", "/v1/jobs", "text/plain", b"Alice: hi", 415, "application/json or multipart"),
    ("job without a content type", "POST", "/v1/jobs", None, b"Alice: hi", 415, "no content type"),
    ("job multipart without boundary", "POST", "/v1/jobs", "multipart/form-data", b"--x", 400, "Missing boundary"),
    ("job multipart garbage", "POST", "/v1/jobs", "multipart/form-data; boundary=B", b"--B\r\nnonsense", 422, "a job needs a script"),
    ("voice as JSON", "POST", "/v1/voices", "application/json", b'{"name": "x"}', 422, "Field required"),
    ("speech not JSON", "POST", "/v1/audio/speech", "application/json", b"{model:", 422, "JSON decode error"),
    ("speech nested 100,000 deep", "POST", "/v1/audio/speech", "application/json", b"[" * 100_000, 400, "parsing the body"),
    ("speech input of 4,097 characters", "POST", "/v1/audio/speech", "application/json",
     b'{"model": "m", "voice": "v", "input": "' + b"a" * 4097 + b'"}', 422, "at most 4096 characters"),
    ("speech speed 2", "POST", "/v1/audio/speech", "application/json",
     b'{"model": "m", "voice": "v", "input": "hi", "speed": 2}', 422, "only 1.0 is supported"),
    ("speech format aac", "POST", "/v1/audio/speech", "application/json",
     b'{"model": "m", "voice": "v", "input": "hi", "response_format": "aac"}', 422, "'mp3', 'opus', 'flac', 'wav' or 'pcm'"),
    ("regenerate a list", "POST", "/v1/jobs/{job}/turns/0/regenerate", "application/json", b"[]", 422, "object"),
    ("regenerate text with a line break", "POST", "/v1/jobs/{job}/turns/0/regenerate", "application/json",
     b'{"text": "one\\nBob: two"}', 422, "one line"),
    ("regenerate a turn that does not exist", "POST", "/v1/jobs/{job}/turns/99/regenerate", "application/json",
     b"{}", 404, "has no turn 99"),
    ("priority a string", "POST", "/v1/admin/jobs/{job}/priority", "application/json", b'{"priority": "high"}', 422, "valid integer"),
    ("priority 1e400", "POST", "/v1/admin/jobs/{job}/priority", "application/json", b'{"priority": 1e400}', 422, ""),
]  # fmt: skip


@pytest.mark.parametrize(
    ("method", "path", "content_type", "body", "status", "words"),
    [case[1:] for case in MALFORMED],
    ids=[case[0] for case in MALFORMED],
)
def test_malformed_bodies_are_4xx_with_a_reason(
    stack,
    admin_key: str,
    alice_job: dict,
    method: str,
    path: str,
    content_type: str | None,
    body: bytes,
    status: int,
    words: str,
) -> None:  # type: ignore[no-untyped-def]
    client = stack.client(admin_key)
    headers = {} if content_type is None else {"content-type": content_type}
    with leaves_nothing(stack):
        response = client.request(method, path.format(job=alice_job["id"]), content=body, headers=headers)
        assert_refused(response, status, words)


# --- Range ----------------------------------------------------------------------------------------------


def _range_cases(size: int) -> list[tuple[str, int, str | None]]:
    """(Range header, status, Content-Range) as RFC 9110 has them; None: no Content-Range (whole or multipart)."""
    return [
        ("bytes=0-0", 206, f"bytes 0-0/{size}"),
        ("bytes=-10", 206, f"bytes {size - 10}-{size - 1}/{size}"),
        (f"bytes={size - 5}-", 206, f"bytes {size - 5}-{size - 1}/{size}"),
        ("bytes=0-" + "9" * 40, 206, f"bytes 0-{size - 1}/{size}"),
        ("bytes=0-9,20-29", 206, None),  # multipart/byteranges
        (f"bytes=0-9,{size + 100}-", 206, f"bytes 0-9/{size}"),  # the unsatisfiable range is left out
        ("bytes=0-1,,2-3", 206, f"bytes 0-3/{size}"),  # an empty list element is allowed
        (f"bytes={size}-", 416, f"bytes */{size}"),
        (f"bytes={size + 100}-{size + 200}", 416, f"bytes */{size}"),
        ("bytes=-0", 416, f"bytes */{size}"),
        ("bytes=10-5", 200, None),  # inverted: invalid, ignored
        ("items=0-5", 200, None),  # an unknown unit MUST be ignored
        ("garbage", 200, None),
        ("bytes=", 200, None),
        ("bytes=a-b", 200, None),
        ("bytes=-", 200, None),
        ("bytes=0 - 5", 200, None),
        ("bytes=" + ",".join(f"{n}-{n}" for n in range(0, 40, 2)), 200, None),  # 20 ranges: more than 16, ignored
        ("bytes=0-" + "9" * 5000, 206, f"bytes 0-{size - 1}/{size}"),  # longer than Python parses: capped
    ]


def test_hostile_range_headers_get_what_rfc_9110_says(stack, alice: httpx.Client, alice_job: dict) -> None:  # type: ignore[no-untyped-def]
    url = alice_job["outputs"]["audio"]["wav"]
    whole = alice.get(url).content
    size = len(whole)
    for value, status, content_range in _range_cases(size):
        response = alice.get(url, headers={"Range": value})
        assert response.status_code == status, (value, response.status_code, response.text[:200])
        assert response.headers.get("content-range") == content_range, value
        if status == 200:
            assert response.content == whole, value
        if content_range and status == 206:
            first, last = map(int, content_range.split()[1].split("/")[0].split("-"))
            assert response.content == whole[first : last + 1], value
    preview = alice.get(
        f"/v1/voices/{alice.get('/v1/voices').json()['voices'][0]['id']}/preview.wav", headers={"Range": "x"}
    )
    assert preview.status_code == 200
    assert_healthy(stack)


# --- limits from settings -------------------------------------------------------------------------------


def test_script_length_and_audio_minutes_are_held_to_the_settings(
    stack, alice: httpx.Client, alice_voice: str, alice_job: dict
) -> None:  # type: ignore[no-untyped-def]
    voices = {"Alice": alice_voice}
    with leaves_nothing(stack):
        long_script = alice.post("/v1/jobs", json={"script": "Alice: " + "a " * 1500, "voices": voices})
        assert_refused(long_script, 422, "3,007 characters", "at most 3,000 (VOXCAST_MAX_SCRIPT_CHARS)", field="script")
        seventy_seconds = "Alice: " + "Words and more words. " * 45  # ~1,000 characters: ~71 s at 14 a second
        too_long = alice.post("/v1/jobs", json={"script": seventy_seconds, "voices": voices})
        assert_refused(too_long, 422, "about 1.2 minutes", "at most 1 minutes per job (VOXCAST_MAX_JOB_AUDIO_MINUTES)")
        regenerated = alice.post(f"/v1/jobs/{alice_job['id']}/turns/0/regenerate", json={"text": "Long words. " * 80})
        assert_refused(regenerated, 422, "VOXCAST_MAX_JOB_AUDIO_MINUTES", field="text")
    fifty_seconds = alice.post("/v1/jobs", json={"script": "Alice: " + "Words and more words. " * 30, "voices": voices})
    assert fifty_seconds.status_code == 202, fifty_seconds.text
    assert alice.delete(f"/v1/jobs/{fifty_seconds.json()['id']}").status_code == 200


@pytest.fixture
def twin_apis(stack) -> Iterator[list[str]]:  # type: ignore[no-untyped-def]
    """Two more api processes on the stack's database and Redis, limited to RATE_LIMIT requests a minute."""
    env = {**stack.env, "VOXCAST_MAX_REQUESTS_PER_MINUTE": str(RATE_LIMIT)}
    ports = [free_port(), free_port()]
    logs = [(stack.root / f"twin-{port}.log").open("ab") for port in ports]
    processes = [
        subprocess.Popen(stack.api_command(port), env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        for port, log in zip(ports, logs, strict=True)
    ]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    try:
        for url in urls:
            deadline = time.monotonic() + 60
            while not _answers(url):
                assert time.monotonic() < deadline, f"api {url} did not start"
                time.sleep(0.2)
        yield urls
    finally:
        for process in processes:
            process.kill()
            process.wait()
        for log in logs:
            log.close()


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_requests_per_minute_are_limited_per_key_across_api_processes(stack, twin_apis: list[str]) -> None:  # type: ignore[no-untyped-def]
    key, other = stack.mint_key("busy"), stack.mint_key("calm")
    with contextlib.ExitStack() as closing:
        first, second = (
            closing.enter_context(httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}))
            for url in twin_apis
        )
        statuses = [(first if n % 2 else second).get("/v1/jobs").status_code for n in range(RATE_LIMIT)]
        assert statuses == [200] * RATE_LIMIT  # the whole minute's allowance at once, split over two processes
        refused = first.get("/v1/jobs")
        assert_refused(refused, 429, f"more than {RATE_LIMIT} requests in a minute", "VOXCAST_MAX_REQUESTS_PER_MINUTE")
        retry_after = int(refused.headers["retry-after"])
        assert 1 <= retry_after <= 60 // RATE_LIMIT
        assert second.get("/v1/jobs").status_code == 429  # the other process knows
        calm = httpx.get(f"{twin_apis[1]}/v1/jobs", headers={"Authorization": f"Bearer {other}"})
        assert calm.status_code == 200  # per key
        assert httpx.get(f"{twin_apis[0]}/healthz").status_code == 200  # health is not a keyed route
        time.sleep(retry_after)
        assert second.get("/v1/jobs").status_code == 200


def test_the_rate_limiter_admits_at_once_when_redis_does_not_answer(service_redis_url: str) -> None:
    async def waits(limiter: RateLimiter, count: int) -> tuple[list[int], float]:
        started = time.monotonic()
        return [await limiter.seconds_to_wait(7) for _ in range(count)], time.monotonic() - started

    async def run() -> tuple[list[int], list[int], float]:
        live = redis.asyncio.Redis.from_url(service_redis_url)
        dead = redis.asyncio.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=0.2)
        namespace = f"voxcast-test-rate-{os.getpid()}-{time.monotonic_ns()}"
        try:
            limited, _ = await waits(RateLimiter(live, namespace, 3), 5)
            unlimited, seconds = await waits(RateLimiter(dead, namespace, 3), 20)
            return limited, unlimited, seconds
        finally:
            await live.delete(f"{namespace}:rate:7")
            await live.aclose()
            await dead.aclose()

    limited, unlimited, seconds = asyncio.run(run())
    assert limited[:3] == [0, 0, 0] and all(19 <= wait <= 20 for wait in limited[3:])  # one every 20 s after the burst
    assert unlimited == [0] * 20
    assert seconds < 1.5  # one half-second try, then no more asking for a while


# --- schemathesis ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["valid", "invalid"])
def test_schemathesis_finds_no_server_error_and_no_undocumented_answer(
    stack, admin_key: str, alice_job: dict, mode: GenerationMode
) -> None:  # type: ignore[no-untyped-def]
    schema = schemathesis.openapi.from_url(f"{stack.base_url}/openapi.json")
    headers = {"Authorization": f"Bearer {admin_key}"}
    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
    statuses: dict[int, int] = {}
    tried = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        if mode is GenerationMode.NEGATIVE and operation.path == "/health":
            continue  # no parameter, body or key: nothing to send it wrong

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=15,
            deadline=None,
            database=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        def exercise(case) -> None:  # type: ignore[no-untyped-def]
            response = case.call_and_validate(headers=headers, checks=checks, timeout=30)
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1

        exercise()
        tried += 1
    assert tried >= 20
    assert not [status for status in statuses if status >= 500], statuses
    assert sum(statuses.values()) >= 3 * tried, statuses
    assert_healthy(stack)

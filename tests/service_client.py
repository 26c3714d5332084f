"""Talking to a running service from tests: upload a voice, submit and wait for a job, read its events and rows."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

from core.models import JobSegment
from core.settings import Settings

# Four turns and a pause, generated turn by turn: a job of several segments, for kill-and-resume tests.
FOUR_TURNS = "".join(
    f"{'Alice' if turn % 2 == 0 else 'Bob'}: Turn {turn} of the show, with a sentence or two to say.\n"
    + ("[pause: 0.5s]\n" if turn == 1 else "")
    for turn in range(4)
)
FOUR_TURNS_PAUSE_SECONDS = 0.5
FOUR_TURNS_SETTINGS = {"diffusion_steps": 2, "seed": 11}


def in_process_settings(data_dir: Path, redis_url: str, **overrides: Any) -> Settings:
    """Settings for an api (and worker services) run in the test's own process: a single-user install on the real
    Redis, under a namespace of its own so that tests running side by side never read each other's queues."""
    namespace = f"voxcast-test-{uuid.uuid4().hex[:8]}"
    return Settings(data_dir=data_dir, redis_url=redis_url, redis_namespace=namespace, single_user=True, **overrides)


def upload_voice(client: httpx.Client, path: Path, name: str) -> str:
    with path.open("rb") as handle:
        response = client.post("/v1/voices", data={"name": name}, files={"file": (path.name, handle, "audio/wav")})
    assert response.status_code == 201, response.text
    return response.json()["id"]


def wait_for(client: httpx.Client, job_id: str, states: set[str], timeout: float = 90) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["state"] in states:
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} never reached {states}; last: {job}")


def read_events(client: httpx.Client, job_id: str) -> list[tuple[str, dict]]:
    return read_event_stream(client, f"/v1/jobs/{job_id}/events")


def read_event_stream(client: httpx.Client, path: str) -> list[tuple[str, dict]]:
    """Every server-sent event at `path` (name, data) until the stream closes."""
    events = []
    with client.stream("GET", path, timeout=120) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        name = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((name, json.loads(line.removeprefix("data: "))))
    return events


def submit_four_turns(client: httpx.Client, voice: str, **options: object) -> str:
    """Submit `FOUR_TURNS` (both speakers on `voice`, turns mode); returns the job id."""
    body = {
        "script": FOUR_TURNS,
        "voices": {"Alice": voice, "Bob": voice},
        "mode": "turns",
        "settings": FOUR_TURNS_SETTINGS,
        **options,
    }
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 202, response.text
    return response.json()["id"]


def segment_rows(stack, job_id: str) -> list[JobSegment]:  # type: ignore[no-untyped-def]
    """The job's segment rows in order, read from the stack's database."""
    with stack.database().session() as session:
        return list(session.scalars(select(JobSegment).where(JobSegment.job_id == job_id).order_by(JobSegment.index)))

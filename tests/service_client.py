"""Talking to a running service from tests: upload a voice, wait for a job, read its server-sent events."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx


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
    events = []
    with client.stream("GET", f"/v1/jobs/{job_id}/events", timeout=120) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        name = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((name, json.loads(line.removeprefix("data: "))))
    return events

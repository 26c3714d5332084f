"""The admin's view of live workers, through the real stack: a uvicorn api and a Celery worker process that
announces its device, model and engine slots in Redis."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

LONG_SCRIPT = "".join(f"Speaker 1: Turn number {turn} goes on for a little while, as turns do.\n" for turn in range(6))


@pytest.fixture(scope="module")
def stack(make_service_stack):  # type: ignore[no-untyped-def]
    return make_service_stack(engine_slots="3").start()


def workers_seen(admin: httpx.Client, until, timeout: float = 30) -> list[dict]:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not until(workers := admin.get("/v1/admin/workers").json()["workers"]):
        assert time.monotonic() < deadline, workers
        time.sleep(0.2)
    return workers


def test_admins_see_each_worker_its_device_slots_and_jobs(stack, voice_wav: Path) -> None:  # type: ignore[no-untyped-def]
    admin = stack.client(stack.mint_key("ops", admin=True))
    (worker,) = workers_seen(admin, lambda workers: len(workers) == 1)
    assert worker["pid"] == stack.workers[0].pid and worker["name"].endswith(f":{worker['pid']}")
    assert (worker["device"], worker["dtype"], worker["slots"]) == ("cpu", "float32", 3)
    assert worker["model"] == stack.settings.worker_model
    assert (worker["slots_in_use"], worker["running_jobs"]) == (0, [])

    with voice_wav.open("rb") as handle:
        voice = admin.post("/v1/voices", data={"name": "v"}, files={"file": ("v.wav", handle, "audio/wav")}).json()
    body = {"script": LONG_SCRIPT, "voices": {"1": voice["id"]}, "mode": "turns", "settings": {"diffusion_steps": 2}}
    job_id = admin.post("/v1/jobs", json=body).json()["id"]
    (busy,) = workers_seen(admin, lambda ws: ws and ws[0]["running_jobs"] == [job_id] and ws[0]["slots_in_use"] == 1)
    assert busy["seen_at"] > worker["seen_at"] and busy["started_at"] == worker["started_at"]
    assert admin.delete(f"/v1/jobs/{job_id}").status_code == 200

    assert stack.client(stack.mint_key("user")).get("/v1/admin/workers").status_code == 403

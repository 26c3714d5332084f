"""A worker runs many jobs at once through its one engine, through the real stack: a uvicorn api and a Celery worker
process that announces its device, model and engine slots in Redis.

- the admin's view of a worker: device, model, slots, and the jobs it runs;
- ten turns-mode jobs run side by side: the engine has ten or more slots in use at once, and one-line speech
  requests sent together meanwhile are claimed at once and finish while the ten still run (the priority-9 speech
  leads every step it is in);
- a job's segments are stored as each finishes, while its others still generate;
- a cancelled job cancels every segment it has in the engine.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from core.engine_defaults import default_slots
from tests.service_client import read_events, segment_rows, upload_voice, wait_for

FAST = {"diffusion_steps": 2, "seed": 3}
JOBS = 10
LONG_SCRIPT = "".join(f"Speaker 1: Turn number {turn} goes on for a little while, as turns do.\n" for turn in range(6))
SPEECH_REQUESTS = 3  # sent together while the ten jobs run
FINAL = {"done", "failed", "cancelled"}


@pytest.fixture(scope="module")
def stack(make_service_stack):  # type: ignore[no-untyped-def]
    return make_service_stack(max_jobs_in_flight=str(2 * JOBS)).start()


@pytest.fixture(scope="module")
def admin(stack) -> httpx.Client:  # type: ignore[no-untyped-def]
    return stack.client(stack.mint_key("ops", admin=True))


@pytest.fixture(scope="module")
def voice(admin: httpx.Client, voice_wav: Path) -> str:
    return upload_voice(admin, voice_wav, "v")


def workers_seen(admin: httpx.Client, until, timeout: float = 60) -> list[dict]:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not until(workers := admin.get("/v1/admin/workers").json()["workers"]):
        assert time.monotonic() < deadline, workers
        time.sleep(0.1)
    return workers


def submit_turns(client: httpx.Client, voice: str, script: str = LONG_SCRIPT, **options: object) -> str:
    body = {"script": script, "voices": {"1": voice}, "mode": "turns", "settings": FAST, **options}
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 202, response.text
    return response.json()["id"]


def speech(client: httpx.Client, voice: str) -> str:
    """Send a one-line `POST /v1/audio/speech` and read its whole body; its job's id."""
    body = {"model": "tts-1", "voice": voice, "input": "Hello there.", "response_format": "wav", "settings": FAST}
    response = client.post("/v1/audio/speech", json=body)
    assert response.status_code == 200, response.text
    return response.headers["x-voxcast-job"]


def test_admins_see_each_worker_its_device_slots_and_jobs(stack, admin: httpx.Client, voice: str) -> None:  # type: ignore[no-untyped-def]
    (worker,) = workers_seen(admin, lambda workers: len(workers) == 1)
    assert worker["pid"] == stack.workers[0].pid and worker["name"].endswith(f":{worker['pid']}")
    slots = stack.settings.engine_slots or default_slots("cpu")
    assert (worker["device"], worker["dtype"], worker["slots"]) == ("cpu", "float32", slots)
    assert worker["model"] == stack.settings.worker_model
    assert (worker["slots_in_use"], worker["running_jobs"]) == (0, [])

    job_id = submit_turns(admin, voice)
    (busy,) = workers_seen(admin, lambda ws: ws[0]["running_jobs"] == [job_id] and ws[0]["slots_in_use"] == 6)
    assert busy["seen_at"] > worker["seen_at"] and busy["started_at"] == worker["started_at"]
    assert admin.delete(f"/v1/jobs/{job_id}").status_code == 200
    assert wait_for(admin, job_id, FINAL)["state"] == "cancelled"
    # every one of its six segments left the engine with the cancel, not just the one a frame was checked for
    workers_seen(admin, lambda ws: ws[0]["slots_in_use"] == 0 and ws[0]["waiting"] == 0, timeout=10)
    assert stack.client(stack.mint_key("user")).get("/v1/admin/workers").status_code == 403


def test_ten_jobs_share_the_engine_and_speech_runs_beside_them(stack, admin: httpx.Client, voice: str) -> None:  # type: ignore[no-untyped-def]

    job_ids = [submit_turns(admin, voice, settings={**FAST, "seed": n}) for n in range(JOBS)]
    (busy,) = workers_seen(admin, lambda ws: ws and len(ws[0]["running_jobs"]) == JOBS and ws[0]["slots_in_use"] >= 10)
    assert busy["waiting"] > 0  # six segments a job: more than the engine's rows, so the rest wait their turn
    # Together, as listeners arrive: sent one after another, three speeches' frames at the CPU's cost of a crowded
    # step took as long as the ten jobs had left (a clean run's third finished 0.7 s after the first job).
    with ThreadPoolExecutor(SPEECH_REQUESTS) as pool:
        speech_ids = list(pool.map(lambda _: speech(admin, voice), range(SPEECH_REQUESTS)))
    jobs = [wait_for(admin, job_id, FINAL, timeout=300) for job_id in job_ids]
    assert [job["state"] for job in jobs] == ["done"] * JOBS
    # A speech job never waits for a task thread behind long jobs: each was claimed, and ran to its end, while the
    # ten jobs were all still running (how much it slowed down beside them is `bench/service.py`'s figure).
    first_job_done = min(datetime.fromisoformat(job["finished_at"]) for job in jobs)
    for speech_id in speech_ids:
        job = admin.get(f"/v1/jobs/{speech_id}").json()
        assert datetime.fromisoformat(job["finished_at"]) < first_job_done, (job, first_job_done)


def test_a_segment_is_stored_as_soon_as_it_finishes_while_the_others_generate(stack, admin, voice) -> None:  # type: ignore[no-untyped-def]
    # one short turn and two long ones, all generating at once: the short one is stored long before the others
    script = (
        "Speaker 1: Short.\n"
        "Speaker 1: This turn is a good deal longer, so that it keeps generating for a while after the first.\n"
        "Speaker 1: And so is this one, which also says a lot more than the first turn of the script did.\n"
    )
    job_id = submit_turns(admin, voice, script)
    events: list[tuple[str, dict]] = []
    reader = threading.Thread(target=lambda: events.extend(read_events(admin, job_id)), daemon=True)
    reader.start()
    reader.join(180)
    assert not reader.is_alive()
    assert events[-1][1]["state"] == "done", events[-1]
    names = [name for name, _ in events]
    first_stored = names.index("segment")
    assert events[first_stored][1]["index"] == 0
    # after segment 0 was stored, the two others still sent audio: they were generating beside it
    later_audio = {data["segment"] for name, data in events[first_stored:] if name == "audio"}
    assert later_audio == {1, 2}, later_audio
    rows = segment_rows(stack, job_id)  # all three started before the first was stored, which was stored first
    assert max(row.started_at for row in rows) < rows[0].finished_at < min(row.finished_at for row in rows[1:])

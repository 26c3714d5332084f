"""Durability: a worker killed with SIGKILL mid-job, and a Redis that restarts empty, lose no job.

These run against a redis-server of their own (started here, on a free port, without persistence), so
restarting it cannot disturb anyone else's Redis.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import redis
import soundfile as sf
from sqlalchemy import select

from core.models import Job, JobSegment
from tests.conftest import free_port
from tests.service_client import upload_voice, wait_for
from workers.sweeper import job_ids_in_broker

SCRIPT = "".join(
    f"{'Alice' if turn % 2 == 0 else 'Bob'}: Turn {turn} of the show, with a sentence or two to say.\n"
    + ("[pause: 0.5s]\n" if turn == 1 else "")
    for turn in range(4)
)
SETTINGS = {"diffusion_steps": 2, "seed": 11}


class RedisServer:
    """A throwaway redis-server; `restart()` brings it back empty, as a Redis without persistence does."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(command, cwd=self.folder, stdout=subprocess.DEVNULL)
        client = redis.Redis.from_url(self.url)
        for _ in range(100):
            try:
                client.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture(scope="module")
def own_redis(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed; the recovery tests start one of their own")
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def stack(make_service_stack, own_redis: RedisServer):  # type: ignore[no-untyped-def]
    stack = make_service_stack(redis_url=own_redis.url)
    stack.start_api()
    return stack


def segment_rows(stack, job_id: str) -> list[JobSegment]:  # type: ignore[no-untyped-def]
    with stack.database().session() as session:
        return list(session.scalars(select(JobSegment).where(JobSegment.job_id == job_id).order_by(JobSegment.index)))


def submit(client, voice: str) -> str:  # type: ignore[no-untyped-def]
    body = {"script": SCRIPT, "voices": {"Alice": voice, "Bob": voice}, "mode": "turns", "settings": SETTINGS}
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 202, response.text
    return response.json()["id"]


def test_a_worker_killed_mid_job_resumes_without_regenerating_stored_segments(stack, voice_wav: Path) -> None:  # type: ignore[no-untyped-def]
    worker = stack.start_worker()
    client = stack.client(stack.mint_key("recovery"))
    voice = upload_voice(client, voice_wav, "voice")
    job_id = submit(client, voice)

    deadline = time.monotonic() + 90
    partial = stack.root / "data" / "jobs" / job_id / "segments" / "0001.partial.npy"
    while True:
        rows = segment_rows(stack, job_id)
        if len(rows) == 4 and rows[0].state == "done" and partial.is_file():
            break  # the second segment is under way and has stored its first frames
        assert time.monotonic() < deadline, "the job never got into its second segment"
        time.sleep(0.02)
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait()
    before = segment_rows(stack, job_id)
    stored = [row for row in before if row.state == "done"]
    assert 1 <= len(stored) < 4, "the kill came too late to test a resume"
    mtimes = {row.index: stack.root.joinpath("data", row.audio_path).stat().st_mtime_ns for row in stored}
    with stack.database().session() as session:
        assert session.get_one(Job, job_id).state == "running"  # the dead worker could not say otherwise

    stack.start_worker()
    job = wait_for(client, job_id, {"done", "failed"}, timeout=120)
    assert job["state"] == "done", job["error"]

    after = {row.index: row for row in segment_rows(stack, job_id)}
    for row in stored:  # stored before the kill: neither generated again nor rewritten
        assert after[row.index].attempts == 1
        assert after[row.index].finished_at == row.finished_at
        assert stack.root.joinpath("data", row.audio_path).stat().st_mtime_ns == mtimes[row.index]
    resumed = len(stored)
    assert after[resumed].attempts == 2  # the segment cut short by the kill
    # ... picked up from its stored frames, not from zero; its partial latents are gone once it is done
    assert after[resumed].resumed_from_frame >= 8
    assert not list((stack.root / "data" / "jobs" / job_id / "segments").glob("*.partial.npy"))
    with stack.database().session() as session:
        assert session.get_one(Job, job_id).attempts == 2

    # The planned length, with nothing missing or repeated at the resume point: the episode is exactly the
    # stored segments and the pause, and sample for sample what an uninterrupted run of the same job gives.
    episode, rate = sf.read(stack.root / "data" / "jobs" / job_id / "outputs" / "episode.wav")
    assert len(episode) == sum(round(row.seconds * rate) for row in after.values()) + round(0.5 * rate)
    reference_id = submit(client, voice)
    reference_job = wait_for(client, reference_id, {"done", "failed"}, timeout=120)
    assert reference_job["state"] == "done", reference_job["error"]
    reference, _ = sf.read(stack.root / "data" / "jobs" / reference_id / "outputs" / "episode.wav")
    assert len(reference) == len(episode)
    np.testing.assert_allclose(episode, reference, atol=1e-3)


def test_jobs_queued_when_redis_restarts_empty_are_not_lost(stack, own_redis: RedisServer, voice_wav: Path) -> None:  # type: ignore[no-untyped-def]
    for worker in stack.workers:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    client = stack.client(stack.mint_key("redis-restart"))
    voice = upload_voice(client, voice_wav, "voice")
    job_ids = [submit(client, voice) for _ in range(2)]
    broker = redis.Redis.from_url(own_redis.url)
    assert set(job_ids) <= job_ids_in_broker(broker, stack.namespace)

    own_redis.restart()
    assert not set(job_ids) & job_ids_in_broker(broker, stack.namespace)  # the messages are gone

    stack.start_worker()
    for job_id in job_ids:
        job = wait_for(client, job_id, {"done", "failed"}, timeout=120)
        assert job["state"] == "done", job["error"]

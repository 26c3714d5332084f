"""A job's whole path in this process, in seconds: the api takes it (an in-process client on a real SQLite database
and the real Redis), and `workers.job_execution.execute_job` runs it on a real engine over the tiny checkpoint,
through `WorkerServices` built by the test: claim → plan → generate → store → assemble, a cancel mid-job, a planned
stop handed back with its frames, the resume from them, and one turn regenerated.

The subprocess tests keep what needs a process boundary (kills, stops of serve, the supervisor, the browser).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from core import job_repository
from core.db import Database
from core.job_events import EventPublisher
from core.job_states import JobState
from core.models import Job, JobSegment
from core.settings import Settings
from core.storage import DataFolder
from models.loading import LoadedModel, load_model
from pipeline.engine.engine import Engine, EngineConfig
from pipeline.engine.factory import engine_for_model
from tests.service_client import FOUR_TURNS_SETTINGS, in_process_settings, upload_voice
from tests.waiting import wait_until
from workers.cancel_watch import CancelWatch
from workers.job_execution import execute_job
from workers.job_stops import HandedBack
from workers.worker_services import WorkerServices

# Three short turns in turns mode: three segments, a few seconds of generation in all.
SCRIPT = "Alice: Hello and welcome.\nBob: Thanks, glad to be here.\nAlice: Let us begin.\n"


@pytest.fixture(scope="module")
def tiny(tiny_hf_checkpoint: Path) -> LoadedModel:
    return load_model(str(tiny_hf_checkpoint), device="cpu")


@pytest.fixture(scope="module")
def engine(tiny: LoadedModel) -> Iterator[Engine]:
    engine = engine_for_model(tiny, EngineConfig(slots=4, prefill_chunk=64, policy="online"))
    engine.start()
    yield engine
    engine.stop()


class JobPath:
    """The api in process and a worker's services around the test's engine, sharing one database and folder."""

    def __init__(self, settings: Settings, engine: Engine, api: TestClient) -> None:
        self.settings, self.engine, self.api = settings, engine, api
        self.database = Database.from_settings(settings)
        self.services = self.worker()

    def worker(self, **overrides: object) -> WorkerServices:
        """A worker's services (a new one: after a planned stop, the next attempt is another worker's), its settings
        with `overrides`."""
        return WorkerServices(
            settings=self.settings.model_copy(update=overrides),
            database=self.database,
            data=DataFolder.from_settings(self.settings),
            events=EventPublisher.from_url(self.settings.redis_url, self.settings.redis_namespace),
            cancels=CancelWatch(self.database),
            engine_source=lambda: self.engine,
        )

    def submit(self, **options: object) -> str:
        voice = upload_voice(self.api, self.settings.data_dir.parent / "voice.wav", "Host")
        body = {"script": SCRIPT, "voices": {"Alice": voice, "Bob": voice}, "mode": "turns", "formats": ["wav"]}
        answer = self.api.post("/v1/jobs", json=body | {"settings": FOUR_TURNS_SETTINGS} | options)
        assert answer.status_code == 202, answer.text
        return str(answer.json()["id"])

    def view(self, job_id: str) -> dict:
        return self.api.get(f"/v1/jobs/{job_id}").json()

    def segments(self, job_id: str) -> list[JobSegment]:
        with self.database.session() as session:
            query = select(JobSegment).where(JobSegment.job_id == job_id).order_by(JobSegment.index)
            return list(session.scalars(query))

    def job(self, job_id: str) -> Job:
        with self.database.session() as session:
            return session.get_one(Job, job_id)


@pytest.fixture
def path(tmp_path: Path, engine: Engine, service_redis_url: str, voice_wav: Path) -> Iterator[JobPath]:
    (tmp_path / "voice.wav").write_bytes(voice_wav.read_bytes())
    settings = in_process_settings(tmp_path / "data", service_redis_url, heartbeat_seconds=0.2)
    with TestClient(create_app(settings)) as api:
        job_path = JobPath(settings, engine, api)
        yield job_path
        job_path.database.dispose()


def test_a_job_goes_from_claim_to_its_episode(path: JobPath) -> None:
    job_id = path.submit()
    execute_job(path.services, job_id)
    view = path.view(job_id)
    assert view["state"] == "done", view
    assert (view["attempts"], view["worker_deaths"], view["handbacks"]) == (1, 0, 0)
    assert [segment.state for segment in path.segments(job_id)] == ["done"] * 3
    episode = path.api.get(view["outputs"]["audio"]["wav"])
    assert episode.status_code == 200 and episode.content[:4] == b"RIFF"
    assert path.api.get(view["outputs"]["srt"]).text.count("-->") == 3


def _run_in_thread(services: WorkerServices, job_id: str) -> tuple[threading.Thread, list[BaseException]]:
    raised: list[BaseException] = []

    def run() -> None:
        try:
            execute_job(services, job_id)
        except BaseException as error:  # what the task would see; the test asserts on it
            raised.append(error)

    thread = threading.Thread(target=run, name=f"job-{job_id}")
    thread.start()
    return thread, raised


def _generating(path: JobPath, job_id: str) -> bool:
    """The job has made frames of a segment it has not stored yet."""
    return path.job(job_id).state == JobState.RUNNING and any(
        path.services.data.job(job_id).segment_partial_frames(segment.index).exists() or segment.state == "done"
        for segment in path.segments(job_id)
    )


def test_a_cancel_mid_job_ends_it_cancelled_with_its_files_counted(path: JobPath) -> None:
    job_id = path.submit()
    thread, raised = _run_in_thread(path.services, job_id)
    wait_until(lambda: path.job(job_id).frames_done > 0 or _generating(path, job_id), "the job generating")
    assert path.api.delete(f"/v1/jobs/{job_id}").status_code == 200
    thread.join(60)
    assert not thread.is_alive() and raised == []
    job = path.job(job_id)
    assert job.state == JobState.CANCELLED and job.worker is None
    assert job.storage_bytes == path.services.data.files.tree_bytes(path.services.data.job(job_id).root)


def test_a_planned_stop_hands_the_job_back_with_its_frames_and_the_next_attempt_resumes_them(path: JobPath) -> None:
    job_id = path.submit()
    thread, raised = _run_in_thread(path.services, job_id)
    wait_until(lambda: _generating(path, job_id), "the job generating")
    path.services.hand_back_jobs()  # a planned stop: SIGTERM's path in the worker
    thread.join(60)
    assert not thread.is_alive() and [type(error) for error in raised] == [HandedBack]
    job = path.job(job_id)
    assert (job.state, job.handbacks, job.worker_deaths) == (JobState.QUEUED, 1, 0)
    kept = [segment for segment in path.segments(job_id) if segment.state != "done"]
    frames = path.services.data.job(job_id)
    assert any(frames.segment_partial_frames(segment.index).exists() for segment in kept), (
        "no frames kept for the resume"
    )

    execute_job(path.worker(), job_id)  # the next attempt, by another worker
    view = path.view(job_id)
    assert view["state"] == "done" and view["attempts"] == 2
    assert any(segment.resumed_from_frame > 0 for segment in path.segments(job_id))


def test_a_worker_taken_for_dead_that_ends_its_job_unchecked_takes_back_the_death(path: JobPath) -> None:
    """A paused worker (SIGSTOP, a frozen host) is taken for dead by another host's sweeper, which charges the job a
    death; it wakes in the job's last steps, so no stop check sees the lease lost (its heartbeat has not beaten since):
    its end cannot be written, and that is how it learns it lived through the silence. The death is taken back, the
    job's end is the next holder's (chaos run, seed 1: a regeneration's last segment)."""
    job_id = path.submit()
    silent = path.worker(heartbeat_seconds=30.0)  # no beat within the run: only its end finds the lease gone
    thread, raised = _run_in_thread(silent, job_id)
    wait_until(lambda: _generating(path, job_id), "the job generating")
    holder = path.job(job_id).worker
    assert holder is not None
    (taken,) = job_repository.release_abandoned_jobs(
        path.database, max_worker_deaths=3, dead_process=holder.rsplit(":", 1)[0]
    )  # what a sweeper does to a holder it cannot see alive
    assert (taken.id, taken.worker_deaths) == (job_id, 1)
    thread.join(60)
    assert not thread.is_alive() and raised == []
    job = path.job(job_id)
    assert (job.state, job.worker_deaths, job.handbacks, job.death_charged_to) == (JobState.QUEUED, 0, 1, None)

    execute_job(path.worker(), job_id)  # the sweeper's message, run by another worker
    view = path.view(job_id)
    assert (view["state"], view["worker_deaths"]) == ("done", 0)


def test_a_job_cancelled_while_its_silent_holder_still_wrote_counts_what_that_holder_left(path: JobPath) -> None:
    """Taken back from a paused worker, the job is cancelled at once as queued, its folder counted then; the paused
    worker wakes and writes on (its segments, its live audio) until its end finds the job gone. What it changed
    after the count is counted again as it lets go, its scratch removed (chaos run, seed 1: a cancelled job recorded
    450 KiB of live audio its waking holder then removed)."""
    job_id = path.submit()
    silent = path.worker(heartbeat_seconds=30.0)
    thread, raised = _run_in_thread(silent, job_id)
    wait_until(lambda: _generating(path, job_id), "the job generating")
    holder = path.job(job_id).worker
    assert holder is not None
    job_repository.release_abandoned_jobs(path.database, max_worker_deaths=3, dead_process=holder.rsplit(":", 1)[0])
    answer = path.api.delete(f"/v1/jobs/{job_id}")
    assert answer.status_code == 200 and answer.json()["state"] == "cancelled", answer.text
    thread.join(60)
    assert not thread.is_alive() and raised == []
    job, folder = path.job(job_id), path.services.data.job(job_id)
    assert job.state == JobState.CANCELLED and list(folder.live_audio()) == []
    assert job.storage_bytes == path.services.data.files.tree_bytes(folder.root)


def test_one_regenerated_turn_is_the_only_segment_generated_again(path: JobPath) -> None:
    job_id = path.submit()
    execute_job(path.services, job_id)
    before = {segment.index: (segment.seed, segment.finished_at) for segment in path.segments(job_id)}
    answer = path.api.post(f"/v1/jobs/{job_id}/turns/2/regenerate", json={"seed": 4321})
    assert answer.status_code == 202, answer.text
    revision = answer.json()["revision"]
    execute_job(path.services, job_id, revision=revision)
    assert path.view(job_id)["state"] == "done"
    after = {segment.index: (segment.seed, segment.finished_at) for segment in path.segments(job_id)}
    changed = {index for index in before if before[index] != after[index]}
    assert len(changed) == 1 and after[changed.pop()][0] == 4321
    assert path.view(job_id)["previous_take"] is not None  # the earlier take is kept until the listener chooses


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 32 MiB tmpfs for the data folder: a disk this test can fill and free (needs root and `mount`)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("filling a real disk needs root and `mount` (a tmpfs of its own); this run has neither")
    folder = tmp_path / "data"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _fill(folder: Path) -> Path:
    """Write a ballast file until the disk refuses a byte more; the ballast."""
    ballast = folder / "ballast"
    with ballast.open("wb") as handle:
        try:
            while True:
                handle.write(bytes(1 << 16))
                handle.flush()
        except OSError as error:
            assert error.errno == errno.ENOSPC, error
    return ballast


def test_a_full_disk_pauses_the_job_and_freed_space_lets_it_finish_as_an_undisturbed_run(
    small_disk: Path, tmp_path: Path, engine: Engine, service_redis_url: str, voice_wav: Path
) -> None:
    """The data folder's disk fills while the job generates (its frames cannot be written): the job waits, keeps
    its lease, and once space is freed goes on from what it stored, ending done on its first attempt with the
    audio of a run the disk never disturbed (the database is on another disk, as PostgreSQL would be)."""
    (tmp_path / "voice.wav").write_bytes(voice_wav.read_bytes())
    database_url = f"sqlite:///{tmp_path / 'voxcast.db'}"
    settings = in_process_settings(small_disk, service_redis_url, database_url=database_url, heartbeat_seconds=0.2)
    with TestClient(create_app(settings)) as api:
        path = JobPath(settings, engine, api)
        reference, disturbed = path.submit(), path.submit()
        execute_job(path.services, reference)
        ballast = _fill(small_disk)
        thread, raised = _run_in_thread(path.services, disturbed)
        wait_until(
            lambda: path.job(disturbed).state == JobState.RUNNING and path.job(disturbed).waiting is False,
            "the job generating",
        )
        time.sleep(3)  # the job meets the full disk (its first frames' sync) and waits for space
        assert thread.is_alive() and path.job(disturbed).state == JobState.RUNNING
        ballast.unlink()
        thread.join(120)
        assert not thread.is_alive() and raised == []
        view = path.view(disturbed)
        assert (view["state"], view["attempts"], view["worker_deaths"], view["handbacks"]) == ("done", 1, 0, 0), view
        episodes = [
            sf.read(path.services.data.job(job_id).output("episode.wav"))[0] for job_id in (reference, disturbed)
        ]
        assert episodes[0].shape == episodes[1].shape
        assert np.abs(episodes[0] - episodes[1]).max() <= 2**-15  # one 16-bit step (README: a resume's tolerance)
        path.database.dispose()

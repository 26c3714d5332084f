"""Faults, injected for real: each must end in a state a user can see (GET /v1/jobs/{id}) and retry.

- a worker SIGKILLed at several random points of one job, restarted each time: the job ends done, equal
  sample for sample to an uninterrupted run (no gap, no repeat at a resume point);
- Redis killed while jobs run and wait, brought back empty: every job ends done, the api answers meanwhile;
- every PostgreSQL connection of the api and the worker terminated mid-job: later requests succeed, the
  job ends done;
- the data folder's disk full while the episode is written and still full past the job's wait for space: the job
  fails saying so, leaves no cut-short file, and once space is freed an admin retry completes it (a disk freed
  within the wait lets the job go on by itself: `tests/test_job_path.py`);
- a checkpoint that does not load: the worker says so in one line and exits, the job waits queued for a
  worker that can run it;
- out of memory in one request of a batched engine step: that request fails, the others go on.

The service tests run the real api, Celery worker, Redis and database as processes; `own_redis` and the
tmpfs are this module's own, so killing or filling them disturbs nobody else.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import sqlalchemy
import torch

from assembly.episode import Episode, write_episode
from core.models import Job
from core.storage import JobFolder, NoSpaceLeft, write_audio
from models.loading import LoadedModel, load_model
from models.segment_io import GenerationSettings
from pipeline.engine.engine import Engine, EngineConfig
from pipeline.engine.factory import engine_for_model
from pipeline.engine.requests import FINAL_EVENTS, EventKind
from pipeline.engine.runner import ModelRunner, RunnerConfig
from pipeline.engine.step_records import RowOutcome, StepInput
from pipeline.generation import SegmentRequest, submit_segment
from script_text.prompt import SegmentText
from tests.conftest import ROOT, RedisServer, postgres_database
from tests.service_client import (
    segment_rows,
    submit_four_turns,
    upload_voice,
    wait_for,
)
from tests.synthetic_audio import voice_like
from tests.waiting import wait_until
from workers.partial_frames import PartialFrames

KILL_SEED = 20_240_611
KILLS = 3
MID_TRANSACTION_DROPS = 3
FINAL = {"done", "failed", "cancelled"}
SHORT_SCRIPT = "Alice: A short turn, said once, to keep the job quick."


def submit_short(client, voice: str, **options: object) -> str:  # type: ignore[no-untyped-def]
    """A one-segment job (a few seconds to generate here); returns its id."""
    body = {"script": SHORT_SCRIPT, "voices": {"Alice": voice}, "settings": {"diffusion_steps": 2, "seed": 5}}
    response = client.post("/v1/jobs", json={**body, **options})
    assert response.status_code == 202, response.text
    return response.json()["id"]


def job_row(stack, job_id: str) -> Job:  # type: ignore[no-untyped-def]
    with stack.database().session() as session:
        return session.get_one(Job, job_id)


def episode(stack, job_id: str, name: str = "episode.wav") -> np.ndarray:  # type: ignore[no-untyped-def]
    samples, _ = sf.read(stack.root / "data" / "jobs" / job_id / "outputs" / name)
    return samples


def leftovers(folder: Path) -> list[str]:
    """Files a finished attempt must not leave behind: temporaries and the frames of an unfinished segment."""
    return sorted(
        str(path.relative_to(folder)) for path in folder.rglob("*") if path.name.endswith((".tmp", ".partial.frames"))
    )


def kill(process: subprocess.Popen[bytes]) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.wait()


# --- a: a worker killed at random points, many times, in one job ----------------------------------------------

# Four turns of different lengths and a pause. The worker generates them side by side, so the short ones are stored
# while the long ones still run: the kills land both inside segments and after some are stored.
UNEVEN_TURNS = (
    "Alice: Hello, and welcome.\n"
    "Bob: Thanks for having me on the show; it has been quite a week for all of us here.\n"
    "[pause: 0.5s]\n"
    "Alice: Turn two of the show, with a sentence or two to say.\n"
    "Bob: And the last turn is the longest of them all, so it keeps generating well after the first two are stored.\n"
)
UNEVEN_TURNS_PAUSE_SECONDS = 0.5


def submit_uneven_turns(client, voice: str) -> str:  # type: ignore[no-untyped-def]
    body = {"script": UNEVEN_TURNS, "voices": {"Alice": voice, "Bob": voice}, "mode": "turns"}
    response = client.post("/v1/jobs", json={**body, "settings": {"diffusion_steps": 2, "seed": 11}})
    assert response.status_code == 202, response.text
    return response.json()["id"]


def test_a_worker_killed_at_random_points_resumes_to_the_uninterrupted_episode(
    make_service_stack, voice_wav: Path
) -> None:  # type: ignore[no-untyped-def]
    stack = make_service_stack(max_worker_deaths=str(KILLS + 1))  # every kill is a worker death of this job
    stack.start_api()
    worker = stack.start_worker()
    client = stack.client(stack.mint_key("kills"))
    voice = upload_voice(client, voice_wav, "voice")
    reference_id = submit_uneven_turns(client, voice)
    assert wait_for(client, reference_id, FINAL, timeout=120)["state"] == "done"
    total_frames = sum(row.frames for row in segment_rows(stack, reference_id))

    # Kill points in frames of the whole job, drawn once from a fixed seed; each lands on a fresh attempt.
    kill_points = sorted(random.Random(KILL_SEED).sample(range(8, total_frames - 8), KILLS))
    job_id = submit_uneven_turns(client, voice)
    stored_before_kills: dict[int, tuple[object, int, int]] = {}  # index: (finished at, attempts, audio's mtime)
    for attempt, frames in enumerate(kill_points, start=1):

        def reached(attempt: int = attempt, frames: int = frames) -> bool:
            job = job_row(stack, job_id)
            return job.state == "running" and job.attempts == attempt and job.frames_done >= frames

        wait_until(reached, f"attempt {attempt} to pass frame {frames}")
        kill(worker)
        assert job_row(stack, job_id).state == "running"  # the dead worker could not say otherwise
        for row in segment_rows(stack, job_id):
            if row.state == "done":
                mtime = stack.root.joinpath("data", row.audio_path).stat().st_mtime_ns
                stored_before_kills.setdefault(row.index, (row.finished_at, row.attempts, mtime))
        worker = stack.start_worker()

    job = wait_for(client, job_id, FINAL, timeout=120)
    assert job["state"] == "done", job["error"]
    assert job_row(stack, job_id).attempts == KILLS + 1
    rows = segment_rows(stack, job_id)
    for row in rows:  # a segment stored before a kill is neither generated again nor rewritten
        if row.index in stored_before_kills:
            mtime = stack.root.joinpath("data", row.audio_path).stat().st_mtime_ns
            assert (row.finished_at, row.attempts, mtime) == stored_before_kills[row.index]
    assert stored_before_kills, "every kill came before the first segment was stored"
    assert any(row.attempts > 1 for row in rows)  # and at least one was cut short and generated again
    # at least one kill landed mid-segment, and its next attempt picked up from the stored frames
    assert any(row.resumed_from_frame >= 8 for row in rows), [(r.index, r.resumed_from_frame) for r in rows]
    assert leftovers(stack.root / "data" / "jobs" / job_id) == []

    # The planned length, nothing missing or repeated at any resume point: the uninterrupted run, sample for sample.
    killed, reference = episode(stack, job_id), episode(stack, reference_id)
    assert len(killed) == sum(round(row.seconds * 24_000) for row in rows) + round(UNEVEN_TURNS_PAUSE_SECONDS * 24_000)
    assert len(killed) == len(reference)
    np.testing.assert_allclose(killed, reference, atol=1e-3)


# Eight turns and no pause: in `whole` mode one generation, long enough to kill well inside it.
LONG_WHOLE = "".join(
    f"{'Alice' if turn % 2 == 0 else 'Bob'}: Turn {turn} of the show, with a sentence or two to say.\n"
    for turn in range(8)
)


def submit_whole(client, voice: str) -> str:  # type: ignore[no-untyped-def]
    body = {"script": LONG_WHOLE, "voices": {"Alice": voice, "Bob": voice}, "mode": "whole"}
    response = client.post("/v1/jobs", json={**body, "settings": {"diffusion_steps": 2, "seed": 11}})
    assert response.status_code == 202, response.text
    return response.json()["id"]


@pytest.mark.slow
def test_a_whole_mode_generation_killed_half_way_loses_no_stored_frame(make_service_stack, voice_wav: Path) -> None:  # type: ignore[no-untyped-def]
    """The next attempt replays the stored frames, its progress never falls back to 0, the episode is the same."""
    stack = make_service_stack()
    stack.start_api()
    worker = stack.start_worker()
    client = stack.client(stack.mint_key("whole-kill"))
    voice = upload_voice(client, voice_wav, "voice")
    reference_id = submit_whole(client, voice)
    assert wait_for(client, reference_id, FINAL, timeout=180)["state"] == "done"
    (reference_row,) = segment_rows(stack, reference_id)  # whole mode, no pause: one segment

    job_id = submit_whole(client, voice)
    wait_until(lambda: job_row(stack, job_id).frames_done >= reference_row.frames // 2, "the job to pass half way")
    kill(worker)
    stored = PartialFrames(JobFolder(stack.root / "data" / "jobs" / job_id).segment_partial_frames(0)).stored_frames
    assert stored >= 8
    # what the job showed when its worker died: progress is written a few times a second, so it may trail the
    # frames stored by a step or two
    shown_at_death = min(job_row(stack, job_id).frames_done, stored)
    worker = stack.start_worker()
    progress = []  # frames_done seen while the second attempt runs
    while (job := job_row(stack, job_id)).state not in FINAL:
        if job.attempts == 2:
            progress.append(job.frames_done)
        time.sleep(0.02)
    assert job.state == "done", job.error
    (row,) = segment_rows(stack, job_id)
    assert (row.attempts, row.resumed_from_frame, row.frames) == (2, stored, reference_row.frames)
    # the job's progress did not restart from 0: never below what it showed, and on from the stored frames
    assert progress and min(progress) >= shown_at_death and max(progress) >= stored, progress[:10]
    np.testing.assert_allclose(episode(stack, job_id), episode(stack, reference_id), atol=1e-3)


# --- b: Redis killed and restarted empty while jobs run and wait -----------------------------------------------


def test_redis_killed_while_jobs_run_and_wait_loses_none(
    make_service_stack, own_redis: RedisServer, voice_wav: Path
) -> None:  # type: ignore[no-untyped-def]
    stack = make_service_stack(redis_url=own_redis.url)
    stack.start_api()
    stack.start_worker(max_jobs=2)
    client = stack.client(stack.mint_key("redis-kill"))
    voice = upload_voice(client, voice_wav, "voice")
    job_ids = [submit_short(client, voice, formats=["wav"]) for _ in range(3)]

    def running_and_waiting() -> bool:
        states = [job_row(stack, job_id).state for job_id in job_ids]
        return states.count("running") == 2 and states.count("queued") == 1  # two jobs at most: one waits

    wait_until(running_and_waiting, "two jobs running and one queued")
    kill(own_redis.process)
    # Redis is down: the api still answers from the database, and takes a job the sweeper will send later.
    assert client.get("/healthz").status_code == 200
    assert client.get(f"/v1/jobs/{job_ids[0]}").status_code == 200
    job_ids.append(submit_short(client, voice, formats=["wav"]))
    time.sleep(1.0)
    own_redis.start()  # empty: every waiting and unacknowledged message is gone

    for job_id in job_ids:
        job = wait_for(client, job_id, FINAL, timeout=150)
        assert job["state"] == "done", (job_id, job["error"])


# --- c: the database drops every connection mid-job -----------------------------------------------------------


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    yield from postgres_database()


def terminate_connections(database_url: str, *, mid_transaction: int = 0, timeout: float = 20) -> int:
    """Terminate the backends connected to `database_url`'s database, as a restart or failover does.

    Without `mid_transaction`, every one of them, once (most sit idle in their pools). With it, watch for
    backends caught between two statements of a transaction and terminate them until that many were hit:
    the case a pool's pre-ping cannot cover. Returns how many were terminated.
    """
    name = sqlalchemy.make_url(database_url).database
    admin = sqlalchemy.create_engine(database_url.rsplit("/", 1)[0] + "/postgres", isolation_level="AUTOCOMMIT")
    query = sqlalchemy.text(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = :name AND pid <> pg_backend_pid()"
        + (" AND state = 'idle in transaction'" if mid_transaction else "")
    )
    terminated = 0
    deadline = time.monotonic() + timeout
    try:
        with admin.connect() as connection:
            while True:
                terminated += int(connection.execute(query, {"name": name}).scalar_one())
                if terminated >= mid_transaction:
                    return terminated
                if time.monotonic() > deadline:
                    raise AssertionError(f"caught only {terminated} of {mid_transaction} transactions in {timeout} s")
    finally:
        admin.dispose()


def test_database_connections_dropped_mid_job_are_reopened(
    make_service_stack, postgres_url: str, voice_wav: Path
) -> None:  # type: ignore[no-untyped-def]
    stack = make_service_stack(database_url=postgres_url)
    stack.start_api()
    stack.start_worker()
    client = stack.client(stack.mint_key("db-drop"))
    voice = upload_voice(client, voice_wav, "voice")
    job_id = submit_four_turns(client, voice)
    wait_until(lambda: job_row(stack, job_id).frames_done > 0, "the job to start generating")

    for _ in range(3):  # every connection, idle or not: pools reconnect
        assert terminate_connections(postgres_url) >= 2  # at least the api's and the worker's
        response = client.get(f"/v1/jobs/{job_id}")
        assert response.status_code == 200, response.text
        time.sleep(0.3)
    # connections cut inside a transaction: the transaction is rolled back and run again
    assert terminate_connections(postgres_url, mid_transaction=MID_TRANSACTION_DROPS) >= MID_TRANSACTION_DROPS

    job = wait_for(client, job_id, FINAL, timeout=120)
    assert job["state"] == "done", job["error"]
    assert client.get(f"/v1/jobs/{job_id}/audio.wav").status_code == 200
    worker_log = (stack.root / "worker-0.log").read_text(errors="replace")
    assert "database not available; trying again" in worker_log


# --- d: the disk fills up while the episode is written -----------------------------------------------------------


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `where` (root only), unmounted afterwards; a skip where that cannot be."""
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("filling a disk needs a small tmpfs, and mounting one needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace').strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def disk_bytes(folder: Path) -> int:
    """What the files under `folder` take on the disk (whole blocks), as the filesystem counts them."""
    return sum(path.stat().st_blocks * 512 for path in folder.rglob("*") if path.is_file())


# soundfile reports the disk's errors from C callbacks that Python can only print: expected here.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_no_format_leaves_a_cut_short_file_on_a_full_disk(tmp_path: Path) -> None:
    audio = (np.random.default_rng(0).standard_normal(24_000 * 40) * 0.1).astype(np.float32)
    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        for audio_format in ("wav", "flac", "mp3", "ogg", "opus"):
            target = disk / f"episode.{audio_format}"
            # The side files are staged while the audio encodes, so whichever fills the disk first is named.
            first_full = rf"{re.escape(str(disk))}/episode\.({audio_format}|srt|vtt|chapters\.json)\b"
            with pytest.raises(NoSpaceLeft, match=f"no space left on the device to write {first_full}"):
                write_episode(Episode(audio=audio, turns=(), chapters=()), target)
            assert sorted(path.name for path in disk.iterdir()) == []  # not the audio, nor its side files


def test_a_full_disk_is_one_swallowed_error_not_one_for_every_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """soundfile's C callbacks print each exception they swallow: one full disk printed thousands of tracebacks into
    a worker's log (chaos soak). After the first error the file fails quietly; the write still ends `NoSpaceLeft`."""
    swallowed: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", swallowed.append)
    audio = (np.random.default_rng(0).standard_normal(24_000 * 40) * 0.1).astype(np.float32)
    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        with pytest.raises(NoSpaceLeft):
            write_audio(disk / "episode.wav", audio, "PCM_16")
        assert sorted(path.name for path in disk.iterdir()) == []
    assert len(swallowed) <= 1


def test_a_full_disk_fails_the_job_clearly_and_a_retry_completes_it(
    make_service_stack, voice_wav: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    # The data folder on a tmpfs of its own; the database beside it, so a full disk cannot hide the failure. The job
    # waits 2 s for space (300 by default) before it fails.
    stack = make_service_stack(database_url=f"sqlite:///{tmp_path / 'voxcast.db'}", disk_full_wait_seconds="2")
    with small_tmpfs(stack.root / "data", "24m") as data:
        stack.start_api()
        stack.start_worker()
        client = stack.client(stack.mint_key("disk-full"))
        admin = stack.client(stack.mint_key("admin", admin=True))
        voice = upload_voice(client, voice_wav, "voice")
        reference_id = submit_short(client, voice, formats=["wav", "flac"])
        assert wait_for(client, reference_id, FINAL, timeout=120)["state"] == "done"
        reference = data / "jobs" / reference_id
        needed = disk_bytes(reference / "inputs") + disk_bytes(reference / "segments")
        first_output = disk_bytes(reference / "outputs") // 4  # well below the episode's first file
        # Leave room for the job's inputs and segments (and its partial frames), not for its episode.
        free = shutil.disk_usage(data).free
        filler = data / "filler"
        filler.write_bytes(b"\0" * (free - needed - first_output))

        job_id = submit_short(client, voice, formats=["wav", "flac"])
        job = wait_for(client, job_id, FINAL, timeout=120)
        assert job["state"] == "failed"
        assert "no space left on the device to write" in job["error"], job["error"]
        assert "outputs/episode." in job["error"]  # the segments fitted; the episode did not
        worker_log = (stack.root / "worker-0.log").read_text(errors="replace")
        assert "the data folder's disk is full; the job waits for space" in worker_log
        folder = data / "jobs" / job_id
        assert all(row.state == "done" for row in segment_rows(stack, job_id))
        assert leftovers(folder) == []
        assert not (folder / "outputs").exists() or list((folder / "outputs").iterdir()) == []
        assert client.get(f"/v1/jobs/{job_id}/audio.wav").status_code == 409

        # An upload onto the full disk: the server's condition (507), not a 500, and no voice half-made.
        last_bytes = data / "last-bytes"
        last_bytes.write_bytes(b"\0" * shutil.disk_usage(data).free)
        voices_before = client.get("/v1/voices").json()
        files_before = sorted(path.name for path in (data / "voices").iterdir())
        with voice_wav.open("rb") as handle:
            refused = client.post(
                "/v1/voices", data={"name": "late"}, files={"file": ("late.wav", handle, "audio/wav")}
            )
        assert refused.status_code == 507, refused.text
        assert "disk is full" in refused.json()["detail"]
        assert client.get("/v1/voices").json() == voices_before
        assert sorted(path.name for path in (data / "voices").iterdir()) == files_before
        last_bytes.unlink()

        filler.unlink()
        retried = admin.post(f"/v1/admin/jobs/{job_id}/retry")
        assert retried.status_code == 200, retried.text
        job = wait_for(client, job_id, FINAL, timeout=120)
        assert job["state"] == "done", job["error"]
        assert all(row.attempts == 1 for row in segment_rows(stack, job_id))  # the stored segments were kept
        np.testing.assert_allclose(episode(stack, job_id), episode(stack, reference_id), atol=1e-6)
        stack.stop()  # before the tmpfs goes


# --- e: a checkpoint that does not load ------------------------------------------------------------------------


def test_a_checkpoint_that_does_not_load_stops_the_worker_with_one_clear_line(
    make_service_stack, tiny_hf_checkpoint: Path, voice_wav: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from cli.serve import worker_command

    broken = Path(shutil.copytree(tiny_hf_checkpoint, tmp_path / "broken"))
    for weights in broken.glob("*.safetensors"):
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a download cut short
    stack = make_service_stack(worker_model=str(broken))
    stack.start_api()
    client = stack.client(stack.mint_key("broken"))
    voice = upload_voice(client, voice_wav, "voice")
    job_id = submit_short(client, voice, formats=["wav"])

    log_path = stack.root / "broken-worker.log"
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            worker_command(stack.settings, 2), env=stack.env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT
        )
        try:
            code = worker.wait(timeout=90)  # exits by itself: no retry loop, no half-alive worker
        except subprocess.TimeoutExpired:
            kill(worker)
            raise AssertionError(f"the worker kept running on a broken checkpoint; see {log_path}") from None
    assert code != 0
    lines = [line for line in log_path.read_text(errors="replace").splitlines() if "cannot load the model" in line]
    assert len(lines) == 1, log_path.read_text(errors="replace")[-3000:]
    assert str(broken) in lines[0]
    assert job_row(stack, job_id).state == "queued"  # not failed, not lost: it waits for a worker that can run it

    stack.env["VOXCAST_WORKER_MODEL"] = str(tiny_hf_checkpoint)  # the operator fixes the checkpoint
    stack.start_worker()
    assert wait_for(client, job_id, FINAL, timeout=90)["state"] == "done"


# --- f: out of memory in one request of a batched step -----------------------------------------------------------


class OutOfMemoryRunner(ModelRunner):
    """A runner that runs every step for real, then raises CUDA's OutOfMemoryError when `runs_out` says so.

    There is no honest way to run a CPU out of CUDA memory, and no per-request memory limit to trip, so
    the error is raised here; but only after the step has really run: that is the worst case for the
    engine's recovery, since every slot's caches, streams and noise have moved on and the outcomes are lost.
    """

    def runs_out(self, requests: set[int]) -> bool:
        return False

    def run(self, step: StepInput) -> list[RowOutcome]:
        outcomes = super().run(step)
        if self.runs_out({row.request_id for row in [*step.prefill, *step.decode]}):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return outcomes


@pytest.fixture(scope="module")
def tiny(tiny_hf_checkpoint: Path) -> LoadedModel:
    return load_model(str(tiny_hf_checkpoint), device="cpu")


def segment(seed: int) -> SegmentRequest:
    text = SegmentText(((0, "Hello and welcome."), (1, "Thanks, glad to be here.")))
    voices = {0: voice_like(4, 24_000, seed=0), 1: voice_like(5, 24_000, seed=1)}
    return SegmentRequest(text, voices, 16, GenerationSettings(seed=seed, diffusion_steps=2))


def audio_of(events: list) -> np.ndarray:  # type: ignore[type-arg]
    return np.concatenate([event.audio for event in events if event.kind is EventKind.AUDIO])


def run_alone(tiny: LoadedModel, seed: int) -> np.ndarray:
    engine = engine_for_model(tiny, EngineConfig(slots=1, prefill_chunk=64))
    handle = submit_segment(engine, segment(seed))
    engine.run_until_idle()
    return audio_of(handle.drain())


def batch_of_three(tiny: LoadedModel, fail_at_step: int, runs_out) -> tuple[Engine, list[list]]:  # type: ignore[no-untyped-def]
    """Three requests side by side; from step `fail_at_step` on, every step `runs_out` picks runs out of memory."""
    engine = Engine(OutOfMemoryRunner(tiny, RunnerConfig(rows=3)), EngineConfig(slots=3, prefill_chunk=64), tiny)
    handles = [submit_segment(engine, segment(seed)) for seed in (1, 2, 3)]
    for _ in range(fail_at_step):
        engine.step()
    engine.runner.runs_out = lambda requests: runs_out(requests, [handle.request_id for handle in handles])
    engine.run_until_idle()
    return engine, [handle.drain() for handle in handles]


def final_kinds(events: list[list]) -> list[EventKind]:  # type: ignore[type-arg]
    return [[event for event in stream if event.kind in FINAL_EVENTS][-1].kind for stream in events]


@pytest.mark.parametrize("fail_at_step", [2, 9])  # while the prompts prefill, and once frames are flowing
def test_out_of_memory_in_one_request_fails_that_request_only(tiny: LoadedModel, fail_at_step: int) -> None:
    engine, events = batch_of_three(tiny, fail_at_step, lambda requests, ids: ids[1] in requests)

    assert final_kinds(events) == [EventKind.FINISHED, EventKind.FAILED, EventKind.FINISHED]
    assert "generation failed: CUDA out of memory" in events[1][-1].reason
    assert engine.idle and sorted(engine.free_rows) == [0, 1, 2] and engine.pool.in_use == 0
    for stream, seed in ((events[0], 1), (events[2], 3)):  # the others: exactly what they give on their own
        np.testing.assert_allclose(audio_of(stream), run_alone(tiny, seed), atol=1e-4)


def test_a_batch_too_big_for_memory_is_split_and_every_request_finishes(tiny: LoadedModel) -> None:
    engine, events = batch_of_three(tiny, 9, lambda requests, ids: len(requests) > 1)

    assert final_kinds(events) == [EventKind.FINISHED] * 3
    assert engine.budget.max_batch == 1
    for stream, seed in zip(events, (1, 2, 3), strict=True):
        np.testing.assert_allclose(audio_of(stream), run_alone(tiny, seed), atol=1e-4)

"""Nothing one job does can take the service down: `voxcast serve` as a user runs it, with its worker killed.

- a worker killed with SIGKILL is started again while the api answers, and `/health` and the admin view say so;
- SIGTERM and SIGINT stop serve and its worker, exit 0 and leave no process behind;
- serve runs script jobs on a scripts worker of its own, which stops with it;
- a poison job (one that crashes every worker it meets: `tests.engine_faults`, a real SIGSEGV) fails
  after `VOXCAST_MAX_WORKER_DEATHS` attempts, while the jobs beside it finish;
- the crash matrix: jobs of both modes and every format in flight, the worker killed with SIGKILL and SIGSEGV at
  seeded random points; every job ends done and equal to an uninterrupted run, and the api answers throughout;
- a job longer than libvorbis could encode in one write, in every format, finishes.

Everything is real: serve's own processes, Redis, SQLite, the tiny checkpoint.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.serve_process import FINAL, Heartbeats, Serve, episode_files, gone, submit
from tests.service_client import FOUR_TURNS, FOUR_TURNS_SETTINGS, upload_voice

MATRIX_SEED = 20_261_130
POISON = "POISON-PILL"
ENGINE_FAULT = "ENGINE-BREAKER"


@pytest.fixture
def serve(serve_process: Callable[..., Serve], service_redis_url: str) -> Callable[..., Serve]:
    """Start `voxcast serve` on the shared Redis with extra settings (`serve_process` stops it afterwards)."""

    def start(faults: dict[str, str] | None = None, **settings: str) -> Serve:
        return serve_process(service_redis_url, faults, **settings).start()

    return start


def test_a_killed_worker_is_started_again_while_the_api_answers(serve, voice_wav: Path) -> None:  # type: ignore[no-untyped-def]
    running = serve()
    first = running.worker_pid()
    with Heartbeats(running.url) as heartbeats:
        os.kill(first, signal.SIGKILL)
        running.wait_until(lambda: running.health()["supervised_worker"]["restarts"] == 1, "a restart")
        running.wait_until(lambda: running.health()["status"] == "ok", "the new worker to be ready")
    assert heartbeats.asked > 10 and heartbeats.failures == []
    supervised = running.workers()["supervised"]
    assert supervised["pid"] != first and supervised["last_exit"] == "killed by SIGKILL"
    assert supervised["last_exit_status"] == -signal.SIGKILL
    assert [worker["pid"] for worker in running.workers()["workers"]] == [supervised["pid"]]
    assert "the worker died; starting a new one" in running.log.read_text(errors="replace")
    # and the service works on
    job_id = submit(running, upload_voice(running.client, voice_wav, "voice"), mode="turns", formats=["wav"])
    assert running.wait_for_jobs([job_id])[job_id]["state"] == "done"


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_ends_serve_and_its_worker_with_status_0(serve, stop_signal: signal.Signals) -> None:  # type: ignore[no-untyped-def]
    running = serve()
    worker = running.worker_pid()
    running.process.send_signal(stop_signal)
    assert running.process.wait(60) == 0, running.tail()
    deadline = time.monotonic() + 5
    while not gone(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(worker), "the worker outlived serve"
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{running.url}/healthz", timeout=2)


def scripts_worker_pids(running: Serve) -> list[int]:
    """The processes whose command line is this serve's scripts worker (`workers.script_worker` on its namespace)."""
    queue = f"{running.env['VOXCAST_REDIS_NAMESPACE']}.scripts"
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if b"workers.script_worker" in command and queue.encode() in command:
            pids.append(int(entry.name))
    return pids


def test_serve_runs_script_jobs_on_a_scripts_worker_it_stops_with_itself(serve) -> None:  # type: ignore[no-untyped-def]
    running = serve(script_model="tiny-random", script_max_attempts="2")
    body = {"task": "normalise", "transcript": "Alice: Hi.\nBob: Hello.\n", "force_model": True}
    response = running.client.post("/v1/scripts", json=body)
    assert response.status_code == 202, response.text
    script_id = response.json()["id"]
    running.wait_until(
        lambda: running.client.get(f"/v1/scripts/{script_id}").json()["state"] == "failed", "the script job", 120
    )
    assert len(running.client.get(f"/v1/scripts/{script_id}").json()["attempts"]) == 2
    (scripts_worker,) = scripts_worker_pids(running)
    running.process.send_signal(signal.SIGTERM)
    assert running.process.wait(60) == 0, running.tail()
    deadline = time.monotonic() + 5
    while not gone(scripts_worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(scripts_worker), "the scripts worker outlived serve"


def test_a_poison_job_fails_after_the_allowed_worker_deaths_and_the_jobs_beside_it_finish(
    serve, voice_wav: Path
) -> None:  # type: ignore[no-untyped-def]
    running = serve({"FAULT_CRASH_ON_TEXT": POISON}, max_worker_deaths="2")
    voice = upload_voice(running.client, voice_wav, "voice")
    innocent = [submit(running, voice, mode="turns", formats=["wav"]) for _ in range(2)]
    poison_script = f"Alice: This one is a {POISON}, said slowly.\nBob: And this one follows it."
    poison = submit(running, voice, poison_script, mode="turns", formats=["wav"])
    with Heartbeats(running.url) as heartbeats:
        jobs = running.wait_for_jobs([*innocent, poison])
    assert heartbeats.failures == []
    assert jobs[poison]["state"] == "failed"
    assert jobs[poison]["error"].startswith("the worker died 2 times while running this job")
    assert (jobs[poison]["attempts"], jobs[poison]["worker_deaths"]) == (2, 2)
    for job_id in innocent:
        assert jobs[job_id]["state"] == "done", jobs[job_id]
        assert jobs[job_id]["worker_deaths"] <= 1  # beside the poison once at most: then it ran alone
    running.wait_until(lambda: running.health()["supervised_worker"]["restarts"] == 2, "the second restart")
    running.wait_until(lambda: running.health()["status"] == "ok", "the third worker to be ready")
    assert running.workers()["supervised"]["last_exit"] == "killed by SIGSEGV"
    # every job has ended, the poison one by the guard: each counts what its folder holds, not its estimate
    data = running.root / "data"
    held = sum(path.stat().st_size for folder in ("jobs", "voices") for path in (data / folder).rglob("*") if path.is_file())
    assert running.client.get("/v1/usage").json()["bytes"] == held


def test_a_dead_engine_ends_its_worker_which_is_restarted_and_its_jobs_run_again(serve, voice_wav: Path) -> None:  # type: ignore[no-untyped-def]
    """The engine loop itself fails (`tests.engine_faults`: an exception inside its step, as a bug
    in it would raise): the worker exits with status 4 instead of failing its jobs or hanging them, the supervisor
    starts a new one, and the jobs run again; the job that kills the engine every time is failed by the guard."""
    running = serve({"FAULT_ENGINE_ERROR_ON_TEXT": ENGINE_FAULT}, max_worker_deaths="2")
    voice = upload_voice(running.client, voice_wav, "voice")
    innocent = [submit(running, voice, mode="turns", formats=["wav"]) for _ in range(2)]
    faulty = submit(
        running, voice, f"Alice: This one is an {ENGINE_FAULT}.\nBob: And this one follows it.", mode="turns"
    )
    with Heartbeats(running.url) as heartbeats:
        jobs = running.wait_for_jobs([*innocent, faulty])
    assert heartbeats.failures == []
    assert jobs[faulty]["state"] == "failed"
    assert jobs[faulty]["error"].startswith("the worker died 2 times while running this job")  # not the engine's
    for job_id in innocent:
        assert jobs[job_id]["state"] == "done", jobs[job_id]
        assert jobs[job_id]["worker_deaths"] <= 1
    running.wait_until(lambda: running.health()["supervised_worker"]["restarts"] == 2, "the second restart")
    supervised = running.workers()["supervised"]
    assert (supervised["last_exit"], supervised["last_exit_status"]) == ("exit status 4 (its engine died)", 4)
    log = running.log.read_text(errors="replace")
    # Each job thread that meets the dead engine says so before it ends the process; the first to end it usually
    # silences the others, but a busy machine lets a second thread beside it say it too (the clean run of
    # 2026-12-05: three lines for two deaths). The deaths themselves are the two restarts above.
    assert log.count("the engine died; this worker exits so that it is restarted") >= 2
    assert "injected engine fault" in log


# The jobs of the crash matrix: both modes, every format, each on its own seed.
MATRIX_JOBS = [
    {"mode": "whole", "formats": ["wav", "ogg"], "settings": {**FOUR_TURNS_SETTINGS, "seed": 1}},
    {"mode": "turns", "formats": ["wav", "mp3", "opus"], "settings": {**FOUR_TURNS_SETTINGS, "seed": 2}},
    {"mode": "whole", "formats": ["wav", "flac"], "settings": {**FOUR_TURNS_SETTINGS, "seed": 3}},
    {"mode": "turns", "formats": ["wav", "ogg"], "settings": {**FOUR_TURNS_SETTINGS, "seed": 4}},
]


def test_the_crash_matrix_every_job_ends_equal_to_an_uninterrupted_run(serve, voice_wav: Path) -> None:  # type: ignore[no-untyped-def]
    # Enough allowed deaths that no job is failed by the guard: the matrix checks resumption, the poison test the guard.
    running = serve(max_worker_deaths="5")
    voice = upload_voice(running.client, voice_wav, "voice")
    references = [submit(running, voice, **job) for job in MATRIX_JOBS]
    assert all(job["state"] == "done" for job in running.wait_for_jobs(references).values())

    draw = random.Random(MATRIX_SEED)
    kills = [(draw.uniform(1.0, 6.0), sig) for sig in (signal.SIGKILL, signal.SIGSEGV, signal.SIGKILL, signal.SIGSEGV)]
    job_ids = [submit(running, voice, **job) for job in MATRIX_JOBS]
    with Heartbeats(running.url) as heartbeats:
        for number, (after, kill_signal) in enumerate(kills, start=1):
            time.sleep(after)
            if all(running.job(job_id)["state"] in FINAL for job_id in job_ids):
                break
            os.kill(running.worker_pid(), kill_signal)
            running.wait_until(
                lambda number=number: running.health()["supervised_worker"]["restarts"] == number, f"restart {number}"
            )
        jobs = running.wait_for_jobs(job_ids)
    assert heartbeats.failures == []
    assert any(job["worker_deaths"] > 0 for job in jobs.values()), "no kill landed while a job ran"
    for job_id, reference_id, spec in zip(job_ids, references, MATRIX_JOBS, strict=True):
        assert jobs[job_id]["state"] == "done", jobs[job_id]
        killed, reference = (
            episode_files(running, job_id, spec["formats"]),
            episode_files(running, reference_id, spec["formats"]),
        )
        np.testing.assert_allclose(killed["wav"], reference["wav"], atol=1e-3)  # the episode itself
        for audio_format in spec["formats"][1:]:
            # Each file holds it as well as the reference's does (a lossy encoder turns a 1e-3 difference of its
            # input into different choices, so the lossy files themselves are not compared sample by sample).
            assert len(killed[audio_format]) == len(reference[audio_format]), (spec, audio_format)
            fidelity = snr_db(killed[audio_format], killed["wav"])
            assert abs(fidelity - snr_db(reference[audio_format], reference["wav"])) < 3, (spec, audio_format)


def snr_db(signal: np.ndarray, reference: np.ndarray) -> float:
    """How far `signal` is from `reference`, as the reference's power over the difference's, in dB."""
    difference = float(np.mean((signal - reference) ** 2))
    return float("inf") if difference == 0 else 10 * np.log10(float(np.mean(reference**2)) / difference)


@pytest.mark.timeout(1800)
def test_a_four_minute_job_finishes_in_every_format(serve, voice_wav: Path) -> None:  # type: ignore[no-untyped-def]
    """Before the encoder wrote in blocks, an `ogg` episode past about 85 s killed the worker, again and again."""
    running = serve()
    voice = upload_voice(running.client, voice_wav, "voice")
    script = "".join(
        f"{'Alice' if n % 2 == 0 else 'Bob'}: {FOUR_TURNS.splitlines()[0].split(': ')[1]}\n" for n in range(22)
    )  # 22 turns of about 12 s each: the tiny model runs every turn to its frame budget
    formats = ["wav", "flac", "mp3", "ogg", "opus"]
    job_id = submit(running, voice, script, mode="turns", formats=formats)
    job = running.wait_for_jobs([job_id], timeout=600)[job_id]
    assert job["state"] == "done", job
    assert job["audio_seconds"] > 240
    decoded = episode_files(running, job_id, formats)
    assert {audio_format: len(samples) for audio_format, samples in decoded.items()} == dict.fromkeys(
        formats, len(decoded["wav"])
    )

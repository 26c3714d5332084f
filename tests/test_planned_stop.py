"""Routine operations never cost a job: `voxcast serve` stopped and started as a deploy does, with jobs running.

- SIGTERM with 16 jobs running (a `whole` and a `turns` job among them): serve, its workers, their encoders and its
  private Redis are all gone within 10 s (docker's default grace); every job was handed back (queued, no worker
  death), and after three stop/start cycles in a row each ends done, once; four of them (both modes) were also run
  uninterrupted first, and each WAV is within one 16-bit step of that run's, the README's bound for a resumed job;
- a speech worker alone, as compose runs it (`voxcast serve --only worker`): SIGTERM hands its job back with its
  frames stored and it ends within 10 s; the next worker finishes the job;
- SIGKILL to serve: no process of its tree is left 10 s later (the workers watch a lifeline, the Redis a death
  signal), and after a restart the jobs finish, with no death counted;
- serve's private Redis: a job queued through `--only api` survives the stop and runs once serve starts with its
  workers; and serve starts one by itself where no Redis answers at the default address, and runs a job on it.

Everything is real: serve's own processes, Redis, SQLite, the tiny checkpoint. Worker deaths are still charged
(a worker killed alone, a poison job): `tests/test_crash_isolation.py`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import redis
from sqlalchemy import select

from core.db import Database
from core.job_states import JobState
from core.models import Job
from core.settings import Settings
from tests.conftest import ROOT, ServiceStack, free_port
from tests.serve_process import (
    FINAL,
    START_SECONDS,
    Serve,
    command_line,
    descendants,
    episode_files,
    submit,
    wait_until_gone,
)
from tests.service_client import FOUR_TURNS, FOUR_TURNS_SETTINGS, upload_voice, wait_for
from workers.partial_frames import PartialFrames
from workers.sweeper import job_ids_in_broker

GRACE_SECONDS = 10.0  # docker's default: after it, SIGKILL
JOBS_RUNNING = 16  # a worker's default jobs at once
CYCLES = 3
ONE_STEP = 2**-15  # of 16-bit audio: how far a resumed job's WAV may be from an uninterrupted run's (README)
# Eight turns: long enough that the pair is still generating after three restarts on two busy cores.
EIGHT_TURNS = "".join(
    f"{'Alice' if turn % 2 == 0 else 'Bob'}: Turn {turn} of the show, with a sentence or two to say.\n"
    for turn in range(8)
)
PAIR = [
    {"mode": "whole", "formats": ["wav", "mp3"], "settings": {**FOUR_TURNS_SETTINGS, "seed": 1}},
    {"mode": "turns", "formats": ["wav", "ogg"], "settings": {**FOUR_TURNS_SETTINGS, "seed": 2}},
]
# The other 14 jobs running beside the pair (four turns each); the first two are also run uninterrupted, and compared.
OTHERS = [
    {"mode": "turns", "formats": ["wav"], "settings": {**FOUR_TURNS_SETTINGS, "seed": seed}}
    for seed in range(10, 10 + JOBS_RUNNING - len(PAIR))
]
COMPARED_OTHERS = 2
# The longest each stage of the three-cycle test waits, on two busy cores (it takes 3 to 7 minutes in all).
REFERENCES_SECONDS = 300  # the four uninterrupted runs, side by side
RUNNING_SECONDS = 120  # all 16 jobs running
CYCLE_SECONDS = 180  # the pair making frames again after a restart
FINISH_SECONDS = 450  # every job done after the last restart


def database_of(serve: Serve) -> Database:
    return Database.from_settings(Settings.from_env(serve.env))


def rows(serve: Serve, job_ids: list[str]) -> dict[str, Job]:
    """The jobs' rows, read from serve's database (serve may be down)."""
    database = database_of(serve)
    try:
        with database.reading() as session:
            found = session.scalars(select(Job).where(Job.id.in_(job_ids))).all()
            session.expunge_all()
    finally:
        database.dispose()
    return {job.id: job for job in found}


def progress(serve: Serve, job_id: str) -> int:
    job = serve.job(job_id)
    return job["progress"]["frames_done"] if job["state"] == "running" else -1


def stop_and_check_the_tree(serve: Serve, stop_signal: signal.Signals, at_least: int = 4) -> float:
    """Send `stop_signal` and assert that serve and every process under it (`at_least` of them: serve, its two
    workers and its private Redis) are gone within `GRACE_SECONDS`; the seconds it took."""
    assert serve.process is not None
    tree = serve.processes()
    assert len(tree) >= at_least, {pid: command_line(pid) for pid in tree}
    sent = time.monotonic()
    serve.process.send_signal(stop_signal)
    left = wait_until_gone(tree, GRACE_SECONDS)
    took = time.monotonic() - sent
    assert not left, f"still running {GRACE_SECONDS:g} s after {stop_signal.name}: " + "; ".join(
        f"{pid}: {command_line(pid)}" for pid in left
    )
    serve.process.wait()
    return took


def private_redis(serve: Serve) -> redis.Redis:
    """A client of serve's private Redis, from the config serve wrote for it."""
    config = (serve.root / "data" / "broker" / "redis.conf").read_text()
    port = re.search(r"^port (\d+)$", config, re.M)
    password = re.search(r"^requirepass (\S+)$", config, re.M)
    assert port and password, config
    return redis.Redis(host="127.0.0.1", port=int(port[1]), password=password[1])


def assert_within_one_step(stopped: np.ndarray, reference: np.ndarray, job_id: str) -> None:
    """`stopped` (a 16-bit WAV read as floats) is `reference` within one 16-bit step in every sample, and in a few
    samples only (one in 50 at most: float rounding that tips a sample over a step, not a drift or a gain)."""
    assert stopped.shape == reference.shape, (job_id, stopped.shape, reference.shape)
    difference = np.abs(stopped.astype(np.float64) - reference.astype(np.float64))
    differing = int(np.count_nonzero(difference))
    print(f"job {job_id}: {differing} of {difference.size} samples differ, by {difference.max() / ONE_STEP:g} step")
    assert difference.max() <= ONE_STEP, f"job {job_id}: {difference.max() / ONE_STEP:g} steps apart"
    assert differing <= difference.size // 50, f"job {job_id}: {differing} of {difference.size} samples differ"


@pytest.mark.timeout(
    START_SECONDS
    + REFERENCES_SECONDS
    + RUNNING_SECONDS
    + CYCLES * (CYCLE_SECONDS + GRACE_SECONDS + START_SECONDS)
    + FINISH_SECONDS
    + 60  # polls, reads and comparisons
)
def test_sigterm_hands_every_running_job_back_and_three_restarts_end_them_as_an_uninterrupted_run(
    serve_process, voice_wav: Path
) -> None:  # type: ignore[no-untyped-def]
    serve = serve_process(max_jobs_in_flight=str(JOBS_RUNNING))
    serve.start()
    assert "voxcast: broker: a private Redis" in serve.log.read_text(errors="replace")
    voice = upload_voice(serve.client, voice_wav, "voice")
    compared = [(EIGHT_TURNS, job) for job in PAIR] + [(FOUR_TURNS, job) for job in OTHERS[:COMPARED_OTHERS]]
    references = [submit(serve, voice, script, **job) for script, job in compared]
    finished = serve.wait_for_jobs(references, timeout=REFERENCES_SECONDS)
    assert all(job["state"] == "done" for job in finished.values()), finished

    pair = [submit(serve, voice, EIGHT_TURNS, **job) for job in PAIR]
    others = [submit(serve, voice, FOUR_TURNS, **job) for job in OTHERS]
    everything = pair + others
    serve.wait_until(
        lambda: all(serve.job(job_id)["state"] == "running" for job_id in everything),
        f"{JOBS_RUNNING} jobs running",
        RUNNING_SECONDS,
    )
    reached = dict.fromkeys(pair, 0)
    for cycle in range(1, CYCLES + 1):
        # each stop lands mid-generation: both jobs of the pair make frames again after the last restart
        serve.wait_until(
            lambda reached=reached: all(progress(serve, job_id) > reached[job_id] for job_id in pair),
            f"the pair to make frames again in cycle {cycle}",
            CYCLE_SECONDS,
        )
        reached = {job_id: progress(serve, job_id) for job_id in pair}
        took = stop_and_check_the_tree(serve, signal.SIGTERM)
        assert serve.process.returncode == 0, serve.tail()
        log = serve.log.read_text(errors="replace")
        bound = log.count("planned stop ran out of time")  # a worker ended by its own bound (see core.stop_budget)
        print(f"cycle {cycle}: serve and its processes gone {took:.1f} s after SIGTERM; bounds reached so far: {bound}")
        assert log.rindex("job handed back") < log.rindex("Shutting down"), "the api stopped before the workers"
        after = rows(serve, everything)
        assert [job_id for job_id, job in after.items() if job.state == JobState.RUNNING] == []
        for job_id in pair:
            job = after[job_id]
            assert (job.state, job.worker_deaths, job.handbacks, job.worker) == (JobState.QUEUED, 0, cycle, None)
        serve.start()

    jobs = serve.wait_for_jobs(everything, timeout=FINISH_SECONDS)
    for job in jobs.values():
        assert (job["state"], job["worker_deaths"]) == ("done", 0), job
        # every attempt but the last was a hand-back (a short one may have ended before the first stop: loaded, the
        # pair can take that long to make frames again; each stop's check above saw no job left running)
        assert job["attempts"] == job["handbacks"] + 1, job
    assert [jobs[job_id]["handbacks"] for job_id in pair] == [CYCLES, CYCLES]
    for job_id, reference_id, (_, spec) in zip(everything[: len(compared)], references, compared, strict=True):
        stopped, reference = (
            episode_files(serve, job_id, spec["formats"]),
            episode_files(serve, reference_id, spec["formats"]),
        )
        assert_within_one_step(stopped["wav"], reference["wav"], job_id)
        for lossy in spec["formats"][1:]:  # MP3 and Ogg encode those WAVs' audio: compared by length only
            assert len(stopped[lossy]) == len(reference[lossy]), (job_id, lossy)
    # never two runs, never a message too many: no delivery found its job taken, and the broker holds none left
    assert "job not claimed" not in serve.log.read_text(errors="replace")
    assert job_ids_in_broker(private_redis(serve), serve.env["VOXCAST_REDIS_NAMESPACE"]) == set()


def stored_frames(data: Path, job_id: str) -> int:
    """The frames a job has on disk: its stored segments' and those kept for a segment cut short."""
    segments = data / "jobs" / job_id / "segments"
    done = sum(len(np.load(path)) for path in segments.glob("*.latents.npy"))
    return done + sum(PartialFrames(path).stored_frames for path in segments.glob("*.partial.frames"))


@pytest.mark.timeout(3 * START_SECONDS + CYCLE_SECONDS + GRACE_SECONDS + FINISH_SECONDS)
def test_a_worker_alone_as_compose_runs_it_hands_its_job_back_on_sigterm_and_ends_within_the_grace(
    make_service_stack, voice_wav: Path
) -> None:  # type: ignore[no-untyped-def]
    """`voxcast serve --only worker` (one process per container: no serve above it, no lifeline) on the shared Redis:
    SIGTERM while its job generates hands the job back, every frame it made stored, and the process (with anything
    it started) is gone within docker's grace, exit status 0; a new worker finishes the job, with no death counted."""
    stack: ServiceStack = make_service_stack()
    stack.start_api()
    worker = stack.start_worker(as_compose=True)
    client = stack.client(stack.mint_key())
    voice = upload_voice(client, voice_wav, "voice")
    body = {"script": FOUR_TURNS, "voices": {"Alice": voice, "Bob": voice}, **PAIR[0], "formats": ["wav"]}
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]

    def generating() -> int:
        job = client.get(f"/v1/jobs/{job_id}").json()
        assert job["state"] in {"queued", "running"}, job
        return job["progress"]["frames_done"] if job["state"] == "running" else 0

    deadline = time.monotonic() + CYCLE_SECONDS
    while (made := generating()) == 0:
        assert time.monotonic() < deadline, "the job never made a frame"
        time.sleep(0.1)
    tree = {worker.pid} | descendants(worker.pid)
    sent = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    left = wait_until_gone(tree, GRACE_SECONDS)
    assert not left, {pid: command_line(pid) for pid in left}
    took = time.monotonic() - sent
    assert worker.wait() == 0
    with stack.database().reading() as session:
        job = session.get_one(Job, job_id)
        assert (job.state, job.worker_deaths, job.handbacks, job.worker) == (JobState.QUEUED, 0, 1, None)
    stored = stored_frames(stack.root / "data", job_id)
    print(f"the worker gone {took:.1f} s after SIGTERM; {made} frames seen made before it, {stored} stored")
    assert stored >= made  # every frame made before the signal, at least

    stack.start_worker(as_compose=True)
    finished = wait_for(client, job_id, FINAL, timeout=FINISH_SECONDS)
    assert (finished["state"], finished["worker_deaths"], finished["handbacks"], finished["attempts"]) == (
        "done",
        0,
        1,
        2,
    ), finished
    logs = [(stack.root / f"worker-{number}.log").read_text(errors="replace") for number in (0, 1)]
    assert "job handed back" in logs[0] and "job not claimed" not in logs[1]


@pytest.mark.timeout(2 * START_SECONDS + CYCLE_SECONDS + GRACE_SECONDS + FINISH_SECONDS)
def test_sigkill_to_serve_leaves_no_process_behind_and_its_jobs_finish_after_a_restart(
    serve_process, voice_wav: Path
) -> None:  # type: ignore[no-untyped-def]
    serve = serve_process()
    serve.start()
    voice = upload_voice(serve.client, voice_wav, "voice")
    pair = [submit(serve, voice, EIGHT_TURNS, **job) for job in PAIR]
    serve.wait_until(lambda: all(progress(serve, job_id) > 0 for job_id in pair), "the jobs to generate", CYCLE_SECONDS)
    took = stop_and_check_the_tree(serve, signal.SIGKILL)
    print(f"serve's processes gone {took:.1f} s after SIGKILL")
    # the workers handed their jobs back themselves (serve was gone, the database was there)
    assert all(job.state == JobState.QUEUED and job.handbacks == 1 for job in rows(serve, pair).values())

    serve.start()
    jobs = serve.wait_for_jobs(pair, timeout=FINISH_SECONDS)
    for job in jobs.values():
        assert (job["state"], job["worker_deaths"], job["handbacks"]) == ("done", 0, 1), job
    # What the killed workers had taken went back to its queue at the restart ("message(s) the last run's workers had
    # taken went back", when a stopping worker had taken its job's message sent again: a race, which a loaded machine
    # loses). Either way each job ran once more, and no message is left behind.
    assert "job not claimed" not in serve.log.read_text(errors="replace")
    assert job_ids_in_broker(private_redis(serve), serve.env["VOXCAST_REDIS_NAMESPACE"]) == set()


def test_a_job_queued_on_the_private_redis_survives_its_restart_and_runs(serve_process, voice_wav: Path) -> None:  # type: ignore[no-untyped-def]
    """`--only api` with its private Redis takes a job; stopped (both gone), the job's message is in the Redis's
    append-only file; serve started with its workers runs it."""
    serve = serve_process()
    serve.start("--only", "api")
    job_id = submit(serve, upload_voice(serve.client, voice_wav, "voice"), mode="turns", formats=["wav"])
    assert serve.job(job_id)["state"] == "queued"
    stop_and_check_the_tree(serve, signal.SIGTERM, at_least=2)  # serve (the api) and its Redis
    assert serve.process.returncode == 0
    assert rows(serve, [job_id])[job_id].state == JobState.QUEUED

    serve.start()
    assert serve.wait_for_jobs([job_id])[job_id]["state"] == "done"
    lines = [line for line in serve.log.read_text(errors="replace").splitlines() if line.startswith("voxcast: broker:")]
    assert len(lines) == 2 and all("a private Redis" in line and "/data/broker" in line for line in lines), lines


# Run in serve's network namespace (`nsenter`): once the api at argv[1] has a live worker, one short job with the voice
# at argv[2]; prints the job as it ended.
ONE_JOB = """
import json, sys, time
from pathlib import Path
import httpx
from tests.service_client import FOUR_TURNS_SETTINGS, upload_voice, wait_for
with httpx.Client(base_url=sys.argv[1], timeout=30) as client:
    deadline = time.monotonic() + float(sys.argv[3])
    while True:
        try:
            if client.get("/health").json().get("status") == "ok":
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "serve never had a live worker"
        time.sleep(0.2)
    voice = upload_voice(client, Path(sys.argv[2]), "voice")
    body = {"script": "Alice: Hello there.\\n", "voices": {"Alice": voice}, "settings": FOUR_TURNS_SETTINGS}
    response = client.post("/v1/jobs", json={**body, "formats": ["wav"]})
    assert response.status_code == 202, response.text
    print(json.dumps(wait_for(client, response.json()["id"], {"done", "failed", "cancelled"}, timeout=300)))
"""


@pytest.mark.slow  # starts `voxcast serve` itself, in a network namespace of its own
@pytest.mark.skipif(
    shutil.which("unshare") is None or shutil.which("nsenter") is None,
    reason="needs unshare(1) and nsenter(1) to run serve where no Redis answers",
)
@pytest.mark.timeout(2 * START_SECONDS + 300 + GRACE_SECONDS)
def test_serve_starts_a_private_redis_where_none_answers_at_the_default_address(
    tmp_path: Path, tiny_hf_checkpoint: Path, voice_wav: Path
) -> None:
    """In a network namespace of its own (nothing listens on 127.0.0.1:6379 there), with no VOXCAST_REDIS_URL:
    serve starts its own Redis, says so in one line, runs a job through it, and stops it with itself."""
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a network namespace here: {probe.stderr.decode().strip()}")
    environment = {name: value for name, value in os.environ.items() if not name.startswith("VOXCAST_")}
    environment |= {
        "VOXCAST_DATA_DIR": str(tmp_path / "data"),
        "VOXCAST_WORKER_MODEL": str(tiny_hf_checkpoint),
        "VOXCAST_SINGLE_USER": "1",
    }
    log = tmp_path / "serve.log"
    port = free_port()
    command = ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$0" "$@"']
    command += [sys.executable, "-m", "cli.main", "serve", "--port", str(port)]
    with log.open("wb") as output:
        process = subprocess.Popen(command, cwd=ROOT, env=environment, stdout=output, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_SECONDS
        while "voxcast: studio at" not in log.read_text(errors="replace"):
            assert process.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.1)
        (line,) = [line for line in log.read_text().splitlines() if line.startswith("voxcast: broker:")]
        assert line.startswith("voxcast: broker: a private Redis ("), line
        assert f"its data in {tmp_path / 'data' / 'broker'}" in line
        client = [sys.executable, "-c", ONE_JOB, f"http://127.0.0.1:{port}", str(voice_wav), str(START_SECONDS)]
        ran = subprocess.run(
            ["nsenter", "--net=" + f"/proc/{process.pid}/ns/net", "--", *client],
            cwd=ROOT,
            env=environment,
            capture_output=True,
            text=True,
            timeout=START_SECONDS + 300,
        )
        assert ran.returncode == 0, ran.stderr + log.read_text(errors="replace")[-3000:]
        job = json.loads(ran.stdout)
        assert (job["state"], job["attempts"]) == ("done", 1), job
        tree = {process.pid} | descendants(process.pid)
        assert any("redis-server" in command_line(pid) for pid in tree), {pid: command_line(pid) for pid in tree}
        process.send_signal(signal.SIGTERM)
        assert process.wait(GRACE_SECONDS) == 0, log.read_text(errors="replace")
        assert not wait_until_gone(tree, GRACE_SECONDS)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

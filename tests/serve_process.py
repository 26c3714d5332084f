"""`voxcast serve` as a user runs it, driven from tests: start it, stop it, restart it, watch its processes and jobs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

import httpx
import numpy as np
import soundfile as sf

from tests import waiting
from tests.conftest import ROOT, free_port
from tests.service_client import FOUR_TURNS, FOUR_TURNS_SETTINGS
from workers.supervisor import stop_process

FINAL = {"done", "failed", "cancelled"}
START_SECONDS = 120  # for serve to start (the worker loads its model) on two busy cores, at most


class Serve:
    """`voxcast serve` in single-user mode (no keys) on a port of its own, its output in a log file.

    With `redis_url` None it runs on its private Redis (`VOXCAST_PRIVATE_REDIS`: this machine has a Redis at the
    default address, which serve would otherwise use). It can be started again after it stops, on the same data.
    """

    def __init__(
        self, root: Path, model: Path, redis_url: str | None, faults: dict[str, str] | None = None, **settings: str
    ) -> None:
        """`settings` become `VOXCAST_*` variables; `faults` (see `tests.engine_faults`) go in its workers' engines."""
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = root / "serve.log"
        environment = {name: value for name, value in os.environ.items() if name != "VOXCAST_REDIS_URL"}
        broker = {"VOXCAST_PRIVATE_REDIS": "1"} if redis_url is None else {"VOXCAST_REDIS_URL": redis_url}
        self.env = {
            **environment,
            **broker,
            "VOXCAST_DATA_DIR": str(root / "data"),
            # its own, even on a Redis other test processes share: their queues and workers never meet
            "VOXCAST_REDIS_NAMESPACE": f"serve-{root.name}-{uuid.uuid4().hex[:10]}",
            "VOXCAST_WORKER_MODEL": str(model),
            "VOXCAST_SINGLE_USER": "1",
            "VOXCAST_LOG_LEVEL": "INFO",
            "VOXCAST_HEARTBEAT_SECONDS": "0.5",
            "VOXCAST_STALE_AFTER_SECONDS": "30",  # the supervisor, not the sweeper, takes a dead worker's jobs back
            # single-user mode sends every request under one key, and these tests poll every job ten times a second
            "VOXCAST_MAX_REQUESTS_PER_MINUTE": "0",
            **{f"VOXCAST_{name.upper()}": value for name, value in settings.items()},
        }
        if faults:
            self.env |= {"VOXCAST_ENGINE_RUNNER_WRAPPER": "tests.engine_faults:wrap_runner", **faults}
        self.process: subprocess.Popen[bytes] | None = None
        self.client = httpx.Client(base_url=self.url, timeout=30)

    def start(self, *arguments: str) -> Serve:
        """Start serve (with extra command-line `arguments`) and wait until it answers: with a live worker, or the api
        alone for `--only api`."""
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "cli.main", "serve", "--port", str(self.port), *arguments],
                env=self.env,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        if "--only" in arguments:
            self.wait_until(lambda: self.health().get("database") is not None, "the api to start", START_SECONDS)
        else:
            self.wait_until(
                lambda: self.health().get("status") == "ok", "serve to start with a live worker", START_SECONDS
            )
        return self

    def health(self) -> dict:
        try:
            return self.client.get("/health", timeout=5).json()
        except httpx.HTTPError:
            return {}

    def workers(self) -> dict:
        response = self.client.get("/v1/admin/workers")
        assert response.status_code == 200, response.text
        return response.json()

    def worker_pid(self) -> int:
        supervised = self.workers()["supervised"]
        assert supervised["state"] == "running", supervised
        return supervised["pid"]

    def wait_until(self, condition: Callable[[], object], what: str, timeout: float = 120) -> object:
        """`tests.waiting.wait_until`, failing at once (with serve's log) when serve ends meanwhile."""

        def holds() -> object:
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(f"serve ended ({self.process.returncode}) waiting for {what}: {self.tail()}")
            return condition()

        try:
            return waiting.wait_until(holds, what, timeout, interval=0.1)
        except AssertionError as error:
            if "timed out" not in str(error):
                raise
            raise AssertionError(f"{error}: {self.tail()}") from None

    def tail(self) -> str:
        """The end of serve's log, without the api's access lines (the tests' polling fills it with them)."""
        lines = self.log.read_text(errors="replace").splitlines()
        return "\n".join(line for line in lines if ' HTTP/1.1" ' not in line)[-3000:]

    def job(self, job_id: str) -> dict:
        response = self.client.get(f"/v1/jobs/{job_id}")
        assert response.status_code == 200, f"job {job_id}: {response.status_code} {response.text}"
        return response.json()

    def wait_for_jobs(self, job_ids: list[str], timeout: float = 300) -> dict[str, dict]:
        self.wait_until(lambda: all(self.job(job_id)["state"] in FINAL for job_id in job_ids), "the jobs", timeout)
        return {job_id: self.job(job_id) for job_id in job_ids}

    def processes(self) -> set[int]:
        """serve and every process under it (its workers, their encoders, its private Redis), as of now."""
        assert self.process is not None
        return {self.process.pid} | descendants(self.process.pid)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            stop_process(self.process, 60)
        self.client.close()


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, ended and not yet reaped by its parent, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def gone(pid: int) -> bool:
    return not alive(pid)


def descendants(pid: int) -> set[int]:
    """Every running process whose chain of parents leads to `pid`, read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found: set[int] = set()
    waiting = [pid]
    while waiting:
        for child in children.get(waiting.pop(), []):
            if child not in found:
                found.add(child)
                waiting.append(child)
    return {child for child in found if alive(child)}


def wait_until_gone(pids: Iterable[int], timeout: float) -> set[int]:
    """Wait up to `timeout` seconds for every one of `pids` to end; those still running then."""
    deadline = time.monotonic() + timeout
    left = {pid for pid in pids if alive(pid)}
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = {pid for pid in left if alive(pid)}
    return left


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "(ended)"


class Heartbeats:
    """Asks the api `/healthz` every 50 ms in a thread, and counts the answers that were not a 200."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.asked = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Heartbeats:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with httpx.Client(timeout=5) as client:
            while not self._stop.wait(0.05):
                self.asked += 1
                try:
                    status = client.get(f"{self.url}/healthz").status_code
                except httpx.HTTPError as error:
                    self.failures.append(repr(error))
                    continue
                if status != 200:
                    self.failures.append(f"status {status}")


def submit(serve: Serve, voice: str, script: str = FOUR_TURNS, **options: object) -> str:
    body = {"script": script, "voices": {"Alice": voice, "Bob": voice}, "settings": FOUR_TURNS_SETTINGS, **options}
    response = serve.client.post("/v1/jobs", json=body)
    assert response.status_code == 202, response.text
    return response.json()["id"]


def episode_files(serve: Serve, job_id: str, formats: list[str]) -> dict[str, np.ndarray]:
    folder = serve.root / "data" / "jobs" / job_id / "outputs"
    return {audio_format: sf.read(folder / f"episode.{audio_format}", dtype="float32")[0] for audio_format in formats}


def send(serve: Serve, stop_signal: signal.Signals) -> float:
    """Send `stop_signal` to serve; the monotonic time it was sent."""
    assert serve.process is not None
    sent = time.monotonic()
    serve.process.send_signal(stop_signal)
    return sent

"""A worker process under supervision: started, watched, started again when it dies, stopped on request.

`voxcast serve` runs the api and one worker on one machine; the worker holds the model and runs native
code (the GPU, codecs), so it is the half that can die. When it does, the supervisor:
- takes back the jobs it held at once (`job_repository.release_abandoned_jobs` with the dead process's name),
  counting a worker death against each, so they run again on the next worker instead of waiting for the
  sweeper to notice their silent heartbeat, and a job that keeps killing workers is failed by the guard;
- logs the exit (status or signal) and those jobs in one line;
- starts a new worker after a pause that doubles with every death in quick succession (1 s up to a
  minute; a worker that ran for `STABLE_SECONDS` starts the count again), so a crash loop does not spin;
- never restarts a worker whose model did not load (`EXIT_MODEL_NOT_LOADED`): no restart fixes a bad
  checkpoint, so it calls `on_fatal` with the reason (serve then stops, saying why). A worker whose engine
  loop died (`EXIT_ENGINE_DEAD`) is restarted like one that crashed: its jobs run again.

The worker runs in a session of its own, so a Ctrl-C in the terminal reaches serve alone, and serve stops
it: SIGTERM, a planned stop in which the worker hands its jobs back (`workers.tasks`) and ends within about two
seconds; SIGKILL if it is still there when serve's stop budget says (`core.stop_budget`: 5 s after the signal), its
jobs then handed back here (`hand_back_process_jobs`: the stop was asked for, so no death is counted).
`request_stop` lets serve stop both its workers at once. Each
worker holds a lifeline to serve (`workers.lifeline`), so it ends when serve does, however serve ended. Its state
is `status()`, which the api reports in `/health` and `/v1/admin/workers`. In production (compose, one process per
container) the container runtime is the supervisor and this module is not used.
"""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

import redis
from celery import Celery

from core.db import Database
from core.job_repository import AbandonedJob, hand_back_process_jobs, release_abandoned_jobs
from core.models import utc_now
from core.settings import Settings
from core.worker_presence import SupervisedWorker, SupervisedWorkerState, withdraw
from workers.celery_app import create_celery_app
from workers.lifeline import Lifeline
from workers.sweeper import send_back

logger = logging.getLogger(__name__)

EXIT_MODEL_NOT_LOADED = 3  # a worker's exit status when its model does not load (no restart can help)
EXIT_ENGINE_DEAD = 4  # a worker's exit status when its engine loop died: a restart runs its jobs again
FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 60.0
STABLE_SECONDS = 60.0  # a worker that lived this long died of something new: restart it at once
_POLL_SECONDS = 0.2  # how often a waiting supervisor checks whether it was asked to stop


def exit_reason(status: int) -> str:
    """A process's exit status in words: "killed by SIGSEGV", "exit status 1", "exit status 4 (its engine died)"."""
    if status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    if status == EXIT_ENGINE_DEAD:
        return f"exit status {status} (its engine died)"
    return f"exit status {status}"


def stop_process(process: subprocess.Popen[bytes], grace_seconds: float) -> int:
    """SIGTERM `process`, SIGKILL it if it has not ended within `grace_seconds`; its exit status."""
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(grace_seconds)
    except subprocess.TimeoutExpired:
        logger.warning("the process did not stop in time; killing it", extra={"pid": process.pid})
        process.kill()
        return process.wait()


class WorkerSupervisor:
    """Keeps one worker process running; see the module's docstring."""

    def __init__(
        self,
        command: Sequence[str],
        environment: Mapping[str, str],
        settings: Settings,
        *,
        on_fatal: Callable[[str], None],
    ) -> None:
        self.command = list(command)
        self.environment = dict(environment)
        self.settings = settings
        self.on_fatal = on_fatal
        self.hostname = socket.gethostname()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._kill_at = 0.0  # when a stopping worker still there is killed (`time.monotonic()`)
        self._process: subprocess.Popen[bytes] | None = None
        self._state: SupervisedWorkerState = "starting"
        self._restarts = 0
        self._started_at: datetime | None = None
        self._last_exit: tuple[int, list[str], datetime] | None = None
        self._next_start: float | None = None
        self._thread = threading.Thread(target=self._supervise, name="voxcast-supervisor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def request_stop(self, grace_seconds: float) -> None:
        """Stop the worker and stop supervising, without waiting: SIGTERM (a planned stop: it hands its jobs back and
        ends), SIGKILL if it is still there `grace_seconds` from now. Only the first request counts."""
        if not self._stopping.is_set():
            self._kill_at = time.monotonic() + grace_seconds
            self._stopping.set()

    def wait_stopped(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the worker to be gone and its jobs taken back; whether they are."""
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def status(self) -> SupervisedWorker:
        with self._lock:
            process, last_exit = self._process, self._last_exit
            return SupervisedWorker(
                state=self._state,
                pid=process.pid if process is not None and self._state == "running" else None,
                restarts=self._restarts,
                started_at=self._started_at,
                last_exit=None if last_exit is None else exit_reason(last_exit[0]),
                last_exit_status=None if last_exit is None else last_exit[0],
                last_exit_jobs=[] if last_exit is None else last_exit[1],
                last_exit_at=None if last_exit is None else last_exit[2],
                next_start_in_seconds=(
                    None if self._next_start is None else round(max(0.0, self._next_start - time.monotonic()), 1)
                ),
            )

    def _supervise(self) -> None:
        database = Database.from_settings(self.settings)
        celery = create_celery_app(self.settings)
        backoff = FIRST_BACKOFF_SECONDS
        try:
            while not self._stopping.is_set():
                began = time.monotonic()
                status, pid = self._run_once()
                if self._stopping.is_set():
                    self._take_back_jobs(database, celery, pid, planned=True)
                    return
                jobs = self._take_back_jobs(database, celery, pid, planned=False)
                reason = exit_reason(status)
                with self._lock:
                    self._last_exit = (status, jobs, utc_now())
                if status == EXIT_MODEL_NOT_LOADED:
                    self._set_state("stopped")
                    self.on_fatal("its model did not load")
                    return
                backoff = FIRST_BACKOFF_SECONDS if time.monotonic() - began >= STABLE_SECONDS else backoff
                logger.error(
                    "the worker died; starting a new one",
                    extra={"pid": pid, "how": reason, "jobs": ",".join(jobs) or "none", "restart_in_s": backoff},
                )
                with self._lock:
                    self._state, self._next_start = "restarting", time.monotonic() + backoff
                if self._stopping.wait(backoff):
                    return
                backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
                with self._lock:
                    self._restarts += 1
        finally:
            self._set_state("stopped")
            database.dispose()

    def _run_once(self) -> tuple[int, int]:
        """Start a worker and wait for it to end (or end it, once asked to stop); its exit status and pid."""
        with Lifeline() as lifeline:  # cut when the worker has ended (or when serve does, however it ends)
            process = subprocess.Popen(
                self.command,
                env=lifeline.child_environment(self.environment),
                pass_fds=(lifeline.child_fd,),
                start_new_session=True,
            )
            lifeline.started()
            with self._lock:
                self._process, self._state, self._started_at, self._next_start = process, "running", utc_now(), None
            while True:
                try:
                    return process.wait(_POLL_SECONDS), process.pid
                except subprocess.TimeoutExpired:
                    if self._stopping.is_set():
                        return self._end(process), process.pid

    def _end(self, process: subprocess.Popen[bytes]) -> int:
        """A warm shutdown (running jobs finish their step; one cut short resumes later), forced if it lingers."""
        return stop_process(process, max(0.0, self._kill_at - time.monotonic()))

    def _take_back_jobs(self, database: Database, celery: Celery, pid: int, *, planned: bool) -> list[str]:
        """Take back the jobs the ended worker still held and send back those queued again: after a death each counts
        one (and the guard fails those past their allowance); after a planned stop they are hand-backs.

        Its announcement goes too, so the admin's list and `/health` stop counting it at once.
        """
        name = f"{self.hostname}:{pid}"
        try:
            withdraw(self.settings, name)
        except redis.RedisError:
            pass  # it expires by itself within a few heartbeats
        try:
            abandoned: list[AbandonedJob] = (
                hand_back_process_jobs(database, name)
                if planned
                else release_abandoned_jobs(
                    database, dead_process=name, max_worker_deaths=self.settings.max_worker_deaths
                )
            )
            send_back(
                self.settings, database, celery, abandoned, "the worker was stopped" if planned else "the worker died"
            )
        except Exception:  # the database or Redis down: the sweeper of the next worker finds them by their heartbeat
            logger.warning("could not take back the ended worker's jobs; the sweeper will", exc_info=True)
            return []
        return [job.id for job in abandoned]

    def _set_state(self, state: SupervisedWorkerState) -> None:
        with self._lock:
            self._state, self._next_start = state, None

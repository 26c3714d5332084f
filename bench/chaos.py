"""A seeded chaos run over the production topology (issue 37): faults at the dependencies, then the invariants.

    .venv/bin/python bench/chaos.py                          # the short schedule: every fault kind once, ~3 minutes
    .venv/bin/python bench/chaos.py --minutes 30 --seed 1 --json chaos.json

Why this exists: each fault was tested where the tests imagined it (a worker killed, Redis stopped, serve stopped),
never at the dependency the code leans on hardest, so the recovery code was never run through the failure it exists
for. This run starts, on this machine and as docker compose lays it out:

- a private PostgreSQL cluster (`initdb` into the run's temporary folder as the `postgres` user, its own port);
- a private Redis with its append-only file (`--appendonly yes`), its own port;
- the api (`voxcast serve --only api`), two speech workers (`serve --only worker`) and one scripts worker (`serve
  --only scripts`), each a process of its own with its own hostname (a UTS namespace, as each container has one:
  the scripts worker is `voxcast-scripts`, as compose names it), scratch folder (`TMPDIR`) and log; all
  on one tiny checkpoint written at the start, so every worker holds the same weights;
- the data folder on a tmpfs of its own (`--disk-mb`), so that filling it is a real ENOSPC and touches nothing else.

A keeper restarts any of the four service processes that ends (compose's `restart: unless-stopped`). Three keys
drive a steady mix through HTTP to 127.0.0.1 only: jobs of both modes, regenerations, speech requests, drafting
jobs, episodes published in a show, and cancels; every request is bounded by a timeout and every loop by the run's
stop. First an undisturbed reference run of every request of the mix; then faults from a schedule drawn from
`--seed`: SIGKILL of a worker; SIGSTOP of a worker past its heartbeat, then SIGCONT; SIGTERM and SIGKILL of the api
(started again); PostgreSQL stopped `-m fast` and `-m immediate`; Redis SIGKILLed and started again from its AOF, or
with its AOF removed (empty); the data folder's disk filled. The short schedule (`--minutes` 3 or less) has every
kind once, one after another, outages of 1 to 10 s; a longer one (`--minutes 30`, the soak) runs a timeline per
target side by side (each worker, the api, PostgreSQL, Redis, the disk), outages of 1 to 30 s.

Then the run stops sending, waits for every job to end, and checks the invariants of issue 37 (`INVARIANTS`), stops
everything, checks that no process outlives the run, and prints a report; `--json OUT` writes it (with
`faults_by_kind`, `jobs_by_outcome`, `violations`, `responses_500`, `recovery_p95_s`) and a plot beside it
(`OUT` with `.png`). Everything it started is stopped and its folder removed, also on Ctrl-C or an error (after a
violation its logs stay, in FOLDER-logs).
Needs root (a tmpfs mount, `runuser` to `postgres`, `unshare --uts`), `initdb`/`pg_ctl` and `redis-server`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.file_store import is_temporary  # noqa: E402
from tests.conftest import free_port  # noqa: E402
from tests.synthetic_audio import voice_like  # noqa: E402

# --- settings of the run -------------------------------------------------------------------------------------------

HEARTBEAT_SECONDS = 1.0
STALE_AFTER_SECONDS = 6.0  # a SIGSTOP lasts past this, so the sweeper takes the job back
WORKER_MAX_JOBS = 4
KEYS = ("ann", "ben", "cat")
IN_FLIGHT_PER_KEY = 3  # the driver's own bound, below the service's (`MAX_JOBS_IN_FLIGHT`)
OUTAGE_GRACE_SECONDS = 10.0  # after a fault ends, a 503 is still its outage (pools reconnect, loops back off)
DRAIN_SECONDS = 240.0  # after the schedule, how long every job gets to end
SETTLE_SECONDS = 8.0  # quiet time before the broker and /metrics are read (a sweeper round or two)
REQUEST_TIMEOUT = 30.0
SPEECH_TIMEOUT = 120.0
PCM16_STEP = 1 / 32768
DEPENDENCY_RECOVERY_GOAL_S = 10.0  # issue 37: running jobs progress again this soon after PostgreSQL or Redis is back
DEPENDENCY_KINDS = ("postgres", "redis")
# How long after a fault ends it may still hold a job up by itself (`Run.held_up`): a dependency, until the jobs are
# back (the goal's own time); a full disk, a job's longest pause between tries for space (8 s) and its resume; a
# worker's fault, a sweep of the lost lease (`STALE_AFTER_SECONDS`) and a new claim and resume.
AFTERMATH_SECONDS = {"postgres": 10.0, "redis": 10.0, "disk": 15.0, "worker": STALE_AFTER_SECONDS + 10.0}
# A soak's gap between two faults of one target. Six targets side by side: with gaps of 5 to 20 s (the first soaks)
# some part was nearly always down (the api, restarted every ~14 s, waited out PostgreSQL's outages at start), 22 jobs
# were accepted in 30 minutes and no recovery could be told from the next fault; 15 to 45 s still gives 200+ faults.
SOAK_GAP_SECONDS = (15.0, 45.0)
# Side by side, nearly every dependency fault meets another fault within its 10 s (seed 1, 2026-12-04: 0 of 194 jobs
# judged): so every this many seconds a soak clears its other timelines for one PostgreSQL or Redis outage alone,
# long enough for the goal to be judged on the jobs it finds running.
SOLO_EVERY_SECONDS = 150.0
DISK_FULL_SHARE = 0.9  # the run's own data past this share of the data disk: the run is void (`run_problems`)
PRINTED_VIOLATIONS = 40  # the report prints this many; the JSON has them all
RESUME_SHARE = 0.02  # README: a resumed job's WAV is within one 16-bit step of an uninterrupted run's in 2% of samples

FAULT_KINDS = (
    "worker_sigkill",
    "worker_sigstop",
    "api_sigterm",
    "api_sigkill",
    "postgres_stop_fast",
    "postgres_stop_immediate",
    "redis_kill_aof",
    "redis_kill_no_aof",
    "disk_full",
)
INVARIANTS = {
    "ended_once": "every accepted job ended exactly once, in done or the state its owner asked for, none stranded",
    "audio_matches_reference": "every done job's audio equals an undisturbed run within the resume tolerance",
    "no_duplicate_segments": "no duplicate segment rows or files, nothing left half-written",
    "usage_equals_storage": "each key's usage equals the bytes its jobs and voices hold",
    "worker_deaths_equal_kills": "worker_deaths equals the worker processes actually killed holding the job",
    "no_process_outlives_run": "no process of the run is left once it stopped",
    "no_broker_message_for_ended_job": "no broker message is left for a job that ended",
    "metrics_equal_database": "/metrics equals the database",
    "no_5xx_but_503_in_outage": "no 5xx (nor a reset connection) other than 503 during an outage",
}

# --- the mix: each request has a seed of its own, so a job's row names its reference -------------------------------

TURN = "{name}: Turn {n} of the show, where {name} says a sentence about the news of the week."
SPEECH_INPUT = "Hello there, and welcome to the show."
NOTES = "A new bakery opened on Main Street. It sells sourdough and rye. The owner trained in Lyon for ten years."


def script(turns: int) -> str:
    return "\n".join(TURN.format(name=("Alice", "Bob")[n % 2], n=n) for n in range(turns))


TEMPLATES: dict[str, dict[str, Any]] = {  # name: the job's body (voices and show filled in per key)
    "turns": {"script": script(3), "mode": "turns", "formats": ["wav"], "seed": 101},
    "whole": {"script": script(3), "mode": "whole", "formats": ["wav"], "seed": 102},
    "publish": {"script": script(2), "mode": "turns", "formats": ["wav", "mp3"], "seed": 103},
    "speech": {"seed": 104},
}
REGENERATE = {"turn": 1, "seed": 777}  # a done `turns` job's regeneration
SEED_TEMPLATE = {body["seed"]: name for name, body in TEMPLATES.items()}
ACTIONS = {"turns": 3, "whole": 3, "publish": 2, "speech": 2, "draft": 1, "regenerate": 2, "cancel": 1}
FINAL = {"done", "failed", "cancelled"}


def log(message: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def percentile(values: list[float], share: float) -> float | None:
    """The nearest-rank percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


# --- the dependencies ----------------------------------------------------------------------------------------------


def as_postgres(*command: str) -> list[str]:
    """`command` run as the `postgres` user: initdb and the server refuse root."""
    return ["runuser", "-u", "postgres", "--", *command]


class Postgres:
    """A private cluster in the run's folder: initdb'd once, started and stopped (fast or immediate) by the run."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.data = folder / "data"
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/voxcast"
        self.admin_url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def init(self) -> None:
        self.folder.mkdir()
        shutil.chown(self.folder, "postgres")
        subprocess.run(
            as_postgres("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"),
            check=True,
            capture_output=True,
        )
        self.start()
        import sqlalchemy

        admin = sqlalchemy.create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            connection.exec_driver_sql("CREATE DATABASE voxcast")
        admin.dispose()

    def start(self) -> None:
        # fsync off: the operating system never crashes here, and an immediate stop still recovers from the WAL
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300"
        subprocess.run(
            as_postgres(
                "pg_ctl",
                "-D",
                str(self.data),
                "-l",
                str(self.folder / "server.log"),
                "-w",
                "-t",
                "60",
                "-o",
                options,
                "start",
            ),
            check=True,
            capture_output=True,
        )

    def stop(self, mode: str) -> None:
        subprocess.run(
            as_postgres("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "30", "stop"), capture_output=True
        )

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def kill_leftovers(self) -> None:
        """The postmaster, by the pid it wrote, when `pg_ctl stop` did not end it."""
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
            os.kill(pid, signal.SIGKILL)


class Redis:
    """A private redis-server with its AOF, as compose runs it; killed and started again by the run."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        import redis

        self.folder.mkdir(exist_ok=True)
        command = [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--appendonly",
            "yes",
            "--save",
            "",
            "--dir",
            str(self.folder),
        ]
        with (self.folder / "redis.log").open("ab") as output:
            self.process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.RedisError):
                if client.ping():
                    client.close()
                    return
            time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def kill(self, keep_aof: bool) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if not keep_aof:
            shutil.rmtree(self.folder / "appendonlydir", ignore_errors=True)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class DataDisk:
    """The data folder on a tmpfs of `megabytes`: filling it is a real ENOSPC for the api and every worker."""

    def __init__(self, where: Path, megabytes: int) -> None:
        self.where = where
        self.megabytes = megabytes
        self.mounted = False
        self.problem: str | None = None
        self.filler = where / ".chaos-filler"

    def mount(self) -> None:
        self.where.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0:
            self.problem = "mounting a tmpfs needs root"
            return
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.megabytes}m", "tmpfs", str(self.where)], capture_output=True
        )
        if done.returncode != 0:
            self.problem = f"mount -t tmpfs failed: {done.stderr.decode(errors='replace').strip()}"
            return
        self.mounted = True

    def fill(self) -> int:
        """Take every free byte (what is written meanwhile too: zeros appended until ENOSPC); the bytes taken.
        Unbuffered: a buffered file's close flushed into the full disk and raised, and the fault never ended (soak)."""
        with self.filler.open("wb", buffering=0) as handle:
            with contextlib.suppress(OSError):
                os.posix_fallocate(handle.fileno(), 0, max(1, shutil.disk_usage(self.where).free - (1 << 20)))
            handle.seek(0, os.SEEK_END)
            with contextlib.suppress(OSError):
                while True:
                    handle.write(b"\0" * 65536)
                    handle.flush()
        return self.filler.stat().st_size

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def data_bytes(self) -> int:
        """What the service's own files take (read while no filler is there)."""
        return shutil.disk_usage(self.where).used

    def unmount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.where)], capture_output=True)
            self.mounted = False


# --- the service's processes ---------------------------------------------------------------------------------------


START_MARK = "--- chaos: start"  # written to a service's log before each start


class Service:
    """One process of the service, as a compose service: its command, hostname, scratch folder and log."""

    def __init__(self, name: str, hostname: str, arguments: list[str], ready: str, run: Run) -> None:
        self.name = name
        self.hostname = hostname
        self.arguments = arguments
        self.ready = ready  # a log line, or "healthz" for the api
        self.run = run
        self.scratch = run.folder / "scratch" / name
        self.log_path = run.folder / "logs" / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.held = False  # down on purpose: the keeper leaves it
        self.expected_exit = False  # the run ended it (a fault, a stop): not an unexpected exit
        self.starts = 0
        self.lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def start(self) -> None:
        self.scratch.mkdir(parents=True, exist_ok=True)
        environment = {**self.run.environment, "TMPDIR": str(self.scratch)}
        inner = " ".join([sys.executable, "-m", "cli.main", *self.arguments])
        command = ["unshare", "--uts", "sh", "-c", f"hostname {self.hostname} && exec {inner}"]
        with self.log_path.open("ab") as output:
            output.write(f"\n{START_MARK} {self.starts} at {time.strftime('%H:%M:%S')}\n".encode())
            output.flush()
            self.process = subprocess.Popen(
                command, env=environment, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.starts += 1
        self.expected_exit = False

    def wait_ready(self, timeout: float, starts: int = 1) -> bool:
        """Until its `starts`-th start (or a later one, the keeper's after it ended) is up and ready (its log line
        since its start, or the api's /healthz), or `timeout`; whether it is."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is None and self.starts >= starts:
                if self.ready == "healthz":
                    with contextlib.suppress(httpx.HTTPError):
                        if httpx.get(f"{self.run.base_url}/healthz", timeout=1).status_code == 200:
                            return True
                else:
                    since_start = self.log_path.read_bytes().decode(errors="replace").rsplit(START_MARK, 1)[-1]
                    if self.ready in since_start:
                        return True
            time.sleep(0.2)
        return False

    def signal(self, signum: int) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signum)

    def request_stop(self) -> None:
        """A planned stop (SIGTERM; SIGCONT first, should a fault have it stopped); the keeper leaves it down."""
        with self.lock:
            self.held = True
            self.expected_exit = True
            if self.process is not None and self.process.poll() is None:
                os.kill(self.process.pid, signal.SIGCONT)
                self.process.send_signal(signal.SIGTERM)

    def finish_stop(self, deadline: float) -> None:
        """Wait for the planned stop until `deadline` (monotonic), then SIGKILL its whole process group."""
        if self.process is None:
            return
        try:
            self.process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)  # an encoder child left in its group


# --- what the run records ------------------------------------------------------------------------------------------


@dataclass
class Response:
    at: float
    key: str
    method: str
    route: str
    status: int | None  # None: no response (refused, reset, timed out)
    error: str | None = None  # the error that replaced the response, or a 5xx's body (its start)


@dataclass
class Fault:
    kind: str
    target: str
    started: float
    ended: float | None = None
    detail: str = ""
    affected: dict[str, tuple[int, int]] = field(default_factory=dict)  # running job: (frames, segments) at start
    holders: dict[str, str] = field(default_factory=dict)  # running job let run at start: its worker's hostname
    killed_holding: list[str] = field(default_factory=list)  # jobs a killed worker held (let run: charged)
    killed_waiting: list[str] = field(default_factory=list)  # jobs it had claimed but not let run yet (not charged)
    blind: bool = False  # a kill while the database was away: what the worker held since the last reading is unknown
    recovery_s: float | None = None
    # a PostgreSQL or Redis fault: seconds until each job it found let run progressed again, for the jobs no other
    # fault held up meanwhile (`Run.held_up`), and how many it found that another fault did hold up
    judged: dict[str, float] = field(default_factory=dict)
    held_up: int = 0


@dataclass
class Submitted:
    """A job or script job the service accepted (202) for a key: what its owner asked of it."""

    id: str
    action: str  # what the driver did: turns, whole, publish, draft
    cancel_asked: bool = False


@dataclass
class JobRow:
    """One job as the monitor read it from the database."""

    id: str
    owner: str
    state: str
    frames: int
    segments: int
    worker: str | None
    revision: int
    seed: int | None
    finished_at: datetime | None
    error: str | None
    waiting: bool


class Run:
    """The whole run: its folder, dependencies, processes, driver, faults and records."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.run_id = uuid.uuid4().hex[:10]
        self.folder = Path(tempfile.mkdtemp(prefix="voxcast-chaos-"))
        self.folder.chmod(0o755)  # the postgres user walks into its cluster's folder
        (self.folder / "logs").mkdir()
        self.started = time.monotonic()
        self.postgres = Postgres(self.folder / "postgres")
        self.redis = Redis(self.folder / "redis")
        self.disk = DataDisk(self.folder / "data", args.disk_mb)
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.namespace = f"chaos-{self.run_id}"
        self.environment: dict[str, str] = {}
        self.services: dict[str, Service] = {}
        self.stop_event = threading.Event()  # the driver stops
        self.end_event = threading.Event()  # the keeper and monitor stop
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()
        self.responses: list[Response] = []
        self.faults: list[Fault] = []
        self.unavailable: dict[str, str] = {}  # fault kind: why it cannot run here
        self.submitted: dict[str, Submitted] = {}
        self.speech_hung_up: set[str] = set()  # keys whose speech request got no response (the job may be cancelled)
        self.keys: dict[str, str] = {}  # name: secret
        self.key_ids: dict[str, int] = {}
        self.admin_key = ""
        self.voices: dict[str, str] = {}
        self.shows: dict[str, dict[str, Any]] = {}
        self.references: dict[str, str] = {}  # template (or "regenerate"): the reference job's id
        self.jobs: dict[str, JobRow] = {}  # the monitor's latest reading
        self.finished_seen: dict[str, set[datetime]] = defaultdict(set)
        self.progress_log: dict[str, list[tuple[float, int, int, str]]] = defaultdict(list)
        self.script_rows: dict[str, tuple[str, str | None, datetime | None]] = {}  # id: state, error, finished_at
        self.script_finished_seen: dict[str, set[datetime]] = defaultdict(set)
        # regenerations and admin retries accepted, by job (speech jobs too): each may end it once more
        self.reopened: Counter[str] = Counter()  # an operator's retries (and the reference's regeneration)
        self.regenerated: Counter[str] = Counter()  # regenerations the api accepted (202) as the driver saw them
        self.retried: set[str] = set()  # jobs an admin retried after a full disk failed them
        self.retried_ends: set[tuple[str, datetime]] = set()  # (job, finished_at) of each failure retried
        self.disk_full = threading.Event()  # while set, an operator waits before retrying
        self.unexpected_exits: list[str] = []
        self.kills: list[Fault] = []  # the worker_sigkill faults
        self.violations: list[dict[str, str]] = []
        self.database: Any = None
        self.leftover_processes: list[str] = []
        self.data_peak = 0  # the most bytes the service's own files took on the data disk

    # --- setting up ---------------------------------------------------------------------------------------------

    def now(self) -> float:
        return time.monotonic() - self.started

    def set_up(self) -> None:
        log(f"folder {self.folder}")
        self.disk.mount()
        if self.disk.problem is not None:
            self.unavailable["disk_full"] = self.disk.problem
            log(f"disk_full cannot run: {self.disk.problem}")
        checkpoint = self.folder / "tiny-checkpoint"
        subprocess.run(
            [sys.executable, "-m", "cli.main", "dev", "tiny-checkpoint", str(checkpoint), "--layout", "hf"],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        self.postgres.init()
        self.redis.start()
        self.environment = {
            **{name: value for name, value in os.environ.items() if not name.startswith("VOXCAST_")},
            "CHAOS_RUN_ID": self.run_id,  # every process of the run carries it: how leftovers are found
            "OMP_NUM_THREADS": "1",
            "VOXCAST_DATA_DIR": str(self.disk.where),
            "VOXCAST_DATABASE_URL": self.postgres.url,
            "VOXCAST_REDIS_URL": self.redis.url,
            "VOXCAST_REDIS_NAMESPACE": self.namespace,
            "VOXCAST_WORKER_MODEL": str(checkpoint),
            "VOXCAST_SCRIPT_MODEL": "tiny-random",
            "VOXCAST_SCRIPT_MAX_ATTEMPTS": "2",
            "VOXCAST_LOG_LEVEL": "INFO",
            "VOXCAST_HEARTBEAT_SECONDS": str(HEARTBEAT_SECONDS),
            "VOXCAST_STALE_AFTER_SECONDS": str(STALE_AFTER_SECONDS),
            "VOXCAST_MAX_WORKER_DEATHS": "50",  # the run's kills must not fail a job: each is checked instead
            "VOXCAST_MAX_JOBS_IN_FLIGHT": str(IN_FLIGHT_PER_KEY + 3),
            "VOXCAST_MAX_REQUESTS_PER_MINUTE": "0",
            "VOXCAST_WORKER_MAX_JOBS": str(WORKER_MAX_JOBS),
        }
        api = Service(
            "api",
            "chaos-api",
            ["serve", "--only", "api", "--host", "127.0.0.1", "--port", str(self.port)],
            "healthz",
            self,
        )
        self.services["api"] = api
        api.start()
        if not api.wait_ready(120):
            raise RuntimeError(f"the api did not start; see {api.log_path}")
        for n in range(2):
            name = f"worker-{n}"
            self.services[name] = Service(
                name,
                f"chaos-worker-{n}",
                ["serve", "--only", "worker", "--max-jobs", str(WORKER_MAX_JOBS)],
                "worker ready",
                self,
            )
        self.services["scripts"] = Service(
            "scripts", "voxcast-scripts", ["serve", "--only", "scripts"], "scripts worker ready", self
        )
        for name in ("worker-0", "worker-1", "scripts"):
            self.services[name].start()
        for name in ("worker-0", "worker-1", "scripts"):
            if not self.services[name].wait_ready(240):
                raise RuntimeError(f"{name} did not start; see {self.services[name].log_path}")
        from core.api_keys import create_api_key
        from core.db import Database

        self.database = Database.connect(self.postgres.url, retry_seconds=0.5)
        with self.database.session() as session:
            for name in KEYS:
                made = create_api_key(session, name)
                self.keys[name], self.key_ids[name] = made.secret, made.id
            self.admin_key = create_api_key(session, "chaos-admin", admin=True).secret
        voice_file = self.folder / "voice.wav"
        sf.write(voice_file, voice_like(4.0, 24_000, seed=0), 24_000)
        for name in KEYS:
            with self.client(name) as client, voice_file.open("rb") as handle:
                answer = client.post("/v1/voices", data={"name": "host"}, files={"file": handle})
                answer.raise_for_status()
                self.voices[name] = answer.json()["id"]
                show = {
                    "title": f"{name}'s show",
                    "description": "chaos",
                    "author": name,
                    "language": "en",
                    "category": "Technology",
                }
                answer = client.post("/v1/shows", json=show)
                answer.raise_for_status()
                self.shows[name] = answer.json()
        for target in (self.keep, self.monitor):
            thread = threading.Thread(target=target, name=target.__name__, daemon=True)
            thread.start()
            self.threads.append(thread)

    def client(self, key: str | None) -> httpx.Client:
        secret = self.admin_key if key == "admin" else self.keys.get(key or "")
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=REQUEST_TIMEOUT)

    # --- the keeper (compose's restart policy) and the monitor (the database, read directly) ------------------

    def keep(self) -> None:
        """Start again every service process that ended and is not held down, a second later, as compose does."""
        while not self.end_event.wait(0.5):
            for service in self.services.values():
                with service.lock:
                    if service.held or service.process is None or service.process.poll() is None:
                        continue
                    code = service.process.returncode
                    if not service.expected_exit:
                        self.unexpected_exits.append(
                            f"{service.name} (pid {service.pid}) exited by itself with {code} at "
                            f"{self.now():.1f} s; its last error: {self.last_error(service)}"
                        )
                    time.sleep(1.0)
                    service.start()

    @staticmethod
    def last_error(service: Service) -> str:
        """The last warning, error or critical line of the service's log since its start, shortened."""
        since_start = service.log_path.read_bytes().decode(errors="replace").rsplit(START_MARK, 1)[-1]
        lines = [line for line in since_start.splitlines() if re.match(r"level=(warning|error|critical)", line)]
        return lines[-1][:400] if lines else "(none logged)"

    def monitor(self) -> None:
        """Read every job and script job every 0.25 s: progress, ends, holders; skipped while the database is away."""
        from sqlalchemy import select

        from core.models import ApiKey, Job, ScriptJob

        while not self.end_event.wait(0.25):
            try:
                with self.database.session() as session:
                    owners = dict(session.execute(select(ApiKey.id, ApiKey.name)).all())
                    rows = session.scalars(select(Job)).all()
                    scripts = session.execute(
                        select(ScriptJob.id, ScriptJob.state, ScriptJob.error, ScriptJob.finished_at)
                    ).all()
                    readings = {
                        row.id: JobRow(
                            row.id,
                            owners.get(row.owner_id, "?"),
                            row.state,
                            row.frames_done,
                            row.segments_done,
                            row.worker,
                            row.revision,
                            (row.generation or {}).get("seed"),
                            row.finished_at,
                            row.error,
                            row.waiting,
                        )
                        for row in rows
                    }
            except Exception:  # noqa: BLE001 - the database is away (a fault): read again next round
                continue
            at = self.now()
            self.note_data_bytes()
            with self.lock:
                for job_id, row in readings.items():
                    if row.state in FINAL and row.finished_at is not None:
                        self.finished_seen[job_id].add(row.finished_at)
                    entries = self.progress_log[job_id]
                    point = (at, row.frames, row.segments, row.state)
                    if not entries or entries[-1][1:] != point[1:]:
                        entries.append(point)
                self.jobs = readings
                # replaced, not merged: a script job the api could not queue is deleted again ("nothing kept")
                self.script_rows = {script_id: (state, error, ended) for script_id, state, error, ended in scripts}
                for script_id, (state, _, ended) in self.script_rows.items():
                    if state in FINAL and ended is not None:
                        self.script_finished_seen[script_id].add(ended)

    def note_data_bytes(self) -> None:
        """The data disk's bytes, outside `disk_full` faults (the filler comes and goes while it is read)."""
        if self.disk_full.is_set():
            return
        with contextlib.suppress(OSError):  # unmounted at the very end
            taken = self.disk.data_bytes()
            if not self.disk_full.is_set():
                self.data_peak = max(self.data_peak, taken)

    # --- HTTP, recorded ----------------------------------------------------------------------------------------

    def request(self, client: httpx.Client, key: str, method: str, path: str, **options: Any) -> httpx.Response | None:
        """One request, recorded with its status (or the error that replaced it); None without a response."""
        route = re.sub(r"[0-9a-f]{32}", "{id}", path)
        route = re.sub(r"/feeds/[^/]+", "/feeds/{token}", route)
        try:
            response = client.request(method, path, **options)
        except httpx.HTTPError as error:
            with self.lock:
                self.responses.append(Response(self.now(), key, method, route, None, type(error).__name__))
            return None
        body = response.text[:160] if response.status_code >= 500 else None
        with self.lock:
            self.responses.append(Response(self.now(), key, method, route, response.status_code, body))
        return response

    # --- the reference run -------------------------------------------------------------------------------------

    def job_body(self, key: str, template: str) -> dict[str, Any]:
        body = TEMPLATES[template]
        voice = self.voices[key]
        job: dict[str, Any] = {
            "script": body["script"],
            "voices": {"Alice": voice, "Bob": voice},
            "mode": body["mode"],
            "formats": body["formats"],
            "settings": {"diffusion_steps": 2, "seed": body["seed"]},
        }
        if template == "publish":
            job["episode"] = {"show_id": self.shows[key]["id"], "title": "An episode"}
        return job

    def speech_body(self, key: str) -> dict[str, Any]:
        return {
            "model": "tts-1",
            "voice": self.voices[key],
            "input": SPEECH_INPUT,
            "response_format": "wav",
            "settings": {"diffusion_steps": 2, "seed": TEMPLATES["speech"]["seed"]},
        }

    def wait_final(self, job_id: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                row = self.jobs.get(job_id)
            if row is not None and row.state in FINAL:
                return row.state
            time.sleep(0.25)
        raise RuntimeError(f"reference job {job_id} did not end in {timeout:.0f} s")

    def reference_run(self) -> None:
        """Every request of the mix once, nothing disturbing it: what each done job's audio must equal."""
        key = KEYS[0]
        with self.client(key) as client:
            for template in ("turns", "whole", "publish"):
                answer = client.post("/v1/jobs", json=self.job_body(key, template))
                answer.raise_for_status()
                self.references[template] = answer.json()["id"]
            speech = client.post("/v1/audio/speech", json=self.speech_body(key), timeout=SPEECH_TIMEOUT)
            speech.raise_for_status()
            for template in ("turns", "whole", "publish"):
                if self.wait_final(self.references[template], 180) != "done":
                    raise RuntimeError(f"the reference {template} job did not end done; see {self.folder}/logs")
                self.keep_reference(template, self.references[template])
            answer = client.post(
                f"/v1/jobs/{self.references['turns']}/turns/{REGENERATE['turn']}/regenerate",
                json={"seed": REGENERATE["seed"]},
            )
            answer.raise_for_status()
            self.reopened[self.references["turns"]] += 1
            time.sleep(1.0)
            if self.wait_final(self.references["turns"], 180) != "done":
                raise RuntimeError("the reference regeneration did not end done")
            self.keep_reference("regenerate", self.references["turns"])
        with self.lock:
            speech_jobs = [row.id for row in self.jobs.values() if row.seed == TEMPLATES["speech"]["seed"]]
        self.references["speech"] = speech_jobs[0]
        self.keep_reference("speech", speech_jobs[0])
        log(f"references done: {self.references}")

    def keep_reference(self, template: str, job_id: str) -> None:
        """Copy the reference episode aside: the turns reference is regenerated later, which replaces its file."""
        (self.folder / "references").mkdir(exist_ok=True)
        shutil.copyfile(
            self.disk.where / "jobs" / job_id / "outputs" / "episode.wav",
            self.folder / "references" / f"{template}.wav",
        )

    # --- the driver -------------------------------------------------------------------------------------------

    def drive(self, key: str, seed: int) -> None:
        """One key's steady mix until the run stops: at most `IN_FLIGHT_PER_KEY` of its jobs in flight."""
        rng = random.Random(seed)
        with self.client(key) as client, self.client(None) as anonymous:
            while not self.stop_event.wait(rng.uniform(0.5, 2.0)):
                action = rng.choices(list(ACTIONS), weights=list(ACTIONS.values()))[0]
                with self.lock:
                    mine = [row for row in self.jobs.values() if row.owner == key]
                    in_flight = sum(1 for row in mine if row.state not in FINAL)
                if action in ("turns", "whole", "publish", "speech", "draft") and in_flight >= IN_FLIGHT_PER_KEY:
                    self.request(client, key, "GET", "/v1/jobs")
                    continue
                if action == "speech":
                    answer = self.request(
                        client, key, "POST", "/v1/audio/speech", json=self.speech_body(key), timeout=SPEECH_TIMEOUT
                    )
                    if answer is None:
                        self.speech_hung_up.add(key)
                elif action == "draft":
                    body = {"task": "draft", "material": NOTES, "minutes": 1}
                    answer = self.request(client, key, "POST", "/v1/scripts", json=body)
                    if answer is not None and answer.status_code == 202:
                        self.accept(answer.json()["id"], action)
                elif action == "regenerate":
                    self.regenerate(client, key, mine, rng)
                elif action == "cancel":
                    self.cancel(client, key, mine, rng)
                else:
                    answer = self.request(client, key, "POST", "/v1/jobs", json=self.job_body(key, action))
                    if answer is not None and answer.status_code == 202:
                        self.accept(answer.json()["id"], action)
                if rng.random() < 0.2:
                    token = self.shows[key]["feed_url"].rsplit("/", 1)[-1]
                    self.request(anonymous, key, "GET", f"/feeds/{token}")
                if rng.random() < 0.3:
                    self.request(client, key, "GET", "/v1/usage")

    def accept(self, item_id: str, action: str) -> None:
        with self.lock:
            self.submitted[item_id] = Submitted(item_id, action)

    def regenerate(self, client: httpx.Client, key: str, mine: list[JobRow], rng: random.Random) -> None:
        """A done `turns` job of this key not regenerated yet, its turn 1 again with the regeneration's seed."""
        done = [
            row
            for row in mine
            if row.state == "done"
            and row.seed == TEMPLATES["turns"]["seed"]
            and row.revision == 0
            and row.id not in self.references.values()
        ]
        if not done:
            return
        job = rng.choice(done)
        path = f"/v1/jobs/{job.id}/turns/{REGENERATE['turn']}/regenerate"
        answer = self.request(client, key, "POST", path, json={"seed": REGENERATE["seed"]})
        if answer is not None and answer.status_code == 202:
            with self.lock:
                self.regenerated[job.id] += 1

    def cancel(self, client: httpx.Client, key: str, mine: list[JobRow], rng: random.Random) -> None:
        running = [
            row
            for row in mine
            if row.state in ("queued", "running")
            and row.id in self.submitted
            and row.seed != TEMPLATES["speech"]["seed"]
        ]
        if not running:
            return
        job = rng.choice(running)
        with self.lock:
            self.submitted[job.id].cancel_asked = True  # asked, whatever the answer: it may have been taken
        self.request(client, key, "DELETE", f"/v1/jobs/{job.id}")

    def retry_disk_failures(self) -> None:
        """What an operator does after a full disk (README): an admin retry of each job it failed, once freed."""
        if self.disk_full.is_set():
            return
        with self.lock:
            failed = [
                row
                for row in self.jobs.values()
                if row.state == "failed"
                and row.finished_at is not None
                and (row.id, row.finished_at) not in self.retried_ends
                and "no space left" in (row.error or "")
            ]
        if not failed:
            return
        with self.client("admin") as admin:
            for row in failed:
                answer = self.request(admin, "admin", "POST", f"/v1/admin/jobs/{row.id}/retry")
                if answer is not None and answer.status_code == 200:
                    with self.lock:
                        self.retried.add(row.id)
                        self.retried_ends.add((row.id, row.finished_at))  # type: ignore[arg-type]
                        self.reopened[row.id] += 1

    # --- faults ------------------------------------------------------------------------------------------------

    def schedule(self) -> list[tuple[float, str, str, float]]:
        """(start second, kind, target, outage seconds), drawn from the seed.

        Short (`--minutes` 3 or less): every kind once, one after another, outages of 1 to 10 s, gaps of 4 to 10 s.
        Longer: a timeline per target side by side, each a fault then a gap of `SOAK_GAP_SECONDS`, outages of 1 to 30 s,
        and every `SOLO_EVERY_SECONDS` a dependency's outage alone (`_solo`).
        """
        kinds = [kind for kind in FAULT_KINDS if kind not in self.unavailable]
        rng = self.rng
        plan: list[tuple[float, str, str, float]] = []
        if self.args.minutes <= 3:
            rng.shuffle(kinds)
            at = 3.0
            for kind in kinds:
                plan.append((at, kind, self.target_of(kind), self.outage_of(kind, rng, 10.0)))
                at += plan[-1][3] + rng.uniform(4.0, 10.0)
            return plan
        timelines = {
            "worker-0": ["worker_sigkill", "worker_sigstop"],
            "worker-1": ["worker_sigkill", "worker_sigstop"],
            "api": ["api_sigterm", "api_sigkill"],
            "postgres": ["postgres_stop_fast", "postgres_stop_immediate"],
            "redis": ["redis_kill_aof", "redis_kill_no_aof"],
            "disk": ["disk_full"],
        }
        for target, choices in timelines.items():
            choices = [kind for kind in choices if kind in kinds]
            at = rng.uniform(3.0, 15.0)
            while choices and at < self.args.minutes * 60:
                kind = rng.choice(choices)
                outage = self.outage_of(kind, rng, 30.0)
                plan.append((at, kind, target, outage))
                at += outage + rng.uniform(*SOAK_GAP_SECONDS)
        return self._solo(plan, [kind for kind in kinds if kind.startswith(DEPENDENCY_KINDS)], rng)

    def _solo(
        self, plan: list[tuple[float, str, str, float]], dependency_kinds: list[str], rng: random.Random
    ) -> list[tuple[float, str, str, float]]:
        """`plan` with a dependency outage alone every `SOLO_EVERY_SECONDS` (the kinds in turn): the faults that
        could hold its jobs up (under way, or in their aftermath, from its start to the goal's 10 s after its end)
        are left out; the api's stay, since no job waits on the api."""
        at = SOLO_EVERY_SECONDS
        turn = 0
        while dependency_kinds and at < self.args.minutes * 60 - SOLO_EVERY_SECONDS / 2:
            kind = dependency_kinds[turn % len(dependency_kinds)]
            outage = self.outage_of(kind, rng, 30.0)
            judged_until = at + outage + DEPENDENCY_RECOVERY_GOAL_S + 5.0
            plan = [
                fault
                for fault in plan
                if fault[2] == "api"
                or fault[0] > judged_until
                or fault[0] + fault[3] + AFTERMATH_SECONDS.get(self.target_of(fault[1]), 0.0) < at
            ]
            plan.append((at, kind, self.target_of(kind), outage))
            at += SOLO_EVERY_SECONDS
            turn += 1
        return sorted(plan)

    @staticmethod
    def target_of(kind: str) -> str:
        return kind.split("_")[0]  # a worker fault picks its worker when it starts (`worker_for`)

    @staticmethod
    def outage_of(kind: str, rng: random.Random, longest: float) -> float:
        if kind == "worker_sigstop":
            return round(STALE_AFTER_SECONDS + rng.uniform(2.0, 5.0), 1)  # past the heartbeat: swept
        if kind in ("worker_sigkill", "api_sigterm", "api_sigkill"):
            return 1.0  # the restart policy's second
        return round(rng.uniform(1.0, longest), 1)

    def running_jobs(self) -> dict[str, tuple[int, int]]:
        with self.lock:
            return {row.id: (row.frames, row.segments) for row in self.jobs.values() if row.state == "running"}

    def holders(self) -> dict[str, str]:
        """The hostname of the worker holding each running job that it let run (a waiting job has no progress to
        make: it waits for a place, not for a dependency)."""
        with self.lock:
            return {
                row.id: row.worker.split(":")[0]
                for row in self.jobs.values()
                if row.state == "running" and row.worker and not row.waiting
            }

    def held_by(self, service: Service) -> tuple[list[tuple[str, bool]], bool]:
        """(job, uncharged) of each job `service`'s process holds now, and whether that is known: from the database
        when it answers, else the monitor's last reading (not known). A waiting job (claimed, not yet let run) is not
        charged a death (README); nor, maybe, one in a reading taken before the database went away (it may have been
        handed back since: soak), so those count as waiting too, charged or not."""
        prefix = f"{service.hostname}:{service.pid}:"
        from sqlalchemy import select

        from core.models import Job

        try:
            with self.database.session() as session:
                query = select(Job.id, Job.waiting).where(Job.state == "running", Job.worker.like(prefix + "%"))
                return [(job_id, bool(waiting)) for job_id, waiting in session.execute(query)], True
        except Exception:  # noqa: BLE001 - the database is away: the last reading, each job maybe held still
            with self.lock:
                held = [
                    (row.id, True)
                    for row in self.jobs.values()
                    if row.state == "running" and (row.worker or "").startswith(prefix)
                ]
            return held, False

    def worker_for(self, target: str) -> Service:
        """The speech worker a worker fault hits: `target` in a soak's timeline; in the short schedule ("worker"),
        the one holding the most running jobs, so that the fault meets work. Waits (a minute at most) for it to be
        ready: a fault on a worker still loading its model proves nothing."""
        names = [target] if target in self.services else ["worker-0", "worker-1"]
        for name in names:
            self.services[name].wait_ready(60, self.services[name].starts)
        return max(
            (self.services[name] for name in names),
            key=lambda service: (len(self.held_by(service)[0]), -names.index(service.name)),
        )

    def inject(self, kind: str, target: str, outage: float) -> None:
        service = self.worker_for(target) if kind.startswith("worker") else self.services["api"]
        target = service.name if kind.startswith("worker") else target
        fault = Fault(kind, target, self.now(), affected=self.running_jobs(), holders=self.holders())
        with self.lock:
            self.faults.append(fault)
        log(f"fault {kind} on {target} for {outage:.1f} s")
        if kind in ("worker_sigkill", "worker_sigstop"):
            with service.lock:
                starts = service.starts
                if kind == "worker_sigkill":
                    held, known = self.held_by(service)
                    fault.blind = not known
                    service.expected_exit = True
                    service.signal(signal.SIGKILL)
                    fault.killed_holding = [job_id for job_id, waiting in held if not waiting]
                    fault.killed_waiting = [job_id for job_id, waiting in held if waiting]
                    self.kills.append(fault)
                    fault.detail = f"pid {service.pid} held {len(held)} jobs"
                else:
                    service.signal(signal.SIGSTOP)
                    fault.detail = f"pid {service.pid}"
            if kind == "worker_sigstop":
                time.sleep(outage)
                service.signal(signal.SIGCONT)
            else:
                service.wait_ready(180, starts + 1)  # the keeper starts it again
        elif kind in ("api_sigterm", "api_sigkill"):
            with service.lock:
                starts = service.starts
                service.expected_exit = True
                service.signal(signal.SIGTERM if kind == "api_sigterm" else signal.SIGKILL)
            service.wait_ready(120, starts + 1)  # the keeper starts it again
        elif kind.startswith("postgres"):
            self.postgres.stop("fast" if kind.endswith("fast") else "immediate")
            time.sleep(outage)
            self.postgres.start()
        elif kind.startswith("redis"):
            self.redis.kill(keep_aof=kind == "redis_kill_aof")
            time.sleep(outage)
            self.redis.start()
        elif kind == "disk_full":
            self.disk_full.set()
            try:
                fault.detail = f"{self.disk.fill()} bytes taken"
                time.sleep(outage)
            finally:  # whatever happened, the disk is freed: a fault that never ends is not this run's to measure
                self.disk.free()
                self.disk_full.clear()
        fault.ended = self.now()
        log(f"fault {kind} ended after {fault.ended - fault.started:.1f} s")

    def run_faults(self, plan: list[tuple[float, str, str, float]]) -> None:
        """Each target's faults in order, targets side by side (in the short schedule, one at a time)."""
        by_target: dict[str, list[tuple[float, str, str, float]]] = defaultdict(list)
        for entry in plan:
            by_target["all" if self.args.minutes <= 3 else entry[2]].append(entry)
        origin = time.monotonic()

        def timeline(entries: list[tuple[float, str, str, float]]) -> None:
            for at, kind, target, outage in entries:
                if self.stop_event.wait(max(0.0, at - (time.monotonic() - origin))):
                    return
                self.inject(kind, target, outage)
                self.retry_disk_failures()

        lines = [threading.Thread(target=timeline, args=(entries,), daemon=True) for entries in by_target.values()]
        for thread in lines:
            thread.start()
        end = origin + self.args.minutes * 60
        while any(thread.is_alive() for thread in lines) or time.monotonic() < end:
            time.sleep(1.0)
            self.retry_disk_failures()
            if time.monotonic() > end + 300:  # a fault that hangs must not hang the run
                break

    # --- the end -----------------------------------------------------------------------------------------------

    def drain(self) -> None:
        """Stop sending; give every job `DRAIN_SECONDS` to end (retrying disk failures as an operator does)."""
        self.stop_event.set()
        deadline = time.monotonic() + DRAIN_SECONDS
        while time.monotonic() < deadline:
            self.retry_disk_failures()
            with self.lock:
                open_jobs = [row.id for row in self.jobs.values() if row.state not in FINAL]
                open_scripts = [sid for sid, (state, _, _) in self.script_rows.items() if state not in FINAL]
            if not open_jobs and not open_scripts:
                break
            time.sleep(1.0)
        log(f"drained; settling {SETTLE_SECONDS:.0f} s")
        time.sleep(SETTLE_SECONDS)

    def violate(self, invariant: str, subject: str, evidence: str) -> None:
        self.violations.append({"invariant": invariant, "job": subject, "evidence": evidence})

    def check(self) -> None:
        """Every invariant but the processes' (checked once they are stopped), on the final state."""
        from sqlalchemy import select

        from core.models import Job, JobSegment, ScriptJob

        with self.database.session() as session:
            jobs = {job.id: job for job in session.scalars(select(Job))}
            segments: dict[str, list[JobSegment]] = defaultdict(list)
            for row in session.scalars(select(JobSegment)):
                segments[row.job_id].append(row)
            scripts = {row.id: row for row in session.scalars(select(ScriptJob))}
        self.check_ends(jobs, scripts)
        self.check_audio(jobs)
        self.check_segments(jobs, segments)
        self.check_usage(jobs)
        self.check_deaths(jobs)
        self.check_broker(jobs, scripts)
        self.check_metrics(jobs, scripts)
        self.check_responses()

    def check_ends(self, jobs: dict[str, Any], scripts: dict[str, Any]) -> None:
        for job in jobs.values():
            asked = self.submitted.get(job.id)
            # a regeneration whose 202 was lost (the api killed before it answered) still reopened the job: its
            # revision says so
            reopened = self.reopened[job.id] + max(self.regenerated[job.id], job.revision)
            ends = len(self.finished_seen.get(job.id, set()))
            evidence = (
                f"state {job.state}, attempts {job.attempts}, deaths {job.worker_deaths}, handbacks "
                f"{job.handbacks}, revision {job.revision}, worker {job.worker}, heartbeat {job.heartbeat_at}, "
                f"error {job.error!r}"
            )
            if job.state not in FINAL:
                self.violate("ended_once", job.id, f"stranded: {evidence}")
                continue
            if ends > 1 + reopened:
                self.violate("ended_once", job.id, f"ended {ends} times, reopened {reopened}: {evidence}")
            allowed = {"done"}
            speech = job.generation.get("seed") == TEMPLATES["speech"]["seed"]
            if (asked and asked.cancel_asked) or (speech and self.owner_name(job.owner_id) in self.speech_hung_up):
                allowed.add("cancelled")
            if job.state not in allowed:
                self.violate("ended_once", job.id, f"ended {job.state}, not as its owner asked: {evidence}")
        for script_job in scripts.values():
            asked = self.submitted.get(script_job.id)
            evidence = f"state {script_job.state}, deliveries {script_job.deliveries}, error {script_job.error!r}"
            if script_job.state not in FINAL:
                self.violate("ended_once", script_job.id, f"stranded script job: {evidence}")
            elif len(self.script_finished_seen.get(script_job.id, set())) > 1:
                self.violate("ended_once", script_job.id, f"script job ended more than once: {evidence}")
            elif script_job.state == "failed" and not (script_job.error or "").startswith(
                "the script model (tiny-random) gave no valid script"
            ):  # the tiny model's replies never pass validation: that failure is the expected end
                self.violate("ended_once", script_job.id, f"script job failed otherwise: {evidence}")
            elif script_job.state == "cancelled" and not (asked and asked.cancel_asked):
                self.violate("ended_once", script_job.id, f"script job cancelled unasked: {evidence}")

    def owner_name(self, owner_id: int) -> str:
        return next((name for name, key_id in self.key_ids.items() if key_id == owner_id), "admin")

    def reference_audio(self, template: str) -> np.ndarray | None:
        path = self.folder / "references" / f"{template}.wav"
        return sf.read(path, dtype="int16")[0] if path.exists() else None

    def check_audio(self, jobs: dict[str, Any]) -> None:
        for job in jobs.values():
            if job.state != "done" or job.id in self.references.values():
                continue
            template = SEED_TEMPLATE.get(job.generation.get("seed"))
            if template is None:
                continue
            if job.revision > 0:
                template = "regenerate"
            reference = self.reference_audio(template)
            path = self.disk.where / "jobs" / job.id / "outputs" / "episode.wav"
            if reference is None or not path.exists():
                self.violate("audio_matches_reference", job.id, f"no episode.wav to compare ({template})")
                continue
            audio = sf.read(path, dtype="int16")[0]
            if len(audio) != len(reference):
                self.violate(
                    "audio_matches_reference",
                    job.id,
                    f"{template}: {len(audio)} samples, the reference {len(reference)}",
                )
                continue
            apart = np.abs(audio.astype(np.int32) - reference.astype(np.int32))
            share = float(np.mean(apart > 0))
            if apart.max() > 1 or share > RESUME_SHARE:
                self.violate(
                    "audio_matches_reference",
                    job.id,
                    f"{template}: up to {apart.max()} steps apart in {share:.2%} of samples "
                    f"(attempts {job.attempts}, deaths {job.worker_deaths}, handbacks {job.handbacks})",
                )

    def check_segments(self, jobs: dict[str, Any], segments: dict[str, list[Any]]) -> None:
        for job_id, rows in segments.items():
            indices = Counter(row.index for row in rows)
            doubled = sorted(index for index, count in indices.items() if count > 1)
            if doubled:
                self.violate("no_duplicate_segments", job_id, f"segment rows repeated for indices {doubled}")
            job = jobs.get(job_id)
            folder = self.disk.where / "jobs" / job_id / "segments"
            if job is None or job.state != "done" or not folder.exists():
                continue
            expected = {f"{index:04d}.{suffix}" for index in indices for suffix in ("flac", "latents.npy")}
            expected |= {f"{index:04d}.previous.{suffix}" for index in indices for suffix in ("flac", "latents.npy")}
            present = {path.name for path in folder.iterdir()}
            stray = sorted(present - expected)
            if stray:
                self.violate("no_duplicate_segments", job_id, f"files in segments/ no row accounts for: {stray}")
            left = [
                str(path.relative_to(folder.parent))
                for path in folder.parent.rglob("*")
                if path.name.endswith((".tmp", ".bak"))
            ]
            if left:
                self.violate("no_duplicate_segments", job_id, f"half-written files left: {left}")

    def check_usage(self, jobs: dict[str, Any]) -> None:
        """Each key's usage against the bytes its files hold; where they differ, each ended job whose recorded
        bytes differ from its folder's is named too (the data disk is gone once the run ends)."""
        jobs_root = self.disk.where / "jobs"
        folder_bytes = {
            job.id: sum(
                path.stat().st_size
                for path in (jobs_root / job.id).rglob("*")
                if path.is_file() and not is_temporary(path)  # a writer's, not stored yet (`FileStore.tree_bytes`)
            )
            for job in jobs.values()
        }
        for name in KEYS:
            mine = [job for job in jobs.values() if job.owner_id == self.key_ids[name]]
            held = sum(folder_bytes[job.id] for job in mine)
            voice = self.disk.where / "voices" / f"{self.voices[name]}.wav"
            held += voice.stat().st_size if voice.exists() else 0
            with self.client(name) as client:
                answer = self.request(client, name, "GET", "/v1/usage")
            if answer is None or answer.status_code != 200:
                self.violate("usage_equals_storage", name, f"GET /v1/usage gave {answer and answer.status_code}")
                continue
            usage = answer.json()["bytes"]
            if usage != held:
                self.violate("usage_equals_storage", name, f"usage {usage} bytes, its files hold {held}")
                for job in mine:
                    if job.state in FINAL and job.storage_bytes != folder_bytes[job.id]:
                        evidence = (
                            f"{name}'s job ({job.state}, revision {job.revision}, attempts {job.attempts}) records "
                            f"{job.storage_bytes} bytes, its folder holds {folder_bytes[job.id]}"
                        )
                        left = [path.name for path in (jobs_root / job.id).rglob("*") if is_temporary(path)]
                        evidence += f" and these temporaries: {left}" if left else ""
                        self.violate("usage_equals_storage", job.id, evidence)

    def check_deaths(self, jobs: dict[str, Any]) -> None:
        """Each job's `worker_deaths` against the kills of a worker holding it: between those that held it let run
        and those plus the ones that had it claimed but waiting (not charged, README), plus the blind kills (while
        the database was away) in its lifetime, which may have held it. An admin retry (after a full disk) starts the
        count again, so a retried job's count only needs to stay within the bound."""
        charged: Counter[str] = Counter(job_id for fault in self.kills for job_id in fault.killed_holding)
        waiting: Counter[str] = Counter(job_id for fault in self.kills for job_id in fault.killed_waiting)
        for job in jobs.values():
            low, high = charged.get(job.id, 0), charged.get(job.id, 0) + waiting.get(job.id, 0)
            high += self.blind_kills_in_life(job.id)
            if job.id in self.retried:
                low = 0
            if not low <= job.worker_deaths <= high:
                met = [f"{fault.kind} at {fault.started:.1f} s" for fault in self.faults if job.id in fault.affected]
                kills = [
                    f"{fault.target} ({fault.detail}) at {fault.started:.1f} s"
                    for fault in self.kills
                    if job.id in fault.killed_holding + fault.killed_waiting
                ]
                self.violate(
                    "worker_deaths_equal_kills",
                    job.id,
                    f"worker_deaths {job.worker_deaths}, killed holding it {low} to {high} times "
                    f"{kills}; handbacks {job.handbacks}, attempts {job.attempts}; faults it met running: "
                    f"{met or 'none'}; processes that ended "
                    f"by themselves: {self.unexpected_exits or 'none'}",
                )

    def blind_kills_in_life(self, job_id: str) -> int:
        """Blind kills (`Fault.blind`) between the monitor's first sight of the job and its last end (a regenerated
        job runs again after an end)."""
        entries = self.progress_log.get(job_id, [])
        if not entries:
            return 0
        last = entries[-1][0] if entries[-1][3] in FINAL else float("inf")
        return sum(1 for fault in self.kills if fault.blind and entries[0][0] - 1.0 <= fault.started <= last)

    def check_broker(self, jobs: dict[str, Any], scripts: dict[str, Any]) -> None:
        import redis

        from workers.celery_app import SCRIPTS_QUEUE, broker_key_prefix, priority_list_keys

        client = redis.Redis.from_url(self.redis.url)
        try:
            messages: list[tuple[str, bytes]] = []
            for kind in ("interactive", "batch", SCRIPTS_QUEUE):
                for list_key in priority_list_keys(self.namespace, kind):  # type: ignore[arg-type]
                    messages += [(f"queue {kind}", item) for item in client.lrange(list_key, 0, -1)]
            unacked = client.hgetall(broker_key_prefix(self.namespace) + "unacked")
            messages += [("unacked", value) for value in unacked.values()]
        finally:
            client.close()
        for where, raw in messages:
            payload = json.loads(raw)
            message = payload[0] if isinstance(payload, list) else payload
            task_id = message.get("headers", {}).get("id", "?")
            row = jobs.get(task_id) or scripts.get(task_id)
            state = None if row is None else row.state
            if state is None or state in FINAL:
                self.violate("no_broker_message_for_ended_job", task_id, f"a message in {where}; the job is {state}")

    def check_metrics(self, jobs: dict[str, Any], scripts: dict[str, Any]) -> None:
        with self.client("admin") as admin:
            answer = self.request(admin, "admin", "GET", "/metrics")
        if answer is None or answer.status_code != 200:
            self.violate("metrics_equal_database", "-", f"GET /metrics gave {answer and answer.status_code}")
            return
        shown: dict[tuple[str, ...], float] = {}
        for line in answer.text.splitlines():
            found = re.match(r"^(voxcast_jobs|voxcast_script_jobs)\{([^}]*)\} (\S+)$", line)
            if found:
                labels = dict(re.findall(r'(\w+)="([^"]*)"', found[2]))
                group = labels.get("queue", labels.get("task", "?"))
                shown[(found[1], group, labels.get("state", "?"))] = float(found[3])
        counted: Counter[tuple[str, ...]] = Counter(("voxcast_jobs", job.queue, job.state) for job in jobs.values())
        counted.update(("voxcast_script_jobs", row.task, row.state) for row in scripts.values())
        for series in set(shown) | set(counted):
            if shown.get(series, 0.0) != counted.get(series, 0):
                self.violate(
                    "metrics_equal_database",
                    "-",
                    f"{series[0]}{{{series[1]},{series[2]}}} is {shown.get(series, 0.0):g}, "
                    f"the database has {counted.get(series, 0)}",
                )

    def outage_at(self, at: float, kinds: tuple[str, ...]) -> bool:
        return any(
            fault.kind.startswith(kinds) and fault.started <= at <= (fault.ended or at) + OUTAGE_GRACE_SECONDS
            for fault in self.faults
        )

    def check_responses(self) -> None:
        for answer in self.responses:
            what = f"{answer.method} {answer.route} at {answer.at:.1f} s ({answer.key})"
            if answer.status is None:
                if not self.outage_at(answer.at, ("api",)):  # a reset (after a 500, issue 37) or a refusal
                    self.violate("no_5xx_but_503_in_outage", "-", f"{what}: no response ({answer.error})")
            elif answer.status == 503 and self.outage_at(answer.at, (*DEPENDENCY_KINDS, "api")):
                continue
            elif answer.status == 507 and self.outage_at(answer.at, ("disk",)):
                continue
            elif answer.status >= 500:
                self.violate("no_5xx_but_503_in_outage", "-", f"{what}: {answer.status} {answer.error!r}")

    def recovery(self) -> None:
        """Each fault's recovery: from its end until every job it found running progressed (or ended) again (a job
        that never did counts until the run's end). For a PostgreSQL or Redis fault, issue 37's goal is judged per
        job: each job it found let run, unless another fault held that job up too (`held_up`)."""
        end = self.now()
        for fault in self.faults:
            if fault.ended is None or not fault.affected:
                continue
            waits: dict[str, float] = {}
            for job_id in fault.affected:
                entries = self.progress_log.get(job_id, [])
                at_end = [entry for entry in entries if entry[0] <= fault.ended]
                if at_end and at_end[-1][3] in FINAL:
                    continue  # it ended before the fault did
                base = at_end[-1][1:3] if at_end else fault.affected[job_id]
                later = [
                    entry for entry in entries if entry[0] > fault.ended and (entry[1:3] > base or entry[3] in FINAL)
                ]
                waits[job_id] = round((later[0][0] if later else end) - fault.ended, 2)
            fault.recovery_s = max(waits.values()) if waits else None
            if not fault.kind.startswith(DEPENDENCY_KINDS):
                continue
            for job_id, wait in waits.items():
                if job_id not in fault.holders:
                    continue
                if self.held_up(job_id, fault, fault.ended + min(wait, DEPENDENCY_RECOVERY_GOAL_S)):
                    fault.held_up += 1
                else:
                    fault.judged[job_id] = wait

    def recovery_misses(self) -> list[dict[str, Any]]:
        """Each judged job that took longer than the goal, with what the monitor read of it around the fault: the
        evidence to read in the kept logs (`remove`), since a soak's miss is read from them, not run again."""
        misses = []
        for fault in self.faults:
            for job_id, wait in fault.judged.items():
                if wait <= DEPENDENCY_RECOVERY_GOAL_S or fault.ended is None:
                    continue
                submitted = self.submitted.get(job_id)
                window = (fault.started - 5.0, fault.ended + wait + 2.0)
                progress = [
                    [round(at, 2), frames, segments, state]
                    for at, frames, segments, state in self.progress_log.get(job_id, [])
                    if window[0] <= at <= window[1]
                ]
                misses.append(
                    {
                        "job": job_id,
                        "action": submitted.action if submitted else "?",
                        "fault": fault.kind,
                        "fault_s": [round(fault.started, 2), round(fault.ended, 2)],
                        "wait_s": wait,
                        "holder": fault.holders.get(job_id),
                        "progress": progress,  # [seconds into the run, frames, segments, state]
                    }
                )
        return misses

    def held_up(self, job_id: str, fault: Fault, until: float) -> bool:
        """Whether another fault could hold `job_id` up by itself between `fault`'s end and `until`: one under way
        then, or whose aftermath (`AFTERMATH_SECONDS`) reached into that time, that was another dependency's
        outage, a full disk, or a fault of the worker that held the job (an api fault cannot: no worker talks to
        the api)."""
        holder = fault.holders[job_id]
        for other in self.faults:
            aftermath = AFTERMATH_SECONDS.get(self.target_of(other.kind), 0.0)
            if other is fault or other.started > until or (other.ended or until) + aftermath < (fault.ended or 0.0):
                continue
            if other.kind.startswith((*DEPENDENCY_KINDS, "disk")):
                return True
            if other.kind.startswith("worker") and self.services[other.target].hostname == holder:
                return True
        return False

    # --- stopping ----------------------------------------------------------------------------------------------

    def stop_all(self) -> None:
        """Stop every process of the run (planned stops first, kills after), unmount, and find what is left.

        A second Ctrl-C or SIGTERM is ignored meanwhile: the stop is bounded (about a minute at worst), and cut short
        it would leave processes and a mount behind."""
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
        self.stop_event.set()
        self.end_event.set()
        for thread in self.threads:
            thread.join(10)
        for service in self.services.values():
            service.request_stop()
        deadline = time.monotonic() + 15
        for service in self.services.values():
            service.finish_stop(deadline)
        if self.database is not None:
            with contextlib.suppress(Exception):
                self.database.dispose()
        self.redis.stop()
        if self.postgres.running():
            self.postgres.stop("fast")
        time.sleep(1.0)
        self.leftover_processes = self.processes_of_run()
        for entry in self.leftover_processes:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(entry.split()[0]), signal.SIGKILL)
        self.postgres.kill_leftovers()
        self.disk.unmount()

    def processes_of_run(self) -> list[str]:
        """Every process that carries the run's mark in its environment or names its folder: "pid command"."""
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            try:
                command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                environment = (proc / "environ").read_bytes()
            except OSError:
                continue
            if f"CHAOS_RUN_ID={self.run_id}".encode() in environment or str(self.folder) in command:
                found.append(f"{proc.name} {command[:200]}")
        return found

    def remove(self) -> None:
        """Remove the run's folder (unless `--keep`); after a violation or a missed recovery goal, its logs are kept
        first: a half-hour soak's failure is read from them, not run again."""
        if self.args.keep:
            log(f"kept {self.folder}")
            return
        if self.violations or self.recovery_misses():
            kept = Path(f"{self.folder}-logs")
            for source in self.folder.rglob("*.log"):
                target = kept / source.relative_to(self.folder)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
            log(f"violations or recovery misses: the run's logs are kept in {kept}")
        shutil.rmtree(self.folder, ignore_errors=True)

    # --- the report --------------------------------------------------------------------------------------------

    def outcomes(self) -> dict[str, int]:
        outcome: Counter[str] = Counter()
        with self.lock:
            rows = list(self.jobs.values())
            scripts = dict(self.script_rows)
        for row in rows:
            if row.id in self.references.values():
                continue
            kind = SEED_TEMPLATE.get(row.seed or -1, "other")
            kind = "regenerate" if row.revision > 0 else kind
            suffix = "_after_retry" if row.id in self.retried else ""
            outcome[f"{kind}:{row.state}{suffix}"] += 1
        for state, error, _ in scripts.values():
            rejected = state == "failed" and (error or "").startswith("the script model (tiny-random)")
            outcome[f"draft:{'failed_by_model' if rejected else state}"] += 1
        return dict(sorted(outcome.items()))

    def report(self, wall: float) -> dict[str, Any]:
        by_kind: dict[str, list[float]] = defaultdict(list)
        for fault in self.faults:
            if fault.recovery_s is not None:
                by_kind[fault.kind].append(fault.recovery_s)
        statuses = Counter(str(answer.status or answer.error) for answer in self.responses)
        judged = [wait for fault in self.faults for wait in fault.judged.values()]
        return {
            "seed": self.args.seed,
            "minutes": self.args.minutes,
            "wall_s": round(wall, 1),
            "faults_by_kind": dict(Counter(fault.kind for fault in self.faults)),
            "faults_unavailable": self.unavailable,
            "jobs_by_outcome": self.outcomes(),
            "accepted_by_action": dict(Counter(item.action for item in self.submitted.values())),
            "violations": self.violations,
            "violations_by_invariant": dict(Counter(item["invariant"] for item in self.violations)),
            "responses_500": statuses.get("500", 0),
            "responses_by_status": dict(sorted(statuses.items())),
            "recovery_p50_s": {kind: percentile(values, 0.5) for kind, values in sorted(by_kind.items())},
            "recovery_p95_s": {kind: percentile(values, 0.95) for kind, values in sorted(by_kind.items())},
            # issue 37's goal: every running job progressing again within 10 s of PostgreSQL or Redis answering,
            # judged on each job such a fault found let run that no other fault held up (`Run.recovery`)
            "goal_dependency_recovery_within_10s": (
                all(wait <= DEPENDENCY_RECOVERY_GOAL_S for wait in judged) if judged else None  # None: not judged
            ),
            "dependency_recovery_judged": len(judged),
            "dependency_recovery_held_up": sum(fault.held_up for fault in self.faults),
            "dependency_recovery_p95_s": percentile(judged, 0.95),
            "dependency_recovery_worst_s": max(judged, default=None),
            "dependency_recovery_misses": self.recovery_misses(),
            "faults": [
                {
                    **{k: v for k, v in asdict(fault).items() if k not in ("affected", "holders")},
                    "affected": len(fault.affected),
                }
                for fault in self.faults
            ],
            "worker_kills": [
                {
                    "worker": fault.target,
                    "detail": fault.detail,
                    "held": fault.killed_holding,
                    "waiting": fault.killed_waiting,
                    "blind": fault.blind,
                }
                for fault in self.kills
            ],
            "unexpected_exits": self.unexpected_exits,
            "leftover_processes": self.leftover_processes,
            "disk_mb": self.disk.megabytes,
            "data_peak_mb": round(self.data_peak / 2**20, 1),
            "run_problems": self.run_problems(),
        }

    def run_problems(self) -> list[str]:
        """What makes the run prove less than it says, apart from the service: its own data filling the data disk
        makes full-disk answers (507, jobs waiting for space past the drain) that no `disk_full` fault caused."""
        if "disk_full" not in self.unavailable and self.data_peak >= DISK_FULL_SHARE * self.disk.megabytes * 2**20:
            return [
                f"the run's own data filled the data disk ({self.data_peak / 2**20:.0f} of {self.disk.megabytes} MB):"
                " raise --disk-mb"
            ]
        return []


def plot(report: dict[str, Any], path: Path) -> str | None:
    """Recovery seconds of every fault by kind, and the faults on the run's timeline; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    figure, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5))
    kinds = sorted({fault["kind"] for fault in report["faults"]})
    for n, kind in enumerate(kinds):
        values = [f["recovery_s"] for f in report["faults"] if f["kind"] == kind and f["recovery_s"] is not None]
        left.scatter(values, [n] * len(values), s=18)
    left.set_yticks(range(len(kinds)), kinds)
    left.set_xlabel("seconds from the fault's end to every affected job progressing")
    left.set_title("recovery")
    for n, kind in enumerate(kinds):
        for fault in report["faults"]:
            if fault["kind"] == kind and fault["ended"] is not None:
                right.plot([fault["started"], fault["ended"]], [n, n], linewidth=6)
    right.set_yticks(range(len(kinds)), kinds)
    right.set_xlabel("seconds into the run")
    right.set_title(f"faults (seed {report['seed']}); {len(report['violations'])} violations")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return str(path)


def print_report(report: dict[str, Any]) -> None:
    print(f"chaos run: seed {report['seed']}, {report['minutes']} min schedule, {report['wall_s']} s in all")
    print(f"faults by kind: {report['faults_by_kind']}")
    if report["faults_unavailable"]:
        print(f"faults that cannot run here: {report['faults_unavailable']}")
    print(f"accepted by action: {report['accepted_by_action']}")
    print(f"jobs by outcome: {report['jobs_by_outcome']}")
    print(f"responses by status: {report['responses_by_status']} (500s: {report['responses_500']})")
    print(f"recovery p50 / p95 s: {report['recovery_p50_s']} / {report['recovery_p95_s']}")
    print(
        f"every job progressing within 10 s of PostgreSQL or Redis: {report['goal_dependency_recovery_within_10s']} "
        f"(p95 {report['dependency_recovery_p95_s']} s, worst {report['dependency_recovery_worst_s']} s, over "
        f"{report['dependency_recovery_judged']} jobs such faults found running; "
        f"{report['dependency_recovery_held_up']} more were held up by another fault too)"
    )
    for miss in report["dependency_recovery_misses"]:
        print(f"  slow: {miss['action']} job {miss['job']} on {miss['holder']}: {miss['wait_s']} s, {miss['fault']}")
    print(f"data disk: {report['data_peak_mb']} MB of {report['disk_mb']} at most")
    for problem in report["run_problems"]:
        print(f"run problem: {problem}")
    print(f"violations: {len(report['violations'])} {report['violations_by_invariant']}")
    for item in report["violations"][:PRINTED_VIOLATIONS]:
        print(f"  {item['invariant']}: {item['job']}: {item['evidence']}")
    if len(report["violations"]) > PRINTED_VIOLATIONS:
        print(f"  ... and {len(report['violations']) - PRINTED_VIOLATIONS} more (all in the JSON)")


@contextlib.contextmanager
def stopped_on_sigterm() -> Iterator[None]:
    """SIGTERM as Ctrl-C, so that a stopped run still cleans up after itself."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seed", type=int, default=1, help="draws the fault schedule and the mix (default 1)")
    parser.add_argument(
        "--minutes", type=float, default=3.0, help="the schedule's length; 3 or less: every fault kind once (default 3)"
    )
    parser.add_argument("--json", type=Path, help="write the report here, and its plot beside it (.png)")
    parser.add_argument(
        "--disk-mb",
        type=int,
        help="the data folder's tmpfs; default 1024 + 100 a minute of schedule, at least 2048: the short run's mix"
        " wrote 742 MB in 4 minutes here, the soak's 1.4 GB in 35 (a larger disk takes longer to fill)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the run's folder (logs, data) and print it")
    args = parser.parse_args(argv)
    if args.disk_mb is None:
        args.disk_mb = max(2048, round(1024 + 100 * args.minutes))
    run = Run(args)
    started = time.monotonic()
    report: dict[str, Any] | None = None
    with stopped_on_sigterm():
        try:
            run.set_up()
            run.reference_run()
            drivers = [
                threading.Thread(target=run.drive, args=(key, args.seed * 10 + n), name=f"drive-{key}", daemon=True)
                for n, key in enumerate(KEYS)
            ]
            for thread in drivers:
                thread.start()
            plan = run.schedule()
            log(f"schedule: {[(round(at), kind, target, outage) for at, kind, target, outage in plan]}")
            run.run_faults(plan)
            run.drain()
            for thread in drivers:
                thread.join(SPEECH_TIMEOUT + 5)
            run.check()
            run.recovery()
        finally:
            run.stop_all()
            for entry in run.leftover_processes:
                run.violate("no_process_outlives_run", "-", f"still running after the stop: {entry}")
            report = run.report(time.monotonic() - started)
            if args.keep:
                (run.folder / "report.json").write_text(json.dumps(report, indent=2, default=str))
            run.remove()
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
        drawn = plot(report, args.json.with_suffix(".png"))
        print(f"report: {args.json}" + (f", plot: {drawn}" if drawn else " (no plot: matplotlib is not installed)"))
    return 1 if report["violations"] or report["run_problems"] else 0


if __name__ == "__main__":
    sys.exit(main())

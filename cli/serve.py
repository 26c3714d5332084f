"""`voxcast serve`: the api (with the studio at /studio), a worker and a scripts worker on one machine.

The defaults need nothing installed but Redis: the database is a SQLite file and the job files live in the
data folder (VOXCAST_DATA_DIR). Redis is checked first; when it does not answer, one line says how to
start it. `--only api`, `--only worker` or `--only scripts` runs one part (as docker compose does, one
service each).

All of them: the worker runs under a supervisor (`workers.supervisor`) that starts it again when it dies,
while the api stays up and reports it (`/health`, `/v1/admin/workers`); only a worker whose model does not
load stops serve, with one line saying why. The scripts worker (`workers.script_worker`, script jobs only)
runs under a supervisor of its own. SIGTERM (systemd, `docker stop`) and SIGINT (Ctrl-C) stop the
worker, then the api, and exit 0 with no process left behind.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
from types import FrameType
from typing import TYPE_CHECKING

from cli.errors import EXIT_FAILED, EXIT_OK
from core.settings import Settings

if TYPE_CHECKING:
    import uvicorn

    from workers.supervisor import WorkerSupervisor

logger = logging.getLogger(__name__)


class _StopRequested(Exception):
    """SIGTERM arrived: stop like a Ctrl-C (uvicorn hands the signal back once it has shut down)."""


def _stop_requested(signum: int, frame: FrameType | None) -> None:
    raise _StopRequested(signal.Signals(signum).name)


def register(subcommands: argparse._SubParsersAction, settings: Settings) -> None:
    serve = subcommands.add_parser("serve", help="run the api and a worker (Redis required)")
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


def run_serve(args: argparse.Namespace, settings: Settings) -> int:
    problem = redis_problem(settings.redis_url)
    if problem is not None:
        print(
            f"error: no Redis answers at {settings.redis_url} ({problem}); start one with `redis-server` or "
            "`docker compose up -d redis`, or set VOXCAST_REDIS_URL",
            file=sys.stderr,
        )
        return EXIT_FAILED
    from core.db import database_url, upgrade_database

    upgrade_database(database_url(settings))
    command = worker_command(settings, args.max_jobs)
    environment = {**os.environ, "VOXCAST_WORKER_MAX_JOBS": str(args.max_jobs)}  # the worker reads it too
    environment |= {"VOXCAST_WORKER_MODEL": args.model} if args.model else {}
    if args.only in ("worker", "scripts"):
        command = command if args.only == "worker" else scripts_worker_command(settings)
        os.execvpe(command[0], command, environment)
    fatal: list[str] = []
    signal.signal(signal.SIGTERM, _stop_requested)
    supervisor = scripts = None
    if args.only != "api":
        supervisor = _supervisor(command, environment, settings, fatal)
        scripts = _supervisor(scripts_worker_command(settings), environment, settings, fatal)
    try:
        server = _api_server(settings, args.host, args.port, supervisor)
        for part in (supervisor, scripts):
            if part is not None:
                part.start()
        server.run()
    except (KeyboardInterrupt, _StopRequested):
        pass  # uvicorn raises again the signal it has already shut down on: a normal stop
    finally:
        for part in (scripts, supervisor):
            if part is not None:
                part.stop()
    return EXIT_FAILED if fatal else EXIT_OK


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


def redis_problem(url: str) -> str | None:
    """Why Redis at `url` does not answer a PING within two seconds, or None when it does."""
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2).ping()
    except (redis.RedisError, OSError) as error:
        return str(error) or type(error).__name__
    return None


def worker_command(settings: Settings, max_jobs: int | None = None) -> list[str]:
    """A Celery worker consuming both queues of this installation (interactive first): one task thread per job it
    runs at once (`max_jobs`, default `worker_max_jobs`), all feeding its one engine."""
    from workers.celery_app import QUEUE_KINDS, queue_name

    queues = ",".join(queue_name(settings.redis_namespace, kind) for kind in QUEUE_KINDS)
    threads = settings.worker_max_jobs if max_jobs is None else max_jobs
    return [
        sys.executable, "-m", "celery", "-A", "workers.celery_app", "worker",
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


def _api_server(settings: Settings, host: str, port: int, supervisor: WorkerSupervisor | None) -> uvicorn.Server:
    """The api, with the studio (the web UI, an HTTP client of this api) mounted at /studio on the same port."""
    import uvicorn

    from api.app import create_app
    from api.http_protocol import BoundedHttpToolsProtocol
    from webui.app import STUDIO_PATH, local_api_url, mount_studio

    studio_api = settings.webui_api_url or local_api_url(host, port)
    app = mount_studio(create_app(settings, supervisor), studio_api, max_upload_bytes=settings.max_upload_bytes)
    print(f"voxcast: studio at http://{host}:{port}{STUDIO_PATH}/, api at http://{host}:{port}/v1", flush=True)
    config = uvicorn.Config(
        app, host=host, port=port, log_level=settings.log_level.lower(), http=BoundedHttpToolsProtocol
    )
    return uvicorn.Server(config)

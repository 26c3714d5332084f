"""`voxcast serve`: the api (with the studio at /studio) and a worker on one machine, with the embedded defaults.

The defaults need nothing installed but Redis: the database is a SQLite file and the job files live in the
data folder (VOXCAST_DATA_DIR). Redis is checked first; when it does not answer, one line says how to
start it. `--only api` or `--only worker` runs one half (as docker compose does, one service each). When the
worker of a both-halves serve ends on its own (a model that does not load, a crash), the api stops with it.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from typing import TYPE_CHECKING

from cli.errors import EXIT_FAILED, EXIT_OK
from core.settings import Settings

if TYPE_CHECKING:
    import uvicorn

logger = logging.getLogger(__name__)

_WORKER_STOP_SECONDS = 30


def register(subcommands: argparse._SubParsersAction, settings: Settings) -> None:
    serve = subcommands.add_parser("serve", help="run the api and a worker (Redis required)")
    serve.add_argument("--host", default=settings.api_host, help=f"api address (default {settings.api_host})")
    serve.add_argument("--port", type=int, default=settings.api_port, help=f"api port (default {settings.api_port})")
    serve.add_argument("--only", choices=["api", "worker"], help="run only the api or only a worker")
    serve.add_argument(
        "--concurrency",
        type=int,
        default=settings.worker_concurrency,
        help=f"task threads in the worker, all feeding its one engine (default {settings.worker_concurrency})",
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
    command = worker_command(settings, args.concurrency)
    environment = {**os.environ, **({"VOXCAST_WORKER_MODEL": args.model} if args.model else {})}
    if args.only == "worker":
        os.execvpe(command[0], command, environment)
    worker = None if args.only == "api" else subprocess.Popen(command, env=environment)
    server = _api_server(settings, args.host, args.port)
    worker_ended: list[int] = []
    if worker is not None:
        watch = threading.Thread(target=_stop_when_worker_ends, args=(worker, server, worker_ended), daemon=True)
        watch.start()
    try:
        server.run()
    except KeyboardInterrupt:
        pass  # uvicorn raises again the Ctrl-C it has already shut down on: a normal stop
    finally:
        if worker is not None:
            _stop(worker)
    return EXIT_FAILED if worker_ended else EXIT_OK


def _stop_when_worker_ends(worker: subprocess.Popen[bytes], server: uvicorn.Server, ended: list[int]) -> None:
    """A studio whose only worker is gone would take jobs nobody runs: say why, and stop the api too."""
    from workers.tasks import EXIT_MODEL_NOT_LOADED

    status = worker.wait()
    if server.should_exit:  # the api is stopping and stopped it
        return
    ended.append(status)
    why = "its model did not load" if status == EXIT_MODEL_NOT_LOADED else f"exit status {status}"
    print(f"error: the worker stopped ({why}; its log is above), so the api stops too", file=sys.stderr, flush=True)
    server.should_exit = True


def redis_problem(url: str) -> str | None:
    """Why Redis at `url` does not answer a PING within two seconds, or None when it does."""
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2).ping()
    except (redis.RedisError, OSError) as error:
        return str(error) or type(error).__name__
    return None


def worker_command(settings: Settings, concurrency: int) -> list[str]:
    """A Celery worker in threads (one engine per process), consuming both queues of this installation."""
    from workers.celery_app import QUEUE_KINDS, queue_name

    queues = ",".join(queue_name(settings.redis_namespace, kind) for kind in QUEUE_KINDS)
    return [
        sys.executable, "-m", "celery", "-A", "workers.celery_app", "worker",
        "--pool", "threads", "--concurrency", str(concurrency), "--queues", queues,
        "--hostname", f"voxcast@{socket.gethostname()}", "--without-gossip", "--without-mingle",
        "--loglevel", settings.log_level,
    ]  # fmt: skip


def _api_server(settings: Settings, host: str, port: int) -> uvicorn.Server:
    """The api, with the studio (the web UI, an HTTP client of this api) mounted at /studio on the same port."""
    import uvicorn

    from api.app import create_app
    from api.http_protocol import BoundedHttpToolsProtocol
    from webui.app import STUDIO_PATH, local_api_url, mount_studio

    studio_api = settings.webui_api_url or local_api_url(host, port)
    app = mount_studio(create_app(settings), studio_api, max_upload_bytes=settings.max_upload_bytes)
    print(f"voxcast: studio at http://{host}:{port}{STUDIO_PATH}/, api at http://{host}:{port}/v1", flush=True)
    config = uvicorn.Config(
        app, host=host, port=port, log_level=settings.log_level.lower(), http=BoundedHttpToolsProtocol
    )
    return uvicorn.Server(config)


def _stop(worker: subprocess.Popen[bytes]) -> None:
    """A warm shutdown: running jobs finish their step; a job cut short resumes from its stored segments."""
    worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(_WORKER_STOP_SECONDS)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()

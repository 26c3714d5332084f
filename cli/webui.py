"""`voxcast webui`: the studio alone, in a process of its own, calling an api elsewhere over HTTP.

`voxcast serve` already serves the studio at /studio of its api; this command is for running the two
apart (another machine, another container). An api that does not answer yet is reported in one line; the
studio starts anyway and says so on the page until it does.
"""

from __future__ import annotations

import argparse
import sys

from cli.errors import EXIT_OK
from core.settings import Settings

_API_CHECK_SECONDS = 2.0


def register(subcommands: argparse._SubParsersAction, settings: Settings) -> None:
    default_api = settings.webui_api_url or f"http://127.0.0.1:{settings.api_port}"
    webui = subcommands.add_parser("webui", help="run the studio (web UI) against an api")
    webui.add_argument("--api-url", default=default_api, help=f"the api the studio calls (default {default_api})")
    webui.add_argument("--host", default=settings.webui_host, help=f"address (default {settings.webui_host})")
    webui.add_argument("--port", type=int, default=settings.webui_port, help=f"port (default {settings.webui_port})")
    webui.set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from webui.app import STUDIO_PATH, studio_app

    problem = api_problem(args.api_url)
    if problem is not None:
        print(f"warning: no api answers at {args.api_url} ({problem}); starting the studio anyway", file=sys.stderr)
    app = studio_app(args.api_url, max_upload_bytes=settings.max_upload_bytes)
    print(f"voxcast studio: http://{args.host}:{args.port}{STUDIO_PATH}/ (api: {args.api_url})", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=settings.log_level.lower())
    return EXIT_OK


def api_problem(api_url: str) -> str | None:
    """Why the api's /healthz does not answer 200 within two seconds, or None when it does."""
    import httpx

    try:
        response = httpx.get(f"{api_url.rstrip('/')}/healthz", timeout=_API_CHECK_SECONDS)
    except httpx.HTTPError as error:
        return str(error) or type(error).__name__
    return None if response.status_code == 200 else f"/healthz answered {response.status_code}"

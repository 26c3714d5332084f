"""CORS on the feed routes alone: a browser player (a web podcast app, a Podcasting 2.0 player on a page) reads a
show's feed, transcripts and chapters from another origin, as the podcast namespace asks feeds to allow.

Those routes are reached by the feed's token and carry no key, no cookie and nothing a page could not fetch anyway,
so any origin may read them (`Access-Control-Allow-Origin: *`, never with credentials). Every other route keeps
its key and gets no CORS header at all: a page on another origin cannot read what a key fetches, nor send the
preflight a bearer header needs. Starlette's `CORSMiddleware` answers, only for paths under `FEEDS_PREFIX`.
"""

from __future__ import annotations

from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

FEEDS_PREFIX = "/feeds"  # the token-reached routes (`api.routes.feeds`)
FEED_METHODS = ("GET", "HEAD")
# What a player sends: byte ranges of an enclosure, and the conditional requests a feed and its files answer.
FEED_REQUEST_HEADERS = ("Range", "If-None-Match", "If-Modified-Since", "If-Range")
# What it reads beyond the headers every page may read (Content-Type, Content-Length, Last-Modified, ...).
FEED_EXPOSED_HEADERS = ("ETag", "Accept-Ranges", "Content-Range")


class FeedCorsMiddleware:
    """Starlette's CORS for any origin on the feed routes; every other path passes through untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.cors = CORSMiddleware(
            app,
            allow_origins=["*"],
            allow_methods=FEED_METHODS,
            allow_headers=FEED_REQUEST_HEADERS,
            expose_headers=FEED_EXPOSED_HEADERS,
            max_age=86_400,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and _route_path(scope).startswith(FEEDS_PREFIX + "/"):
            await self.cors(scope, receive, send)
        else:
            await self.app(scope, receive, send)


def _route_path(scope: Scope) -> str:
    """The path the routes match (the request's, less the app's root path when it is mounted under one)."""
    path, root = scope["path"], scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root + "/") else path

"""A script job's server-sent events: its state now, each attempt of the script model as it goes, its end.

Events (each `data:` is JSON):
- `state`: the whole script job (as `GET /v1/scripts/{id}` shows it), first on connecting and on every state
  change; a final state (done, failed, cancelled) is the last event before the stream closes.
- `attempt`: `{"attempt": n, "rejected": null}` when the model starts its n-th reply, and again with
  `rejected` set to the reason once that reply was refused (the next attempt follows, or the job fails).

The row is the record (the worker writes every attempt into it); the worker's message on the job's Redis
channel only says when to read it again, and the row is read every second anyway, so a missed message (or
no Redis) delays an event by a second at most and loses none.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import anyio
from fastapi.sse import format_sse_event
from starlette.concurrency import run_in_threadpool

from api.deps import ApiServices, Caller
from api.errors import NotFound
from api.schemas import ScriptAttemptView, ScriptView
from api.services.channel_subscription import ChannelSubscription
from api.services.script_jobs import owned_script, script_view
from core.job_events import script_channel
from core.job_states import FINAL_STATES

POLL_SECONDS = 1.0
KEEPALIVE_SECONDS = 15.0


def read_script_view(services: ApiServices, caller: Caller, script_id: str) -> ScriptView:
    """The script job as its owner sees it; NotFound for anyone else (raised before any event is sent)."""
    with services.database.reading() as session:
        return script_view(owned_script(session, caller, script_id))


async def script_event_stream(services: ApiServices, caller: Caller, script_id: str) -> AsyncIterator[bytes]:
    """The job's events until its final state (or until it is deleted)."""
    namespace = services.settings.redis_namespace
    subscription = ChannelSubscription(services.redis, script_channel(namespace, script_id), "script events")
    await subscription.open()
    try:
        view = await run_in_threadpool(read_script_view, services, caller, script_id)
        yield _state(view)
        last_sent = time.monotonic()
        while view.state not in FINAL_STATES:
            await _wait(subscription)
            try:
                previous, view = view, await run_in_threadpool(read_script_view, services, caller, script_id)
            except NotFound:  # deleted meanwhile: the stream ends, as it does at a final state
                return
            for attempt in _changed_attempts(previous.attempts, view.attempts):
                yield format_sse_event(data_str=attempt.model_dump_json(), event="attempt")
                last_sent = time.monotonic()
            if view.state != previous.state:
                yield _state(view)
                last_sent = time.monotonic()
            if time.monotonic() - last_sent >= KEEPALIVE_SECONDS:
                yield format_sse_event(comment="keep-alive")
                last_sent = time.monotonic()
    finally:
        await subscription.close()


def _changed_attempts(before: list[ScriptAttemptView], after: list[ScriptAttemptView]) -> list[ScriptAttemptView]:
    """The attempts that are new or changed (an attempt's verdict arrives after its start)."""
    return [attempt for index, attempt in enumerate(after) if index >= len(before) or before[index] != attempt]


async def _wait(subscription: ChannelSubscription) -> None:
    """Until the worker says the row changed, or POLL_SECONDS passed."""
    deadline = time.monotonic() + POLL_SECONDS
    while (left := deadline - time.monotonic()) > 0:
        if not subscription.alive:
            await anyio.sleep(left)
        elif await subscription.next_message(left) is not None:
            return


def _state(view: ScriptView) -> bytes:
    return format_sse_event(data_str=view.model_dump_json(), event="state")

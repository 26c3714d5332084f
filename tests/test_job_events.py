"""A worker's event publisher against a Redis that hangs: it gives up within its timeout, then stays quiet.

The silent server is a real listening socket that never answers (the kernel accepts the connection, nobody
reads), which is what a wedged Redis looks like to a client.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from core.job_events import EventPublisher, StateEvent


@pytest.fixture
def silent_server() -> Iterator[int]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    yield listener.getsockname()[1]
    listener.close()


def test_a_hung_redis_costs_one_timeout_then_events_pause(silent_server: int) -> None:
    publisher = EventPublisher.from_url(f"redis://127.0.0.1:{silent_server}/0", "test", timeout_seconds=0.3)
    event = StateEvent(state="running")

    started = time.monotonic()
    publisher.publish("job", event)  # waits for the timeout, logs, raises nothing
    first = time.monotonic() - started
    assert 0.25 <= first < 2.0

    started = time.monotonic()
    for _ in range(20):
        publisher.publish("job", event)  # paused: no more waiting on the hung server
    assert time.monotonic() - started < 0.1
    assert publisher.paused_until > time.monotonic()


def test_events_reach_a_live_redis(service_redis_url: str) -> None:
    import redis

    client = redis.Redis.from_url(service_redis_url)
    subscription = client.pubsub()
    subscription.subscribe("test-events:job-events:job")
    subscription.get_message(timeout=1)  # the subscribe confirmation
    EventPublisher.from_url(service_redis_url, "test-events").publish("job", StateEvent(state="done"))
    message = subscription.get_message(timeout=2)
    assert message is not None and b'"state":"done"' in message["data"]
    subscription.close()

"""A worker's event publisher against a Redis that hangs: it gives up within its timeout, then stays quiet.

The silent server is a real listening socket that never answers (the kernel accepts the connection, nobody
reads), which is what a wedged Redis looks like to a client.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from core.job_events import EventPublisher, StateEvent
from tests.waiting import wait_until


class SilentServer:
    """A listening socket that reads whatever a client sends and never answers; counts what it was sent."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        self.received = 0
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return  # closed
            self.connections.append(connection)
            threading.Thread(target=self._drain, args=(connection,), daemon=True).start()

    def _drain(self, connection: socket.socket) -> None:
        while chunk := _receive(connection):
            self.received += len(chunk)

    def close(self) -> None:
        self.listener.close()
        for connection in self.connections:
            connection.close()


def _receive(connection: socket.socket) -> bytes:
    try:
        return connection.recv(65536)
    except OSError:
        return b""


@pytest.fixture
def silent_server() -> Iterator[SilentServer]:
    server = SilentServer()
    yield server
    server.close()


def test_a_hung_redis_costs_one_timeout_then_events_pause(silent_server: SilentServer) -> None:
    """The first event waits for the client's timeout and is dropped (nothing raised); while events are paused the
    next ones are dropped without reaching the hung server at all."""
    publisher = EventPublisher.from_url(f"redis://127.0.0.1:{silent_server.port}/0", "test", timeout_seconds=0.3)
    event = StateEvent(state="running")

    publisher.publish("job", event)  # waits for the timeout, logs, raises nothing
    assert publisher.paused_until > time.monotonic()
    sent = wait_until(lambda: silent_server.received, "the first event to reach the hung server")

    for _ in range(20):
        publisher.publish("job", event)  # paused: dropped here, never sent
    assert silent_server.received == sent


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

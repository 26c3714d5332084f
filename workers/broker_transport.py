"""kombu's Redis transport, with one repair: a consumer whose connection broke does not die closing it.

Celery (5.7) closes a broken broker connection before it reconnects; closing the channel tries to put the messages
it had delivered and not yet acknowledged back in their queue, through that same connection, whose client kombu
has already cleared: `AttributeError: 'NoneType' object has no attribute 'hostname'`, which Celery takes for an
unrecoverable error, and the worker exits. Every Redis restart under running jobs ended every worker so (found by
`bench/chaos.py`; reproduced with a bare Celery app, acks late and a task in flight).

Here the channel's acknowledgements and restores go through a client of its own, made while its connection was
whole (a redis-py client reconnects by itself), once kombu has cleared the connection: closing the broken channel
puts its deliveries back in their queue as it should (a job still running meets its second delivery held, and does
nothing: `core.job_repository.claim_job`), a job that ends later acknowledges its delivery, and the consumer
reconnects as after any other connection error. The app names this transport (`broker_transport` in
`workers.celery_app`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kombu.transport import redis as kombu_redis


class QoS(kombu_redis.QoS):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._own_client = self.channel._create_client()  # built while the connection is whole; it outlives a close

    def _connection_gone(self) -> bool:
        transport = self.channel.connection
        return transport is None or transport.client is None

    @contextmanager
    def pipe_or_acquire(self, pipe: Any = None, client: Any = None) -> Iterator[Any]:
        if pipe is None and client is None and self._connection_gone():
            yield self._own_client.pipeline()
            return
        with super().pipe_or_acquire(pipe, client) as chosen:
            yield chosen

    def restore_unacked(self, client: Any = None) -> None:
        if client is None and self._connection_gone():
            client = self._own_client
        super().restore_unacked(client)


class Channel(kombu_redis.Channel):
    QoS = QoS


class Transport(kombu_redis.Transport):
    Channel = Channel

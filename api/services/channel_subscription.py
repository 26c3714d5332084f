"""A stream's Redis pub/sub channel, which it lives without once Redis fails.

Both event streams (a job's, `api.services.event_stream`, and a script job's, `api.services.script_event_stream`)
subscribe before they read their row, so nothing falls between the two, and wake on the worker's messages; the
row is read every second anyway, so a Redis that is down or goes away only makes events come by the second.
"""

from __future__ import annotations

import logging

import redis
import redis.asyncio

logger = logging.getLogger(__name__)


class ChannelSubscription:
    """One channel's messages while Redis answers; `alive` turns False (for good) at its first failure."""

    def __init__(self, client: redis.asyncio.Redis, channel: str, what: str) -> None:
        self.pubsub = client.pubsub()
        self.channel = channel
        self.what = what  # "job events": what the warnings say is read from the database instead
        self.alive = False

    async def open(self) -> None:
        try:
            await self.pubsub.subscribe(self.channel)
            self.alive = True
        except (redis.RedisError, OSError) as error:
            logger.warning(f"no Redis for {self.what}; reading the database", extra={"error": str(error)})

    async def next_message(self, timeout: float) -> bytes | None:
        """The next message's data within `timeout` seconds; None if none came (or Redis is gone)."""
        if not self.alive:
            return None
        try:
            message = await self.pubsub.get_message(ignore_subscribe_messages=True, timeout=timeout)
        except (redis.RedisError, OSError) as error:
            logger.warning(f"lost Redis for {self.what}; reading the database", extra={"error": str(error)})
            self.alive = False
            return None
        return None if message is None else message["data"]

    async def close(self) -> None:
        try:
            await self.pubsub.aclose()
        except (redis.RedisError, OSError):
            pass

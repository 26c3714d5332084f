"""Requests per minute per API key, shared by every api process through Redis.

The limit is a generic cell rate algorithm (GCRA) in one Lua script: each key holds one Redis value, its
theoretical arrival time. A key may send `max_requests_per_minute` requests at once and then one every
60 / limit seconds; a refused request learns when the next one will be admitted (`Retry-After`). The clock
is Redis's own `TIME`, so api processes on different machines agree on it.

When Redis does not answer within half a second, the request is admitted, and so is every request of the
next five seconds without asking it again: the api keeps serving without Redis (job events fall back to the
database, sends to the sweeper), and a missing limiter should turn that neither into an outage nor into half
a second more on every request.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time

import redis
import redis.asyncio

logger = logging.getLogger(__name__)

_MICROSECONDS_PER_MINUTE = 60_000_000
_REDIS_TIMEOUT_SECONDS = 0.5
_REDIS_RETRY_SECONDS = 5.0

# KEYS[1]: the key's theoretical arrival time (microseconds). ARGV[1]: microseconds between requests at the
# sustained rate. Returns 0 when the request is admitted, else the microseconds until one would be.
_GCRA = """
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000000 + tonumber(now[2])
local interval = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local after = tat + interval
if after - now > window then
  return math.ceil(after - now - window)
end
redis.call('SET', KEYS[1], string.format('%d', after), 'PX', math.ceil((after - now) / 1000) + 1)
return 0
"""


class RateLimiter:
    """Admits or refuses one request of an API key against `per_minute` (0: every request is admitted)."""

    def __init__(self, client: redis.asyncio.Redis, namespace: str, per_minute: int) -> None:
        self.per_minute = per_minute
        self._namespace = namespace
        self._script = client.register_script(_GCRA)
        self._unchecked_until = 0.0  # after Redis failed: admit without asking until then

    async def seconds_to_wait(self, key_id: int) -> int:
        """0 when this request is admitted (and counted), else the whole seconds until the next one is."""
        if self.per_minute <= 0 or time.monotonic() < self._unchecked_until:
            return 0
        interval = _MICROSECONDS_PER_MINUTE // self.per_minute
        try:
            wait = await asyncio.wait_for(
                self._script(keys=[f"{self._namespace}:rate:{key_id}"], args=[interval, _MICROSECONDS_PER_MINUTE]),
                _REDIS_TIMEOUT_SECONDS,
            )
        except (redis.RedisError, OSError, TimeoutError) as error:
            self._unchecked_until = time.monotonic() + _REDIS_RETRY_SECONDS
            logger.warning(
                "no Redis for the request rate limit; admitting requests for a while",
                extra={"error": str(error) or type(error).__name__, "seconds": _REDIS_RETRY_SECONDS},
            )
            return 0
        return math.ceil(int(wait) / 1_000_000)

"""A worker's announcement of itself: every `heartbeat_seconds`, its status into Redis (see `core.worker_presence`).

It runs in a daemon thread beside the engine (`workers.periodic`), and a Redis that does not answer only costs the
announcement (the admin list misses the worker for a while); jobs never wait on it. The announcement names this
process's loops that have stopped completing rounds (`stalled_loops`), so `/health` can say so.
"""

from __future__ import annotations

import os
import socket

import redis

from core.models import utc_now
from core.worker_presence import EXPIRY_HEARTBEATS, WorkerStatus, worker_key
from workers.engine_host import worker_engine
from workers.periodic import Periodic, stalled_loops
from workers.worker_services import WorkerServices, process_name


class Presence:
    """Writes this worker's status now and every `heartbeat_seconds` after, until `stop()`."""

    def __init__(self, services: WorkerServices) -> None:
        self.services = services
        self.client = redis.Redis.from_url(services.settings.redis_url)
        self.name = process_name()
        self.started_at = utc_now()
        settings = services.settings
        self.key = worker_key(settings.redis_namespace, self.name)
        self.expiry = max(1, round(EXPIRY_HEARTBEATS * settings.heartbeat_seconds))
        self._loop = Periodic("voxcast-presence", settings.heartbeat_seconds, self._announce)

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        """Stop announcing and withdraw the status, so a worker shut down cleanly leaves the list at once."""
        self._loop.stop()
        try:
            self.client.delete(self.key)
        except redis.RedisError:
            pass  # it expires by itself

    def status(self) -> WorkerStatus:
        engine = worker_engine(self.services.engine())
        load = engine.load
        return WorkerStatus(
            name=self.name,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            model=engine.model,
            device=engine.device,
            dtype=engine.dtype,
            chars_per_token=engine.chars_per_token,
            model_name=engine.context.name,
            context_tokens=engine.context.tokens,
            slots=load.rows,
            slots_in_use=load.rows_in_use,
            waiting=load.waiting,
            kv_blocks=load.kv_blocks,
            kv_blocks_in_use=load.kv_blocks_in_use,
            kv_block_tokens=load.block_size,
            longest_generation_tokens=load.longest_generation,
            preemptions=load.preemptions,
            frames_per_second=round(self.services.metrics.frames_per_second(), 2),
            step_mode=load.fast_path.mode.value,
            step_mode_reason=load.fast_path.reason,
            cuda_graphs=load.fast_path.graphs,
            warm_up_seconds=load.warm_up_seconds,
            kv_read_ratio=load.key_reads.ratio,
            stalled_loops=stalled_loops(),
            started_at=self.started_at,
            seen_at=utc_now(),
        )

    def _announce(self) -> None:
        """Redis down for a moment: the round fails (logged by the loop), and the list misses this worker until the
        next one."""
        self.client.set(self.key, self.status().model_dump_json(), ex=self.expiry)

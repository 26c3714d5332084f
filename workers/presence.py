"""A worker's announcement of itself: every `heartbeat_seconds`, its status into Redis (see `core.worker_presence`).

It runs in a daemon thread beside the engine, and a Redis that does not answer only costs the announcement
(the admin list misses the worker for a while); jobs never wait on it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading

import redis

from core.models import utc_now
from core.worker_presence import EXPIRY_HEARTBEATS, WorkerStatus, worker_key
from workers.engine_host import worker_engine
from workers.worker_services import WorkerServices, process_name

logger = logging.getLogger(__name__)


class Presence:
    """Writes this worker's status now and every `heartbeat_seconds` after, until `stop()`."""

    def __init__(self, services: WorkerServices) -> None:
        self.services = services
        self.client = redis.Redis.from_url(services.settings.redis_url)
        self.name = process_name()
        self.started_at = utc_now()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="voxcast-presence", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop announcing and withdraw the status, so a worker shut down cleanly leaves the list at once."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

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
            started_at=self.started_at,
            seen_at=utc_now(),
        )

    def _run(self) -> None:
        settings = self.services.settings
        key = worker_key(settings.redis_namespace, self.name)
        expiry = max(1, round(EXPIRY_HEARTBEATS * settings.heartbeat_seconds))
        while True:
            try:
                self.client.set(key, self.status().model_dump_json(), ex=expiry)
            except Exception:  # Redis down for a moment: the list misses this worker until the next beat
                logger.warning("could not announce the worker", exc_info=True)
            if self._stop.wait(settings.heartbeat_seconds):
                break
        try:
            self.client.delete(key)
        except redis.RedisError:
            pass  # it expires by itself

"""Which workers are alive and how busy they are: each worker announces itself in Redis, the api reads it.

A worker process writes one key, `<namespace>:workers:<host>:<pid>`, holding its `WorkerStatus` as JSON, every
`heartbeat_seconds`, with an expiry of a few heartbeats: a worker that dies drops out of the list by itself and
nothing needs cleaning up. Redis rather than the database, because the status changes every few seconds and is
worth nothing once stale.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

EXPIRY_HEARTBEATS = 3  # a status outlives this many missed heartbeats, then it is gone


class WorkerStatus(BaseModel):
    """One worker process: where it runs, its engine's device and model, and the slots it has in use."""

    model_config = ConfigDict(frozen=True)

    name: str  # "<host>:<pid>", the prefix of the `worker` column of the jobs it holds
    hostname: str
    pid: int
    model: str
    device: str  # the GPU's name (torch.cuda.get_device_name), or "cpu"
    dtype: str
    slots: int
    slots_in_use: int
    waiting: int  # generation requests waiting for a free slot
    started_at: datetime
    seen_at: datetime


def worker_key(namespace: str, name: str) -> str:
    return f"{namespace}:workers:{name}"


def worker_key_pattern(namespace: str) -> str:
    """A Redis SCAN pattern matching every worker's key in this installation."""
    return worker_key(namespace, "*")

"""Which workers are alive and how busy they are: each worker announces itself in Redis, the api reads it.

A worker process writes one key, `<namespace>:workers:<host>:<pid>`, holding its `WorkerStatus` as JSON, every
`heartbeat_seconds`, with an expiry of a few heartbeats: a worker that dies drops out of the list by itself and
nothing needs cleaning up. Redis rather than the database, because the status changes every few seconds and is
worth nothing once stale.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal, Protocol

import redis
from pydantic import BaseModel, ConfigDict, Field

from core.settings import Settings

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
    slots: int  # requests its engine batches side by side (rows)
    slots_in_use: int
    waiting: int  # generation requests waiting for a row and K/V blocks
    kv_blocks: int  # blocks of its engine's K/V pool
    kv_blocks_in_use: int
    kv_block_tokens: int  # tokens a block holds
    longest_generation_tokens: int  # prompt and new tokens one generation may reach here (context and pool allowing)
    chars_per_token: float  # its tokenizer's rate on English: the api estimates prompt lengths with it
    # Its model as a length limit (`script_text.plan.ModelContext`): the published member it is ("VibeVoice-Large"),
    # else its source, and its context; the api refuses a generation past it naming both. None: a worker from
    # before it announced them.
    model_name: str = ""
    context_tokens: int | None = None
    preemptions: int  # requests preempted (and replayed) since it started
    frames_per_second: float = 0.0  # frames its engine made a second, over its metrics' last window
    step_mode: str = "eager"  # how its engine decodes: "graphs", "fixed" or "eager" (pipeline.engine StepMode)
    step_mode_reason: str = ""  # why: as configured, or what made it fall back at warm-up or since
    cuda_graphs: int = 0  # decode-step CUDA graphs its engine holds
    warm_up_seconds: float | None = None  # capturing graphs and checking the fast path, before its first job
    kv_read_ratio: float | None = None  # K/V entries attention read per entry its rows could see (1.0 at best)
    stalled_loops: list[str] = []  # its background loops (sweeper, announcements) not completing rounds in time
    started_at: datetime
    seen_at: datetime


def worker_key(namespace: str, name: str) -> str:
    return f"{namespace}:workers:{name}"


def withdraw(settings: Settings, name: str) -> None:
    """Remove worker `name`'s announcement now (it stopped, or died and its supervisor knows it)."""
    redis.Redis.from_url(settings.redis_url, socket_timeout=2, socket_connect_timeout=2).delete(
        worker_key(settings.redis_namespace, name)
    )


def worker_key_pattern(namespace: str) -> str:
    """A Redis SCAN pattern matching every worker's key in this installation."""
    return worker_key(namespace, "*")


SupervisedWorkerState = Literal["starting", "running", "restarting", "stopped"]


class SupervisedWorker(BaseModel):
    """The worker `voxcast serve` supervises (`workers.supervisor`): running, or waiting to be started again."""

    model_config = ConfigDict(frozen=True)

    state: SupervisedWorkerState
    pid: int | None = Field(description="the running worker's process id")
    restarts: int = Field(description="times the worker was started again after it died")
    started_at: datetime | None = Field(description="when the current (or last) worker process started")
    last_exit: str | None = Field(description='how the last worker ended: "killed by SIGSEGV", "exit status 1"')
    last_exit_status: int | None = Field(description="its exit status; negative: the signal that killed it")
    last_exit_jobs: list[str] = Field(description="the jobs it was running when it ended")
    last_exit_at: datetime | None
    next_start_in_seconds: float | None = Field(description="while restarting: when the next worker starts")


class WorkerSupervision(Protocol):
    """What the api may ask of the supervisor it runs beside (in `voxcast serve`): the worker's state."""

    def status(self) -> SupervisedWorker: ...

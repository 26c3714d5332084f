"""The states a job and its segments go through, and the queues a job waits in: the words every layer shares.

Plain enums, importable without SQLAlchemy or Celery, so the api's schemas and the studio (an HTTP client) name
them without loading the database or the broker's client; `core.models` stores them and `workers.celery_app` maps
the queue kinds to its queues.
"""

from __future__ import annotations

import enum
from typing import Literal


class JobState(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATES


FINAL_STATES = frozenset({JobState.DONE, JobState.FAILED, JobState.CANCELLED})


class SegmentState(enum.StrEnum):
    PENDING = "pending"
    DONE = "done"


QueueKind = Literal["interactive", "batch"]  # interactive: short jobs and speech, served first
QUEUE_KINDS: tuple[QueueKind, ...] = ("interactive", "batch")


def queue_kind(value: str) -> QueueKind:
    """A job row's `queue` column as the `QueueKind` it holds; ValueError for anything else."""
    for kind in QUEUE_KINDS:
        if value == kind:
            return kind
    raise ValueError(f"{value!r} is not a queue kind (one of {', '.join(QUEUE_KINDS)})")

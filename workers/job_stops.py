"""Why a running job stops before its end, and the check that stops it, once per engine step.

A job stops when its cancel is asked for, when another worker holds it now (its lease was lost), or when its worker
is asked to stop (a planned stop: the job hands itself back). Each is an exception `workers.job_execution` turns
into the job's outcome; so are a failed segment and a dead engine.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from core.job_repository import ClaimedJob


class JobCancelled(Exception):
    """The job's cancel flag was set; raised by the job's check after an engine step, to stop all its segments."""


class LeaseLost(Exception):
    """Another worker holds the job now (this one was presumed dead); stop without touching the job."""


class Stopping(Exception):
    """The worker was asked to stop while the job ran: the job hands itself back."""


class GenerationFailed(Exception):
    """A segment failed (the engine's reason, or no audio at all): the job fails with it."""


class EngineDied(Exception):
    """The worker's engine loop died: no job of this process can run. The job is not at fault and is left as it
    is; the process must end (`workers.tasks`), so that it is restarted and its jobs run again."""


class HandedBack(Exception):
    """The job was queued again because its worker is stopping on purpose; the task sends its message again."""

    def __init__(self, job: ClaimedJob) -> None:
        super().__init__(job.id)
        self.job = job


@dataclass(frozen=True)
class JobStops:
    """What stops a running job: its lease lost, its cancel asked for, or its worker asked to stop."""

    job_id: str
    lease_lost: threading.Event
    cancelled: threading.Event
    stopping: threading.Event

    def check(self) -> None:
        """Raise `LeaseLost`, `JobCancelled` or `Stopping` if the job must stop now."""
        if self.lease_lost.is_set():
            raise LeaseLost(self.job_id)
        if self.cancelled.is_set():
            raise JobCancelled(self.job_id)
        if self.stopping.is_set():
            raise Stopping(self.job_id)

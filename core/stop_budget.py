"""A planned stop's budget: from SIGTERM (or SIGINT) to the last process gone, well inside docker's 10 s grace.

`voxcast serve` stops in three stages, one after another, against one deadline set when the signal arrives
(`StopDeadline`, `STOP_SECONDS` later). Each stage takes what is left of it less what the stages after it are kept,
so the stop as a whole ends by the deadline however long any stage would take:

    stage                    ends at the latest       then
    both workers, at once    deadline - 3 s (at 5 s)  SIGKILL; serve hands back what a killed worker still held
    the api                  deadline - 1 s           its open requests and event streams are cut (2 s at most)
    the private Redis        deadline (at 8 s)        SIGKILL (what it acknowledged is written already)

The 2 s between the deadline and docker's SIGKILL are for what no deadline bounds: a killed process's exit, the
interpreter's start and end, two busy cores. A worker also bounds its own planned stop (`WORKER_STOP_SECONDS` from
its SIGTERM, half a second before serve would kill it), since alone (compose runs one per container) or with serve
gone nobody else would: within it every running job hands itself back, its partial frames stored, in about an engine
step (with 16 jobs on two busy cores the whole tree is gone 2 to 3 s after the signal: `tests/test_planned_stop.py`
prints the figures); at the bound the worker hands back in the database whatever it still holds and ends.
"""

from __future__ import annotations

import time

STOP_SECONDS = 8.0  # from the signal to the last of serve's processes gone
API_STOP_SECONDS = 2.0  # the api's share: open requests and event streams, at most
BROKER_STOP_SECONDS = 1.0  # the private Redis's share: it writes its append-only file and ends, in milliseconds
WORKER_KILL_SECONDS = STOP_SECONDS - API_STOP_SECONDS - BROKER_STOP_SECONDS  # serve kills a worker still there then
WORKER_STOP_SECONDS = WORKER_KILL_SECONDS - 0.5  # a worker's own bound, from its SIGTERM


class StopDeadline:
    """A planned stop's one deadline, shared by its stages: set by the first `begin` (when the stop signal arrives),
    or else by the first stage that asks what is left (a stop with no signal: serve ending on an error)."""

    def __init__(self, seconds: float = STOP_SECONDS) -> None:
        self.seconds = seconds
        self._at: float | None = None

    def begin(self) -> None:
        """The stop begins now, unless it already has. Called from signal handlers: takes no lock."""
        if self._at is None:
            self._at = time.monotonic() + self.seconds

    def left(self, kept: float = 0.0) -> float:
        """Seconds a stage may take from now: what is left until the deadline, less `kept` for the stages after it."""
        self.begin()
        assert self._at is not None
        return max(0.0, self._at - kept - time.monotonic())

"""A daemon thread that does one round of work now and every `interval` seconds after, until stopped.

The sweepers, retention (in the sweeper's rounds) and a worker's announcements run this way. A round that fails
(Redis or the database away for a moment) is logged and tried again sooner, backing off from `FIRST_RETRY_SECONDS`
up to `interval`, so a blip never ends the thread and its end is noticed within seconds. Anything that escapes a
round, even from the logging of its failure, is caught too: the loop goes on. Each loop remembers when it last
completed a round; `stalled_loops` names those that have not for `stall_after` seconds (or whose thread is gone), and
a worker's announcement carries them to `/health`.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable

logger = logging.getLogger(__name__)

FIRST_RETRY_SECONDS = 1.0
_STALL_ROUNDS = 3  # a loop is stalled once this many of its intervals passed without a completed round
_MIN_STALL_SECONDS = 30.0

_loops: weakref.WeakSet[Periodic] = weakref.WeakSet()


class Periodic:
    """`work` now, then every `interval` seconds in a daemon thread named `name`, until `stop()`."""

    def __init__(self, name: str, interval: float, work: Callable[[], object]) -> None:
        self.name = name
        self.interval = interval
        self.work = work
        self.stall_after = max(_STALL_ROUNDS * interval, _MIN_STALL_SECONDS)
        self.round_completed_at: float | None = None  # monotonic time of the last completed round
        self.loop_started_at: float | None = None
        self._failures = 0  # rounds failed in a row
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self.loop_started_at = time.monotonic()
        _loops.add(self)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        _loops.discard(self)
        if self._thread.is_alive():
            self._thread.join()

    def stalled(self, now: float) -> bool:
        """No round completed for `stall_after` seconds (since its start, before the first), or its thread is gone."""
        if self.loop_started_at is None or self._stop.is_set():
            return False
        if not self._thread.is_alive():
            return True
        return now - (self.round_completed_at or self.loop_started_at) > self.stall_after

    def _run(self) -> None:
        while True:
            self._run_round()
            if self._stop.wait(self._next_wait()):
                return

    def _run_round(self) -> None:
        try:
            self.work()
        except BaseException:  # a blip, or anything else (SystemExit from a library too): this loop outlives it
            self._failures += 1
            try:
                logger.warning(
                    "round failed; retrying",
                    extra={"loop": self.name, "failures": self._failures, "retry_in_s": self._next_wait()},
                    exc_info=True,
                )
            except Exception:  # not even the log line may end the loop
                pass
            return
        self._failures = 0
        self.round_completed_at = time.monotonic()

    def _next_wait(self) -> float:
        """`interval` after a completed round; after failed ones, 1 s, 2 s, 4 s... up to `interval`."""
        if not self._failures:
            return self.interval
        return min(self.interval, FIRST_RETRY_SECONDS * 2 ** (self._failures - 1))


def stalled_loops() -> list[str]:
    """The names of this process's running loops that have not completed a round in time."""
    now = time.monotonic()
    return sorted(loop.name for loop in list(_loops) if loop.stalled(now))

"""A daemon thread that does one round of work now and every `interval` seconds after, until stopped.

The sweepers run this way: a round that fails (Redis or the database down for a moment) is logged and the next
round tries again, so a blip never ends the thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)


class Periodic:
    """`work` now, then every `interval` seconds in a daemon thread named `name`, until `stop()`."""

    def __init__(self, name: str, interval: float, work: Callable[[], object]) -> None:
        self.name = name
        self.interval = interval
        self.work = work
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            try:
                self.work()
            except Exception:  # a blip: the next round retries
                logger.warning("round failed; retrying", extra={"thread": self.name}, exc_info=True)
            if self._stop.wait(self.interval):
                return

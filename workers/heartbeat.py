"""A running job's heartbeat: its row refreshed every few seconds while it runs, so a sweeper can tell a dead worker.

Audio jobs (`workers.job_execution`) and script jobs (`workers.script_execution`) both hold their row under their
worker's name and prove it alive this way; a beat that finds the row held by someone else (a sweeper took it
back) sets `lost`, and the job stops rather than write over the new holder's work.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import TracebackType

logger = logging.getLogger(__name__)


class Heartbeat:
    """Calls `beat` every `interval` seconds in a daemon thread while the `with` block runs.

    `beat` refreshes the row and says whether this worker still holds it; once it says no, `lost` is set and
    the beating stops. A beat that raises (a database blip) is logged and retried at the next interval.
    """

    def __init__(self, name: str, interval: float, beat: Callable[[], bool], context: dict[str, str]) -> None:
        self.interval = interval
        self.beat = beat
        self.context = context  # what the warning of a failed beat names (the job's id)
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                held = self.beat()
            except Exception:  # a database blip must not kill the job; the next beat retries
                logger.warning("heartbeat failed", extra=self.context, exc_info=True)
                continue
            if not held:
                self.lost.set()
                return

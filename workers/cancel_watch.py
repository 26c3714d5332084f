"""Which of a worker's jobs have been asked to stop: one database read every tenth of a second for all of them.

A cancel is a flag on the job's row (`DELETE /v1/jobs/{id}` sets it). A running job must stop within about an
engine step of it, and a worker runs many jobs: asking the database once per job and step would cost a busy
worker a hundred reads a second, each taking the Python lock from the engine's thread for a while. So one thread
per worker process reads the flags of every job the process runs, every `POLL_SECONDS`, and sets that job's
event; a job looks at its event after every engine step (`workers.job_stops.JobStops.check`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator

from core import job_repository
from core.db import Database

logger = logging.getLogger(__name__)

POLL_SECONDS = 0.1


class CancelWatch:
    """Polls the cancel flags of the jobs being watched, in a daemon thread started on first use."""

    def __init__(self, database: Database, poll_seconds: float = POLL_SECONDS) -> None:
        self.database = database
        self.poll_seconds = poll_seconds
        self._watched: dict[str, threading.Event] = {}
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def watching(self, job_id: str) -> Iterator[threading.Event]:
        """An event set once the job's cancel is asked for, while the block runs."""
        cancelled = threading.Event()
        with self._changed:
            self._watched[job_id] = cancelled
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="voxcast-cancels", daemon=True)
                self._thread.start()
            self._changed.notify_all()
        try:
            yield cancelled
        finally:
            with self._changed:
                if self._watched.get(job_id) is cancelled:
                    del self._watched[job_id]

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: bool(self._watched))
                watched = dict(self._watched)
            try:
                for job_id in job_repository.cancel_requested(self.database, watched.keys()):
                    watched[job_id].set()
            except Exception:  # the database down for a moment: the next poll asks again
                logger.warning("could not read the jobs' cancel flags", exc_info=True)
            time.sleep(self.poll_seconds)

"""Suspects run alone: a job that was running when its worker died runs next time with no other job beside it.

A worker runs many jobs at once in one process and one batched engine, so when it dies every job it held
coincided with the death, and only one of them may have caused it. Counting the death against all of them
and failing them at `max_worker_deaths` would fail innocent jobs that happened to share the batch. So a
job with a worker death on its record is a suspect: it waits until the worker's other jobs end, and no new
job starts while it runs. If the worker dies again, that death is the suspect's alone, and the guard
(`job_repository.release_abandoned_jobs`) fails it; the innocent ones beside it the first time run to the end,
each alone once and then batched again. Suspects are rare (they follow a crash), so the lost batching is
brief.

A worker that stops on purpose closes its quarantine: the jobs waiting in it do not start (`QuarantineClosed`), and
are handed back with the running ones.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator


class QuarantineClosed(Exception):
    """The worker stops: a job still waiting for its turn does not start."""


class Quarantine:
    """A readers-writer lock over a worker's jobs: ordinary jobs share the worker, a suspect has it alone.

    A waiting suspect goes first: ordinary jobs that arrive after it wait for it, so it cannot starve.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._sharing = 0  # ordinary jobs running
        self._alone = False  # a suspect is running
        self._suspects_waiting = 0
        self._closed = False  # the worker stops: nothing waiting starts any more
        self._waiting = 0  # jobs waiting for their turn

    @contextlib.contextmanager
    def run(self, suspect: bool, started: Callable[[], None] | None = None) -> Iterator[None]:
        """Hold the worker for one job: alone when `suspect`, else beside the other ordinary jobs.

        `started()` is called once the job may run, outside the lock: it records in the database that the job runs
        from now on, so that a worker death while it waited (from its claim on) is not counted against it. Raises
        `QuarantineClosed` (without calling it) once `close()` was called, whether the job waited or just came.
        """

        def may_run() -> bool:
            if suspect:
                return not self._alone and self._sharing == 0
            return not self._alone and self._suspects_waiting == 0

        with self._changed:
            self._suspects_waiting += suspect
            self._waiting += 1
            self._changed.wait_for(lambda: self._closed or may_run())
            self._waiting -= 1
            if self._closed:
                self._suspects_waiting -= suspect
                raise QuarantineClosed
            if suspect:
                self._suspects_waiting -= 1
                self._alone = True
            else:
                self._sharing += 1
        try:
            if started is not None:
                started()
            yield
        finally:
            with self._changed:
                if suspect:
                    self._alone = False
                else:
                    self._sharing -= 1
                self._changed.notify_all()

    @property
    def waiting(self) -> int:
        """Jobs waiting for their turn now (a suspect for the others to end, or the others for a suspect)."""
        with self._changed:
            return self._waiting

    def close(self) -> None:
        """Let no waiting or later job start: each raises `QuarantineClosed`. The running ones are not touched."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

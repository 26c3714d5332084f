"""What a worker process shares among its task threads, and the names it goes by.

Everything a job's path uses comes from here, given by the caller: the worker process builds it from the settings
(`workers.tasks`), and a test builds it around an engine, a database, a folder and a clock of its own, so the whole
path (claim, plan, generate, store, assemble) runs in the test's process.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from core.db import Database
from core.job_events import EventPublisher
from core.settings import Settings
from core.storage import DataFolder
from pipeline.engine.engine import Engine
from workers.cancel_watch import CancelWatch
from workers.engine_host import shared_engine
from workers.metrics import WorkerMetrics
from workers.quarantine import Quarantine


@dataclass(frozen=True)
class WorkerServices:
    """A worker process's settings, database, files, events and engine, shared by every job it runs."""

    settings: Settings
    database: Database
    data: DataFolder
    events: EventPublisher
    cancels: CancelWatch  # the cancel flags of the jobs this process runs, read for all of them at once
    quarantine: Quarantine = field(default_factory=Quarantine)  # suspects of a worker's death run alone
    metrics: WorkerMetrics = field(default_factory=WorkerMetrics)
    stopping: threading.Event = field(default_factory=threading.Event)  # set by `hand_back_jobs`, never cleared
    # The engine every job shares: by default the process's one (`workers.engine_host`), started on first use.
    engine_source: Callable[[], Engine] | None = None
    clock: Callable[[], float] = time.monotonic  # what progress, speed and the job's durations are measured with

    def hand_back_jobs(self) -> None:
        """This worker stops on purpose: every job it runs hands itself back at its next check (within about an
        engine step), and those its quarantine holds at once. Safe to call from a signal handler."""
        self.stopping.set()
        self.quarantine.close()

    def engine(self) -> Engine:
        """The engine the jobs share: the caller's, or the process's one (`workers.engine_host`)."""
        if self.engine_source is not None:
            return self.engine_source()
        return shared_engine(self.settings)


def process_name() -> str:
    """This worker process: "<host>:<pid>", as the admin's worker list shows it."""
    return f"{socket.gethostname()}:{os.getpid()}"


def holder_name() -> str:
    """Who holds a job: host, process and thread, so two deliveries in one process are told apart too."""
    return f"{process_name()}:{threading.get_ident()}"

"""What a worker process shares among its task threads, and the names it goes by."""

from __future__ import annotations

import os
import socket
import threading
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

    def hand_back_jobs(self) -> None:
        """This worker stops on purpose: every job it runs hands itself back at its next check (within about an
        engine step), and those its quarantine holds at once. Safe to call from a signal handler."""
        self.stopping.set()
        self.quarantine.close()

    def engine(self) -> Engine:
        """The process's one engine (`workers.engine_host`), started on first use."""
        return shared_engine(self.settings)


def process_name() -> str:
    """This worker process: "<host>:<pid>", as the admin's worker list shows it."""
    return f"{socket.gethostname()}:{os.getpid()}"


def holder_name() -> str:
    """Who holds a job: host, process and thread, so two deliveries in one process are told apart too."""
    return f"{process_name()}:{threading.get_ident()}"

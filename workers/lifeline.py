"""How a worker started by `voxcast serve` ends: never after serve, and quickly.

A pipe ties each worker to serve. serve keeps its write end (`Lifeline`) and hands the read end to that worker alone
(its number in `LIFELINE_FD_VARIABLE`); the worker reads it in a thread (`watch_lifeline`). The read ends with
end-of-file the moment no process holds the write end, which the kernel ensures however serve ended (SIGKILL and
the OOM killer included). The worker then stops as on SIGTERM (a warm shutdown: its jobs handed back while the
database still answers, within the worker's own bound, `end_within`), and ends regardless `LIFELINE_GRACE_SECONDS`
later, as serve's SIGKILL would have (its main thread stuck, say, where no bound of its own can run).

Why not `PR_SET_PDEATHSIG`: it fires when the parent *thread* that started the child ends, and serve starts its
workers from supervisor threads; the pipe follows the whole process. Under docker compose (one process per container)
no lifeline is given and none is watched.

`end_within` bounds a worker's planned stop (`core.stop_budget.WORKER_STOP_SECONDS`), under serve or alone: what it
has not handed back by then, it hands back in the database, and it ends. `end_process` ends a worker without the
interpreter's teardown, which frees every module one object at a time (1.5 to 3 s with torch and transformers loaded,
on two busy cores): the logs are flushed, nothing else is left to do.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import NoReturn

from core.stop_budget import WORKER_KILL_SECONDS

logger = logging.getLogger(__name__)

LIFELINE_FD_VARIABLE = "VOXCAST_LIFELINE_FD"  # serve to its workers only: not a setting
LIFELINE_GRACE_SECONDS = WORKER_KILL_SECONDS  # from serve's end to the worker's, at most, as serve's stop would kill it


class Lifeline:
    """serve's side of one worker's lifeline: a pipe whose read end only that worker inherits.

    Used as a context manager around the worker's life: leaving it closes serve's ends, which cuts the lifeline.
    """

    def __init__(self) -> None:
        self._read: int | None
        self._read, self._write = os.pipe()  # neither is inherited unless passed (`pass_fds`)

    @property
    def child_fd(self) -> int:
        """The read end, to pass to the child (`subprocess.Popen(pass_fds=...)`)."""
        assert self._read is not None, "the child has started"
        return self._read

    def child_environment(self, environment: Mapping[str, str]) -> dict[str, str]:
        """`environment` with the variable that tells the child which descriptor to watch."""
        return {**environment, LIFELINE_FD_VARIABLE: str(self.child_fd)}

    def started(self) -> None:
        """The child holds its end now: serve lets go of its copy, so that only the child's read end is left."""
        if self._read is not None:
            os.close(self._read)
            self._read = None

    def __enter__(self) -> Lifeline:
        return self

    def __exit__(self, *_: object) -> None:
        self.started()
        os.close(self._write)


def watch_lifeline() -> None:
    """If serve started this process with a lifeline, stop when serve is gone (see the module's docstring).

    The variable is removed from the environment, so that this process's own children do not look for it.
    """
    fd = os.environ.pop(LIFELINE_FD_VARIABLE, None)
    if fd is not None:
        threading.Thread(target=_watch, args=(int(fd),), name="voxcast-lifeline", daemon=True).start()


def _watch(fd: int) -> None:
    while os.read(fd, 1):  # serve never writes: only the end-of-file comes
        pass
    logger.warning(
        "voxcast serve is gone; this worker stops and hands its jobs back", extra={"grace_s": LIFELINE_GRACE_SECONDS}
    )
    os.kill(os.getpid(), signal.SIGTERM)  # the worker's own planned stop
    time.sleep(LIFELINE_GRACE_SECONDS)
    logger.error("the worker did not stop in time after serve ended; it ends now")
    end_process(1)


def end_within(seconds: float, hand_back_the_rest: Callable[[], None]) -> None:
    """Bound this worker's planned stop, which has begun: if the process still runs `seconds` from now (a job that has
    not reached its next check, a warm shutdown that hangs), run `hand_back_the_rest` and end it with status 1."""

    def overdue() -> None:
        time.sleep(seconds)
        logger.error(
            "the worker's planned stop ran out of time; it hands back what it still holds and ends",
            extra={"bound_s": seconds},
        )
        try:
            hand_back_the_rest()
        except Exception:  # the database or the broker gone: a sweeper finds the jobs by their silent heartbeat
            logger.warning("could not hand back what the worker still held", exc_info=True)
        end_process(1)

    threading.Thread(target=overdue, name="voxcast-stop-bound", daemon=True).start()


def end_process(status: int) -> NoReturn:
    """End this process now with `status`, its logs and output flushed, skipping the interpreter's teardown."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or its reader gone
            pass
    os._exit(status)

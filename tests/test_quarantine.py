"""The quarantine of a worker's jobs: ordinary jobs share the worker, a suspect of a worker's death runs alone."""

from __future__ import annotations

import threading

from tests.waiting import wait_until
from workers.quarantine import Quarantine, QuarantineClosed

WAIT = 5.0


def hold(
    quarantine: Quarantine, suspect: bool, log: list[str], name: str, release: threading.Event
) -> threading.Thread:
    """A job that enters the quarantine, notes when it runs, and leaves once `release` is set."""

    def job() -> None:
        with quarantine.run(suspect):
            log.append(f"{name} runs")
            release.wait(WAIT)
            log.append(f"{name} ends")

    thread = threading.Thread(target=job)
    thread.start()
    return thread


def settled(quarantine: Quarantine, log: list[str], *, ran: int, waiting: int = 0) -> None:
    """Wait until `ran` lines are logged and `waiting` jobs wait for their turn: every thread has got where it can."""
    wait_until(lambda: len(log) == ran and quarantine.waiting == waiting, f"{ran} lines and {waiting} waiting", WAIT)


def test_ordinary_jobs_share_the_worker() -> None:
    quarantine, log, release = Quarantine(), [], threading.Event()
    threads = [hold(quarantine, False, log, name, release) for name in ("a", "b", "c")]
    settled(quarantine, log, ran=3)
    assert sorted(log) == ["a runs", "b runs", "c runs"]
    release.set()
    for thread in threads:
        thread.join(WAIT)
    assert len(log) == 6


def test_a_suspect_waits_for_the_running_jobs_and_later_ones_wait_for_it() -> None:
    quarantine, log = Quarantine(), []
    first, suspect, later = threading.Event(), threading.Event(), threading.Event()
    threads = [hold(quarantine, False, log, "first", first)]
    settled(quarantine, log, ran=1)
    threads.append(hold(quarantine, True, log, "suspect", suspect))
    settled(quarantine, log, ran=1, waiting=1)
    threads.append(hold(quarantine, False, log, "later", later))  # arrives while the suspect waits
    settled(quarantine, log, ran=1, waiting=2)
    assert log == ["first runs"]
    first.set()
    settled(quarantine, log, ran=3, waiting=1)
    assert log == ["first runs", "first ends", "suspect runs"]  # alone: "later" still waits
    suspect.set()
    settled(quarantine, log, ran=5)
    assert log[3:] == ["suspect ends", "later runs"]
    later.set()
    for thread in threads:
        thread.join(WAIT)
    assert log[-1] == "later ends"


def test_two_suspects_run_one_after_the_other() -> None:
    quarantine, log = Quarantine(), []
    releases = [threading.Event(), threading.Event()]
    threads = [hold(quarantine, True, log, f"s{i}", releases[i]) for i in range(2)]
    settled(quarantine, log, ran=1, waiting=1)
    running = log[0].split()[0]
    releases[int(running[1])].set()
    settled(quarantine, log, ran=3)
    assert log[1:] == [f"{running} ends", f"{'s1' if running == 's0' else 's0'} runs"]
    releases[1 - int(running[1])].set()
    for thread in threads:
        thread.join(WAIT)


def test_a_job_says_when_it_starts_and_one_that_must_wait_only_once_it_runs() -> None:
    """What the worker records in the database: a job claimed runs from `started` on, so that a death while it
    waits (a suspect waiting for the others) is not counted against it."""
    quarantine, log = Quarantine(), []
    first, suspect = threading.Event(), threading.Event()

    def job(name: str, is_suspect: bool, release: threading.Event) -> threading.Thread:
        def run() -> None:
            with quarantine.run(is_suspect, lambda: log.append(f"{name} started")):
                log.append(f"{name} runs")
                release.wait(WAIT)

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    threads = [job("first", False, first)]
    settled(quarantine, log, ran=2)
    threads.append(job("suspect", True, suspect))
    settled(quarantine, log, ran=2, waiting=1)
    assert log == ["first started", "first runs"]  # the suspect waits: not started
    first.set()
    settled(quarantine, log, ran=4)
    assert log[2:] == ["suspect started", "suspect runs"]
    suspect.set()
    for thread in threads:
        thread.join(WAIT)


def test_a_closed_quarantine_starts_no_waiting_or_later_job_and_leaves_the_running_one() -> None:
    """The worker stops on purpose: a suspect waiting for the running job, and any job that comes after, never start
    (nor say they started); the running job goes on until it hands itself back."""
    quarantine, log, outcomes = Quarantine(), [], {}
    release = threading.Event()
    running = hold(quarantine, False, log, "running", release)

    def arrive(name: str, suspect: bool) -> threading.Thread:
        def run() -> None:
            try:
                with quarantine.run(suspect, lambda: log.append(f"{name} started")):
                    log.append(f"{name} runs")
            except QuarantineClosed:
                outcomes[name] = "closed"

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    waiting = arrive("suspect", True)
    settled(quarantine, log, ran=1, waiting=1)
    quarantine.close()
    waiting.join(WAIT)
    later = arrive("later", False)
    later.join(WAIT)
    assert outcomes == {"suspect": "closed", "later": "closed"}
    assert log == ["running runs"]
    release.set()
    running.join(WAIT)
    assert log == ["running runs", "running ends"]

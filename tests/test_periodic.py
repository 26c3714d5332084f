"""Background loops never die: a failed round is logged and tried again sooner, anything a round raises is caught,
and a loop that stops completing rounds is named by `stalled_loops` (a worker's announcement carries it to
`/health`)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from core.db import Database, DatabaseUnavailable
from core.models import utc_now
from core.settings import Settings
from tests.waiting import wait_until
from workers import periodic
from workers.celery_app import create_celery_app
from workers.periodic import Periodic, stalled_loops
from workers.script_sweeper import ScriptSweeper
from workers.sweeper import SilenceJudge, Sweeper

WAIT = 30.0  # a bound on a stalled test, never a measure of speed


def test_a_loop_outlives_failed_rounds_and_retries_them_sooner(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(periodic, "FIRST_RETRY_SECONDS", 0.01)
    rounds: list[int] = []
    succeeded = threading.Event()

    def work() -> None:
        rounds.append(len(rounds))
        if len(rounds) == 1:
            raise ConnectionError("the database is shutting down")
        if len(rounds) == 2:
            raise SystemExit(3)  # what a library may raise: it must not end the loop either
        succeeded.set()

    loop = Periodic("test-loop", interval=3600, work=work)  # the next round is a retry's, not the interval's
    loop.start()
    try:
        assert succeeded.wait(WAIT)
        assert loop.round_completed_at is not None and "test-loop" not in stalled_loops()
    finally:
        loop.stop()
    assert len(rounds) == 3


def test_a_loop_that_completes_no_round_in_time_is_named_stalled() -> None:
    release, entered = threading.Event(), threading.Event()

    def work() -> None:
        entered.set()
        release.wait(WAIT)

    loop = Periodic("test-stuck-loop", interval=3600, work=work)
    loop.stall_after = 0.0
    loop.start()
    try:
        assert entered.wait(WAIT)
        assert "test-stuck-loop" in stalled_loops()
        release.set()
    finally:
        loop.stop()
    assert "test-stuck-loop" not in stalled_loops()  # a stopped loop is not stalled


def test_after_a_database_outage_heartbeats_are_judged_only_once_workers_had_time_to_write_theirs() -> None:
    now = [0.0]
    judge = SilenceJudge(stale_after=60, clock=lambda: now[0])
    with judge.round() as may_judge:
        assert may_judge  # nothing happened yet
    with pytest.raises(DatabaseUnavailable), judge.round():
        raise DatabaseUnavailable("sweep", 61, ConnectionRefusedError("connection refused"))
    with judge.round() as may_judge:
        assert not may_judge  # the first round that reaches the database again: every heartbeat is stale
    now[0] = 59.0
    with judge.round() as may_judge:
        assert not may_judge
    now[0] = 60.0
    with judge.round() as may_judge:
        assert may_judge  # a minute since it answered again: a silent worker now is silent for its own reasons
    with pytest.raises(ValueError), judge.round():
        raise ValueError("a bug, not an outage")
    with judge.round() as may_judge:
        assert may_judge


def test_both_sweepers_complete_their_rounds(
    database: Database, database_url: str, service_redis_url: str, tmp_path: Path
) -> None:
    """A round of each, on a real database and Redis, as a worker runs them: nothing raises (the scripts sweeper's
    first round, with its start time, once died of an attribute its loop had overwritten)."""
    settings = Settings(data_dir=tmp_path, database_url=database_url, redis_url=service_redis_url)
    scripts = ScriptSweeper(settings, database, lambda script_id: None, "voxcast-scripts@test", utc_now())
    scripts.start()
    speech = Sweeper(settings, database, create_celery_app(settings), interval=3600)
    speech.start()
    try:
        wait_until(lambda: scripts.round_completed_at and speech.round_completed_at, "a round of each sweeper", WAIT)
    finally:
        scripts.stop()
        speech.stop()

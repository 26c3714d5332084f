"""The job repository (`core.job_repository`) is the one owner of a job's row: nothing else writes it, and its
transitions follow one table, refusing the rest by name."""

from __future__ import annotations

import ast
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from core import job_repository
from core.api_keys import create_api_key
from core.db import Database
from core.job_repository import ALLOWED, DELETED, TRANSITIONS, IllegalTransition, Transition, check_transition
from core.job_states import JobState
from core.models import Job

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("api", "assembly", "cli", "core", "diffusion", "models", "pipeline", "script_text", "tokenizer", "webui",
            "workers", "bench")  # fmt: skip
REPOSITORY = ROOT / "core" / "job_repository.py"
JOB_COLUMNS = frozenset(column.key for column in Job.__table__.columns)


def job_writes(source: str) -> list[str]:
    """Where `source` writes a `Job` row: an UPDATE, DELETE or INSERT of `Job`, a `Job(...)` built, or a Job column
    assigned on a job by the names this code gives one (`job`, `*_job`, `row`), in a module that imports `Job`.
    Each as "line N: what"."""
    tree = ast.parse(source)
    imports_job = any(
        isinstance(node, ast.ImportFrom) and any(alias.name == "Job" for alias in node.names) for node in ast.walk(tree)
    )
    if not imports_job:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            first = node.args[0] if node.args else None
            if node.func.id in {"update", "delete", "insert"} and isinstance(first, ast.Name) and first.id == "Job":
                found.append(f"line {node.lineno}: {node.func.id}(Job)")
            elif node.func.id == "Job":
                found.append(f"line {node.lineno}: Job(...) built")
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = [element for target in node.targets for element in _unpacked(target)]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Attribute) and target.attr in JOB_COLUMNS and _names_a_job(target.value):
                found.append(f"line {node.lineno}: .{target.attr} assigned")
    return found


def _unpacked(target: ast.expr) -> list[ast.expr]:
    return list(target.elts) if isinstance(target, ast.Tuple) else [target]


def _names_a_job(value: ast.expr) -> bool:
    return isinstance(value, ast.Name) and (value.id in {"job", "row"} or value.id.endswith("_job"))


def test_no_module_but_the_repository_writes_a_job_row() -> None:
    offenders = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == REPOSITORY or "migrations" in path.parts:
                continue
            if writes := job_writes(path.read_text()):
                offenders[str(path.relative_to(ROOT))] = writes
    assert offenders == {}, f"only core/job_repository.py may write a job's row: {offenders}"


@pytest.mark.parametrize(
    "source",
    [
        "from core.models import Job\nsession.execute(update(Job).values(state='done'))",
        "from core.models import Job\nsession.add(Job(id='x'))",
        "from core.models import Job\njob.state = 'done'",
        "from core.models import Job\njob.state, job.worker = 'queued', None",
        "from core.models import Job\nrow.attempts += 1",
        "from core.models import Job\nheld_job.worker = None",
    ],
)
def test_the_check_sees_every_kind_of_write(source: str) -> None:
    assert job_writes(source), source


def test_the_check_leaves_reads_and_other_rows_alone() -> None:
    source = (
        "from core.models import Job, Show\nsession.scalars(select(Job).where(Job.state == 'done'))\n"
        "self.state = 1\nepisode.title = 'x'\nshow_update = update(Show)\n"
    )
    assert job_writes(source) == []
    assert job_writes("from core.models import ScriptJob\njob.state = 'done'") == []


def test_the_table_names_every_state_and_every_transition() -> None:
    assert set(TRANSITIONS) == set(Transition)
    reached = {target for _, target in ALLOWED}
    assert set(JobState) <= reached | {state for state, _ in ALLOWED}
    assert (JobState.DONE, JobState.QUEUED) in ALLOWED  # a regeneration
    assert (JobState.DONE, DELETED) in ALLOWED
    assert (JobState.RUNNING, DELETED) not in ALLOWED  # a running job is cancelled first
    assert (JobState.DONE, JobState.RUNNING) not in ALLOWED  # a done job runs again only through the queue
    assert (JobState.CANCELLED, JobState.DONE) not in ALLOWED


@pytest.mark.parametrize("transition", list(Transition))
def test_every_transition_outside_the_table_raises_naming_both_states(transition: Transition) -> None:
    move = TRANSITIONS[transition]
    for state in JobState:
        if state in move.sources:
            check_transition("j", transition, state)
            continue
        with pytest.raises(IllegalTransition) as refused:
            check_transition("j", transition, state)
        target = state if move.target is None else move.target
        assert f"from {state} to {target}" in str(refused.value) and refused.value.current is state


def job_in_state(database: Database, state: JobState) -> str:
    """A job of a key of its own, stored in `state` (a fixture's row); its id."""
    generation = {"cfg_scale": 1.3, "diffusion_steps": 2, "seed": 5, "max_segment_seconds": 120.0}
    with database.session() as session:
        job = job_repository.create_job(
            session,
            id=uuid.uuid4().hex,
            owner_id=create_api_key(session, "owner").id,
            mode="turns",
            queue="batch",
            generation=generation,
            formats=["wav"],
            voices={"0": "voice"},
        )
        job.state = state  # a fixture's row, in the state under test
        return job.id


def _state(database: Database, job_id: str) -> JobState | None:
    with database.reading() as session:
        job = session.get(Job, job_id)
        return None if job is None else JobState(job.state)


def test_the_api_transitions_move_only_what_the_table_allows(database: Database) -> None:
    """Retry, regenerate, cancel and delete against a job in every state, on the real database: each either moves
    the job where the table says or raises naming both states, and a refused one leaves the row as it was."""
    api_transitions = {
        Transition.RETRY: lambda session, job_id: job_repository.retry(session, job_id),
        Transition.REGENERATE: lambda session, job_id: job_repository.regenerate(session, job_id, 1, {}, {}),
        Transition.DELETE: lambda session, job_id: job_repository.delete_rows(session, job_id),
    }
    for transition, call in api_transitions.items():
        move = TRANSITIONS[transition]
        for state in JobState:
            job_id = job_in_state(database, state)
            if state in move.sources:
                with database.session() as session:
                    call(session, job_id)
                expected = None if move.target is DELETED else move.target
                assert _state(database, job_id) == expected, (transition, state)
                continue
            with pytest.raises(IllegalTransition, match=f"from {state}"), database.session() as session:
                call(session, job_id)
            assert _state(database, job_id) is state, (transition, state)


def test_a_cancel_stops_what_runs_ends_what_waits_and_refuses_what_ended(database: Database) -> None:
    for state, after in {JobState.QUEUED: JobState.CANCELLED, JobState.RUNNING: JobState.RUNNING}.items():
        job_id = job_in_state(database, state)
        with database.session() as session:
            job_repository.cancel(session, job_id)
            job_repository.cancel(session, job_id)  # asked again: nothing changes, nothing refused
        assert _state(database, job_id) is after
        with database.reading() as session:
            assert session.get_one(Job, job_id).cancel_requested  # a running one's worker reads it
    for state in (JobState.DONE, JobState.FAILED):
        job_id = job_in_state(database, state)
        with pytest.raises(IllegalTransition, match=f"job {job_id} is {state}"), database.session() as session:
            job_repository.cancel(session, job_id)
        assert _state(database, job_id) is state


def _held(database: Database, holder: str) -> job_repository.ClaimedJob:
    job_id = job_in_state(database, JobState.QUEUED)
    held = job_repository.claim_job(database, job_id, holder, stale_after=60)
    assert isinstance(held, job_repository.ClaimedJob)
    job_repository.mark_started(database, held)
    return held


def test_only_a_process_that_died_is_charged_a_death(database: Database) -> None:
    """Two workers fall silent past `stale_after`: one process still announces itself (it lost the database, or was
    paused), the other is gone. The first's job is handed back with no death on its record; the second's is
    charged one."""
    paused, killed = _held(database, "host:10:1"), _held(database, "host:11:1")
    later = job_repository.utc_now() + timedelta(seconds=120)
    released = job_repository.release_abandoned_jobs(
        database, stale_after=60, max_worker_deaths=2, living={"host:10"}, now=later
    )
    assert {job.id: (job.worker_deaths, job.failed) for job in released} == {
        paused.id: (0, False),
        killed.id: (1, False),
    }
    with database.reading() as session:
        found = session.execute(
            select(Job.id, Job.state, Job.handbacks, Job.worker_deaths).where(Job.id.in_([paused.id, killed.id]))
        )
        counts = {job_id: (state, handbacks, deaths) for job_id, state, handbacks, deaths in found}
    assert counts[paused.id] == ("queued", 1, 0)
    assert counts[killed.id] == ("queued", 0, 1)
    assert not job_repository.beat(database, paused)  # the paused worker learns at its next beat that it lost it


def test_a_silent_holder_that_wakes_takes_back_the_death_charged_to_it(database: Database) -> None:
    """Taken for dead (silent, not announced: SIGSTOP looks so from outside), the job is charged a death and runs
    again elsewhere; the paused holder wakes, finds the job gone, and lives: the death is taken back, once."""
    paused = _held(database, "host:20:1")
    later = job_repository.utc_now() + timedelta(seconds=120)
    (released,) = job_repository.release_abandoned_jobs(database, stale_after=60, max_worker_deaths=3, now=later)
    assert released.worker_deaths == 1
    again = job_repository.claim_job(database, paused.id, "host:21:1", stale_after=60)
    assert isinstance(again, job_repository.ClaimedJob)
    assert not job_repository.forgive_death(database, again)  # nothing was charged to the new holder
    assert not job_repository.beat(database, paused)  # the paused holder wakes: the job is not its own any more
    assert job_repository.forgive_death(database, paused)
    assert not job_repository.forgive_death(database, paused)  # once
    with database.session() as session:
        job = session.get_one(Job, paused.id)
        assert (job.worker_deaths, job.handbacks, job.worker) == (0, 1, "host:21:1")

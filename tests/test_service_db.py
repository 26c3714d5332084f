"""The service's database layer on SQLite and on PostgreSQL: migrations, hashed keys, and the job claims that
make the worker's task idempotent."""

from __future__ import annotations

import dataclasses
import threading
import uuid
from datetime import datetime, timedelta
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, select, update

from core import job_repository
from core.api_keys import create_api_key, find_api_key, hash_key
from core.db import Database, upgrade_database
from core.job_states import JobState
from core.models import ApiKey, Base, Job, JobSegment, ScriptJob, utc_now
from core.settings import Settings
from core.storage import DataFolder, atomic_write
from workers.celery_app import create_celery_app
from workers.script_sweeper import take_back_script_jobs
from workers.sweeper import send_back


def add_row(database: Database, model: type[Job] | type[ScriptJob], **values: object) -> str:
    """A job or script job of a key of its own, with `values`; its id."""
    with database.session() as session:
        row = model(id=uuid.uuid4().hex, owner_id=create_api_key(session, "owner").id, **values)
        session.add(row)
        return row.id


def add_job(database: Database, **values: object) -> str:
    generation = {"cfg_scale": 1.3, "diffusion_steps": 2, "seed": 5, "max_segment_seconds": 120.0}
    return add_row(
        database, Job, mode="turns", queue="batch", generation=generation, formats=["wav"], voices={"0": "voice"},
        **values,
    )  # fmt: skip


def test_migrations_build_exactly_the_schema_the_models_describe(database_url: str) -> None:
    upgrade_database(database_url)
    upgrade_database(database_url)  # a second start finds the schema current
    database = Database.connect(database_url)
    try:
        with database.engine.connect() as connection:
            assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
            tables = set(inspect(connection).get_table_names())
        assert {"api_keys", "jobs", "job_segments", "voices", "alembic_version"} <= tables
    finally:
        database.dispose()


def test_api_keys_are_stored_only_as_hashes(database: Database) -> None:
    with database.session() as session:
        minted = create_api_key(session, "ci", admin=True)
    with database.session() as session:
        row = session.get_one(ApiKey, minted.id)
        assert row.key_hash == hash_key(minted.secret) and minted.secret not in (row.key_hash, row.key_prefix)
        assert find_api_key(session, minted.secret).is_admin  # type: ignore[union-attr]
        assert find_api_key(session, minted.secret + "x") is None
        row.revoked_at = utc_now()
    with database.session() as session:
        assert find_api_key(session, minted.secret) is None


def test_a_job_is_claimed_by_one_delivery_only(database: Database) -> None:
    job_id = add_job(database)
    winners: list[object] = []
    barrier = threading.Barrier(4)

    def claim(holder: str) -> None:
        barrier.wait()
        winners.append(job_repository.claim_job(database, job_id, holder, stale_after=60))

    threads = [threading.Thread(target=claim, args=(f"worker-{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    claimed = [claim for claim in winners if claim is not None]
    assert len(claimed) == 1
    job = claimed[0]
    assert job.seed == 5 and job.speakers == (0,)  # type: ignore[attr-defined]
    assert job_repository.finish_job(database, job, JobState.DONE)  # type: ignore[arg-type]
    assert job_repository.claim_job(database, job_id, "late-redelivery", stale_after=0) is None


def test_a_cancelled_queued_job_is_never_run(database: Database) -> None:
    job_id = add_job(database, cancel_requested=True)
    assert job_repository.claim_job(database, job_id, "worker", stale_after=60) == job_repository.CancelledAtClaim(
        job_id
    )
    assert job_repository.claim_job(database, job_id, "worker", stale_after=60) is None  # ended: nothing to do
    with database.session() as session:
        assert session.get_one(Job, job_id).state == JobState.CANCELLED


PLANNED = [job_repository.PlannedSegment(0, 10, 5, "a" * 64), job_repository.PlannedSegment(1, 12, 6, "b" * 64)]


def test_a_stored_segment_whose_words_changed_is_generated_again(database: Database) -> None:
    """Audio stored for other words (the plan now hashes the segment differently) is not reused: the row goes back
    to pending with the new hash; a segment whose words are the same stays stored, and a row from before hashes
    were kept takes the plan's."""
    job_id = add_job(database)
    job = job_repository.claim_job(database, job_id, "worker", stale_after=60)
    assert job is not None
    for record in job_repository.prepare_segments(database, job, PLANNED):
        stored = dataclasses.replace(record, audio_path=f"jobs/{job_id}/segments/{record.index:04d}.flac", frames=9)
        job_repository.record_segment_done(database, job, stored, 1.2, "latents.npy", 9, record.index + 1)
    with database.session() as session:  # segment 1 as stored before hashes were kept
        session.execute(update(JobSegment).where(JobSegment.index == 1).values(text_hash=None))

    reworded = [dataclasses.replace(PLANNED[0], text_hash="c" * 64), PLANNED[1]]
    first, second = job_repository.prepare_segments(database, job, reworded)
    assert (first.done, first.text_changed, first.audio_path, first.frames, first.seed) == (False, True, None, 0, 5)
    assert (second.done, second.text_changed, second.frames) == (True, False, 9)
    with database.session() as session:
        rows = session.scalars(select(JobSegment).where(JobSegment.job_id == job_id).order_by(JobSegment.index)).all()
        assert [(row.state, row.text_hash) for row in rows] == [("pending", "c" * 64), ("done", "b" * 64)]
    again = job_repository.prepare_segments(database, job, reworded)
    assert [record.text_changed for record in again] == [False, False]  # said once, not at every run


def test_a_silent_holder_loses_its_job_to_the_sweeper(database: Database) -> None:
    job_id = add_job(database)
    first = job_repository.claim_job(database, job_id, "dead-worker", stale_after=60)
    assert first is not None
    job_repository.mark_started(database, first)
    records = job_repository.prepare_segments(database, first, PLANNED)
    assert [record.index for record in records] == [0, 1] and not any(record.done for record in records)
    assert job_repository.release_abandoned_jobs(database, stale_after=60, max_worker_deaths=2) == []  # it is alive

    later = utc_now() + timedelta(seconds=120)
    released = job_repository.release_abandoned_jobs(database, stale_after=60, max_worker_deaths=2, now=later)
    assert [(job.id, job.worker_deaths, job.failed) for job in released] == [(job_id, 1, False)]
    second = job_repository.claim_job(database, job_id, "new-worker", stale_after=60)
    assert second is not None
    assert not job_repository.beat(database, first)  # the old holder learns it lost the job
    assert not job_repository.finish_job(database, first, JobState.FAILED, error="too late")
    again = job_repository.prepare_segments(database, second, PLANNED)
    assert len(again) == 2  # the rows are reused, not duplicated
    with database.session() as session:
        assert len(session.scalars(select(JobSegment).where(JobSegment.job_id == job_id)).all()) == 2
        assert session.get_one(Job, job_id).attempts == 2


def test_a_redelivery_never_takes_a_job_from_a_silent_holder_that_let_it_run(database: Database) -> None:
    """Its holder's death is the sweeper's to judge (and charge): a redelivered message that took the job over would
    lose it. A holder silent while the job still waited for its turn had no part in it: that one is taken over."""
    job_id = add_job(database)
    held = job_repository.claim_job(database, job_id, "host:30:1", stale_after=60)
    assert held is not None
    job_repository.mark_started(database, held)
    assert job_repository.claim_job(database, job_id, "host:31:1", stale_after=0) is None  # silent, let run
    (released,) = job_repository.release_abandoned_jobs(database, dead_process="host:30", max_worker_deaths=3)
    assert released.worker_deaths == 1
    again = job_repository.claim_job(database, job_id, "host:31:1", stale_after=0)
    assert again is not None and again.worker_deaths == 1
    waiting_elsewhere = job_repository.claim_job(database, job_id, "host:32:1", stale_after=0)  # never let run
    assert waiting_elsewhere is not None and waiting_elsewhere.worker_deaths == 1


def test_a_job_whose_workers_keep_dying_is_failed_by_the_guard(database: Database) -> None:
    """Each death of its holder counts; the second (with a limit of 2) fails the job instead of queueing it."""
    job_id = add_job(database)
    for death in (1, 2):
        held = job_repository.claim_job(database, job_id, f"host:{100 + death}:1", stale_after=60)
        assert held is not None
        job_repository.mark_started(database, held)
        assert job_repository.release_abandoned_jobs(database, dead_process="host:999", max_worker_deaths=2) == []
        released = job_repository.release_abandoned_jobs(
            database, dead_process=f"host:{100 + death}", max_worker_deaths=2
        )
        assert [(job.id, job.worker_deaths, job.failed) for job in released] == [(job_id, death, death == 2)]
    with database.session() as session:
        job = session.get_one(Job, job_id)
        assert (job.state, job.attempts, job.worker_deaths, job.worker) == (JobState.FAILED, 2, 2, None)
        assert job.error == job_repository.worker_deaths_error(2)
        assert "died 2 times" in job.error and "VOXCAST_MAX_WORKER_DEATHS" in job.error
    assert job_repository.claim_job(database, job_id, "host:103:1", stale_after=0) is None  # never run again


def test_a_job_claimed_but_not_yet_started_is_not_charged_with_its_workers_death(database: Database) -> None:
    """Claimed, but not let run yet (waiting for a suspect beside it to finish, or the worker died first): when the
    worker dies, it goes back to the queue with no death counted; the one that was running is charged."""
    waiting_id, running_id = add_job(database), add_job(database)
    waiting = job_repository.claim_job(database, waiting_id, "host:7:1", stale_after=60)
    running = job_repository.claim_job(database, running_id, "host:7:2", stale_after=60)
    assert waiting is not None and running is not None
    job_repository.mark_started(database, running)
    released = job_repository.release_abandoned_jobs(database, dead_process="host:7", max_worker_deaths=1)
    assert sorted((job.id, job.worker_deaths, job.failed) for job in released) == sorted(
        [(waiting_id, 0, False), (running_id, 1, True)]
    )
    with database.session() as session:
        job = session.get_one(Job, waiting_id)
        assert (job.state, job.worker_deaths, job.waiting, job.worker) == (JobState.QUEUED, 0, False, None)


def test_a_job_handed_back_is_queued_again_without_a_death_and_the_guard_never_counts_it(database: Database) -> None:
    """A planned stop of its worker queues the job again (`handbacks` + 1); a job handed back as often as the limit of
    deaths allows, then killed once, is queued again, not failed: only the death counts."""
    job_id = add_job(database)
    for stop in (1, 2):
        held = job_repository.claim_job(database, job_id, f"host:{stop}:1", stale_after=60)
        assert held is not None
        job_repository.mark_started(database, held)
        assert job_repository.hand_back_job(database, held)
        assert not job_repository.hand_back_job(database, held)  # no longer its worker's
        with database.session() as session:
            job = session.get_one(Job, job_id)
            assert (job.state, job.worker, job.handbacks, job.worker_deaths) == (JobState.QUEUED, None, stop, 0)
    held = job_repository.claim_job(database, job_id, "host:3:1", stale_after=60)
    assert held is not None
    job_repository.mark_started(database, held)
    released = job_repository.release_abandoned_jobs(database, dead_process="host:3", max_worker_deaths=2)
    assert [(job.id, job.worker_deaths, job.failed) for job in released] == [(job_id, 1, False)]
    with database.session() as session:
        job = session.get_one(Job, job_id)
        assert (job.state, job.attempts, job.handbacks, job.worker_deaths) == (JobState.QUEUED, 3, 2, 1)


def test_a_job_whose_cancel_is_pending_is_not_handed_back(database: Database) -> None:
    job_id = add_job(database)
    held = job_repository.claim_job(database, job_id, "host:1:1", stale_after=60)
    assert held is not None
    with database.session() as session:
        session.get_one(Job, job_id).cancel_requested = True
    assert not job_repository.hand_back_job(database, held)  # its worker ends it as cancelled instead
    assert job_repository.finish_job(database, held, JobState.CANCELLED)


def test_a_stopped_worker_s_jobs_are_handed_back_by_its_supervisor(database: Database) -> None:
    """A worker killed once its planned stop outlived its grace: what it still held goes back as hand-backs."""
    running_id, other_id = add_job(database), add_job(database)
    running = job_repository.claim_job(database, running_id, "host:7:1", stale_after=60)
    other = job_repository.claim_job(database, other_id, "host:8:1", stale_after=60)
    assert running is not None and other is not None
    job_repository.mark_started(database, running)
    handed = job_repository.hand_back_process_jobs(database, "host:7")
    assert [(job.id, job.worker_deaths, job.failed) for job in handed] == [(running_id, 0, False)]
    with database.session() as session:
        assert session.get_one(Job, running_id).handbacks == 1
        assert session.get_one(Job, other_id).state == JobState.RUNNING  # another process's


def test_a_job_the_guard_fails_counts_what_its_folder_holds(database: Database, tmp_path: Path) -> None:
    """Failed by the worker-death guard, a job counts the bytes its folder holds, not its submission's estimate."""
    settings = Settings(data_dir=tmp_path)
    data = DataFolder.from_settings(settings)
    job_id = add_job(database, storage_bytes=23_400_000)  # what it was expected to write
    folder = data.job(job_id)
    atomic_write(folder.script, lambda handle: handle.write(b"Alice: Hi.\n"))
    atomic_write(folder.segment_partial_frames(0), lambda handle: handle.write(bytes(1000)))
    held = job_repository.claim_job(database, job_id, "host:9:1", stale_after=60)
    assert held is not None
    job_repository.mark_started(database, held)
    abandoned = job_repository.release_abandoned_jobs(database, dead_process="host:9", max_worker_deaths=1)
    assert [job.failed for job in abandoned] == [True]
    assert send_back(settings, database, create_celery_app(settings), abandoned, "the worker died") == []
    with database.session() as session:
        assert session.get_one(Job, job_id).storage_bytes == data.files.tree_bytes(folder.root) == 1011


def add_running_script_job(
    database: Database, worker: str, started_at: datetime, deliveries: int, handbacks: int
) -> str:
    return add_row(
        database, ScriptJob, task="draft", source="notes", options={}, max_attempts=2, state=JobState.RUNNING,
        worker=worker, started_at=started_at, heartbeat_at=started_at, deliveries=deliveries, handbacks=handbacks,
    )  # fmt: skip


def test_a_starting_scripts_worker_takes_back_only_what_its_node_name_held_before_it_started(
    database: Database,
) -> None:
    """A job the new process claims as it starts (one handed back by the stop before, say) is its own, not a dead
    one's; a job claimed before it started is a dead process's: taken back, and its hand-back is not a death."""
    started = utc_now()
    own = add_running_script_job(database, "voxcast-scripts@host", started + timedelta(seconds=1), 2, 1)
    dead = add_running_script_job(database, "voxcast-scripts@host", started - timedelta(seconds=5), 2, 1)
    sent: list[str] = []
    taken = take_back_script_jobs(
        database, sent.append, max_deaths=2, worker="voxcast-scripts@host", claimed_before=started
    )
    assert taken == sent == [dead]  # its deliveries less its hand-backs: one death, below the limit of two
    with database.session() as session:
        assert session.get_one(ScriptJob, own).state == JobState.RUNNING
        assert session.get_one(ScriptJob, dead).state == JobState.QUEUED

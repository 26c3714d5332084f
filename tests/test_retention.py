"""The retention policy and job deletes on a real database (SQLite and PostgreSQL) and data folder, with the clock
given: what goes when, what stays, and what a crash midway leaves for the next pass."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from core.api_keys import create_api_key
from core.db import Database
from core.job_deletion import JobNotEnded, delete_job, empty_trash
from core.job_states import JobState, SegmentState
from core.models import Job, JobSegment, utc_now
from core.retention import apply_retention
from core.settings import Settings, SettingsError
from core.storage import DataFolder

DAY = timedelta(days=1)


@pytest.fixture
def data(tmp_path: Path) -> DataFolder:
    return DataFolder.local(tmp_path / "data")


def add_job(database: Database, data: DataFolder, state: JobState, finished_days_ago: float | None) -> str:
    """A job with two stored segments and an episode on disk, ended (or not) that many days ago."""
    job_id = uuid.uuid4().hex
    folder = data.job(job_id)
    folder.segments.mkdir(parents=True)
    folder.outputs.mkdir(parents=True)
    for index in range(2):
        folder.segment_audio(index).write_bytes(b"RIFF")
        folder.segment_latents(index).write_bytes(b"NUMPY")
    folder.output("episode.wav").write_bytes(b"RIFF")
    finished = None if finished_days_ago is None else utc_now() - finished_days_ago * DAY
    with database.session() as session:
        owner = create_api_key(session, f"owner-{job_id[:6]}").id
        session.add(
            Job(
                id=job_id, owner_id=owner, mode="turns", queue="batch", state=state, finished_at=finished,
                generation={"cfg_scale": 1.3, "diffusion_steps": 2, "seed": 5}, formats=["wav"], voices={},
            )
        )  # fmt: skip
        session.flush()
        for index in range(2):
            session.add(
                JobSegment(
                    job_id=job_id, index=index, state=SegmentState.DONE, seed=index, frames_planned=10,
                    audio_path=data.relative(folder.segment_audio(index)),
                    latents_path=data.relative(folder.segment_latents(index)),
                )
            )  # fmt: skip
    return job_id


def job(database: Database, job_id: str) -> Job | None:
    with database.reading() as session:
        found = session.get(Job, job_id)
        if found is not None:
            session.expunge(found)
        return found


def segment_paths(database: Database, job_id: str) -> list[tuple[str | None, str | None]]:
    with database.reading() as session:
        rows = session.scalars(select(JobSegment).where(JobSegment.job_id == job_id).order_by(JobSegment.index))
        return [(row.audio_path, row.latents_path) for row in rows]


def test_intermediates_go_after_their_days_and_the_rest_stays(database: Database, data: DataFolder) -> None:
    settings = Settings(keep_intermediates_days=7)
    old, recent = (add_job(database, data, JobState.DONE, days) for days in (8, 6))
    failed, running = add_job(database, data, JobState.FAILED, 30), add_job(database, data, JobState.RUNNING, None)
    now = utc_now()

    done = apply_retention(settings, database, data, now)
    assert sorted(done.intermediates_removed) == sorted([old, failed]) and done.jobs_deleted == []
    for job_id in (old, failed):
        assert not data.job(job_id).segments.exists()
        assert data.job(job_id).output("episode.wav").exists()  # the episode is kept
        assert segment_paths(database, job_id) == [(None, None), (None, None)]
        assert job(database, job_id).intermediates_removed_at == now
        assert job(database, job_id).storage_bytes == len(b"RIFF")  # what is left: the episode
    for job_id in (recent, running):
        assert data.job(job_id).segment_audio(1).exists() and segment_paths(database, job_id)[0][0] is not None
        assert job(database, job_id).intermediates_removed_at is None

    assert apply_retention(settings, database, data, now).intermediates_removed == []  # nothing twice
    later = apply_retention(settings, database, data, now + 2 * DAY)  # the frozen clock moves on
    assert later.intermediates_removed == [recent] and not data.job(recent).segments.exists()
    assert data.job(running).segments.exists()  # a job that has not ended keeps everything


def test_whole_jobs_go_after_their_days(database: Database, data: DataFolder) -> None:
    settings = Settings(keep_jobs_days=30)
    old, cancelled = add_job(database, data, JobState.DONE, 31), add_job(database, data, JobState.CANCELLED, 40)
    recent, queued = add_job(database, data, JobState.DONE, 29), add_job(database, data, JobState.QUEUED, None)

    done = apply_retention(settings, database, data, utc_now())
    assert sorted(done.jobs_deleted) == sorted([old, cancelled])
    for job_id in (old, cancelled):
        assert job(database, job_id) is None and segment_paths(database, job_id) == []
        assert not data.job(job_id).root.exists() and not data.trash(job_id).exists()
    for job_id in (recent, queued):
        assert job(database, job_id) is not None and data.job(job_id).root.exists()


def test_without_retention_settings_nothing_goes(database: Database, data: DataFolder) -> None:
    job_id = add_job(database, data, JobState.DONE, 10_000)
    done = apply_retention(Settings(), database, data, utc_now())
    assert done.intermediates_removed == [] and done.jobs_deleted == []
    assert data.job(job_id).segment_audio(0).exists() and job(database, job_id) is not None


def test_a_pass_that_crashed_after_its_claim_leaves_segments_the_next_pass_removes(
    database: Database, data: DataFolder
) -> None:
    job_id = add_job(database, data, JobState.DONE, 8)
    now = utc_now()
    segments = data.job(job_id).segments
    apply_retention(Settings(keep_intermediates_days=7), database, data, now)
    segments.mkdir()  # what a crash between the claim and the removal leaves
    (segments / "0000.wav").write_bytes(b"RIFF")
    apply_retention(Settings(keep_intermediates_days=7), database, data, now + timedelta(minutes=5))
    assert not segments.exists()


def test_a_delete_cut_short_after_its_rename_is_finished_by_the_trash_pass(
    database: Database, data: DataFolder
) -> None:
    job_id = add_job(database, data, JobState.DONE, 1)
    data.trash_root.mkdir(parents=True)
    data.job(job_id).root.rename(data.trash(job_id))  # step 1 done, then the crash
    assert empty_trash(database, data) == [job_id]
    assert job(database, job_id) is None and not data.trash(job_id).exists()


def test_only_a_job_that_has_ended_is_deleted(database: Database, data: DataFolder) -> None:
    job_id = add_job(database, data, JobState.RUNNING, None)
    with database.session() as session, pytest.raises(JobNotEnded):
        delete_job(session, data, session.get_one(Job, job_id))
    assert data.job(job_id).segment_audio(0).exists() and job(database, job_id) is not None


def test_retention_days_must_be_positive() -> None:
    with pytest.raises(SettingsError, match="VOXCAST_KEEP_JOBS_DAYS='0': input should be greater than 0"):
        Settings.from_env({"VOXCAST_KEEP_JOBS_DAYS": "0"})
    assert Settings.from_env({"VOXCAST_KEEP_INTERMEDIATES_DAYS": ""}).keep_intermediates_days is None
    assert Settings.from_env({"VOXCAST_KEEP_JOBS_DAYS": "0.5"}).keep_jobs_days == 0.5

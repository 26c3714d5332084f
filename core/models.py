"""The database record of the service: API keys, voices, jobs, each job's generated segments, script jobs, and the
shows whose feeds publish jobs as episodes.

The database, not the broker, is the record of every job: a job row exists before its Celery message,
and a segment row marked `done` (with its audio and latents on disk) is never generated again, so a worker
killed mid-job, or a broker that lost its messages, costs at most the segment that was being generated.
Schema changes go through Alembic (`core/migrations`); these classes and the newest migration agree.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

from core.job_states import JobState, SegmentState


def utc_now() -> datetime:
    return datetime.now(UTC)


class UtcDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes on every backend (SQLite stores them without an offset and reads back naive ones)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None or value.tzinfo is not None:
            return value
        return value.replace(tzinfo=UTC)


class Base(DeclarativeBase):
    type_annotation_map = {datetime: UtcDateTime(), dict[str, Any]: JSON, list[Any]: JSON}


class ApiKey(Base):
    """A client's credential; only the SHA-256 of the key is stored, the key itself is shown once."""

    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    key_prefix: Mapped[str] = mapped_column(String(16))  # shown in lists so a person can tell keys apart
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)


class Voice(Base):
    """An uploaded voice prompt, stored levelled at 24 kHz mono under the data folder."""

    __tablename__ = "voices"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    seconds: Mapped[float] = mapped_column(Float)
    original_sample_rate: Mapped[int] = mapped_column(Integer)
    original_channels: Mapped[int] = mapped_column(Integer)
    trimmed: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(default=utc_now)


class Job(Base):
    """One podcast to generate: its inputs, where it is in its life, and how far it got."""

    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), index=True)
    state: Mapped[str] = mapped_column(String(16), default=JobState.QUEUED, index=True)
    mode: Mapped[str] = mapped_column(String(16))
    queue: Mapped[str] = mapped_column(String(16))  # "interactive" or "batch"
    priority: Mapped[int] = mapped_column(Integer, default=5)  # 0..9, higher runs sooner
    title: Mapped[str | None] = mapped_column(String(200), default=None)
    # cfg_scale, diffusion_steps, seed; the formats to write; speaker index (as text) -> voice id.
    generation: Mapped[dict[str, Any]] = mapped_column(JSON)
    formats: Mapped[list[Any]] = mapped_column(JSON)
    voices: Mapped[dict[str, Any]] = mapped_column(JSON)
    frames_done: Mapped[int] = mapped_column(Integer, default=0)
    frames_planned: Mapped[int] = mapped_column(Integer, default=0)
    segments_done: Mapped[int] = mapped_column(Integer, default=0)
    segments_total: Mapped[int] = mapped_column(Integer, default=0)
    # The worker's ETA at `eta_at` (`core.progress_estimate.EtaEstimator`), written with its progress; None: none yet.
    eta_seconds: Mapped[float | None] = mapped_column(Float, default=None)
    eta_at: Mapped[datetime | None] = mapped_column(default=None)
    audio_seconds: Mapped[float | None] = mapped_column(Float, default=None)  # of the finished episode
    error: Mapped[str | None] = mapped_column(Text, default=None)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    attempts: Mapped[int] = mapped_column(Integer, default=0)  # times a worker took the job
    # Attempts that ended with their worker dead (a crash, a kill); at `max_worker_deaths` the job fails.
    worker_deaths: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Attempts its worker gave back on a planned stop (SIGTERM, its server gone): queued again, never a death.
    handbacks: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    worker: Mapped[str | None] = mapped_column(String(200), default=None)  # who holds the job while running
    # The holder its last worker death was charged to (a silent worker, taken for dead): if that holder turns out to
    # live (it was paused, and wakes to find the job gone), the death is taken back (`job_repository.forgive_death`).
    death_charged_to: Mapped[str | None] = mapped_column(String(200), default=None)
    # Held by its worker but not yet running: claimed, and waiting for the worker to let it start (its quarantine:
    # a suspect waits for the others, the others for a suspect). A death of that worker now is not counted against it.
    waiting: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # 0 for the job as submitted; +1 for every regenerated turn. Its script is that of the newest revision.
    revision: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(default=utc_now, index=True)
    enqueued_at: Mapped[datetime | None] = mapped_column(default=None)
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    heartbeat_at: Mapped[datetime | None] = mapped_column(default=None)
    finished_at: Mapped[datetime | None] = mapped_column(default=None, index=True)
    # When the retention policy removed its segments' audio and latents: it can no longer be regenerated.
    intermediates_removed_at: Mapped[datetime | None] = mapped_column(default=None)
    # What in the submitted script is likely a typo (`script_text.parser.script_warnings`): [{"line", "message"}].
    warnings: Mapped[list[Any] | None] = mapped_column(JSON, default=None)
    # The take before the last regeneration, kept until the listener keeps one (`api.services.takes`): {"revision",
    # "segments": [{"index", "frames", "seconds", "seed", "revision", "text_hash", "turns"}]}; null when none is kept.
    previous_take: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    # Bytes of its folder: measured at submission (plus what it is expected to write) and when a run ends.
    storage_bytes: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")

    segments: Mapped[list[JobSegment]] = relationship(
        back_populates="job", cascade="all, delete-orphan", order_by="JobSegment.index"
    )

    @property
    def job_state(self) -> JobState:
        return JobState(self.state)


class JobSegment(Base):
    """One generation of a job's plan; `done` means its audio and latents are safely on disk.

    `turns` holds the timings of the segment's turns relative to the segment's start, so the episode can be
    laid out again from stored segments without regenerating any. A regenerated turn sets its segments back to
    pending with a new seed and the job's new revision; every other segment stays as it was.
    """

    __tablename__ = "job_segments"
    __table_args__ = (UniqueConstraint("job_id", "index", name="uq_job_segments_job_index"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    index: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16), default=SegmentState.PENDING)
    frames_planned: Mapped[int] = mapped_column(Integer)
    frames: Mapped[int] = mapped_column(Integer, default=0)
    seconds: Mapped[float] = mapped_column(Float, default=0.0)
    seed: Mapped[int] = mapped_column(Integer)  # the job's seed + index, until a regeneration draws another
    revision: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # the job revision that made it
    audio_path: Mapped[str | None] = mapped_column(String(500), default=None)  # relative to the data folder
    latents_path: Mapped[str | None] = mapped_column(String(500), default=None)
    turns: Mapped[list[Any]] = mapped_column(JSON, default=list)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # SHA-256 of what the segment says (`script_text.plan.Segment.text_hash`); null for rows stored before it was kept.
    text_hash: Mapped[str | None] = mapped_column(String(64), default=None)
    # Frames replayed from the latents an interrupted attempt stored (0: generated in one go).
    resumed_from_frame: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)

    job: Mapped[Job] = relationship(back_populates="segments")


class ScriptJob(Base):
    """A script to draft from notes or to clean up from a transcript, run by a scripts worker.

    Its input is text and its result is text, so both live in the row: there is no folder to keep or delete.
    `attempt_log` has one entry per model reply, `{"attempt": n, "rejected": reason or null}`, written as the
    worker goes, so a listener that joins late (or a Redis that blinks) still sees every attempt.
    """

    __tablename__ = "script_jobs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), index=True)
    task: Mapped[str] = mapped_column(String(16))  # "draft" or "normalise"
    state: Mapped[str] = mapped_column(String(16), default=JobState.QUEUED, index=True)
    source: Mapped[str] = mapped_column(Text)  # the notes or the transcript, as sent
    # draft: names, minutes, tone; normalise: force_model. Checked before the row is written.
    options: Mapped[dict[str, Any]] = mapped_column(JSON)
    max_attempts: Mapped[int] = mapped_column(Integer)
    attempt_log: Mapped[list[Any]] = mapped_column(JSON, default=list)
    script: Mapped[str | None] = mapped_column(Text, default=None)  # `Name: text` lines once done
    via: Mapped[str | None] = mapped_column(String(16), default=None)  # parser, cleanup or model
    notes: Mapped[list[Any]] = mapped_column(JSON, default=list)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    deliveries: Mapped[int] = mapped_column(Integer, default=0)  # times a worker took it
    # Deliveries its scripts worker gave back on a planned stop; the others that did not end it were deaths.
    handbacks: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    worker: Mapped[str | None] = mapped_column(String(200), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utc_now, index=True)
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    heartbeat_at: Mapped[datetime | None] = mapped_column(default=None)  # refreshed while a scripts worker runs it
    finished_at: Mapped[datetime | None] = mapped_column(default=None)

    @property
    def job_state(self) -> JobState:
        return JobState(self.state)


class Show(Base):
    """A podcast a key publishes: what its feed says of it, and the token its feed and files are reached by.

    Podcast apps cannot send an API key, so a show's feed is reached by `feed_token`: random, never derived from an
    id, and replaced when the owner rotates it (the old URLs then answer 404). `podcast_guid` is the show's
    Podcasting 2.0 identity: set once, it stays when the token (and so the feed's URL) changes.
    """

    __tablename__ = "shows"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), index=True)
    title: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text)
    author: Mapped[str] = mapped_column(String(200))
    language: Mapped[str] = mapped_column(String(35))  # a BCP 47 tag: "en", "en-GB"
    category: Mapped[str] = mapped_column(String(100))  # an Apple Podcasts category, "Technology" or "Arts/Books"
    explicit: Mapped[bool] = mapped_column(Boolean, default=False)
    # Who directories write to about the feed (itunes:owner, podcast:locked's owner); null: no owner in the feed.
    owner_email: Mapped[str | None] = mapped_column(String(254), default=None)
    show_type: Mapped[str] = mapped_column(String(16), default="episodic", server_default="episodic")  # or "serial"
    # podcast:locked: other hosting platforms are asked not to import the feed (said only with an owner_email).
    locked: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    feed_token: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    podcast_guid: Mapped[str] = mapped_column(String(36))
    # "jpg" or "png" once artwork is uploaded (its file: `core.storage.DataFolder.show_artwork`); null before.
    artwork_format: Mapped[str | None] = mapped_column(String(8), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    # Any change to what the episodes' tags say of the show (its artwork too): their files' Last-Modified.
    updated_at: Mapped[datetime] = mapped_column(default=utc_now)
    # The feed as last served: a digest of what it said and pointed at, and when that last changed (its
    # Last-Modified), set by the feed route when a digest differs (`api.services.feed_files`); null until served.
    feed_digest: Mapped[str | None] = mapped_column(String(64), default=None)
    feed_changed_at: Mapped[datetime | None] = mapped_column(default=None)

    episodes: Mapped[list[Episode]] = relationship(back_populates="show", cascade="all, delete-orphan")


class Episode(Base):
    """A job published in a show: its episode title, description, number and season. The job's MP3 is its enclosure.

    A job named a show when submitted is listed once it is done; `published_at` (the item's pubDate) is stamped the
    first time it is listed done, or when a done job is added, so it stays put when a turn is regenerated later.
    """

    __tablename__ = "episodes"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    show_id: Mapped[str] = mapped_column(ForeignKey("shows.id", ondelete="CASCADE"), index=True)
    title: Mapped[str] = mapped_column(String(200))
    description: Mapped[str | None] = mapped_column(Text, default=None)
    number: Mapped[int | None] = mapped_column(Integer, default=None)
    season: Mapped[int | None] = mapped_column(Integer, default=None)
    published_at: Mapped[datetime | None] = mapped_column(default=None)
    updated_at: Mapped[datetime] = mapped_column(default=utc_now)

    show: Mapped[Show] = relationship(back_populates="episodes")
    job: Mapped[Job] = relationship()

"""The one owner of a job's row: every write to `Job` (and to its segments' rows) is a function here.

A job's state moves only along `TRANSITIONS`, one table of named transitions, each from a set of states to one.
Each write is a conditional UPDATE whose `WHERE` is drawn from that table (`_may`), so a transition that races
another (a cancel and a claim, a retry and a retention pass) finds the row moved and does nothing, and one that
was never allowed raises `IllegalTransition`, naming both states. A worker's writes are also conditional on the
worker holding the job (`Job.worker`), so two deliveries of the same message (a redelivery, a sweeper's re-enqueue)
can never both run it: the second finds it held, finished or cancelled, and does nothing. That is what makes the
task idempotent.

Every function is one short transaction, or a step of the caller's, that can simply run again when the database
is away for a moment (`core.db.retry_transient`): a job does not fail because a write met a restart. The api's
transitions take the caller's session, so they commit with the rest of its request; the worker's, the sweeper's
and retention's take the `Database` and are their own transactions. An everyday-tier test
(`tests/test_job_repository.py`) fails when any other module writes a `Job` row.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import ColumnElement, delete, false, or_, select, update
from sqlalchemy.orm import Session

from core.db import Database, retry_transient, rows_changed
from core.job_states import FINAL_STATES, JobState, SegmentState
from core.models import Job, JobSegment, utc_now


class Transition(enum.StrEnum):
    """What moves a job from one state to another; `TRANSITIONS` says from which states and to which."""

    CLAIM = "claim"  # a worker takes a queued job, or one whose holder went silent
    CANCEL_AT_CLAIM = "cancel at claim"  # a worker finds a claimable job whose cancel was asked for
    START = "start"  # the claimed job may run now (out of its worker's quarantine)
    HAND_BACK = "hand back"  # its worker stops on purpose, or lost the database or the broker: queued again
    FINISH = "finish"  # its worker stored the whole episode
    FAIL = "fail"  # its worker could not make it
    STOP_CANCELLED = "stop cancelled"  # its worker saw its cancel and stopped
    CANCEL = "cancel"  # the owner cancels a queued job (a running one gets `cancel_requested`, its worker stops it)
    REQUEST_CANCEL = "request cancel"  # the owner asks a running job to stop
    RELEASE = "release"  # its worker died: queued again, one more death on its record
    GIVE_UP = "give up"  # its worker died once too often: failed by the poison-job guard
    RETRY = "retry"  # an admin queues a failed or cancelled job again
    REGENERATE = "regenerate"  # a done job's next revision (some segments again, or an earlier take back)
    DELETE = "delete"  # its rows go (with its files)
    PURGE = "purge"  # retention removes an ended job's intermediates


DELETED: Literal["deleted"] = "deleted"  # a transition's target when the job's rows go


@dataclass(frozen=True)
class Move:
    """The states a transition starts from, and the one it leads to: a state, `DELETED`, or None where the state
    stays as it was (a purge, a cancel asked of a running job)."""

    sources: frozenset[JobState]
    target: JobState | Literal["deleted"] | None


_RUNNING = frozenset({JobState.RUNNING})
_FINAL = frozenset(FINAL_STATES)
TRANSITIONS: Mapping[Transition, Move] = {
    Transition.CLAIM: Move(frozenset({JobState.QUEUED, JobState.RUNNING}), JobState.RUNNING),
    Transition.CANCEL_AT_CLAIM: Move(frozenset({JobState.QUEUED, JobState.RUNNING}), JobState.CANCELLED),
    Transition.START: Move(_RUNNING, None),
    Transition.HAND_BACK: Move(_RUNNING, JobState.QUEUED),
    Transition.FINISH: Move(_RUNNING, JobState.DONE),
    Transition.FAIL: Move(_RUNNING, JobState.FAILED),
    Transition.STOP_CANCELLED: Move(_RUNNING, JobState.CANCELLED),
    Transition.CANCEL: Move(frozenset({JobState.QUEUED}), JobState.CANCELLED),
    Transition.REQUEST_CANCEL: Move(_RUNNING, None),
    Transition.RELEASE: Move(_RUNNING, JobState.QUEUED),
    Transition.GIVE_UP: Move(_RUNNING, JobState.FAILED),
    Transition.RETRY: Move(frozenset({JobState.FAILED, JobState.CANCELLED}), JobState.QUEUED),
    Transition.REGENERATE: Move(frozenset({JobState.DONE}), JobState.QUEUED),
    Transition.DELETE: Move(_FINAL, DELETED),
    Transition.PURGE: Move(_FINAL, None),
}
# Every (from, to) a job may take.
ALLOWED: frozenset[tuple[JobState, JobState | Literal["deleted"]]] = frozenset(
    (source, source if move.target is None else move.target) for move in TRANSITIONS.values() for source in move.sources
)


class IllegalTransition(Exception):
    """A transition asked of a job in a state it cannot take from there; names the job, the transition and both
    states."""

    def __init__(self, job_id: str, transition: Transition, current: JobState) -> None:
        move = TRANSITIONS[transition]
        target = current if move.target is None else move.target
        allowed = ", ".join(sorted(move.sources))
        super().__init__(
            f"job {job_id} is {current}: '{transition}' would take it from {current} to {target}, "
            f"which only a job that is {allowed} may do"
        )
        self.job_id, self.transition, self.current = job_id, transition, current


def check_transition(job_id: str, transition: Transition, current: JobState | str) -> None:
    """Raise `IllegalTransition` unless a job in `current` may take `transition`."""
    if JobState(current) not in TRANSITIONS[transition].sources:
        raise IllegalTransition(job_id, transition, JobState(current))


def _may(transition: Transition) -> ColumnElement[bool]:
    """The `WHERE` that lets a conditional UPDATE move only a job the table allows to take `transition`."""
    return Job.state.in_(list(TRANSITIONS[transition].sources))


def _moved_or_illegal(session: Session, job_id: str, transition: Transition, rowcount: int) -> None:
    """After a conditional UPDATE of one job: nothing when it moved; else `IllegalTransition` with the state found
    (a job deleted meanwhile raises `LookupError`)."""
    if rowcount == 1:
        return
    current = session.scalar(select(Job.state).where(Job.id == job_id))
    if current is None:
        raise LookupError(f"no job {job_id}")
    raise IllegalTransition(job_id, transition, JobState(current))


@dataclass(frozen=True)
class ClaimedJob:
    """A job this worker now holds, with what it needs to run it."""

    id: str
    holder: str
    mode: str
    cfg_scale: float
    diffusion_steps: int
    seed: int
    max_segment_seconds: float
    formats: tuple[str, ...]
    kbps: dict[str, int]  # lossy formats' bitrates as the job asked (the others: their defaults)
    speakers: tuple[int, ...]  # speaker indices that have a voice in the job's inputs
    revision: int  # which revision's script to generate (0: as submitted)
    worker_deaths: int  # earlier attempts that ended with their worker dead (a suspect runs alone)
    queue: str  # "interactive" or "batch": its generations are scheduled as interactive work or not
    priority: int  # 0..9
    waited_seconds: float  # from its submission (or its last requeue) to this claim


@dataclass(frozen=True)
class PlannedSegment:
    """A segment of a job's plan as its row starts: its index, the frames it is expected to make, its seed, and the
    hash of what it says (`script_text.plan.Segment.text_hash`)."""

    index: int
    frames: int
    seed: int
    text_hash: str


@dataclass(frozen=True)
class SegmentRecord:
    """What the database knows of one segment of a job's plan."""

    index: int
    done: bool
    frames: int
    seed: int  # the segment's own seed (`segment_seed(job seed, index)`, unless a regeneration drew another)
    audio_path: str | None
    turns: tuple[tuple[int, str, str, float, float], ...]  # (turn index, speaker, text, start, end) in the segment
    revision: int = 0  # the job's revision that last set it to generate (a regenerated turn's is the job's newest)
    # Its words changed since its row was written (its audio, or the frames of an interrupted attempt, were of other
    # words): generated again from the start.
    text_changed: bool = False


@dataclass(frozen=True)
class CancelledAtClaim:
    """A job `claim_job` found queued with its cancel asked for (its worker died before it stopped): cancelled now."""

    id: str


@retry_transient
def claim_job(
    database: Database, job_id: str, holder: str, stale_after: float, revision: int | None = None
) -> ClaimedJob | CancelledAtClaim | None:
    """Take the job if it is queued, or claimed by a holder silent for `stale_after` seconds that had not let it run
    yet (`waiting`); else None.

    A job its silent holder let run is not taken over here (a redelivered message): it goes back through
    `release_abandoned_jobs`, the sweepers' judgement of that holder (dead: a death charged, the job failed at the
    limit; alive: a hand-back). Taken over here, the holder's death was never counted (a chaos soak found one job
    killed under twice and charged once).

    With `revision`, only while the job is at that revision: a regeneration's message that a newer one
    superseded finds nothing to do. A queued job whose cancel was requested is marked cancelled here instead
    (`CancelledAtClaim`: the caller records what its folder holds).
    """
    now = utc_now()
    silent = Job.heartbeat_at < now - timedelta(seconds=stale_after)
    claimable = _may(Transition.CLAIM) & ((Job.state == JobState.QUEUED) | (silent & Job.waiting.is_(True)))
    if revision is not None:
        claimable = claimable & (Job.revision == revision)
    with database.session() as session:
        cancelled = session.execute(
            update(Job)
            .where(Job.id == job_id, Job.cancel_requested.is_(True), claimable)
            .values(state=TRANSITIONS[Transition.CANCEL_AT_CLAIM].target, finished_at=now, worker=None)
        )
        if rows_changed(cancelled) == 1:
            return CancelledAtClaim(job_id)
        claimed = session.execute(
            update(Job)
            .where(Job.id == job_id, Job.cancel_requested.is_(False), claimable)
            .values(
                state=TRANSITIONS[Transition.CLAIM].target,
                worker=holder,
                waiting=True,  # until its worker lets it run (`mark_started`): a death before that is not its own
                heartbeat_at=now,
                attempts=Job.attempts + 1,
                error=None,
            )
        )
        if rows_changed(claimed) != 1:
            return None
        job = session.get_one(Job, job_id)
        # A first attempt waited since its submission; a later one (a requeue, a regeneration) since it was sent again.
        queued_since = job.created_at if job.started_at is None else (job.enqueued_at or job.created_at)
        if job.started_at is None:
            job.started_at = now
        generation = job.generation
        return ClaimedJob(
            id=job.id,
            holder=holder,
            mode=job.mode,
            cfg_scale=float(generation["cfg_scale"]),
            diffusion_steps=int(generation["diffusion_steps"]),
            seed=int(generation["seed"]),
            max_segment_seconds=float(generation["max_segment_seconds"]),
            formats=tuple(job.formats),
            kbps=dict(generation.get("kbps") or {}),
            speakers=tuple(int(speaker) for speaker in job.voices),
            revision=job.revision,
            worker_deaths=job.worker_deaths,
            queue=job.queue,
            priority=job.priority,
            waited_seconds=max(0.0, (now - queued_since).total_seconds()),
        )


@retry_transient
def beat(database: Database, job: ClaimedJob) -> bool:
    """Refresh the job's heartbeat; False when this worker no longer holds it (a sweeper handed it on)."""
    with database.session() as session:
        result = session.execute(update(Job).where(_held(job)).values(heartbeat_at=utc_now()))
        return rows_changed(result) == 1


@retry_transient
def mark_started(database: Database, job: ClaimedJob) -> None:
    """The held job runs now, beside the worker's others or alone (`Quarantine`): from here a death of its worker
    is counted against it. Claimed, it was waiting, and a death then was not its own."""
    with database.session() as session:
        session.execute(update(Job).where(_held(job), _may(Transition.START)).values(waiting=False))


@retry_transient
def cancel_requested(database: Database, job_ids: Collection[str]) -> set[str]:
    """Which of `job_ids` have had their cancel asked for; a read that never waits for writers (it runs often)."""
    with database.reading() as session:
        return set(session.scalars(select(Job.id).where(Job.id.in_(job_ids), Job.cancel_requested.is_(True))))


@retry_transient
def prepare_segments(database: Database, job: ClaimedJob, planned: list[PlannedSegment]) -> list[SegmentRecord]:
    """Make sure a row exists for every planned segment (a row already there keeps its seed); return them in order.

    A row whose text hash differs from the plan's is set back to pending (its stored audio, or an interrupted
    attempt's frames, said other words) and its record says so; a row stored before hashes were kept (none) takes
    the plan's.
    """
    with database.session() as session:
        existing = {row.index: row for row in session.scalars(select(JobSegment).where(JobSegment.job_id == job.id))}
        changed = set()
        for segment in planned:
            row = existing.get(segment.index)
            if row is None:
                row = JobSegment(
                    job_id=job.id,
                    index=segment.index,
                    frames_planned=segment.frames,
                    seed=segment.seed,
                    revision=job.revision,
                    turns=[],
                    text_hash=segment.text_hash,
                )
                session.add(row)
                existing[segment.index] = row
            elif row.text_hash is None:
                row.text_hash = segment.text_hash
            elif row.text_hash != segment.text_hash:
                changed.add(segment.index)
                row.text_hash, row.frames_planned = segment.text_hash, segment.frames
                row.state, row.audio_path, row.latents_path, row.frames, row.seconds, row.turns = (
                    SegmentState.PENDING, None, None, 0, 0.0, []
                )  # fmt: skip
        session.flush()
        return [_record(existing[segment.index], segment.index in changed) for segment in planned]


@retry_transient
def record_planned(database: Database, job: ClaimedJob, frames_planned: int, segments_total: int) -> None:
    """What this run of the job is for, as its progress counts it (`workers.job_progress`)."""
    with database.session() as session:
        session.execute(
            update(Job).where(_held(job)).values(frames_planned=frames_planned, segments_total=segments_total)
        )


def _record(row: JobSegment, text_changed: bool) -> SegmentRecord:
    return SegmentRecord(
        index=row.index,
        done=row.state == SegmentState.DONE,
        frames=row.frames,
        seed=row.seed,
        audio_path=row.audio_path,
        turns=tuple(tuple(turn) for turn in row.turns),
        revision=row.revision,
        text_changed=text_changed,
    )


@retry_transient
def record_progress(
    database: Database, job: ClaimedJob, frames_done: int, segments_done: int, eta_seconds: float | None
) -> None:
    now = utc_now()
    with database.session() as session:
        session.execute(
            update(Job)
            .where(_held(job))
            .values(
                frames_done=frames_done,
                segments_done=segments_done,
                heartbeat_at=now,
                eta_seconds=eta_seconds,
                eta_at=now,
            )
        )


@retry_transient
def record_segment_started(database: Database, job: ClaimedJob, index: int) -> None:
    with database.session() as session:
        session.execute(
            update(JobSegment)
            .where(JobSegment.job_id == job.id, JobSegment.index == index)
            .values(started_at=utc_now(), attempts=JobSegment.attempts + 1, resumed_from_frame=0)
        )


@retry_transient
def record_segment_resumed(database: Database, job: ClaimedJob, index: int, frames: int) -> None:
    """Note that this attempt at a segment replays `frames` frames an earlier attempt stored."""
    with database.session() as session:
        session.execute(
            update(JobSegment)
            .where(JobSegment.job_id == job.id, JobSegment.index == index)
            .values(resumed_from_frame=frames)
        )


@retry_transient
def record_segment_done(
    database: Database,
    job: ClaimedJob,
    record: SegmentRecord,
    seconds: float,
    latents_path: str,
    frames_done: int,
    segments_done: int,
) -> None:
    """Mark a segment stored (its files are already in place) and move the job's progress on, in one commit."""
    with database.session() as session:
        session.execute(
            update(JobSegment)
            .where(JobSegment.job_id == job.id, JobSegment.index == record.index)
            .values(
                state=SegmentState.DONE,
                frames=record.frames,
                seconds=seconds,
                audio_path=record.audio_path,
                latents_path=latents_path,
                turns=[list(turn) for turn in record.turns],
                finished_at=utc_now(),
            )
        )
        session.execute(
            update(Job)
            .where(_held(job))
            .values(frames_done=frames_done, segments_done=segments_done, heartbeat_at=utc_now())
        )


_ENDINGS = {
    JobState.DONE: Transition.FINISH,
    JobState.FAILED: Transition.FAIL,
    JobState.CANCELLED: Transition.STOP_CANCELLED,
}


def _held(job: ClaimedJob) -> ColumnElement[bool]:
    """The job, still running under this worker."""
    return (Job.id == job.id) & (Job.worker == job.holder) & (Job.state == JobState.RUNNING)


@retry_transient
def finish_job(
    database: Database,
    job: ClaimedJob,
    state: JobState,
    *,
    error: str | None = None,
    audio_seconds: float | None = None,
    storage_bytes: int | None = None,
) -> bool:
    """End the job in a final state (`FINISH`, `FAIL` or `STOP_CANCELLED`), with the bytes its folder holds now; False
    when this worker no longer held it."""
    transition = _ENDINGS[state]
    values: dict[str, object] = {
        "state": TRANSITIONS[transition].target,
        "finished_at": utc_now(),
        "error": error,
        "worker": None,
    }
    if storage_bytes is not None:
        values["storage_bytes"] = storage_bytes
    if audio_seconds is not None:
        values["audio_seconds"] = audio_seconds
    with database.session() as session:
        result = session.execute(update(Job).where(_held(job), _may(transition)).values(**values))
        return rows_changed(result) == 1


@retry_transient
def hand_back_job(database: Database, job: ClaimedJob) -> bool:
    """Queue the held job again because its worker stops on purpose, or could not reach the database or the broker
    for longer than its budget (not a death): `handbacks` + 1, `worker_deaths` unchanged, its stored segments and
    partial frames kept for the next attempt.

    False when this worker no longer holds it, or when its cancel was asked for meanwhile (the caller ends it as
    cancelled instead: a job queued again with its cancel pending would only be cancelled by the next claim).
    """
    with database.session() as session:
        result = session.execute(
            update(Job)
            .where(_held(job), _may(Transition.HAND_BACK), Job.cancel_requested.is_(False))
            .values(**_handed_back(utc_now()))
        )
        return rows_changed(result) == 1


@retry_transient
def hand_back_process_jobs(database: Database, process: str) -> list[AbandonedJob]:
    """Queue again every job still running under `process` ("<host>:<pid>"): a worker stopped on purpose that had not
    handed them all back by the end of its stop's budget (killed by its supervisor, or ending by its own bound). The
    stop was asked for, so these are hand-backs, not deaths. A job whose cancel is pending is cancelled by its next
    claim."""
    with database.session() as session:
        rows = session.execute(
            update(Job)
            .where(_may(Transition.HAND_BACK), _held_by_process(process))
            .values(**_handed_back(utc_now()))
            .returning(Job.id, Job.queue, Job.priority, Job.worker_deaths)
        ).all()
    return [AbandonedJob(*row, failed=False) for row in rows]


def _held_by_process(process: str) -> ColumnElement[bool]:
    return (Job.state == JobState.RUNNING) & Job.worker.startswith(f"{process}:", autoescape=True)


def _handed_back(now: datetime) -> dict[str, object]:
    """A running job's row, queued again without a death on its record."""
    return {
        "state": TRANSITIONS[Transition.HAND_BACK].target,
        "worker": None,
        "waiting": False,
        "enqueued_at": now,
        "handbacks": Job.handbacks + 1,
    }


@dataclass(frozen=True)
class AbandonedJob:
    """A running job whose worker is gone, and what became of it: queued again, or failed by the guard."""

    id: str
    queue: str
    priority: int
    worker_deaths: int
    failed: bool


def worker_deaths_error(deaths: int) -> str:
    """Why the poison-job guard failed a job, and what to do about it."""
    return (
        f"the worker died {deaths} times while running this job (the limit is VOXCAST_MAX_WORKER_DEATHS={deaths}), "
        "so it is not run again; the worker's log shows how it died; an admin can retry the job"
    )


@retry_transient
def release_abandoned_jobs(
    database: Database,
    *,
    max_worker_deaths: int,
    stale_after: float | None = None,
    dead_process: str | None = None,
    living: Collection[str] = (),
    now: datetime | None = None,
) -> list[AbandonedJob]:
    """Take back every running job whose worker is gone; each that was running counts one more worker death.

    A worker is gone when its job's heartbeat is older than `stale_after` seconds (a kill, a crash, a hang, or a
    process that could not reach the database), or when it is `dead_process` ("<host>:<pid>", a process its
    supervisor saw end). A stale job whose process is among `living` (processes still announcing themselves: they
    lost the database or were paused, but did not die) is handed back (`HAND_BACK`), never charged: only a process's
    death is a death. Otherwise a job below `max_worker_deaths` is queued again (`RELEASE`, its stored segments
    kept); one that reaches it is failed with `worker_deaths_error` (`GIVE_UP`), so a job that crashes every worker
    it meets cannot take the service down forever. A job that was claimed but not yet running (`waiting`: its worker
    had not let it start, as `Quarantine` holds a job while a suspect runs alone) had no part in the death: it is
    queued again without one.
    """
    now = now or utc_now()
    gone = _may(Transition.RELEASE)
    if dead_process is not None:
        gone = gone & _held_by_process(dead_process)
    if stale_after is not None:
        gone = gone & (Job.heartbeat_at < now - timedelta(seconds=stale_after))
    alive = or_(false(), *(_held_by_process(process) for process in living))
    if dead_process is not None:
        alive = false()  # its supervisor saw it end
    died = gone & ~alive
    running = died & Job.waiting.is_(False)
    last_chance = Job.worker_deaths + 1 >= max_worker_deaths
    deaths = Job.worker_deaths + 1
    requeued = {"state": TRANSITIONS[Transition.RELEASE].target, "worker": None, "waiting": False, "enqueued_at": now}
    returned = (Job.id, Job.queue, Job.priority, Job.worker_deaths)
    with database.session() as session:
        failed = list(
            session.execute(
                update(Job)
                .where(running, last_chance, _may(Transition.GIVE_UP))
                .values(
                    state=TRANSITIONS[Transition.GIVE_UP].target,
                    worker=None,
                    death_charged_to=Job.worker,
                    worker_deaths=deaths,
                    finished_at=now,
                    error=worker_deaths_error(max_worker_deaths),
                )
                .returning(*returned)
            ).all()
        )
        queued = list(
            session.execute(
                update(Job)
                .where(running, ~last_chance)
                .values(**requeued, worker_deaths=deaths, death_charged_to=Job.worker)
                .returning(*returned)
            ).all()
        )
        queued += session.execute(
            update(Job).where(died, Job.waiting.is_(True)).values(**requeued).returning(*returned)
        ).all()
        queued += session.execute(
            update(Job).where(gone, alive, _may(Transition.HAND_BACK)).values(**_handed_back(now)).returning(*returned)
        ).all()
    return [
        AbandonedJob(job_id, queue, priority, deaths, failed=was_failed)
        for rows, was_failed in ((failed, True), (queued, False))
        for job_id, queue, priority, deaths in rows
    ]


@retry_transient
def forgive_death(database: Database, job: ClaimedJob) -> bool:
    """This worker held `job`, went silent (paused: SIGSTOP, a frozen host), was taken for dead, and wakes to find the
    job taken back: it lives, so the death charged to it is taken back (`worker_deaths` - 1, `handbacks` + 1). False
    when no death was charged to this holder (the job was handed back, or charged to another)."""
    with database.session() as session:
        forgiven = session.execute(
            update(Job)
            .where(Job.id == job.id, Job.death_charged_to == job.holder, Job.worker_deaths > 0)
            .values(worker_deaths=Job.worker_deaths - 1, handbacks=Job.handbacks + 1, death_charged_to=None)
        )
        return rows_changed(forgiven) == 1


@retry_transient
def has_ended(database: Database, job_id: str) -> bool:
    """Whether the job is done, failed or cancelled (False too once it has gone)."""
    with database.session() as session:
        return session.scalar(select(Job.id).where(Job.id == job_id, Job.state.in_(list(_FINAL)))) is not None


@retry_transient
def recount_ended(database: Database, job_id: str, held: int) -> bool:
    """An ended job's folder holds `held` bytes now: counted again after a worker that was silent when the job ended
    (a cancel found it queued, taken back from that worker) stopped writing to it. False while the job runs again
    (its holder counts at its end) or has gone."""
    with database.session() as session:
        ended = update(Job).where(Job.id == job_id, Job.state.in_(list(_FINAL))).values(storage_bytes=held)
        return rows_changed(session.execute(ended)) == 1


# The api's transitions and writes: in the caller's session, committed with the rest of its request.


def create_job(session: Session, **fields: Any) -> Job:
    """A new job, queued (the caller commits it once its inputs are stored)."""
    job = Job(state=JobState.QUEUED, **fields)
    session.add(job)
    return job


def cancel(session: Session, job_id: str) -> None:
    """Cancel a queued job at once (`CANCEL`); ask a running one to stop (`REQUEST_CANCEL`, its worker ends it as
    cancelled); a cancelled one stays so. `IllegalTransition` for a job that is done or failed."""
    cancelled = rows_changed(
        session.execute(
            update(Job)
            .where(Job.id == job_id, _may(Transition.CANCEL))
            .values(state=TRANSITIONS[Transition.CANCEL].target, cancel_requested=True, finished_at=utc_now())
        )
    )
    if cancelled:
        return
    requested = rows_changed(
        session.execute(
            update(Job).where(Job.id == job_id, _may(Transition.REQUEST_CANCEL)).values(cancel_requested=True)
        )
    )
    if requested or session.scalar(select(Job.state).where(Job.id == job_id)) == JobState.CANCELLED:
        return
    _moved_or_illegal(session, job_id, Transition.CANCEL, 0)


def retry(session: Session, job_id: str) -> None:
    """Queue a failed or cancelled job again (`RETRY`), its stored segments kept; its count of worker deaths starts
    again (a job the poison-job guard failed gets the whole allowance back), and segments the retention policy
    removed are kept again from now on (they run again)."""
    moved = rows_changed(
        session.execute(
            update(Job)
            .where(Job.id == job_id, _may(Transition.RETRY))
            .values(
                state=TRANSITIONS[Transition.RETRY].target,
                cancel_requested=False,
                error=None,
                worker_deaths=0,
                finished_at=None,
                enqueued_at=utc_now(),
                intermediates_removed_at=None,
            )
        )
    )
    _moved_or_illegal(session, job_id, Transition.RETRY, moved)


def reprioritise(session: Session, job_id: str, priority: int) -> None:
    session.execute(update(Job).where(Job.id == job_id).values(priority=priority))


def regenerate(
    session: Session, job_id: str, revision: int, seeds: Mapping[int, int], text_hashes: Mapping[int, str]
) -> bool:
    """Queue a done job again at `revision` (`REGENERATE`) with the segments `seeds` names pending under their new
    seeds and the hashes of their new words; False when it moved on meanwhile (another regeneration, a retention
    pass); `IllegalTransition` when it is not done."""
    now = utc_now()
    moved = rows_changed(
        session.execute(
            update(Job)
            .where(
                Job.id == job_id,
                _may(Transition.REGENERATE),
                Job.revision == revision - 1,
                Job.intermediates_removed_at.is_(None),
            )
            .values(
                state=TRANSITIONS[Transition.REGENERATE].target,
                revision=revision,
                frames_done=0,
                segments_done=0,
                audio_seconds=None,
                error=None,
                cancel_requested=False,
                started_at=None,
                finished_at=None,
                enqueued_at=now,
            )
        )
    )
    if not moved:
        current = session.scalar(select(Job.state).where(Job.id == job_id))
        if current is None:
            raise LookupError(f"no job {job_id}")  # deleted meanwhile, as `_moved_or_illegal` says
        check_transition(job_id, Transition.REGENERATE, current)
        return False
    for index, seed in seeds.items():
        session.execute(
            update(JobSegment)
            .where(JobSegment.job_id == job_id, JobSegment.index == index)
            .values(
                state=SegmentState.PENDING,
                seed=seed,
                revision=revision,
                text_hash=text_hashes[index],
                started_at=None,
                finished_at=None,
            )
        )
    return True


def keep_previous_take(session: Session, job_id: str, take: dict[str, Any] | None) -> None:
    """Record the take a regeneration set aside (None: there is none any more)."""
    session.execute(update(Job).where(Job.id == job_id).values(previous_take=take))


def restore_segment(session: Session, job_id: str, index: int, values: Mapping[str, Any]) -> None:
    """Put an earlier take's segment back in place: done, with its stored values and files."""
    session.execute(
        update(JobSegment)
        .where(JobSegment.job_id == job_id, JobSegment.index == index)
        .values(**values, state=SegmentState.DONE)
    )


def record_storage_bytes(session: Session, job_id: str, held: int) -> None:
    """What the job's folder holds, as its usage counts it."""
    session.execute(update(Job).where(Job.id == job_id).values(storage_bytes=held))


def delete_rows(session: Session, job_id: str) -> bool:
    """Delete an ended job's rows (`DELETE`); False when it has no row (deleted meanwhile); `IllegalTransition` when it
    runs again (a retry between the caller's check and now)."""
    deleted = rows_changed(session.execute(delete(Job).where(Job.id == job_id, _may(Transition.DELETE))))
    if not deleted:
        current = session.scalar(select(Job.state).where(Job.id == job_id))
        if current is not None:
            raise IllegalTransition(job_id, Transition.DELETE, JobState(current))
    session.execute(delete(JobSegment).where(JobSegment.job_id == job_id))
    return bool(deleted)


@retry_transient
def purge_intermediates(database: Database, job_id: str, now: datetime) -> bool:
    """Claim an ended job's intermediates for removal (`PURGE`): its segments' files are forgotten and its earlier
    take with them (an intermediate too); False when it runs again, or another pass claimed it first."""
    with database.session() as session:
        claimed = rows_changed(
            session.execute(
                update(Job)
                .where(Job.id == job_id, _may(Transition.PURGE), Job.intermediates_removed_at.is_(None))
                .values(intermediates_removed_at=now, previous_take=None)
            )
        )
        if not claimed:
            return False
        session.execute(
            update(JobSegment).where(JobSegment.job_id == job_id).values(audio_path=None, latents_path=None)
        )
    return True


@retry_transient
def mark_resent(database: Database, job_id: str) -> None:
    """A queued job's message was sent again (the broker had lost it): it waits from now."""
    with database.session() as session:
        session.execute(update(Job).where(Job.id == job_id, Job.state == JobState.QUEUED).values(enqueued_at=utc_now()))

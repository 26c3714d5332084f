"""Jobs: validate and store a submission, enqueue it, describe it, cancel it, find its files.

A submission is checked completely before anything is stored: the script parses (else 422 with its line),
the plan fits the length limit, every speaker has exactly one voice, every voice exists and belongs to the
caller, the key has room for another job. Then the inputs are copied into the job's folder, the row is
committed, and only then is the task sent, so a worker can never see a message before its job. A send
that fails (Redis down) still answers 202: the row is the record, and the sweeper sends it later.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session
from starlette.datastructures import UploadFile

from api.deps import ApiServices, Caller
from api.errors import Conflict, InvalidInput, NotFound, Problem
from api.schemas import (
    GenerationParams,
    JobOptions,
    JobOutputs,
    JobProgress,
    JobView,
    PreviousSegment,
    PreviousTake,
    ScriptWarningView,
)
from api.services.cancellation import request_cancel
from api.services.episodes import add_episode, check_episode, episode_view
from api.services.job_limits import (
    GenerationLimits,
    check_generation_lengths,
    check_in_flight,
    check_script_length,
    planned_within_minutes,
)
from api.services.ownership import owned_row
from api.services.storage_quota import check_storage_quota
from api.services.voices import copy_voice_into, prepare_upload, upload_name
from core import job_deletion, job_repository
from core.audio_formats import AUDIO_FORMATS
from core.audio_rates import FRAMES_PER_SECOND
from core.job_states import JobState, QueueKind, SegmentState
from core.models import ApiKey, Job, JobSegment, Voice, utc_now
from core.progress_estimate import eta_from
from core.storage import atomic_write, new_id, write_audio
from core.storage_usage import expected_job_bytes, record_job_bytes
from script_text.parser import (
    Script,
    ScriptError,
    ScriptWarning,
    Speaker,
    check_speakable,
    find_speaker,
    parse_script,
    script_warnings,
)
from script_text.plan import Plan
from script_text.voice_assignment import assign_voices
from tokenizer.voice_prompt import VoicePrompt
from workers.celery_app import enqueue_job

logger = logging.getLogger(__name__)

TRANSCRIPT_FILES = {
    "srt": "episode.srt",
    "vtt": "episode.vtt",
    "chapters": "episode.chapters.json",
    "turns": "episode.turns.json",
}


@dataclass(frozen=True)
class JobSubmission:
    """A job as the client sent it: the script text, the options, and voice files uploaded with it."""

    script: str
    options: JobOptions
    uploads: Mapping[str, UploadFile]  # speaker (as the client named it) -> recording


def submit_job(
    services: ApiServices, caller: Caller, submission: JobSubmission, limits: GenerationLimits | None = None
) -> JobView:
    """Check, store and enqueue a job; `limits` are what the live workers hold in one generation (see
    `job_limits.check_generation_lengths`)."""
    options = submission.options
    settings = services.settings
    check_script_length(submission.script, settings.max_script_chars)
    script = _parsed_script(submission.script)
    warnings = script_warnings(submission.script, script)
    plan = planned_within_minutes(
        script, options.mode, settings.max_segment_seconds, settings.max_job_audio_minutes, "script"
    )
    # Uploads are decoded and levelled before the database is touched: that can take a second.
    uploads = {key: prepare_upload(services, upload, f"voices.{key}") for key, upload in submission.uploads.items()}
    upload_names = {key: upload_name(upload.filename, f"voices.{key}") for key, upload in submission.uploads.items()}
    job_id = new_id()
    folder = services.data.job(job_id)
    queue = options.queue or queue_by_size(plan, settings.interactive_max_seconds)
    try:
        view = _store_job(services, caller, submission, plan, queue, limits, uploads, upload_names, job_id, warnings)
    except BaseException:  # refused or failed: nothing of the job stays on disk, nor in the store
        try:
            services.data.files.remove(folder.root)
        except Exception:  # the refusal is what the caller must hear; a leftover is logged
            logger.warning("could not remove a refused job's files", extra={"job_id": job_id}, exc_info=True)
        raise
    services.data.files.drop_local(folder.root)  # the store has the inputs now; the worker fetches them
    logger.info("job submitted", extra={"job_id": job_id, "owner": caller.key_id, "queue": queue})
    _send(services, job_id, queue, options.priority)
    return view


def queue_by_size(plan: Plan, interactive_max_seconds: float) -> QueueKind:
    """The queue of a job that did not name one: `interactive` when its estimated audio is short, else `batch`."""
    return "interactive" if plan.estimated_seconds <= interactive_max_seconds else "batch"


def _store_job(
    services: ApiServices,
    caller: Caller,
    submission: JobSubmission,
    plan: Plan,
    queue: QueueKind,
    limits: GenerationLimits | None,
    uploads: Mapping[str, VoicePrompt],
    upload_names: Mapping[str, str],
    job_id: str,
    warnings: Sequence[ScriptWarning],
) -> JobView:
    """The job's row and its folder of inputs, in one transaction; the view of the queued job."""
    options, settings = submission.options, services.settings
    with services.database.session() as session:
        check_in_flight(
            session, Job, caller.key_id, settings.max_jobs_in_flight, "jobs", single_user=settings.single_user
        )
        show = None if options.episode is None else check_episode(session, caller, options.episode, options.formats)
        stored, uploaded = _assign_voices(session, caller, plan.speakers, options.voices, uploads)
        voice_seconds = {speaker: voice.seconds for speaker, voice in stored.items()}
        voice_seconds |= {speaker: uploads[key].seconds for speaker, key in uploaded.items()}
        check_generation_lengths(plan, voice_seconds, limits, "script")
        folder = services.data.job(job_id)
        atomic_write(folder.script, lambda handle: handle.write(submission.script.encode("utf-8")))
        sources: dict[str, str] = {}
        for speaker, voice in stored.items():
            copy_voice_into(services, voice, folder.voice(speaker))
            sources[str(speaker)] = voice.id
        for speaker, key in uploaded.items():
            write_audio(folder.voice(speaker), uploads[key].samples, "PCM_16")
            sources[str(speaker)] = f"upload:{upload_names[key]}"
        formats = list(dict.fromkeys(options.formats))
        services.data.files.publish_tree(folder.root)  # before the row commits: a worker that claims it finds them
        storage_bytes = services.data.files.tree_bytes(folder.root) + expected_job_bytes(
            plan.estimated_seconds, formats
        )
        check_storage_quota(session, services, caller, storage_bytes, "this job")
        job = job_repository.create_job(
            session,
            id=job_id,
            owner_id=caller.key_id,
            mode=options.mode,
            queue=queue,
            priority=options.priority,
            title=options.title,
            generation={
                **options.settings.model_dump(),
                "max_segment_seconds": services.settings.max_segment_seconds,
                "kbps": dict(options.kbps),
            },
            formats=formats,
            voices=sources,
            enqueued_at=utc_now(),
            storage_bytes=storage_bytes,
            frames_planned=plan.estimated_frames,  # a queued job says how long it is; its worker counts it again
            segments_total=len(plan.segments),
            warnings=[{"line": warning.line, "message": warning.message} for warning in warnings],
        )
        session.flush()
        if show is not None and options.episode is not None:
            add_episode(session, job, show, options.episode)
        return job_view(session, job)


def _send(services: ApiServices, job_id: str, queue: QueueKind, priority: int) -> None:
    try:
        enqueue_job(services.celery, services.settings.redis_namespace, job_id, queue, priority)
    except Exception as error:  # the broker is down: the job stays queued in the database for the sweeper
        logger.warning("could not enqueue; the sweeper will", extra={"job_id": job_id, "error": str(error)})


def _parsed_script(text: str) -> Script:
    """The script, once it parses and every turn has something to say aloud; else 422 naming its line."""
    try:
        script = parse_script(text)
        check_speakable(script)
        return script
    except ScriptError as error:
        raise InvalidInput([Problem("script", error.message, kind="script_error", line=error.line)]) from error


def _assign_voices(
    session: Session,
    caller: Caller,
    speakers: Sequence[Speaker],
    voice_ids: Mapping[str, str],
    uploads: Mapping[str, VoicePrompt],
) -> tuple[dict[int, Voice], dict[int, str]]:
    """Map every speaker to one stored voice or one upload (by the client's key, by the rule the CLI's `--voice`
    follows: `script_text.voice_assignment`); report every problem at once."""
    problems: list[Problem] = []
    keyed: list[tuple[str, Voice | str | None]] = []
    for key, voice_id in voice_ids.items():
        voice = session.get(Voice, voice_id)
        if find_speaker(speakers, key) is not None and (
            voice is None or not (caller.is_admin or voice.owner_id == caller.key_id)
        ):
            problems.append(Problem(f"voices.{key}", f"no voice {voice_id!r}; upload one with POST /v1/voices"))
        else:
            keyed.append((key, voice))
    keyed += [(key, key) for key in uploads]  # an upload is named by its key
    assignment = assign_voices(speakers, keyed)
    problems += [Problem(f"voices.{refusal.key}", refusal.why) for refusal in assignment.refused]
    if assignment.missing and not problems:
        missing = ", ".join(speaker.name for speaker in assignment.missing)
        problems.append(
            Problem("voices", f"no voice for {missing}; give a voice id or upload a file for every speaker")
        )
    if problems:
        raise InvalidInput(problems)
    stored = {index: voice for index, voice in assignment.voices.items() if isinstance(voice, Voice)}
    uploaded = {index: key for index, key in assignment.voices.items() if isinstance(key, str)}
    return stored, uploaded


def owned_job(session: Session, caller: Caller, job_id: str) -> Job:
    """The job if this key may see it (its own, or any for an admin); otherwise NotFound, as if absent."""
    return owned_row(session, caller, Job, job_id, f"no job {job_id}")


def list_jobs(
    session: Session,
    caller: Caller,
    *,
    state: str | None = None,
    queue: str | None = None,
    owner_id: int | None = None,
    limit: int = 50,
    offset: int = 0,
) -> list[JobView]:
    """Newest first; a non-admin key sees only its own jobs whatever `owner_id` says."""
    query = select(Job).order_by(Job.created_at.desc()).limit(limit).offset(offset)
    if not caller.is_admin:
        query = query.where(Job.owner_id == caller.key_id)
    elif owner_id is not None:
        query = query.where(Job.owner_id == owner_id)
    if state is not None:
        query = query.where(Job.state == state)
    if queue is not None:
        query = query.where(Job.queue == queue)
    return [job_view(session, job) for job in session.scalars(query)]


def cancel_job(services: ApiServices, session: Session, caller: Caller, job_id: str) -> JobView:
    """A queued job is cancelled at once (and counts what its folder holds from then on); a running one stops at its
    worker's next frame."""
    job = owned_job(session, caller, job_id)
    request_cancel(session, job, "job")
    if job.job_state is JobState.CANCELLED:
        record_job_bytes(session, services.data, job_id)
        session.refresh(job)
    logger.info("job cancel requested", extra={"job_id": job_id, "state": job.state})
    return job_view(session, job)


def delete_job(services: ApiServices, session: Session, caller: Caller, job_id: str) -> None:
    """Delete a job that has ended, with every file it has (the owner's or, for an admin, any)."""
    job = owned_job(session, caller, job_id)
    try:
        job_deletion.delete_job(session, services.data, job)
    except job_deletion.JobNotEnded:
        raise Conflict(
            f"job {job_id} is {job.state}; cancel it first (DELETE /v1/jobs/{job_id}), then delete it once it is "
            "cancelled"
        ) from None


def output_file(services: ApiServices, session: Session, caller: Caller, job_id: str, name: str) -> Path:
    """A finished job's file: `episode.<format>` (a requested format), `episode.srt|vtt|chapters.json` (whether it
    is still there, the download finds out)."""
    job = owned_job(session, caller, job_id)
    extension = name.partition(".")[2]
    if name not in TRANSCRIPT_FILES.values() and extension not in job.formats:
        raise NotFound(f"job {job_id} has no {extension} audio; it was asked for {', '.join(job.formats)}")
    if job.job_state is not JobState.DONE:
        raise Conflict(f"job {job_id} is {job.state}; its files appear when it is done")
    return services.data.job(job_id).output(name)


def segment_audio_file(
    services: ApiServices, session: Session, caller: Caller, job_id: str, index: int, previous: bool = False
) -> Path:
    """A generated segment (24 kHz, 24-bit FLAC), for listening while the rest of the job generates; with `previous`,
    the take of it the last regeneration replaced (`api.services.takes`)."""
    job = owned_job(session, caller, job_id)
    if previous:
        kept = job.previous_take is not None and any(s["index"] == index for s in job.previous_take["segments"])
        if not kept:
            raise NotFound(f"job {job_id} keeps no earlier take of segment {index}")
        return services.data.job(job_id).previous_take(index)[0]
    row = session.scalar(select(JobSegment).where(JobSegment.job_id == job_id, JobSegment.index == index))
    if row is None or row.state != SegmentState.DONE or row.audio_path is None:
        raise NotFound(f"job {job_id} has no finished segment {index}")
    return services.data.resolve(row.audio_path)


def retry_job(services: ApiServices, job_id: str) -> JobView:
    """Queue a failed or cancelled job again; the segments it already stored are kept.

    Its count of worker deaths starts again: a job the poison-job guard failed gets the whole allowance back.
    """
    with services.database.session() as session:
        job = session.get(Job, job_id)
        if job is None:
            raise NotFound(f"no job {job_id}")
        try:
            job_repository.retry(session, job_id)
        except job_repository.IllegalTransition as error:
            raise Conflict(f"job {job_id} is {error.current}; only failed or cancelled jobs can be retried") from None
        session.refresh(job)
        view = job_view(session, job)
    _send(services, job_id, view.queue, view.priority)
    return view


def reprioritise_job(services: ApiServices, job_id: str, priority: int) -> JobView:
    """Change a queued job's priority and send it again at the new one; the older message finds it taken."""
    with services.database.session() as session:
        job = session.get(Job, job_id)
        if job is None:
            raise NotFound(f"no job {job_id}")
        job_repository.reprioritise(session, job_id, priority)
        session.refresh(job)
        view = job_view(session, job)
        requeue = job.job_state is JobState.QUEUED
    if requeue:
        _send(services, job_id, view.queue, priority)
    return view


def job_view(session: Session, job: Job, now: datetime | None = None) -> JobView:
    base = f"/v1/jobs/{job.id}"
    outputs = None
    if job.job_state is JobState.DONE:
        outputs = JobOutputs(
            audio={audio_format: f"{base}/audio.{audio_format}" for audio_format in job.formats},
            srt=f"{base}/transcript.srt",
            vtt=f"{base}/transcript.vtt",
            chapters=f"{base}/chapters.json",
            turns=f"{base}/turns.json",
        )
    return JobView(
        id=job.id,
        state=job.state,
        mode=job.mode,
        queue=job.queue,
        priority=job.priority,
        title=job.title,
        formats=list(job.formats),
        kbps=_bitrates(job),
        settings=GenerationParams.model_validate(
            {key: job.generation[key] for key in ("cfg_scale", "diffusion_steps", "seed")}
        ),
        position=_position(session, job),
        progress=_progress(job, now or utc_now()),
        cancel_requested=job.cancel_requested,
        error=job.error,
        audio_seconds=job.audio_seconds,
        revision=job.revision,
        warnings=[ScriptWarningView(**warning) for warning in job.warnings or ()],
        attempts=job.attempts,
        worker_deaths=job.worker_deaths,
        handbacks=job.handbacks,
        outputs=outputs,
        regenerable=job.job_state is JobState.DONE and job.intermediates_removed_at is None,
        intermediates_removed_at=job.intermediates_removed_at,
        previous_take=_previous_take(job),
        episode=episode_view(session, job),
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        owner_id=job.owner_id,
        owner_name=_key_name(session, job.owner_id),
    )


def _position(session: Session, job: Job) -> int | None:
    """1 + the queued jobs of the same queue that run before this one (higher priority, or older)."""
    if job.job_state is not JobState.QUEUED:
        return None
    ahead = session.scalar(
        select(func.count())
        .select_from(Job)
        .where(
            Job.state == JobState.QUEUED,
            Job.queue == job.queue,
            Job.id != job.id,
            or_(
                Job.priority > job.priority,
                and_(Job.priority == job.priority, Job.created_at < job.created_at),
            ),
        )
    )
    return 1 + (ahead or 0)


def _previous_take(job: Job) -> PreviousTake | None:
    if job.previous_take is None:
        return None
    segments = [
        PreviousSegment(
            index=segment["index"], audio=f"/v1/jobs/{job.id}/segments/{segment['index']}/audio?take=previous"
        )
        for segment in job.previous_take["segments"]
    ]
    return PreviousTake(revision=job.previous_take["revision"], segments=segments)


def _key_name(session: Session, key_id: int) -> str:
    """The name of the key that owns a job (looked up once per key and session: an admin's list names a few). A
    job's key always exists: deleting a key deletes its jobs."""
    return session.get_one(ApiKey, key_id).name


def _bitrates(job: Job) -> dict[str, int]:
    """The bitrate each lossy format of the job is written at: as asked, else the format's default."""
    asked = job.generation.get("kbps") or {}
    return {name: rate for name in job.formats if (rate := AUDIO_FORMATS[name].kbps(asked)) is not None}


def _progress(job: Job, now: datetime) -> JobProgress:
    """The job's progress as its worker last wrote it, its ETA counted down since (the same as its events say)."""
    eta = None
    if job.job_state is JobState.RUNNING and job.eta_at is not None:
        eta = eta_from(job.eta_seconds, (now - job.eta_at).total_seconds())
    return JobProgress(
        frames_done=job.frames_done,
        frames_planned=job.frames_planned,
        audio_seconds_done=round(job.frames_done / FRAMES_PER_SECOND, 3),
        audio_seconds_planned=round(job.frames_planned / FRAMES_PER_SECOND, 3),
        segments_done=job.segments_done,
        segments_total=job.segments_total,
        eta_seconds=eta,
    )

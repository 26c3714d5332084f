"""Job routes: submit, read, list, plan, follow (SSE), download, cancel, delete. The logic is in `api.services`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from api.deps import ApiServices, CurrentKey, ServicesDep, SessionDep
from api.downloads import stored_file
from api.errors import NotFound
from api.params import JobId, Offset, SegmentIndex
from api.schemas import JobList, JobPlanView, JobView
from api.services import jobs
from api.services.event_stream import job_event_stream, read_job_view
from api.services.job_plan import job_plan
from api.services.submissions import read_submission
from api.services.worker_report import generation_limits
from core.audio_formats import AUDIO_FORMATS, AudioFormat
from core.job_states import JobState

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

TRANSCRIPT_MEDIA_TYPES = {"srt": "application/x-subrip", "vtt": "text/vtt"}


@router.post(
    "",
    status_code=202,
    response_model=JobView,
    summary="Submit a script (JSON body, or multipart with a script file and voice files)",
)
async def create_job(request: Request, response: Response, caller: CurrentKey, services: ServicesDep) -> JobView:
    limits = await generation_limits(services)
    async with read_submission(request, services.settings.max_script_chars) as submission:
        view = await run_in_threadpool(jobs.submit_job, services, caller, submission, limits)
    response.headers["Location"] = f"/v1/jobs/{view.id}"
    return view


@router.get("", response_model=JobList, summary="This key's jobs, newest first")
def list_jobs(
    session: SessionDep,
    caller: CurrentKey,
    state: Annotated[JobState | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Offset = 0,
) -> JobList:
    return JobList(
        jobs=jobs.list_jobs(session, caller, owner_id=caller.key_id, state=state, limit=limit, offset=offset)
    )


@router.get("/{job_id}", response_model=JobView)
def get_job(job_id: JobId, session: SessionDep, caller: CurrentKey) -> JobView:
    return jobs.job_view(session, jobs.owned_job(session, caller, job_id))


@router.get("/{job_id}/events", summary="Server-sent events: state, progress, live audio, finished segments")
async def job_events(
    job_id: JobId,
    caller: CurrentKey,
    services: ServicesDep,
    audio: Annotated[bool, Query(description="send live `audio` chunks (about 70 kB a second of audio)")] = True,
) -> StreamingResponse:
    await run_in_threadpool(read_job_view, services, caller, job_id)  # 404 now, not mid-stream
    return StreamingResponse(
        job_event_stream(services, caller, job_id, with_audio=audio),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.get("/{job_id}/audio.{audio_format}", summary="The episode (HTTP Range supported)")
def download_audio(
    job_id: JobId,
    audio_format: AudioFormat,
    session: SessionDep,
    caller: CurrentKey,
    services: ServicesDep,
) -> Response:
    path = jobs.output_file(services, session, caller, job_id, f"episode.{audio_format}")
    return _stored(services, path, AUDIO_FORMATS[audio_format].media_type, job_id, filename=f"{job_id}.{audio_format}")


@router.get("/{job_id}/transcript.{transcript_format}", summary="Transcript with turn timings")
def download_transcript(
    job_id: JobId,
    transcript_format: Literal["srt", "vtt"],
    session: SessionDep,
    caller: CurrentKey,
    services: ServicesDep,
) -> Response:
    path = jobs.output_file(services, session, caller, job_id, f"episode.{transcript_format}")
    return _stored(services, path, TRANSCRIPT_MEDIA_TYPES[transcript_format], job_id)


@router.get("/{job_id}/plan", response_model=JobPlanView, summary="Its segments and the turns each speaks")
def get_job_plan(job_id: JobId, caller: CurrentKey, services: ServicesDep) -> JobPlanView:
    return job_plan(services, caller, job_id)


@router.get("/{job_id}/chapters.json", summary="Chapter marks, in the Podcasting 2.0 JSON chapters format")
def download_chapters(job_id: JobId, session: SessionDep, caller: CurrentKey, services: ServicesDep) -> Response:
    path = jobs.output_file(services, session, caller, job_id, "episode.chapters.json")
    return _stored(services, path, "application/json", job_id)


@router.get("/{job_id}/turns.json", summary="Every turn's timing (`index` is what a regeneration names)")
def download_turns(job_id: JobId, session: SessionDep, caller: CurrentKey, services: ServicesDep) -> Response:
    path = jobs.output_file(services, session, caller, job_id, "episode.turns.json")
    if services.data.files.size(path) is None:  # assembled before turns had a file of their own: its chapters hold them
        path = path.with_name("episode.chapters.json")
    return _stored(services, path, "application/json", job_id)


@router.get(
    "/{job_id}/segments/{index}/audio",
    summary="A finished segment, while the job runs (24-bit FLAC; float WAV for jobs stored by older versions)",
)
def download_segment(
    job_id: JobId,
    index: SegmentIndex,
    session: SessionDep,
    caller: CurrentKey,
    services: ServicesDep,
    take: Annotated[
        Literal["current", "previous"],
        Query(description="`previous`: the take the last regeneration replaced, while the job keeps it"),
    ] = "current",
) -> Response:
    path = jobs.segment_audio_file(services, session, caller, job_id, index, previous=take == "previous")
    return _stored(services, path, AUDIO_FORMATS[path.suffix.removeprefix(".")].media_type, job_id)


@router.delete(
    "/{job_id}",
    response_model=JobView,
    summary="Cancel (a running job stops within one step); with purge=true, delete a job that has ended",
    responses={204: {"description": "purge=true: the job, its rows and every file of it are gone"}},
)
def cancel_job(
    job_id: JobId,
    session: SessionDep,
    caller: CurrentKey,
    services: ServicesDep,
    purge: Annotated[
        bool,
        Query(description="delete the job (done, failed or cancelled) and all its files instead of cancelling it"),
    ] = False,
) -> JobView | Response:
    if purge:
        jobs.delete_job(services, session, caller, job_id)
        return Response(status_code=204)
    return jobs.cancel_job(services, session, caller, job_id)


def _stored(services: ApiServices, path: Path, media_type: str, job_id: str, filename: str | None = None) -> Response:
    """The job's file, with `Range`, from wherever it is kept; 404 when a retention pass or a delete took it."""
    try:
        return stored_file(services.data.files, path, media_type, filename)
    except FileNotFoundError:
        raise NotFound(f"job {job_id} has no file {path.name}") from None

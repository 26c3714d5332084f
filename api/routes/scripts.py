"""Script routes: draft from notes or clean up a transcript, read, list, follow (SSE), cancel, delete.

The logic is in `api.services.script_jobs`; a request arrives as JSON (`ScriptCreate`) or as a multipart
form (`api.services.script_submissions`).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from api.deps import CurrentKey, ServicesDep, SessionDep
from api.params import Offset, ScriptId
from api.schemas import ErrorMessage, ScriptDraftCreate, ScriptList, ScriptNormaliseCreate, ScriptView
from api.services import script_jobs
from api.services.script_event_stream import read_script_view, script_event_stream
from api.services.script_submissions import read_script_request
from core.job_states import JobState

router = APIRouter(prefix="/v1/scripts", tags=["scripts"])


@router.post(
    "",
    status_code=202,
    response_model=ScriptView,
    summary="Draft a script from notes, or clean up a transcript (JSON, or multipart with the text as a file)",
    openapi_extra={
        "requestBody": {
            "content": {
                "application/json": {
                    "schema": {
                        "oneOf": [ScriptDraftCreate.model_json_schema(), ScriptNormaliseCreate.model_json_schema()],
                        "discriminator": {"propertyName": "task"},
                    }
                },
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "required": ["options"],
                        "properties": {
                            "options": {"type": "string", "description": "the JSON of the request without its text"},
                            "material": {"type": "string", "format": "binary", "description": "draft: the notes"},
                            "transcript": {"type": "string", "format": "binary", "description": "normalise"},
                        },
                    }
                },
            },
            "required": True,
        }
    },
    responses={
        201: {"model": ScriptView, "description": "a transcript the parser reads: done at once, no queue"},
        503: {"model": ErrorMessage, "description": "the job queue (Redis) did not answer: nothing was stored"},
    },
)
async def create_script(request: Request, response: Response, caller: CurrentKey, services: ServicesDep) -> ScriptView:
    body = await read_script_request(request, services.settings.max_script_chars)
    view, queued = await run_in_threadpool(script_jobs.submit_script, services, caller, body)
    response.status_code = 202 if queued else 201
    response.headers["Location"] = f"/v1/scripts/{view.id}"
    return view


@router.get("", response_model=ScriptList, summary="This key's script jobs, newest first")
def list_scripts(
    session: SessionDep,
    caller: CurrentKey,
    state: Annotated[JobState | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Offset = 0,
) -> ScriptList:
    return ScriptList(scripts=script_jobs.list_scripts(session, caller, state=state, limit=limit, offset=offset))


@router.get("/{script_id}", response_model=ScriptView)
def get_script(script_id: ScriptId, session: SessionDep, caller: CurrentKey) -> ScriptView:
    return script_jobs.script_view(script_jobs.owned_script(session, caller, script_id))


@router.get("/{script_id}/events", summary="Server-sent events: state, each attempt of the model and its verdict")
async def script_events(script_id: ScriptId, caller: CurrentKey, services: ServicesDep) -> StreamingResponse:
    await run_in_threadpool(read_script_view, services, caller, script_id)  # 404 now, not mid-stream
    return StreamingResponse(
        script_event_stream(services, caller, script_id),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.delete(
    "/{script_id}",
    response_model=ScriptView,
    summary="Cancel (a running draft stops within a second); with purge=true, delete one that has ended",
    responses={204: {"description": "purge=true: the script job is gone"}},
)
def cancel_script(
    script_id: ScriptId,
    session: SessionDep,
    caller: CurrentKey,
    purge: Annotated[bool, Query(description="delete the script job (done, failed or cancelled) instead")] = False,
) -> ScriptView | Response:
    if purge:
        script_jobs.delete_script(session, caller, script_id)
        return Response(status_code=204)
    return script_jobs.cancel_script(session, caller, script_id)

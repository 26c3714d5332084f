"""OpenAI-compatible text to speech. The logic is in `api.services.speech` and `api.services.live_speech`."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from api.deps import CurrentKey, ServicesDep
from api.schemas import SpeechRequest
from api.services.live_speech import LiveSpeechResponse, open_live_speech
from api.services.speech import MEDIA_TYPES, streams_live, synthesize, wants_stream

router = APIRouter(prefix="/v1/audio", tags=["openai"])


@router.post(
    "/speech",
    response_class=Response,
    responses={200: {"content": {media_type: {} for media_type in MEDIA_TYPES.values()}, "description": "the audio"}},
    summary="Speak `input` in one of this key's voices (OpenAI's audio.speech); streamed pcm/wav come as generated",
)
async def create_speech(body: SpeechRequest, request: Request, caller: CurrentKey, services: ServicesDep) -> Response:
    media_type = MEDIA_TYPES[body.response_format]
    if streams_live(body):
        live, first = await open_live_speech(services, caller, body, request.is_disconnected)
        headers = {"X-Voxcast-Job": live.job_id, "X-Voxcast-Model": body.model}
        return LiveSpeechResponse(live, first, media_type=media_type, headers=headers)
    audio = await synthesize(services, caller, body, request.is_disconnected)
    headers = {"X-Voxcast-Job": audio.job_id, "X-Voxcast-Model": body.model}
    if wants_stream(body):
        return StreamingResponse(audio.chunks(), media_type=media_type, headers=headers)
    return Response(await run_in_threadpool(audio.read), media_type=media_type, headers=headers)

"""Voice routes: upload, list, read, preview, delete. The logic is in `api.services.voices`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, UploadFile

from api.deps import CurrentKey, ServicesDep, SessionDep
from api.downloads import RangedFileResponse
from api.params import VoiceId
from api.schemas import PRINTABLE_TEXT, VoiceList, VoiceView
from api.services import voices

router = APIRouter(prefix="/v1/voices", tags=["voices"])


@router.post("", status_code=201, response_model=VoiceView, summary="Upload a recording (3-60 s are used)")
def create_voice(
    file: UploadFile,
    name: Annotated[str, Form(min_length=1, max_length=100, pattern=PRINTABLE_TEXT)],
    session: SessionDep,
    caller: CurrentKey,
    services: ServicesDep,
) -> VoiceView:
    return voices.voice_view(voices.create_voice(services, session, caller, name, file))


@router.get("", response_model=VoiceList)
def list_voices(session: SessionDep, caller: CurrentKey) -> VoiceList:
    return VoiceList(voices=[voices.voice_view(voice) for voice in voices.list_voices(session, caller)])


@router.get("/{voice_id}", response_model=VoiceView)
def get_voice(voice_id: VoiceId, session: SessionDep, caller: CurrentKey) -> VoiceView:
    return voices.voice_view(voices.owned_voice(session, caller, voice_id))


@router.get("/{voice_id}/preview.wav", summary="The stored prompt: 24 kHz mono, levelled")
def preview_voice(
    voice_id: VoiceId, session: SessionDep, caller: CurrentKey, services: ServicesDep
) -> RangedFileResponse:
    voice = voices.owned_voice(session, caller, voice_id)
    return RangedFileResponse(services.data.voice(voice.id), media_type="audio/wav")


@router.delete("/{voice_id}", status_code=204)
def delete_voice(voice_id: VoiceId, session: SessionDep, caller: CurrentKey, services: ServicesDep) -> None:
    voices.delete_voice(services, session, caller, voice_id)

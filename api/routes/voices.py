"""Voice routes: upload, list, read, preview, rename, delete. The logic is in `api.services.voices`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Response, UploadFile

from api.deps import CurrentKey, ServicesDep, SessionDep
from api.downloads import stored_file
from api.errors import NotFound
from api.params import VoiceId
from api.schemas import PRINTABLE_TEXT, VoiceList, VoiceRename, VoiceView
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
def preview_voice(voice_id: VoiceId, session: SessionDep, caller: CurrentKey, services: ServicesDep) -> Response:
    voice = voices.owned_voice(session, caller, voice_id)
    try:
        return stored_file(services.data.files, services.data.voice(voice.id), "audio/wav")
    except FileNotFoundError:
        raise NotFound(f"voice {voice_id} has no recording any more; upload it again") from None


@router.patch("/{voice_id}", response_model=VoiceView, summary="Rename a voice (jobs keep the name they used)")
def rename_voice(voice_id: VoiceId, change: VoiceRename, session: SessionDep, caller: CurrentKey) -> VoiceView:
    return voices.voice_view(voices.rename_voice(session, caller, voice_id, change.name))


@router.delete("/{voice_id}", status_code=204)
def delete_voice(voice_id: VoiceId, session: SessionDep, caller: CurrentKey, services: ServicesDep) -> None:
    voices.delete_voice(services, session, caller, voice_id)

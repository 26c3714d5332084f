"""Voice prompts: validate an upload, store it levelled, list, look up, rename and delete a key's voices."""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
import unicodedata
from pathlib import Path, PurePosixPath

from sqlalchemy.orm import Session
from starlette.datastructures import UploadFile

from api.deps import ApiServices, Caller
from api.errors import ContentTooLarge, InvalidInput, NotFound, Problem
from api.schemas import VoiceView
from api.services.ownership import owned_row, visible_rows
from api.services.storage_quota import check_storage_quota
from core.byte_sizes import byte_size
from core.models import Voice
from core.storage import atomic_write, new_id, write_audio
from tokenizer.voice_prompt import VoicePrompt, VoicePromptError, load_voice_prompt

logger = logging.getLogger(__name__)

_COPY_CHUNK_BYTES = 1 << 20
_WAV_HEADER_BYTES = 44  # a voice is stored as 16-bit PCM WAV: 2 bytes a sample after the header
_MAX_SHOWN_NAME_CHARS = 80
_HIDDEN_CATEGORIES = {"Cc", "Cf"}  # control and format characters (NUL, ESC, bidi overrides, zero-width)
_PLAIN_SUFFIX = re.compile(r"\.[A-Za-z0-9]{1,10}")


def upload_name(filename: str | None, field: str) -> str:
    """How messages and job records name an upload: the client's base name, printable, at most 80 characters.

    The client's file name is anything it likes (paths, NUL, escape codes, right-to-left overrides that make
    "gnp.exe" read "exe.png"); only this cleaned form is ever shown or stored, and nothing of it reaches a
    path on disk but a plain suffix.
    """
    printable = "".join(char for char in filename or "" if unicodedata.category(char) not in _HIDDEN_CATEGORIES)
    base = PurePosixPath(printable.replace("\\", "/")).name
    if len(base) > _MAX_SHOWN_NAME_CHARS:
        suffix = _plain_suffix(base)
        base = base[: _MAX_SHOWN_NAME_CHARS - 3 - len(suffix)] + "..." + suffix
    return base or field


def _plain_suffix(name: str) -> str:
    suffix = Path(name).suffix
    return suffix if _PLAIN_SUFFIX.fullmatch(suffix) else ""


def prepare_upload(services: ApiServices, upload: UploadFile, field: str) -> VoicePrompt:
    """Check an uploaded recording and turn it into a voice prompt (24 kHz mono, levelled).

    The file goes to a temporary file first because libsndfile reads from paths, under a random name with
    the upload's suffix when it is a plain one (libsndfile reads some formats by it). The per-file size
    limit is checked as it is copied (the request as a whole was already capped while it streamed in).
    """
    limit = services.settings.max_upload_bytes
    name = upload_name(upload.filename, field)
    temporary_dir = services.data.root / "tmp"
    temporary_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=temporary_dir, suffix=_plain_suffix(name)) as handle:
        copied = 0
        while chunk := upload.file.read(_COPY_CHUNK_BYTES):
            copied += len(chunk)
            if copied > limit:
                raise ContentTooLarge(
                    f"{field}: {name} is larger than the {byte_size(limit)} a voice file may be "
                    "(VOXCAST_MAX_UPLOAD_BYTES)"
                )
            handle.write(chunk)
        handle.flush()
        try:
            prompt = load_voice_prompt(handle.name)
        except VoicePromptError as error:
            raise InvalidInput([Problem(field, str(error).replace(handle.name, name), kind="voice_error")]) from error
    return prompt


def create_voice(services: ApiServices, session: Session, caller: Caller, name: str, upload: UploadFile) -> Voice:
    prompt = prepare_upload(services, upload, "file")
    check_storage_quota(session, services, caller, _WAV_HEADER_BYTES + 2 * len(prompt.samples), "this voice")
    voice = Voice(
        id=new_id(),
        owner_id=caller.key_id,
        name=name,
        seconds=round(prompt.seconds, 3),
        original_sample_rate=prompt.original_sample_rate,
        original_channels=prompt.original_channels,
        trimmed=prompt.trimmed,
    )
    session.add(voice)
    session.flush()  # a row the database refuses leaves no file behind
    path = write_audio(services.data.voice(voice.id), prompt.samples, "PCM_16")
    try:
        services.data.files.publish(path)  # before the row commits: every api host can serve it then
    finally:
        services.data.files.drop_local(path)  # published (every host fetches it) or refused (the row rolls back)
    logger.info("voice stored", extra={"voice_id": voice.id, "seconds": voice.seconds, "owner": caller.key_id})
    return voice


def owned_voice(session: Session, caller: Caller, voice_id: str) -> Voice:
    """The voice if this key may see it (its own, or any for an admin); otherwise NotFound."""
    return owned_row(session, caller, Voice, voice_id, f"no voice {voice_id}")


def list_voices(session: Session, caller: Caller) -> list[Voice]:
    return visible_rows(session, caller, Voice, Voice.created_at)


def rename_voice(session: Session, caller: Caller, voice_id: str, name: str) -> Voice:
    """Give the voice a new name; only the library's entry changes (jobs that used it keep their own copies)."""
    voice = owned_voice(session, caller, voice_id)
    voice.name = name
    session.flush()
    logger.info("voice renamed", extra={"voice_id": voice.id, "owner": caller.key_id})
    return voice


def delete_voice(services: ApiServices, session: Session, caller: Caller, voice_id: str) -> None:
    """Forget the voice; jobs that used it keep their own copy."""
    voice = owned_voice(session, caller, voice_id)
    session.delete(voice)
    services.data.files.remove(services.data.voice(voice.id))


def copy_voice_into(services: ApiServices, voice: Voice, target: Path) -> None:
    """Give a job its own copy of a stored voice, so deleting the voice later never breaks the job."""
    source = services.data.voice(voice.id)
    if not services.data.files.fetch(source):
        raise NotFound(f"voice {voice.id} has no recording any more; upload it again")
    try:
        with source.open("rb") as stored:
            atomic_write(target, lambda handle: shutil.copyfileobj(stored, handle))
    finally:
        services.data.files.drop_local(source)


def voice_view(voice: Voice) -> VoiceView:
    return VoiceView(
        id=voice.id,
        name=voice.name,
        seconds=voice.seconds,
        original_sample_rate=voice.original_sample_rate,
        original_channels=voice.original_channels,
        trimmed=voice.trimmed,
        preview=f"/v1/voices/{voice.id}/preview.wav",
        created_at=voice.created_at,
    )

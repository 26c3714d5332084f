"""OpenAI-compatible speech (`POST /v1/audio/speech`): one text and one voice in, the audio bytes back.

A request becomes a one-turn job (`whole` mode, the interactive queue, priority 9), so it shares the
workers, the engine's batch, the per-key job limit and the job records with everything else, and shows up
in `GET /v1/jobs`. The response waits for the job: its end is heard on the job's Redis channel, and read
from the database every second as well (the only source when Redis does not answer). A client that hangs
up while it waits cancels the job, so nobody's GPU time goes to audio nobody will hear.

What OpenAI's body means here: `model` is any model name (echoed in `X-Voxcast-Model`; the worker's model
speaks); `voice` is a voice id or the name of one of the key's voices (the newest of that name, any case);
`speed` must be 1.0; `pcm` is the WAV's raw samples (24 kHz mono, 16-bit little-endian). With `stream` (or
`stream_format: "audio"`), `pcm` and `wav` are sent as the worker generates them (`api.services.live_speech`);
the compressed formats are the finished file sent in chunks, since their encoders write headers and
frames that need the whole track (and the file is loudness-normalised, which live audio cannot be).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import redis
import soundfile as sf
from redis.asyncio.client import PubSub
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.deps import ApiServices, Caller
from api.errors import ApiError, Conflict, InvalidInput, Problem, ServerStopping
from api.schemas import JobOptions, JobView, SpeechFormat, SpeechRequest
from api.services.event_stream import POLL_SECONDS, read_job_view
from api.services.jobs import JobSubmission, cancel_job, submit_job
from core.audio_formats import AUDIO_FORMATS
from core.file_store import FileStore
from core.job_events import JOB_EVENT, StateEvent, job_channel
from core.job_states import FINAL_STATES, JobState
from core.models import Voice
from script_text.parser import nothing_to_say

logger = logging.getLogger(__name__)

SPEECH_PRIORITY = 9  # someone is waiting on the line
_JOB_FORMAT = {"mp3": "mp3", "opus": "opus", "flac": "flac", "wav": "wav", "pcm": "wav"}  # pcm: the WAV's samples
# The episode formats' media types, and raw samples (OpenAI's `pcm`: 16-bit little-endian at 24 kHz, no header).
MEDIA_TYPES: dict[str, str] = {name: AUDIO_FORMATS[name].media_type for name in _JOB_FORMAT if name != "pcm"}
MEDIA_TYPES["pcm"] = "audio/pcm"
LIVE_FORMATS = frozenset({"pcm", "wav"})  # streamed as generated; the others are sent once the file exists
_CHUNK_BYTES = 64 * 1024
_PCM_BLOCK_SAMPLES = 32 * 1024
_VOICE_NAMES_SHOWN = 10


class GenerationFailed(ApiError):
    """The worker could not generate the speech (the model, not the request, failed)."""

    status_code = 502


class ClientGone(ApiError):
    """The client hung up before its speech was ready (nginx's 499; nobody receives it)."""

    status_code = 499


@dataclass(frozen=True)
class SpeechAudio:
    """A finished speech job's audio, in the format the request asked for."""

    job_id: str
    path: Path  # fetched from the store; this host's copy is dropped once the chunks are read
    response_format: SpeechFormat
    files: FileStore

    @property
    def media_type(self) -> str:
        return MEDIA_TYPES[self.response_format]

    def chunks(self) -> Iterator[bytes]:
        """The audio in pieces of at most 64 KiB (pcm: the 16-bit samples without the WAV header)."""
        try:
            if self.response_format == "pcm":
                for block in sf.blocks(self.path, blocksize=_PCM_BLOCK_SAMPLES, dtype="int16"):
                    yield block.astype("<i2").tobytes()
                return
            with self.path.open("rb") as handle:
                while chunk := handle.read(_CHUNK_BYTES):
                    yield chunk
        finally:
            self.files.drop_local(self.path)

    def read(self) -> bytes:
        return b"".join(self.chunks())


def wants_stream(body: SpeechRequest) -> bool:
    """Whether the client asked for a streamed body: voxcast's `stream`, or OpenAI's `stream_format: "audio"`."""
    return body.stream or body.stream_format == "audio"


def streams_live(body: SpeechRequest) -> bool:
    """Whether the response sends audio as the worker generates it (a streamed `pcm` or `wav`)."""
    return wants_stream(body) and body.response_format in LIVE_FORMATS


async def synthesize(
    services: ApiServices, caller: Caller, body: SpeechRequest, disconnected: Callable[[], Awaitable[bool]]
) -> SpeechAudio:
    """Queue the speech as a one-turn job, wait for it, and return its audio; errors name the request field."""
    view = await run_in_threadpool(submit_speech, services, caller, body)
    logger.info("speech queued", extra={"job_id": view.id, "model": body.model, "format": body.response_format})
    final = await _wait_until_final(services, caller, view.id, disconnected)
    if final.state == JobState.FAILED:
        raise GenerationFailed(f"speech job {final.id} failed: {final.error}")
    if final.state == JobState.CANCELLED:
        raise Conflict(f"speech job {final.id} was cancelled before it finished")
    path = services.data.job(final.id).output(f"episode.{_JOB_FORMAT[body.response_format]}")
    if not await run_in_threadpool(services.data.files.fetch, path):
        raise GenerationFailed(f"speech job {final.id} is done but its audio is gone (deleted meanwhile?)")
    return SpeechAudio(job_id=final.id, path=path, response_format=body.response_format, files=services.data.files)


def speech_script(text: str) -> str:
    """The one-turn script of a speech request's `input`.

    JSON keeps the input one turn whatever it holds (line breaks, colons); pause tags still split it.
    """
    return json.dumps({"turns": [{"speaker": 1, "text": text}]})


def submit_speech(services: ApiServices, caller: Caller, body: SpeechRequest) -> JobView:
    """The speech as a queued one-turn job; 422 naming `input` or `voice` for what cannot be spoken.

    Control characters in `input` are dropped, as in scripts; an `input` with nothing to say aloud once they are
    (only emoji, punctuation or symbols) is refused, with a bad `voice` in the same answer.
    """
    problems = _input_problems(body.input)
    with services.database.session() as session:
        try:
            voice_id = _voice_for(session, caller, body.voice_key).id
        except InvalidInput as error:
            raise InvalidInput([*problems, *error.problems]) from error
    if problems:
        raise InvalidInput(problems)
    options = JobOptions(
        voices={"1": voice_id},
        mode="whole",
        formats=[_JOB_FORMAT[body.response_format]],
        settings=body.settings,
        queue="interactive",
        priority=SPEECH_PRIORITY,
        title=f"speech ({body.model})",
    )
    try:
        return submit_job(
            services, caller, JobSubmission(script=speech_script(body.input), options=options, uploads={})
        )
    except InvalidInput as error:  # the script is the request's `input`: say so, without JSON line numbers
        problems = [Problem("input", problem.message, kind=problem.kind) for problem in error.problems]
        raise InvalidInput(problems) from error


def _input_problems(text: str) -> list[Problem]:
    """The problem of an `input` that gives the voice nothing to say, if it has one (the parser finds the rest)."""
    problem = nothing_to_say(text)
    return [] if problem is None else [Problem("input", f"input {problem}; write the words to speak")]


def _voice_for(session: Session, caller: Caller, voice: str) -> Voice:
    """The voice with this id, else the key's newest voice with this name (any case); 422 naming `voice`."""
    found = session.get(Voice, voice)
    if found is not None and (caller.is_admin or found.owner_id == caller.key_id):
        return found
    own = select(Voice).where(Voice.owner_id == caller.key_id)
    named = session.scalars(
        own.where(func.lower(Voice.name) == voice.lower()).order_by(Voice.created_at.desc()).limit(1)
    ).first()
    if named is not None:
        return named
    names = list(session.scalars(own.with_only_columns(Voice.name).order_by(Voice.name).limit(_VOICE_NAMES_SHOWN)))
    known = f"this key's voices include {', '.join(names)}" if names else "this key has no voices yet"
    raise InvalidInput(
        [Problem("voice", f"no voice {voice!r}: give a voice id or name; {known} (upload one with POST /v1/voices)")]
    )


async def _wait_until_final(
    services: ApiServices, caller: Caller, job_id: str, disconnected: Callable[[], Awaitable[bool]]
) -> JobView:
    """The job once it is done, failed or cancelled; cancels it and raises ClientGone if the client hangs up, or
    ServerStopping (503, Retry-After) if the api is stopping meanwhile: the server's stop would otherwise cut the
    wait off with a 500, and the job (cancelled: nobody waits for it now) is sent again with the request."""
    pubsub = services.redis.pubsub()
    listening = await _subscribe(pubsub, job_channel(services.settings.redis_namespace, job_id))
    try:
        while True:
            view = await run_in_threadpool(read_job_view, services, caller, job_id)
            if JobState(view.state) in FINAL_STATES:
                return view
            if await disconnected():
                await run_in_threadpool(cancel_speech, services, caller, job_id)
                raise ClientGone(f"the client left before speech job {job_id} finished; it was cancelled")
            if services.stopping.is_set():
                await run_in_threadpool(cancel_speech, services, caller, job_id)
                raise ServerStopping(
                    f"the api is restarting, so speech job {job_id} was cancelled before it finished; send the "
                    "request again in a few seconds"
                )
            listening = await _next_state_change(pubsub, listening)
    finally:
        try:
            await pubsub.aclose()
        except (redis.RedisError, OSError):
            pass


async def _subscribe(pubsub: PubSub, channel: str) -> bool:
    """Whether the subscription took; without Redis the wait lives on database reads alone."""
    try:
        await pubsub.subscribe(channel)
    except (redis.RedisError, OSError) as error:
        logger.warning("no Redis for job events; reading the database", extra={"error": str(error)})
        return False
    return True


async def _next_state_change(pubsub: PubSub, listening: bool) -> bool:
    """Return at the job's next state event or after POLL_SECONDS; False once Redis has failed."""
    deadline = time.monotonic() + POLL_SECONDS
    while listening and (left := deadline - time.monotonic()) > 0:
        try:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=left)
        except (redis.RedisError, OSError) as error:
            logger.warning("lost Redis for job events; reading the database", extra={"error": str(error)})
            listening = False
            break
        if message is not None and isinstance(JOB_EVENT.validate_json(message["data"]), StateEvent):
            return True
    if not listening:
        await anyio.sleep(max(0.0, deadline - time.monotonic()))
    return listening


def cancel_speech(services: ApiServices, caller: Caller, job_id: str) -> None:
    """Cancel the speech job nobody waits for any more, unless it has already finished."""
    with services.database.session() as session:
        try:
            cancel_job(services, session, caller, job_id)
        except Conflict:  # it finished in the meantime: nothing to stop
            pass

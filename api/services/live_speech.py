"""Streamed `pcm` and `wav` speech: the audio is sent as the worker generates it, not once the job is done.

The response listens on the job's Redis channel for `audio` chunks and sends each one on, after what the segment
generating made before it subscribed (`event_stream.audio_made_so_far`: a fast worker may publish its first chunks
before the response listens); `SpeechTrack` decides which bytes are new; a segment whose chunks were missed is sent
from its stored file once it is stored, which a `segment` event announces and every poll checks, so the body is
always the whole track. The
response starts with the first audio: until then a failure is still a 502, a cancel a 409 and a client that
hangs up a cancelled job, as without streaming.

What a streamed body is: the raw generated track (16-bit, 24 kHz mono), without the loudness
normalisation the finished file gets (it needs the whole track), so it is quieter or louder than the
non-streamed answer to the same request. A `wav` starts with a header whose sizes are 0xFFFFFFFF (the
length is not known yet), as OpenAI's streamed WAVs do. A job that fails or is cancelled after the first
bytes ends the response without its final chunk, so the client sees an incomplete body rather than a
short track it could take for the whole; a client that hangs up cancels the job.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.responses import StreamingResponse
from starlette.types import Send

from api.deps import ApiServices, Caller
from api.errors import ApiError, Conflict
from api.schemas import SpeechRequest
from api.services.event_stream import POLL_SECONDS, JobSubscription, audio_made_so_far, read_job_view
from api.services.speech import ClientGone, GenerationFailed, cancel_speech, speech_script, submit_speech
from api.services.speech_track import SpeechTrack
from core.audio_rates import SAMPLE_RATE
from core.job_events import AudioEvent, SegmentEvent, StateEvent
from core.job_states import FINAL_STATES, JobState
from core.pcm import streaming_wav_header
from core.storage import read_segment_audio
from script_text.parser import parse_script
from script_text.plan import plan_script

logger = logging.getLogger(__name__)


class LiveSpeech:
    """A submitted speech job's track, piece by piece as its audio arrives, until the job is done."""

    def __init__(self, services: ApiServices, caller: Caller, job_id: str, body: SpeechRequest) -> None:
        self.services = services
        self.caller = caller
        self.job_id = job_id
        self.track = SpeechTrack(plan_script(parse_script(speech_script(body.input)), "whole").items)
        self.header = streaming_wav_header(SAMPLE_RATE) if body.response_format == "wav" else b""
        self.subscription = JobSubscription(services, job_id)
        self.pieces = self._pieces()
        self.ended = False  # the job reached a final state: nothing left to cancel
        self.closed = False

    async def first_bytes(self, disconnected: Callable[[], Awaitable[bool]]) -> bytes:
        """The response's first bytes (a `wav` header with them), once there is audio to send.

        Raises GenerationFailed or Conflict if the job fails or is cancelled first, and ClientGone if the
        client hangs up first (`close` then cancels the job).
        """
        async for piece in self.pieces:
            if piece:
                return self.header + piece
            if await disconnected():
                raise ClientGone(f"the client left before speech job {self.job_id} had audio; it is cancelled")
        raise RuntimeError(f"speech job {self.job_id} ended without audio")  # _pieces only ends after the track

    async def body(self, first: bytes) -> AsyncIterator[bytes]:
        """`first`, then every further piece to the end of the track."""
        yield first
        async for piece in self.pieces:
            if piece:
                yield piece

    async def close(self) -> None:
        """Stop listening; cancel the job if it is still going (the client left). Runs even while cancelled,
        and once however often it is called."""
        if self.closed:
            return
        self.closed = True
        with anyio.CancelScope(shield=True):
            await self.pieces.aclose()
            await self.subscription.close()
            if not self.ended:
                await run_in_threadpool(cancel_speech, self.services, self.caller, self.job_id)

    async def _pieces(self) -> AsyncGenerator[bytes]:
        """New bytes of the track after every event or poll (often none), to the end of the track."""
        await self.subscription.open()
        async for chunk in audio_made_so_far(self.services, self.job_id):  # before this listened: nothing is missed
            yield self.track.from_chunk(chunk)
        last_read = time.monotonic()
        while True:
            event = await self.subscription.next_event(POLL_SECONDS)
            if event is None and not self.subscription.alive:
                await anyio.sleep(POLL_SECONDS)
            if isinstance(event, AudioEvent):
                yield self.track.from_chunk(event)
            elif isinstance(event, SegmentEvent):
                yield await self._stored()
            if isinstance(event, StateEvent) or time.monotonic() - last_read >= POLL_SECONDS:
                view = await run_in_threadpool(read_job_view, self.services, self.caller, self.job_id)
                last_read = time.monotonic()
                self.ended = JobState(view.state) in FINAL_STATES
                if view.state == JobState.DONE:
                    yield await self._stored(every=True)
                    return
                yield await self._stored()  # a `segment` event Redis dropped
                if view.state == JobState.FAILED:
                    raise GenerationFailed(f"speech job {self.job_id} failed: {view.error}")
                if view.state == JobState.CANCELLED:
                    raise Conflict(f"speech job {self.job_id} was cancelled before it finished")
            yield b""

    async def _stored(self, *, every: bool = False) -> bytes:
        """The stored rest of the track's current segment, and of each next one, while the worker has stored them
        (its audio file is there: it is written whole, then renamed); with `every` (the job is done), all of them.
        """
        pieces = b""
        folder, files = self.services.data.job(self.job_id), self.services.data.files
        while (current := self.track.segment) is not None:
            path = folder.segment_audio(current)
            if not await run_in_threadpool(files.fetch, path) and not every:
                break
            try:
                samples = await run_in_threadpool(read_segment_audio, path)
            except (OSError, RuntimeError) as error:
                raise GenerationFailed(
                    f"speech job {self.job_id}: segment {current} is not readable: {error}"
                ) from error
            finally:
                files.drop_local(path)
            pieces += self.track.from_stored(samples)
        return pieces


class LiveSpeechResponse(StreamingResponse):
    """A live speech body. A failure after the first bytes cuts it short (no final chunk, the connection
    closes); however it ends, even by the client hanging up, the job's listening stops and an unfinished job
    is cancelled."""

    def __init__(self, live: LiveSpeech, first: bytes, media_type: str, headers: dict[str, str]) -> None:
        super().__init__(live.body(first), media_type=media_type, headers=headers)
        self.live = live

    async def stream_response(self, send: Send) -> None:
        try:
            await super().stream_response(send)
        except ApiError as error:
            logger.warning("speech stream cut short", extra={"job_id": self.live.job_id, "error": str(error)})
        finally:
            await self.live.close()


async def open_live_speech(
    services: ApiServices, caller: Caller, body: SpeechRequest, disconnected: Callable[[], Awaitable[bool]]
) -> tuple[LiveSpeech, bytes]:
    """Queue the speech and wait for its first audio; errors before then are the request's HTTP errors."""
    view = await run_in_threadpool(submit_speech, services, caller, body)
    logger.info(
        "speech queued, streaming", extra={"job_id": view.id, "model": body.model, "format": body.response_format}
    )
    live = LiveSpeech(services, caller, view.id, body)
    try:
        first = await live.first_bytes(disconnected)
    except BaseException:
        await live.close()
        raise
    return live, first

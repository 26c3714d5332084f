"""A job's server-sent events: its state now, progress, live audio and finished segments as they happen, its end.

Events (each `data:` is JSON):
- `state`: the whole job (as `GET /v1/jobs/{id}` shows it), first on connecting and on every state change;
  a final state (done, failed, cancelled) is the last event before the stream closes.
- `progress`: frames and audio seconds done against the plan, segment, ETA.
- `audio`: frames just generated (every `VOXCAST_STREAM_CHUNK_FRAMES`, ~1 s of audio, and a segment's
  last ones): `segment`, `first_frame` (within the segment), `frames`, `sample_rate` (24000) and `pcm`,
  base64 of 16-bit little-endian mono samples, raw (before the episode's loudness normalisation). A listener
  that connects while a segment generates first gets what that segment made so far, from its frame 0, in
  chunks of up to `CATCH_UP_FRAMES` (from the segment's live audio file, where the api shares the worker's
  data folder: one machine, or a shared folder; with an object store across hosts, only from when it
  connects), then the live chunks, which may overlap it (keep audio by frame index). Best effort: a chunk
  Redis drops is not sent again (the stored segment holds it), and a resumed segment's chunks start again
  at frame 0. `?audio=false` leaves them out.
- `segment`: a segment's audio is stored; `audio` is its URL, to listen while the rest generates.

Workers publish on Redis; the stream subscribes before it reads the job, so nothing falls between the two.
The database is read every second as well: it catches state changes whose message was missed, and it is
the only source when Redis does not answer (then progress comes from it too, once a second).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
from fastapi.sse import format_sse_event
from starlette.concurrency import run_in_threadpool

from api.deps import ApiServices, Caller
from api.errors import NotFound
from api.schemas import JobView, SegmentReady
from api.services.channel_subscription import ChannelSubscription
from api.services.jobs import job_view, owned_job
from core.audio_rates import SAMPLES_PER_FRAME
from core.job_events import JOB_EVENT, AudioEvent, ProgressEvent, SegmentEvent, StateEvent, job_channel
from core.job_states import FINAL_STATES, JobState
from core.pcm import PCM_BYTES_PER_SAMPLE

POLL_SECONDS = 1.0
KEEPALIVE_SECONDS = 15.0
CATCH_UP_FRAMES = 225  # 30 s of audio an `audio` event, for what a segment made before the listener connected
FRAME_BYTES = SAMPLES_PER_FRAME * PCM_BYTES_PER_SAMPLE


def read_job_view(services: ApiServices, caller: Caller, job_id: str) -> JobView:
    """The job as its owner sees it; NotFound for anyone else (raised before any event is sent)."""
    with services.database.session() as session:
        return job_view(session, owned_job(session, caller, job_id))


class JobSubscription(ChannelSubscription):
    """The job's channel, its messages read as job events."""

    def __init__(self, services: ApiServices, job_id: str) -> None:
        super().__init__(services.redis, job_channel(services.settings.redis_namespace, job_id), "job events")

    async def next_event(self, timeout: float) -> ProgressEvent | SegmentEvent | AudioEvent | StateEvent | None:
        data = await self.next_message(timeout)
        return None if data is None else JOB_EVENT.validate_json(data)


async def job_event_stream(
    services: ApiServices, caller: Caller, job_id: str, *, with_audio: bool = True
) -> AsyncIterator[bytes]:
    """The job's events until its final state (or until it is deleted); `with_audio=False` leaves out the live `audio`
    chunks."""
    subscription = JobSubscription(services, job_id)
    await subscription.open()
    try:
        view = await run_in_threadpool(read_job_view, services, caller, job_id)
        yield _state(view)
        if with_audio and view.state == JobState.RUNNING:
            async for chunk in audio_made_so_far(services, job_id):
                yield _event(chunk, job_id)
        last_read = last_sent = time.monotonic()
        while view.state not in FINAL_STATES:
            event = await subscription.next_event(POLL_SECONDS)
            if event is None and not subscription.alive:
                await anyio.sleep(POLL_SECONDS)
            if isinstance(event, ProgressEvent | SegmentEvent) or (with_audio and isinstance(event, AudioEvent)):
                yield _event(event, job_id)
                last_sent = time.monotonic()
            if isinstance(event, StateEvent) or time.monotonic() - last_read >= POLL_SECONDS:
                try:
                    previous, view = view, await run_in_threadpool(read_job_view, services, caller, job_id)
                except NotFound:  # deleted meanwhile: the stream ends, as it does at a final state
                    return
                last_read = time.monotonic()
                if view.state != previous.state:
                    yield _state(view)
                    last_sent = last_read
                elif not subscription.alive and view.progress != previous.progress:
                    yield _progress_from(view)
                    last_sent = last_read
            if time.monotonic() - last_sent >= KEEPALIVE_SECONDS:
                yield format_sse_event(comment="keep-alive")
                last_sent = time.monotonic()
    finally:
        await subscription.close()


async def audio_made_so_far(services: ApiServices, job_id: str) -> AsyncIterator[AudioEvent]:
    """What each segment generating now made before this listener subscribed, as `audio` events from frame 0, read
    a chunk at a time (a 90-minute segment's is 260 MB). Read after subscribing: the worker writes a chunk there
    before it publishes it, so nothing falls between the file and the live chunks."""
    files = await run_in_threadpool(services.data.job(job_id).live_audio)
    for segment, path in files:
        try:
            size = (await run_in_threadpool(path.stat)).st_size
        except FileNotFoundError:  # the segment was stored meanwhile: its `segment` event says so
            continue
        frames = size // FRAME_BYTES  # whole frames: the worker may be appending one now
        for first in range(0, frames, CATCH_UP_FRAMES):
            count = min(CATCH_UP_FRAMES, frames - first)
            pcm = await run_in_threadpool(_read_range, path, first * FRAME_BYTES, count * FRAME_BYTES)
            if len(pcm) < count * FRAME_BYTES:  # cut short: the attempt ended and dropped its file
                break
            yield AudioEvent.of_pcm16(segment, first, count, pcm)


def _read_range(path: Path, start: int, length: int) -> bytes:
    try:
        with path.open("rb") as file:
            file.seek(start)
            return file.read(length)
    except FileNotFoundError:
        return b""


def _state(view: JobView) -> bytes:
    return format_sse_event(data_str=view.model_dump_json(), event="state")


def _event(event: ProgressEvent | SegmentEvent | AudioEvent, job_id: str) -> bytes:
    if isinstance(event, SegmentEvent):
        event = SegmentReady(**event.model_dump(), audio=f"/v1/jobs/{job_id}/segments/{event.index}/audio")
    return format_sse_event(data_str=event.model_dump_json(), event=event.kind)


def _progress_from(view: JobView) -> bytes:
    """A `progress` event from the job's row, for when Redis carries no events."""
    progress = view.progress
    event = ProgressEvent(
        state=view.state,
        frames_done=progress.frames_done,
        frames_planned=progress.frames_planned,
        segment=progress.segments_done,
        segments=progress.segments_total,
        eta_seconds=progress.eta_seconds,
    )
    return format_sse_event(data_str=event.model_dump_json(), event=event.kind)

"""What a running job tells its listeners, and the Redis pub/sub channel it travels on.

Workers publish; the api subscribes and turns the events into server-sent events. Pub/sub is only the fast
path: every event's content is also in the database or the job's folder (or derivable from them), so a
listener that joins late or a Redis that blinks loses nothing but immediacy. `audio` chunks are the one
kind that is live only: a listener hears them from when it joins, and the stored segments hold the rest.
"""

from __future__ import annotations

import base64
import logging
import time
from typing import Annotated, Literal

import numpy as np
import redis
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, computed_field

from core.audio_rates import FRAMES_PER_SECOND, SAMPLE_RATE
from core.pcm import to_pcm16

logger = logging.getLogger(__name__)


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True)


class ProgressEvent(_Event):
    """Frames of speech generated so far against the plan's estimate; seconds are audio seconds."""

    kind: Literal["progress"] = "progress"
    state: str
    frames_done: int
    frames_planned: int
    segment: int  # 0-based index of the segment being generated
    segments: int
    eta_seconds: float | None = None  # wall-clock seconds left at the current speed

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented way; mypy knows no decorator over a property
    @property
    def audio_seconds_done(self) -> float:
        return round(self.frames_done / FRAMES_PER_SECOND, 3)

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented way; mypy knows no decorator over a property
    @property
    def audio_seconds_planned(self) -> float:
        return round(self.frames_planned / FRAMES_PER_SECOND, 3)


class SegmentEvent(_Event):
    """A segment's audio is stored and can be listened to while the rest generates."""

    kind: Literal["segment"] = "segment"
    index: int
    seconds: float


class AudioEvent(_Event):
    """Frames of a segment just generated, for listening before the segment is stored (best effort).

    `pcm` is base64 of 16-bit little-endian mono samples at `sample_rate`: the raw generated signal,
    before the loudness normalisation of the finished episode. A segment's chunks count its frames from 0;
    a resumed segment's replayed frames are published again from 0 (the same audio, decoded again from
    stored latents), so a listener keeps audio by frame index and skips what it has.
    """

    kind: Literal["audio"] = "audio"
    segment: int
    first_frame: int  # 0-based index, within the segment, of the chunk's first frame
    frames: int
    sample_rate: int = SAMPLE_RATE
    pcm: str

    @classmethod
    def of(cls, segment: int, first_frame: int, frames: int, samples: np.ndarray) -> AudioEvent:
        """The chunk holding `samples` (float, 24 kHz mono): `frames` frames from `first_frame` on."""
        return cls.of_pcm16(segment, first_frame, frames, to_pcm16(samples))

    @classmethod
    def of_pcm16(cls, segment: int, first_frame: int, frames: int, pcm: bytes) -> AudioEvent:
        """The chunk holding `pcm` (16-bit little-endian mono at 24 kHz): `frames` frames from `first_frame` on."""
        return cls(segment=segment, first_frame=first_frame, frames=frames, pcm=base64.b64encode(pcm).decode("ascii"))

    def pcm_bytes(self) -> bytes:
        return base64.b64decode(self.pcm)


class StateEvent(_Event):
    """The job changed state; a final state (done, failed, cancelled) is the last event of a job."""

    kind: Literal["state"] = "state"
    state: str
    error: str | None = None


JobEvent = Annotated[ProgressEvent | SegmentEvent | AudioEvent | StateEvent, Field(discriminator="kind")]
JOB_EVENT = TypeAdapter(JobEvent)


def job_channel(namespace: str, job_id: str) -> str:
    return f"{namespace}:job-events:{job_id}"


def script_channel(namespace: str, script_id: str) -> str:
    """A script job's channel. Its messages only say "look again": the row holds the attempts and the state."""
    return f"{namespace}:script-events:{script_id}"


SCRIPT_CHANGED = b"changed"


class EventPublisher:
    """Publishes job events; a Redis failure is logged, never raised, since the database holds the record.

    After a failure it publishes nothing for `pause_seconds`: a Redis that hangs instead of refusing would
    otherwise hold a job for the client's timeout at every chunk of audio, and events are live data anyway.
    """

    def __init__(self, client: redis.Redis, namespace: str, pause_seconds: float = 5.0) -> None:
        self.client = client
        self.namespace = namespace
        self.pause_seconds = pause_seconds
        self.paused_until = 0.0

    @classmethod
    def from_url(cls, url: str, namespace: str, timeout_seconds: float = 2.0) -> EventPublisher:
        """A publisher whose every call gives up after `timeout_seconds`."""
        client = redis.Redis.from_url(url, socket_connect_timeout=timeout_seconds, socket_timeout=timeout_seconds)
        return cls(client, namespace)

    def publish(self, job_id: str, event: ProgressEvent | SegmentEvent | AudioEvent | StateEvent) -> None:
        self._send(job_channel(self.namespace, job_id), event.model_dump_json(), job_id)

    def script_changed(self, script_id: str) -> None:
        """Wake the listeners of a script job: its row changed (an attempt, a state)."""
        self._send(script_channel(self.namespace, script_id), SCRIPT_CHANGED, script_id)

    def _send(self, channel: str, message: str | bytes, job_id: str) -> None:
        if time.monotonic() < self.paused_until:
            return
        try:
            self.client.publish(channel, message)
        except redis.RedisError as error:
            self.paused_until = time.monotonic() + self.pause_seconds
            logger.warning(
                "could not publish a job event; pausing events",
                extra={"job_id": job_id, "error": str(error), "pause_seconds": self.pause_seconds},
            )

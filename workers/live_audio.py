"""A segment's audio published in chunks while it generates, so listeners hear a job long before it ends.

Chunks go out on the job's event channel every `chunk_frames` frames (the rest when the segment ends).
Each chunk is first appended to the segment's live audio file (`JobFolder.segment_live_audio`, 16-bit PCM from
frame 0), so a listener who connects after the first chunk (a page that follows the job it just sent, a job
opened from History) still hears the segment from its start: the api sends what the file holds, then the chunks
(`api.services.event_stream`). Written before it is published, the file holds every chunk a new subscriber
missed. It is scratch: gone once the segment is complete (before its audio is stored, so a nearly full disk holds
what it held before) or the attempt ends; the stored segment is the record. Keeping it is best effort too: a write
that fails (a full disk) removes it, is logged once, and never fails the job.
Every frame the engine hands over is published, the frames a resumed segment replays included: its chunks
start again at frame 0 (and its file anew), so a listener that joined after the restart hears the segment from
its start, and one that was already listening skips, by frame index, what it has (the same audio, decoded again
from the stored latents). Publishing is a Redis PUBLISH of about 70 KB per second of audio, from the job's task
thread (never the engine's stepping thread); a Redis failure is logged, not raised.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from core.job_events import AudioEvent, EventPublisher
from core.pcm import to_pcm16
from core.storage import JobFolder

logger = logging.getLogger(__name__)


class LiveAudio:
    """Collects one segment's frames and publishes them as `audio` events, `chunk_frames` at a time."""

    def __init__(self, events: EventPublisher, job_id: str, folder: JobFolder, segment: int, chunk_frames: int) -> None:
        if chunk_frames < 1:
            raise ValueError(f"VOXCAST_STREAM_CHUNK_FRAMES must be at least 1 frame, not {chunk_frames}")
        self.events = events
        self.job_id = job_id
        self.segment = segment
        self.chunk_frames = chunk_frames
        self.first_frame = 0  # index in the segment of the first frame not yet published
        self.pending: list[np.ndarray] = []
        self.path: Path | None = folder.segment_live_audio(segment)  # None once it is given up or discarded
        self._keep(b"", mode="wb")  # this attempt's audio, from frame 0

    def add(self, samples: np.ndarray) -> None:
        """One frame's samples; publishes a chunk once `chunk_frames` have gathered."""
        self.pending.append(samples)
        if len(self.pending) >= self.chunk_frames:
            self.flush()

    def flush(self) -> None:
        """Publish the frames gathered so far (the segment's last, shorter chunk)."""
        if not self.pending:
            return
        frames = len(self.pending)
        pcm = to_pcm16(np.concatenate(self.pending))
        self._keep(pcm)  # before the chunk goes out: a subscriber that missed it finds it there
        self.events.publish(self.job_id, AudioEvent.of_pcm16(self.segment, self.first_frame, frames, pcm))
        self.first_frame += frames
        self.pending = []

    def discard(self) -> None:
        """The segment is complete: its live audio file goes (late listeners hear the stored segment)."""
        if self.path is not None:
            self.path.unlink(missing_ok=True)
            self.path = None

    def _keep(self, pcm: bytes, mode: str = "ab") -> None:
        if self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open(mode) as file:
                file.write(pcm)
        except OSError as error:
            logger.warning(
                "live audio not kept for late listeners",
                extra={"job_id": self.job_id, "segment": self.segment, "error": str(error)},
            )
            self.discard()


def drop_live_audio(folder: JobFolder) -> None:
    """Remove every segment's live audio file: the attempt ended (handed back or finished)."""
    for _, path in folder.live_audio():
        path.unlink(missing_ok=True)

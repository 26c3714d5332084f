"""A segment's audio published in chunks while it generates, so listeners hear a job long before it ends.

Chunks go out on the job's event channel every `chunk_frames` frames (the rest when the segment ends).
They are live data only: nothing stores them, a listener that joins late hears them from then on, and the
stored segment is the record. Every frame the engine hands over is published, the frames a resumed segment
replays included: its chunks start again at frame 0, so a listener that joined after the restart hears the
segment from its start, and one that was already listening skips, by frame index, what it has (the same
audio, decoded again from the stored latents). Publishing is a Redis PUBLISH of about 70 KB per second of
audio, from the job's task thread (never the engine's stepping thread); a Redis failure is logged, not raised.
"""

from __future__ import annotations

import numpy as np

from core.job_events import AudioEvent, EventPublisher


class LiveAudio:
    """Collects one segment's frames and publishes them as `audio` events, `chunk_frames` at a time."""

    def __init__(self, events: EventPublisher, job_id: str, segment: int, chunk_frames: int) -> None:
        if chunk_frames < 1:
            raise ValueError(f"VOXCAST_STREAM_CHUNK_FRAMES must be at least 1 frame, not {chunk_frames}")
        self.events = events
        self.job_id = job_id
        self.segment = segment
        self.chunk_frames = chunk_frames
        self.first_frame = 0  # index in the segment of the first frame not yet published
        self.pending: list[np.ndarray] = []

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
        event = AudioEvent.of(self.segment, self.first_frame, frames, np.concatenate(self.pending))
        self.events.publish(self.job_id, event)
        self.first_frame += frames
        self.pending = []

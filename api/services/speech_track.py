"""Which bytes of a speech job's track come next: from live `audio` chunks, or from its stored segments.

A streamed speech response sends the track the worker lays out (segments in plan order, the plan's
silences between them) as 16-bit PCM, before the loudness normalisation of the finished file. A live chunk
is used while it carries on from what was sent; one that skips frames (Redis dropped a chunk, the response
subscribed after the first ones went out) is not, and the segment's rest is read from its stored file once
the worker has stored it. The worker generates a job's segments side by side, so chunks of later segments
arrive early: they are kept, and sent as soon as the track reaches their segment. A resumed segment's chunks
start again at frame 0: what was sent is skipped. So a response holds every sample of the raw track exactly
once, whatever was lost, replayed or early on the way.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from core.audio_rates import SAMPLE_RATE
from core.job_events import AudioEvent
from core.pcm import PCM_BYTES_PER_SAMPLE, to_pcm16
from script_text.plan import Segment, Silence


class SpeechTrack:
    """The position of a response in its job's plan, and the PCM bytes each new piece of audio adds."""

    def __init__(self, items: Sequence[Segment | Silence]) -> None:
        self.items = tuple(items)
        self.position = 0  # index into items of the next item not wholly sent
        self.frames_sent = 0  # of the segment at `position`
        self.samples_sent = 0
        self.early: dict[int, list[AudioEvent]] = {}  # chunks of segments after the current one, kept for their turn

    @property
    def segment(self) -> int | None:
        """Index of the next segment with audio still to send; None once only silences (or nothing) remain."""
        for item in self.items[self.position :]:
            if isinstance(item, Segment):
                return item.index
        return None

    def from_chunk(self, chunk: AudioEvent) -> bytes:
        """What `chunk` adds: the silences before its segment and its frames not sent yet, if it carries on
        from what was sent; nothing if it leaves a gap, or belongs to a segment already sent or still to come
        (that one's chunks are kept until the track reaches it)."""
        current = self.segment
        if current is not None and chunk.segment > current:
            self.early.setdefault(chunk.segment, []).append(chunk)
            return b""
        return self._carry_on(chunk)

    def _carry_on(self, chunk: AudioEvent) -> bytes:
        if chunk.segment != self.segment or chunk.first_frame > self.frames_sent:
            return b""
        pcm = chunk.pcm_bytes()
        bytes_per_frame = len(pcm) // chunk.frames
        skipped = self.frames_sent - chunk.first_frame
        if skipped >= chunk.frames:
            return b""
        fresh = pcm[skipped * bytes_per_frame :]
        self.frames_sent = chunk.first_frame + chunk.frames
        self.samples_sent += len(fresh) // PCM_BYTES_PER_SAMPLE
        return self._silences() + fresh

    def from_stored(self, samples: np.ndarray) -> bytes:
        """The rest of the current segment from its stored audio, then the silences up to the next segment
        (or the end of the track), then what that segment's early chunks carry on with."""
        rest = self._silences() + to_pcm16(samples[self.samples_sent :])
        self.position += 1
        self.frames_sent = self.samples_sent = 0
        rest += self._silences()
        segment = self.segment
        early = self.early.pop(segment, []) if segment is not None else []
        return rest + b"".join(self._carry_on(chunk) for chunk in early)

    def _silences(self) -> bytes:
        """The silences from `position` up to the next segment, moving past them."""
        silence = b""
        while self.position < len(self.items) and isinstance(item := self.items[self.position], Silence):
            silence += to_pcm16(np.zeros(round(item.seconds * SAMPLE_RATE), dtype=np.float32))
            self.position += 1
        return silence

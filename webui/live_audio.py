"""Listening while a job generates, in either mode: its audio in episode order, as parts played one after another.

The api streams every segment's frames as `audio` events while it generates (`api.services.event_stream`), and
says when a segment is stored. In `turns` mode several segments generate side by side, so audio is kept per
segment and published only in episode order: a segment's audio once every segment before it is complete. A part
is cut each few seconds of audio buffered (longer as more has been published, so a 90-minute episode stays a
short list) and at a segment's end, whose rest comes from the stored segment: it holds what the live stream
missed (a chunk Redis dropped, or one sent before the page connected).
"""

from __future__ import annotations

import base64
import bisect
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from api.schemas import JobPlanView
from core.job_events import AudioEvent
from script_text.timeline import text_shares

MIN_PART_SECONDS = 5.0
MAX_PART_SECONDS = 30.0
_LABEL_WORDS = 6
# A live part past the plan's estimate of a segment of several turns: it could be in any of its later turns.
PAST_ESTIMATE = "Past the estimate: which turn is not known while it generates"


@dataclass(frozen=True)
class LivePart:
    """A stretch of a segment, playable in the browser: `start_seconds` into segment `segment`, `seconds` long."""

    segment: int
    start_seconds: float
    seconds: float
    url: str
    label: str


def first_words(text: str, count: int = _LABEL_WORDS) -> str:
    """The first `count` words of `text`, with an ellipsis when there are more."""
    words = text.split()
    return " ".join(words[:count]) + ("…" if len(words) > count else "")


def part_label(
    plan: JobPlanView | None, segment: int, start_seconds: float, number: int, made_seconds: float, complete: bool
) -> str:
    """Who speaks at `start_seconds` into `segment`, and the first words of that turn; "Part N" without a plan.

    Inside a segment each turn takes its share of the audio by its share of the text (`text_shares`), as the
    episode's transcript places it: of the segment's length once it is `complete` (`made_seconds`), and while it
    generates, of the plan's estimate, or of the audio made so far once that runs past the estimate. A part that
    starts past the estimate of a segment of several turns, still generating, could be in any of its later turns
    (speech ran slower than planned): it says so (`PAST_ESTIMATE`) rather than name the last turn.
    """
    planned = next((item for item in plan.segments if item.index == segment), None) if plan is not None else None
    if planned is None or not planned.turns:
        return f"Part {number}"
    if not complete and len(planned.turns) > 1 and start_seconds >= planned.estimated_seconds:
        return PAST_ESTIMATE
    length = made_seconds if complete else max(made_seconds, planned.estimated_seconds)
    where = start_seconds / length if length > 0 else 0.0
    starts = [start for start, _ in text_shares([turn.text for turn in planned.turns])]
    turn = planned.turns[max(0, bisect.bisect_right(starts, where) - 1)]
    return f"{turn.speaker}: {first_words(turn.text)}"


def part_length_seconds(published_seconds: float) -> float:
    """How much buffered audio makes a part: 5 s at first, then a quarter of what is published, up to 30 s."""
    return min(MAX_PART_SECONDS, max(MIN_PART_SECONDS, published_seconds / 4))


def buffer_text(parts: tuple[LivePart, ...]) -> str:
    """What the page says of the live buffer: seconds of audio ready to hear, in how many parts."""
    seconds = sum(part.seconds for part in parts)
    return f"{seconds:.0f} s of audio buffered in {len(parts)} part{'s' if len(parts) != 1 else ''}"


@dataclass
class _SegmentAudio:
    """One segment's audio as it arrives: PCM contiguous from frame 0, and how much of it is published."""

    sample_rate: int = 0
    frames: int = 0
    pcm: bytearray | None = None  # 16-bit little-endian mono; None after a chunk was missed
    published: int = 0  # samples
    stored: Path | None = None  # the finished segment, once the api has it


class LiveAudio:
    """A job's live audio, turned into parts in episode order; part files are written under `folder`.

    `url_of` gives a written file's URL in the browser; `label_of(segment, start_seconds, number, made_seconds,
    complete)` a part's label (`part_label` with the job's plan).
    """

    def __init__(
        self, folder: Path, url_of: Callable[[Path], str], label_of: Callable[[int, float, int, float, bool], str]
    ) -> None:
        self.folder = folder
        self.url_of = url_of
        self.label_of = label_of
        self.parts: list[LivePart] = []
        self._segments: dict[int, _SegmentAudio] = {}
        self._next = 0  # the first segment, in episode order, not yet complete

    def add_chunk(self, event: AudioEvent) -> bool:
        """Keep a chunk's frames (a resumed segment's replayed ones are skipped); True when a part was cut."""
        audio = self._segments.setdefault(event.segment, _SegmentAudio(pcm=bytearray()))
        if audio.pcm is None or audio.stored is not None:
            return False
        if event.first_frame > audio.frames:  # a chunk was missed: the stored segment will have it
            audio.pcm = None
            return False
        pcm = base64.b64decode(event.pcm)
        bytes_per_frame = len(pcm) // max(event.frames, 1)
        audio.pcm += pcm[(audio.frames - event.first_frame) * bytes_per_frame :]
        audio.frames = max(audio.frames, event.first_frame + event.frames)
        audio.sample_rate = event.sample_rate
        return self._publish()

    def add_stored(self, segment: int, path: Path) -> bool:
        """A segment is complete and stored at `path`; True when parts were published."""
        audio = self._segments.setdefault(segment, _SegmentAudio())
        if audio.stored is not None:
            return False
        audio.stored = path
        return self._publish()

    @property
    def segments_stored(self) -> int:
        return sum(audio.stored is not None for audio in self._segments.values())

    def _publish(self) -> bool:
        """Cut every part the buffers allow, in episode order."""
        before = len(self.parts)
        while (audio := self._segments.get(self._next)) is not None:
            if audio.stored is not None:
                self._publish_rest(self._next, audio)
                self._next += 1
                continue
            if audio.pcm is not None:
                self._publish_live(self._next, audio)
            break
        return len(self.parts) > before

    def _publish_live(self, segment: int, audio: _SegmentAudio) -> None:
        """A part of the live PCM once enough of it waits unpublished."""
        waiting = len(audio.pcm or b"") // 2 - audio.published
        published_seconds = sum(part.seconds for part in self.parts)
        if waiting < part_length_seconds(published_seconds) * audio.sample_rate:
            return
        made = np.frombuffer(bytes(audio.pcm or b""), dtype="<i2")
        rate = audio.sample_rate
        self._write_part(segment, audio, made[audio.published :], rate, len(made) / rate, False)

    def _publish_rest(self, segment: int, audio: _SegmentAudio) -> None:
        """The rest of a stored segment: the stored file itself when none of it was heard live."""
        assert audio.stored is not None
        info = sf.info(str(audio.stored))
        length = info.frames / info.samplerate
        if audio.published == 0:
            self._add_part(segment, 0.0, length, self.url_of(audio.stored), length, True)
            return
        if audio.published < info.frames:
            samples, rate = sf.read(str(audio.stored), start=audio.published, dtype="int16")
            self._write_part(segment, audio, samples, rate, length, True)

    def _write_part(
        self, segment: int, audio: _SegmentAudio, samples: np.ndarray, rate: int, made_seconds: float, complete: bool
    ) -> None:
        if not self.folder.is_dir():  # released (`LiveFolders`): no page will play it
            return
        path = self.folder / f"live-{segment:04d}-{audio.published:010d}.flac"
        sf.write(str(path), samples, rate, subtype="PCM_16")  # FLAC: half the room of WAV, played as well
        start = audio.published / rate
        self._add_part(segment, start, len(samples) / rate, self.url_of(path), made_seconds, complete)
        audio.published += len(samples)

    def _add_part(
        self, segment: int, start_seconds: float, seconds: float, url: str, made_seconds: float, complete: bool
    ) -> None:
        label = self.label_of(segment, start_seconds, len(self.parts) + 1, made_seconds, complete)
        self.parts.append(LivePart(segment, start_seconds, seconds, url, label))


class LiveFolders:
    """The folder each page (a Gradio session) has its live parts written in: one at a time, removed when done with.

    The page plays a job's parts while it generates and keeps them playable after it ends, so they cannot go
    with the follower; they go when the page follows another job or is closed. Left alone they would fill the
    disk of a long-running studio (about 130 MB of parts per page that followed a 90-minute job).
    """

    def __init__(self) -> None:
        self._of_page: dict[str, Path] = {}

    def claim(self, page: str, job_folder: Path) -> Path:
        """A new, empty folder under `job_folder` for `page`'s parts; the folder it had before is removed."""
        self.release(page)
        folder = job_folder / f"live-{secrets.token_hex(4)}"  # two pages following one job never share a file
        folder.mkdir(parents=True)
        self._of_page[page] = folder
        return folder

    def release(self, page: str | None) -> None:
        """Remove `page`'s folder and its parts; a follower still writing there writes no more. None (a request
        Gradio gave no session) has nothing kept."""
        if page is None:
            return
        folder = self._of_page.pop(page, None)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

"""A streamed speech response's track: live chunks while they follow on, the stored segment for what was missed,
the plan's silences between, every sample exactly once however chunks were lost, repeated or replayed."""

from __future__ import annotations

import numpy as np
import pytest

from api.services.speech_track import SpeechTrack
from core.job_events import AudioEvent
from core.pcm import streaming_wav_header, to_pcm16
from script_text.parser import parse_script
from script_text.plan import plan_script

FRAME = 3200


def segment_audio(frames: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-0.5, 0.5, frames * FRAME).astype(np.float32)


def chunks(audio: np.ndarray, segment: int, every: int = 3) -> list[AudioEvent]:
    frames = len(audio) // FRAME
    return [
        AudioEvent.of(segment, first, min(every, frames - first), audio[first * FRAME : (first + every) * FRAME])
        for first in range(0, frames, every)
    ]


@pytest.fixture
def track() -> SpeechTrack:
    """Two segments with a 0.5 s pause between them, as a speech request with a pause tag is planned."""
    plan = plan_script(parse_script("Alice: Hello there.\n[pause: 0.5s]\nAlice: Goodbye now."), "whole")
    return SpeechTrack(plan.items)


def test_live_chunks_make_the_track_and_the_stored_segments_add_nothing(track: SpeechTrack) -> None:
    first, second = segment_audio(7, 0), segment_audio(5, 1)
    sent = b"".join(track.from_chunk(chunk) for chunk in chunks(first, 0))
    sent += track.from_stored(first)
    sent += b"".join(track.from_chunk(chunk) for chunk in chunks(second, 1))
    sent += track.from_stored(second)
    assert sent == to_pcm16(np.concatenate([first, np.zeros(12_000), second]))
    assert track.segment is None


def test_missed_repeated_and_replayed_chunks_still_give_every_sample_once(track: SpeechTrack) -> None:
    first, second = segment_audio(7, 0), segment_audio(5, 1)
    live = chunks(first, 0)
    sent = track.from_chunk(live[0])
    assert track.from_chunk(live[0]) == b""  # a repeat
    assert track.from_chunk(live[2]) == b""  # a gap: the lost chunk's frames are not skipped over
    assert track.from_chunk(chunks(second, 1)[0]) == b""  # the next segment waits for this one
    sent += track.from_stored(first)  # the rest of the segment, from its stored file
    replayed = chunks(second, 1, every=2)
    sent += track.from_chunk(replayed[0]) + track.from_chunk(replayed[1])
    for chunk in chunks(second, 1, every=3):  # a resumed segment is published again from frame 0
        sent += track.from_chunk(chunk)
    sent += track.from_stored(second)
    assert sent == to_pcm16(np.concatenate([first, np.zeros(12_000), second]))


def test_chunks_of_a_later_segment_made_side_by_side_are_sent_once_the_track_reaches_it(track: SpeechTrack) -> None:
    """The worker generates a job's segments at once: the second one's chunks can come before the first is done."""
    first, second = segment_audio(7, 0), segment_audio(5, 1)
    live_first, live_second = chunks(first, 0), chunks(second, 1)
    sent = track.from_chunk(live_first[0])
    assert track.from_chunk(live_second[0]) == b""  # early: kept, not sent before the first segment's end
    sent += track.from_chunk(live_first[1])
    assert track.from_chunk(live_second[1]) == b""
    # the first segment is stored: its rest, the pause, then the second's early chunks at once
    from_store = track.from_stored(first)
    assert len(from_store) == 2 * (len(first) - 6 * FRAME + 12_000 + 5 * FRAME)
    sent += from_store
    assert track.from_chunk(live_second[0]) == b""  # already sent
    sent += track.from_stored(second)  # nothing left of it
    assert sent == to_pcm16(np.concatenate([first, np.zeros(12_000), second]))
    assert track.segment is None


def test_a_stream_that_heard_nothing_sends_the_stored_track() -> None:
    plan = plan_script(parse_script("[pause: 1s]\nAlice: Hello there.\n[pause: 0.25s]"), "whole")
    track = SpeechTrack(plan.items)
    audio = segment_audio(4, 2)
    assert track.from_stored(audio) == to_pcm16(np.concatenate([np.zeros(24_000), audio, np.zeros(6_000)]))


def test_pcm_is_clipped_and_the_streaming_wav_header_leaves_the_length_open() -> None:
    assert np.frombuffer(to_pcm16(np.array([-2.0, -1.0, 0.0, 0.5, 1.5])), "<i2").tolist() == [
        -32767,
        -32767,
        0,
        16384,
        32767,
    ]
    header = streaming_wav_header(24_000)
    assert len(header) == 44 and header[4:8] == header[40:44] == b"\xff\xff\xff\xff"

"""Tests for the assembly package: real files on disk, real encoders, real loudness meter."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import get_args

import numpy as np
import pytest
import soundfile as sf
import torch
import torchaudio.functional as AF

from assembly.episode import Episode, EpisodeFiles, OutputError, audio_format_for, write_episode
from assembly.loudness import PEAK_CEILING_DBFS, TARGET_LUFS, normalize_loudness, silence
from assembly.transcripts import Chapter, chapters_from_turns, format_srt, format_vtt
from core.audio_formats import AUDIO_FORMATS, BITRATES, AudioFormat, BitrateFormat
from core.audio_rates import SAMPLE_RATE
from script_text.timeline import TimedTurn

CEILING = 10.0 ** (PEAK_CEILING_DBFS / 20.0)


def tone(seconds: float, amplitude: float, freq: float = 440.0) -> np.ndarray:
    t = np.arange(round(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def lufs(audio: np.ndarray) -> float:
    return float(AF.loudness(torch.from_numpy(audio).unsqueeze(0), SAMPLE_RATE))


def two_turns() -> tuple[TimedTurn, ...]:
    return (
        TimedTurn(0, "Alice", "Hello there.", 0.0, 1.5),
        TimedTurn(1, "Bob", "Hi Alice!", 3723.0, 3723.25),
    )


def make_episode(seconds: float = 2.0, amplitude: float = 0.3) -> Episode:
    audio = tone(seconds, amplitude)
    turns = (
        TimedTurn(0, "Alice", "Welcome to the show.", 0.0, seconds / 2),
        TimedTurn(1, "Bob", "Glad to be here.", seconds / 2, seconds),
    )
    return Episode(audio=audio, turns=turns, chapters=chapters_from_turns(turns))


def leftovers(folder: Path) -> list[str]:
    """Hidden temporaries or backups that write_episode must never leave behind."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


# --- formats -----------------------------------------------------------------


EXTENSIONS = sorted(f".{name}" for name in AUDIO_FORMATS)


def test_the_format_type_names_exactly_the_formats_of_the_table() -> None:
    assert sorted(get_args(AudioFormat)) == sorted(AUDIO_FORMATS)
    assert sorted(get_args(BitrateFormat)) == sorted(BITRATES)
    assert all(spec.name == name for name, spec in AUDIO_FORMATS.items())


@pytest.mark.parametrize("ext", EXTENSIONS)
def test_each_extension_round_trips_at_24k_mono(tmp_path: Path, ext: str) -> None:
    episode = make_episode(seconds=2.0)
    files = write_episode(episode, tmp_path / f"ep{ext}")

    info = sf.info(str(files.audio))
    assert (info.samplerate, info.channels) == (SAMPLE_RATE, 1)
    data, rate = sf.read(str(files.audio), dtype="float32")
    assert rate == SAMPLE_RATE
    if ext in (".wav", ".flac"):
        assert len(data) == len(episode.audio)
        np.testing.assert_allclose(data, episode.audio, atol=1.0 / 2**15)
    else:
        assert abs(len(data) / SAMPLE_RATE - episode.seconds) < 0.05


def kbit_per_second(path: Path, seconds: float) -> float:
    return path.stat().st_size * 8 / seconds / 1000


@pytest.mark.parametrize(
    ("name", "kbps", "expected"),
    [("mp3", None, 128), ("mp3", 64, 64), ("mp3", 160, 160), ("opus", None, 64), ("opus", 48, 48), ("opus", 128, 128)],
)
def test_lossy_formats_are_written_at_the_bitrate_asked_or_their_publishing_default(
    tmp_path: Path, name: str, kbps: int | None, expected: int
) -> None:
    seconds = 20.0
    rng = np.random.default_rng(3)  # noise: every encoder spends its whole budget on it
    audio = (rng.standard_normal(round(seconds * SAMPLE_RATE)) * 0.1).astype(np.float32)
    episode = Episode(audio=audio, turns=(), chapters=())
    files = write_episode(episode, tmp_path / f"ep.{name}", kbps={} if kbps is None else {name: kbps})
    assert kbit_per_second(files.audio, seconds) == pytest.approx(expected, rel=0.1)
    spec = AUDIO_FORMATS[name]
    assert spec.bitrates is not None and expected in spec.bitrates.choices
    assert spec.bytes_per_second >= max(spec.bitrates.choices) * 1000 / 8  # the storage estimate's bound holds


def test_uppercase_extension_is_accepted(tmp_path: Path) -> None:
    files = write_episode(make_episode(), tmp_path / "Show.WAV")
    assert sf.info(str(files.audio)).format == "WAV"
    assert files.srt == tmp_path / "Show.srt"
    assert audio_format_for(Path("x.Opus")) == ("OGG", "OPUS")


@pytest.mark.parametrize("name", ["ep.aac", "ep.txt", "ep"])
def test_unknown_extension_raises_and_writes_nothing(tmp_path: Path, name: str) -> None:
    target = tmp_path / "new-folder" / name
    with pytest.raises(OutputError) as err:
        write_episode(make_episode(), target)
    for ext in EXTENSIONS:
        assert ext in str(err.value)
    assert not target.parent.exists()


def test_clips_out_of_range_samples_before_writing_pcm(tmp_path: Path) -> None:
    episode = Episode(audio=tone(1.0, 2.5), turns=(), chapters=())
    data, _ = sf.read(str(write_episode(episode, tmp_path / "loud.wav").audio))
    assert data.max() == pytest.approx(1.0, abs=1e-4)
    assert data.min() == pytest.approx(-1.0, abs=1e-4)


def test_non_finite_or_empty_audio_is_rejected_before_writing(tmp_path: Path) -> None:
    bad = tone(1.0, 0.3)
    bad[10] = np.nan
    for audio in (bad, np.zeros(0, dtype=np.float32)):
        with pytest.raises(OutputError):
            write_episode(Episode(audio=audio, turns=(), chapters=()), tmp_path / "x.wav")
    assert list(tmp_path.iterdir()) == []


# --- loudness ------------------------------------------------------------------


@pytest.mark.parametrize("amplitude", [0.005, 0.95])
def test_normalize_reaches_target_loudness(amplitude: float) -> None:
    audio = tone(3.0, amplitude)
    out = normalize_loudness(audio)
    assert out.dtype == np.float32 and out.shape == audio.shape
    assert abs(lufs(out) - TARGET_LUFS) < 0.5
    assert np.max(np.abs(out)) <= CEILING + 1e-6


def test_normalize_limits_spiky_signal_to_peak_ceiling() -> None:
    audio = tone(3.0, 0.01)
    audio[:: SAMPLE_RATE // 2] = 1.0
    out = normalize_loudness(audio)
    assert np.max(np.abs(out)) == pytest.approx(CEILING, abs=1e-6)
    assert lufs(out) < TARGET_LUFS - 0.5  # the ceiling wins over the target


def test_normalize_leaves_silence_and_short_clips_unchanged() -> None:
    quiet = np.zeros(SAMPLE_RATE * 2, dtype=np.float32)
    short = tone(0.1, 0.01)
    for audio in (quiet, short):
        out = normalize_loudness(audio)
        assert out.dtype == np.float32
        np.testing.assert_array_equal(out, audio)


def test_silence_has_rounded_sample_count() -> None:
    assert silence(0.5).shape == (12_000,)
    assert silence(1 / 48_000 * 3).shape == (2,)  # 1.5 samples rounds to 2
    assert silence(0).dtype == np.float32 and not silence(0.25).any()
    with pytest.raises(ValueError):
        silence(-1)


# --- subtitles -------------------------------------------------------------------

EXPECTED_SRT = """\
1
00:00:00,000 --> 00:00:01,500
Alice: Hello there.

2
01:02:03,000 --> 01:02:03,250
Bob: Hi Alice!
"""

EXPECTED_VTT = """\
WEBVTT

00:00:00.000 --> 00:00:01.500
<v Alice>Hello there.

01:02:03.000 --> 01:02:03.250
<v Bob>Hi Alice!
"""


def test_srt_exact_text() -> None:
    assert format_srt(two_turns()) == EXPECTED_SRT


def test_vtt_exact_text() -> None:
    assert format_vtt(two_turns()) == EXPECTED_VTT


def test_vtt_escapes_markup_characters() -> None:
    turn = TimedTurn(0, "R&D <team>", "a < b & c", 0.0, 1.0)
    assert "<v R&amp;D &lt;team&gt;>a &lt; b &amp; c" in format_vtt([turn])


def test_long_hours_and_wrapping() -> None:
    long_text = " ".join(["word"] * 60)
    turns = [
        TimedTurn(0, "Alice", long_text, 36_000.0, 36_001.001),
        TimedTurn(1, "Bob", "ok", 360_000.0, 360_000.5),
    ]
    srt = format_srt(turns)
    assert "10:00:00,000 --> 10:00:01,001" in srt
    assert "100:00:00,000 --> 100:00:00,500" in srt
    assert all(len(line) <= 80 for line in srt.splitlines())
    assert len(srt.split("\n\n")[0].splitlines()) > 3  # number + times + several text lines


def _cue_times(text: str, mark: str) -> list[tuple[float, float]]:
    pattern = rf"(\d+):(\d\d):(\d\d){re.escape(mark)}(\d{{3}})"

    def secs(m: tuple[str, ...]) -> float:
        h, mi, s, ms = map(int, m)
        return h * 3600 + mi * 60 + s + ms / 1000

    stamps = re.findall(rf"{pattern} --> {pattern}", text)
    return [(secs(m[:4]), secs(m[4:])) for m in stamps]


@pytest.mark.parametrize(("render", "mark"), [(format_srt, ","), (format_vtt, ".")])
def test_cue_count_and_monotonic_times(render, mark: str) -> None:
    turns = [TimedTurn(i, f"Speaker {i % 2 + 1}", f"line {i}", i * 2.5, i * 2.5 + 2.0) for i in range(7)]
    times = _cue_times(render(turns), mark)
    assert len(times) == len(turns)
    flat = [t for pair in times for t in pair]
    assert flat == sorted(flat)


# --- chapters ---------------------------------------------------------------------


def spaced_turns(starts: list[float], length: float = 10.0) -> list[TimedTurn]:
    return [
        TimedTurn(i, "Alice" if i % 2 == 0 else "Bob", f"Turn number {i} says something", s, s + length)
        for i, s in enumerate(starts)
    ]


def test_chapters_are_contiguous_and_cover_the_episode() -> None:
    turns = spaced_turns([2.0 + 15.0 * i for i in range(20)])
    chapters = chapters_from_turns(turns, min_chapter_seconds=60.0)
    assert len(chapters) > 1
    assert chapters[0].start == 0.0
    assert chapters[-1].end == turns[-1].end
    for before, after in zip(chapters, chapters[1:], strict=False):
        assert before.end == after.start


def test_chapters_respect_minimum_length_and_turn_boundaries() -> None:
    turns = spaced_turns([0.0, 30.0, 59.0, 61.0, 100.0, 125.0, 170.0])
    chapters = chapters_from_turns(turns, min_chapter_seconds=60.0)
    assert [c.start for c in chapters] == [0.0, 61.0, 125.0]
    assert all(c.end - c.start >= 60.0 for c in chapters[:-1])
    turn_starts = {t.start for t in turns} | {0.0}
    assert {c.start for c in chapters} <= turn_starts


def test_chapter_titles_use_speaker_and_first_words() -> None:
    turns = [
        TimedTurn(0, "Alice", "Welcome to Tech Forward, the show about what comes next in tech.", 0.0, 5.0),
        TimedTurn(1, "Speaker 2", "Short one.", 70.0, 75.0),
        TimedTurn(2, "Bob", "", 140.0, 141.0),
    ]
    titles = [c.title for c in chapters_from_turns(turns)]
    assert titles == [
        "Alice: Welcome to Tech Forward, the show about what…",
        "Speaker 2: Short one.",
        "Bob",
    ]


def test_chapters_edge_cases() -> None:
    assert chapters_from_turns([]) == ()
    single = chapters_from_turns(spaced_turns([5.0]))
    assert single == (Chapter("Alice: Turn number 0 says something", 0.0, 15.0),)


def test_invalid_turn_times_are_rejected() -> None:
    with pytest.raises(ValueError, match="turn 3"):
        TimedTurn(3, "Alice", "x", 2.0, 1.0)
    with pytest.raises(ValueError):
        TimedTurn(0, "Alice", "x", math.nan, 1.0)


# --- write_episode ----------------------------------------------------------------


def test_write_episode_creates_all_files_beside_audio(tmp_path: Path) -> None:
    turns = (
        TimedTurn(0, "Alice", "Welcome to the show.", 0.25, 1.1234),
        TimedTurn(1, "Bob", "Glad to be here.", 1.5, 2.9),
    )
    episode = Episode(audio=tone(3.0005, 0.2), turns=turns, chapters=chapters_from_turns(turns))
    folder = tmp_path / "nested" / "out"
    files = write_episode(episode, folder / "show.v2.wav")

    assert files == EpisodeFiles(
        audio=folder / "show.v2.wav",
        srt=folder / "show.v2.srt",
        vtt=folder / "show.v2.vtt",
        chapters=folder / "show.v2.chapters.json",
        turns=folder / "show.v2.turns.json",
    )
    assert sorted(p.name for p in folder.iterdir()) == [
        "show.v2.chapters.json",
        "show.v2.srt",
        "show.v2.turns.json",
        "show.v2.vtt",
        "show.v2.wav",
    ]
    assert files.srt.read_text(encoding="utf-8") == format_srt(turns)
    assert files.vtt.read_text(encoding="utf-8") == format_vtt(turns)

    chapters = json.loads(files.chapters.read_text(encoding="utf-8"))  # Podcasting 2.0's JSON chapters
    assert chapters == {
        "version": "1.2.0",
        "chapters": [{"startTime": 0.0, "endTime": 2.9, "title": "Alice: Welcome to the show."}],
    }
    doc = json.loads(files.turns.read_text(encoding="utf-8"))
    assert doc["version"] == 1
    assert doc["duration"] == 3.001  # 72012 samples, rounded to ms
    assert doc["turns"][0] == {
        "index": 0,
        "speaker": "Alice",
        "text": "Welcome to the show.",
        "start": 0.25,
        "end": 1.123,
    }
    assert len(doc["turns"]) == 2


def test_failure_when_audio_target_is_a_directory_leaves_old_files(tmp_path: Path) -> None:
    (tmp_path / "ep.wav").mkdir()
    old_srt = tmp_path / "ep.srt"
    old_srt.write_text("previous subtitles", encoding="utf-8")

    with pytest.raises(OSError):
        write_episode(make_episode(), tmp_path / "ep.wav")

    assert sorted(p.name for p in tmp_path.iterdir()) == ["ep.srt", "ep.wav"]
    assert (tmp_path / "ep.wav").is_dir()
    assert old_srt.read_text(encoding="utf-8") == "previous subtitles"


def test_failure_midway_rolls_back_to_previous_episode(tmp_path: Path) -> None:
    first = make_episode(seconds=1.0, amplitude=0.1)
    files = write_episode(first, tmp_path / "ep.flac")
    before = {p.name: p.read_bytes() for p in (files.audio, files.srt, files.vtt)}

    # The chapters file is the last one committed: block it so audio, srt and vtt
    # have already been replaced when the failure happens.
    files.chapters.unlink()
    files.chapters.mkdir()
    second = make_episode(seconds=2.0, amplitude=0.5)
    with pytest.raises(OSError):
        write_episode(second, tmp_path / "ep.flac")

    assert leftovers(tmp_path) == []
    after = {p.name: p.read_bytes() for p in (files.audio, files.srt, files.vtt)}
    assert after == before
    assert files.chapters.is_dir()


def test_failure_midway_removes_files_that_did_not_exist_before(tmp_path: Path) -> None:
    (tmp_path / "ep.vtt").mkdir()
    with pytest.raises(OSError):
        write_episode(make_episode(), tmp_path / "ep.ogg")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ep.vtt"]


def test_rewriting_replaces_files_and_leaves_no_temporaries(tmp_path: Path) -> None:
    target = tmp_path / "ep.wav"
    write_episode(make_episode(seconds=1.0), target)
    write_episode(make_episode(seconds=2.0), target)
    assert leftovers(tmp_path) == []
    assert sf.info(str(target)).frames == 2 * SAMPLE_RATE
    assert json.loads((tmp_path / "ep.turns.json").read_text())["duration"] == 2.0

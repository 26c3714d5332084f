"""Every format at any length, and an encoder that crashes fails its file, not the process that asked for it.

The crash is real: libvorbis overflows the stack when libsndfile hands it a long track in one write (see
`assembly.audio_encoding`); the tests ask the encoder's child process for exactly that write.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from assembly import episode as assembly
from assembly.audio_encoding import EncoderCrashed, EncodingError, encode_in_child
from assembly.episode import Episode, write_episode
from core.audio_formats import AUDIO_FORMATS
from core.audio_rates import SAMPLE_RATE
from script_text.timeline import TimedTurn

CRASHING_SECONDS = 120  # one Vorbis write this long overflows an 8 MiB stack (90 s and up crash, 60 s does not)
MARK_SECONDS = 0.5


def marked_track(minutes: int) -> np.ndarray:
    """Silence with a half-second 440 Hz mark at the start of every minute, so a decoded copy can be checked."""
    audio = np.zeros(minutes * 60 * SAMPLE_RATE, dtype=np.float32)
    t = np.arange(round(MARK_SECONDS * SAMPLE_RATE)) / SAMPLE_RATE
    mark = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    for minute in range(minutes):
        start = minute * 60 * SAMPLE_RATE
        audio[start : start + len(mark)] = mark
    return audio


def mark_onsets(decoded: np.ndarray, minutes: int) -> list[int]:
    """Where each minute's mark starts in `decoded`, in samples after the minute's start."""
    onsets = []
    for minute in range(minutes):
        window = np.abs(decoded[minute * 60 * SAMPLE_RATE :][:SAMPLE_RATE])
        onsets.append(int(np.argmax(window > 0.1)) if window.max() > 0.1 else -1)
    return onsets


def one_turn(audio: np.ndarray) -> Episode:
    turns = (TimedTurn(0, "Alice", "The whole show.", 0.0, len(audio) / SAMPLE_RATE),)
    return Episode(audio=audio, turns=turns, chapters=())


def noise(seconds: float) -> np.ndarray:
    return (0.1 * np.random.default_rng(0).standard_normal(round(seconds * SAMPLE_RATE))).astype(np.float32)


def test_a_long_vorbis_file_is_written_in_blocks_without_crashing(tmp_path: Path) -> None:
    audio = noise(CRASHING_SECONDS)
    target = tmp_path / "long.ogg"
    encode_in_child(audio, target, "OGG", "VORBIS", target=target)
    decoded, rate = sf.read(target, dtype="float32")
    assert rate == SAMPLE_RATE
    assert len(decoded) == len(audio)


def test_an_encoder_crash_is_an_error_naming_the_file_and_the_signal(tmp_path: Path) -> None:
    """The same track in one write: the child dies of the libvorbis stack overflow; this process goes on."""
    target = tmp_path / "long.ogg"
    try:
        encode_in_child(noise(CRASHING_SECONDS), target, "OGG", "VORBIS", target=target, block_samples=10**9)
    except EncoderCrashed as crash:
        assert str(crash) == "the OGG/VORBIS encoder crashed (SIGSEGV) while writing long.ogg"
    else:
        pytest.skip("this libsndfile/libvorbis writes a long track in one call without crashing; nothing to isolate")


def test_a_crashing_format_fails_the_episode_and_commits_no_file(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The set is all or nothing: the formats that did encode are not moved into place either."""
    crashing = functools.partial(encode_in_child, block_samples=10**9)
    monkeypatch.setattr(assembly, "encode_in_child", crashing)
    episode = one_turn(noise(CRASHING_SECONDS))
    try:
        write_episode(episode, tmp_path / "ep.wav", tmp_path / "ep.ogg", tmp_path / "ep.flac")
    except EncoderCrashed as crash:
        assert "while writing ep.ogg" in str(crash)
    else:
        pytest.skip("this libsndfile/libvorbis writes a long track in one call without crashing; nothing to isolate")
    assert os.listdir(tmp_path) == []


def test_an_encoder_failure_carries_its_message(tmp_path: Path) -> None:
    target = tmp_path / "bad.xyz"
    with pytest.raises(EncodingError, match=r"could not encode bad\.xyz as NOPE/PCM_16: .*NOPE"):
        encode_in_child(noise(1), target, "NOPE", "PCM_16", target=target)


def test_formats_must_share_a_folder_and_name(tmp_path: Path) -> None:
    with pytest.raises(assembly.OutputError, match="side files are shared"):
        write_episode(one_turn(noise(1)), tmp_path / "a.wav", tmp_path / "b.mp3")


@pytest.mark.slow
def test_a_three_hour_episode_in_every_format_decodes_back_whole(tmp_path: Path) -> None:
    minutes = 180
    audio = marked_track(minutes)
    extensions = sorted(f".{name}" for name in AUDIO_FORMATS)
    files = write_episode(one_turn(audio), *(tmp_path / f"episode{ext}" for ext in extensions))
    written = [files.audio, *files.more_audio]
    assert sorted(path.suffix for path in written) == extensions
    for path in written:
        info = sf.info(str(path))
        assert info.samplerate == SAMPLE_RATE and info.channels == 1, path.name
        decoded = np.concatenate(list(sf.blocks(str(path), blocksize=60 * SAMPLE_RATE, dtype="float32")))
        assert len(decoded) == len(audio), path.name
        onsets = mark_onsets(decoded, minutes)
        assert all(0 <= onset <= 8 for onset in onsets), (path.name, [o for o in onsets if not 0 <= o <= 8][:5])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [*(p.name for p in written), "episode.srt", "episode.vtt", "episode.chapters.json", "episode.turns.json"]
    )

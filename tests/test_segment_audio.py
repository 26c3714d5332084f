"""Stored segments as 24-bit FLAC: exact to read back, within 2^-23 of the generated float audio, the same episode
at 16 bits as the float WAV they replace, and less than half its size on real speech."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from assembly.loudness import normalize_loudness
from core.storage import read_audio, read_segment_audio, write_audio, write_segment_audio
from tokenizer.voice_prompt import load_voice_prompt


def generated_like(seconds: float, peak: float, seed: int = 0) -> np.ndarray:
    """Noise shaped like speech (bursts and pauses), peaking at `peak`."""
    rng = np.random.default_rng(seed)
    samples = rng.standard_normal(int(seconds * 24_000)) * np.repeat(rng.random(int(seconds * 8)) ** 3, 3_000)
    return (samples / np.abs(samples).max() * peak).astype(np.float32)


@pytest.mark.parametrize("peak", [0.3, 1.0, 1.35, 4.0])
def test_what_is_written_is_what_reads_back_within_a_24_bit_step(tmp_path: Path, peak: float) -> None:
    """Peaks above full scale (the tiny model's often are) are kept by a power-of-two gain, never clipped."""
    samples = generated_like(3.0, peak)
    path = tmp_path / "0000.flac"
    kept = write_segment_audio(path, samples)
    read = read_segment_audio(path)
    assert read.dtype == np.float32 and np.array_equal(kept, read)
    gain = max(1.0, 2.0 ** np.ceil(np.log2(peak)))
    assert np.abs(read - samples).max() <= gain * 2.0**-23
    assert sf.info(path).subtype == "PCM_24"


def test_older_jobs_float_wav_segments_still_read(tmp_path: Path) -> None:
    samples = generated_like(1.0, 1.2)
    path = write_audio(tmp_path / "0000.wav", samples, "FLOAT")
    assert np.array_equal(read_segment_audio(path), samples)


def test_non_finite_audio_is_refused_not_stored(tmp_path: Path) -> None:
    samples = generated_like(1.0, 0.5)
    samples[100] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        write_segment_audio(tmp_path / "0000.flac", samples)
    assert not any(tmp_path.iterdir())


def test_the_16_bit_episode_matches_the_float_path_to_within_one_step(tmp_path: Path) -> None:
    """An episode laid out from FLAC segments against one from float WAV segments, as 16-bit PCM after loudness
    normalisation: no sample is more than one 16-bit step apart."""
    segments = [generated_like(4.0, peak, seed) for seed, peak in enumerate((0.8, 1.3, 0.5))]
    lean = np.concatenate([write_segment_audio(tmp_path / f"{n}.flac", s) for n, s in enumerate(segments)])
    float_path = np.concatenate(
        [read_audio(write_audio(tmp_path / f"{n}.wav", s, "FLOAT")) for n, s in enumerate(segments)]
    )

    def as_pcm16(audio: np.ndarray) -> np.ndarray:
        buffer = io.BytesIO()
        sf.write(buffer, normalize_loudness(audio), 24_000, format="WAV", subtype="PCM_16")
        return sf.read(io.BytesIO(buffer.getvalue()), dtype="int16")[0].astype(np.int32)

    difference = np.abs(as_pcm16(lean) - as_pcm16(float_path))
    assert difference.max() <= 1 and difference.mean() < 0.05


def test_real_speech_takes_less_than_half_the_float_wav(tmp_path: Path, examples: Path) -> None:
    flac = wav = 0
    for voice in sorted((examples / "voices").glob("*.wav")):
        samples = load_voice_prompt(voice).samples
        write_segment_audio(tmp_path / "segment.flac", samples)
        flac += (tmp_path / "segment.flac").stat().st_size
        wav += write_audio(tmp_path / "segment.wav", samples, "FLOAT").stat().st_size
    assert flac < 0.5 * wav, (flac, wav)

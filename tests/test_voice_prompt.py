"""Voice prompts are loaded from real files (shipped recordings and ones written here), never mocks."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr
from hypothesis import given, settings
from hypothesis import strategies as st

from core.audio_rates import SAMPLE_RATE
from tests.synthetic_audio import voice_like
from tokenizer.voice_prompt import (
    MAX_FILE_BYTES,
    MAX_FILE_SECONDS,
    MAX_SAMPLE_RATE,
    MAX_SECONDS,
    MIN_SAMPLE_RATE,
    MIN_SECONDS,
    TARGET_DBFS,
    VoicePrompt,
    VoicePromptError,
    load_voice_prompt,
    prepare_voice_samples,
    resampled_length,
)

VOICES_DIR = Path(__file__).resolve().parents[2] / "shared" / "examples" / "voices"
ALLOWED_LENGTH = f"{MIN_SECONDS:g}–{MAX_SECONDS:g} s"
FORMATS_HINT = "accepted formats: WAV, FLAC"


def dbfs(samples: np.ndarray) -> float:
    return 20 * math.log10(math.sqrt(np.mean(np.square(samples, dtype=np.float64))))


def assert_prepared(prompt: VoicePrompt, *, seconds: float, tolerance_s: float = 1e-3) -> None:
    """The invariants every prompt must satisfy: mono float32 at 24 kHz, levelled, expected length."""
    assert prompt.samples.dtype == np.float32
    assert prompt.samples.ndim == 1
    assert np.all(np.isfinite(prompt.samples))
    assert np.max(np.abs(prompt.samples)) <= 1.0
    assert dbfs(prompt.samples) == pytest.approx(TARGET_DBFS, abs=0.05)
    assert prompt.seconds == pytest.approx(seconds, abs=tolerance_s)


def write(path: Path, samples: np.ndarray, sample_rate: int, **kwargs: str) -> Path:
    sf.write(path, samples, sample_rate, **kwargs)
    return path


# --- the shipped recordings -------------------------------------------------


def shipped(name: str) -> Path:
    path = VOICES_DIR / name
    if not path.is_file():
        pytest.skip(f"example voice {path} is not present (shared/examples/voices not checked out)")
    return path


def test_alice_16k_is_resampled_and_levelled() -> None:
    path = shipped("en-Alice_woman.wav")
    frames = sf.info(path).frames

    prompt = load_voice_prompt(path)

    assert (prompt.original_sample_rate, prompt.original_channels, prompt.trimmed) == (16_000, 1, False)
    assert abs(len(prompt.samples) - frames * SAMPLE_RATE / 16_000) <= 2
    assert_prepared(prompt, seconds=9.27, tolerance_s=0.01)
    assert prompt.source == str(path)


def test_carter_24k_keeps_every_sample() -> None:
    path = shipped("en-Carter_man.wav")
    original, _ = sf.read(path, dtype="float32")

    prompt = load_voice_prompt(str(path))

    assert (prompt.original_sample_rate, prompt.original_channels) == (24_000, 1)
    assert len(prompt.samples) == len(original)
    assert_prepared(prompt, seconds=27.73, tolerance_s=0.01)
    # Levelling is one gain: the waveform is the original, scaled.
    gain = prompt.samples[np.argmax(np.abs(original))] / original[np.argmax(np.abs(original))]
    np.testing.assert_allclose(prompt.samples, original * gain, atol=1e-5)


# --- formats, rates, channels -----------------------------------------------


@pytest.mark.parametrize(
    ("name", "sample_rate", "channels", "options", "tolerance_s"),
    [
        ("stereo.flac", 44_100, 2, {}, 1e-3),
        ("vorbis.ogg", 48_000, 1, {"format": "OGG", "subtype": "VORBIS"}, 0.05),
        ("speech.mp3", 22_050, 1, {"format": "MP3", "subtype": "MPEG_LAYER_III"}, 0.1),
        ("opus.ogg", 48_000, 1, {"format": "OGG", "subtype": "OPUS"}, 0.05),
        ("phone.wav", 8_000, 1, {"subtype": "PCM_16"}, 1e-3),
    ],
)
def test_common_formats_load(
    tmp_path: Path, name: str, sample_rate: int, channels: int, options: dict[str, str], tolerance_s: float
) -> None:
    path = write(tmp_path / name, voice_like(4.0, sample_rate, channels), sample_rate, **options)

    prompt = load_voice_prompt(path)

    assert (prompt.original_sample_rate, prompt.original_channels) == (sample_rate, channels)
    assert prompt.trimmed is False
    assert_prepared(prompt, seconds=4.0, tolerance_s=tolerance_s)


def test_channels_are_averaged(tmp_path: Path) -> None:
    left = voice_like(4.0, SAMPLE_RATE)
    stereo = np.stack([left, np.zeros_like(left)], axis=1)
    path = write(tmp_path / "left-only.wav", stereo, SAMPLE_RATE, subtype="FLOAT")

    prompt = load_voice_prompt(path)

    # Averaging halves the signal; levelling then applies one gain to the left channel.
    np.testing.assert_allclose(prompt.samples / prompt.samples.max(), left / left.max(), atol=1e-5)


def test_awkward_sample_rate_resamples_to_the_right_length(tmp_path: Path) -> None:
    # gcd(44101, 24000) == 1: a windowed-sinc kernel at the exact ratio would need ~4 GB; soxr needs none of it.
    path = write(tmp_path / "odd.wav", voice_like(3.5, 44_101), 44_101)

    prompt = load_voice_prompt(path)

    assert prompt.original_sample_rate == 44_101
    assert_prepared(prompt, seconds=3.5, tolerance_s=3.5 * 0.003)


@pytest.mark.parametrize("sample_rate", [16_000, 44_100, 24_000])
def test_a_voice_is_resampled_and_levelled_as_the_original_processor_does(tmp_path: Path, sample_rate: int) -> None:
    """The original loads voices with librosa (soxr at high quality, its length the float ratio of the rates times
    the length, rounded up), then levels them to -25 dBFS dividing by rms + 1e-6, and by peak + 1e-6 if that
    clipped."""
    path = write(tmp_path / "voice.wav", voice_like(4.0, sample_rate, seed=sample_rate), sample_rate, subtype="FLOAT")
    recorded, _ = sf.read(path, dtype="float32")
    expected = soxr.resample(recorded, sample_rate, 24_000, quality="HQ") if sample_rate != 24_000 else recorded
    length = int(np.ceil(len(recorded) * (24_000 / sample_rate)))  # librosa.resample's own expression
    expected = np.pad(expected, (0, max(0, length - len(expected))))[:length].astype(np.float64)
    expected *= 10 ** (-25 / 20) / (math.sqrt(np.mean(expected**2)) + 1e-6)
    if (peak := np.abs(expected).max()) > 1:
        expected /= peak + 1e-6

    prompt = load_voice_prompt(path)

    assert len(prompt.samples) == length
    np.testing.assert_allclose(prompt.samples, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    ("samples", "sample_rate", "expected"),
    [
        (408_807, 44_100, 222_481),  # exactly 222,480: the float ratio lands above it, and librosa keeps one more
        (441_000, 44_100, 240_001),  # ten seconds: the float product lands above 240,000 here too
        (147_000, 44_100, 80_000),  # where it hits the whole number exactly
        (48_000 * 5 + 1, 48_000, 120_001),  # a half sample rounds up
    ],
)
def test_a_resampled_voice_is_as_long_as_librosa_makes_it(
    tmp_path: Path, samples: int, sample_rate: int, expected: int
) -> None:
    rng = np.random.default_rng(samples)
    path = write(tmp_path / "voice.wav", (0.1 * rng.standard_normal(samples)).astype(np.float32), sample_rate)

    assert resampled_length(samples, sample_rate) == expected
    assert len(load_voice_prompt(path).samples) == expected


@pytest.mark.parametrize("sample_rate", [4_000, 384_000])
def test_sample_rate_outside_range_is_refused(tmp_path: Path, sample_rate: int) -> None:
    path = write(tmp_path / f"rate{sample_rate}.wav", voice_like(4.0, sample_rate), sample_rate)

    with pytest.raises(VoicePromptError) as caught:
        load_voice_prompt(path)

    message = str(caught.value)
    assert str(path) in message
    assert f"{sample_rate} Hz" in message
    assert f"{MIN_SAMPLE_RATE}–{MAX_SAMPLE_RATE} Hz" in message


# --- length limits ------------------------------------------------------------


def test_long_file_is_trimmed_to_max_seconds_with_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write(tmp_path / "long.wav", voice_like(70.0, 16_000), 16_000, subtype="PCM_16")

    with caplog.at_level(logging.WARNING, logger="tokenizer.voice_prompt"):
        prompt = load_voice_prompt(path)

    assert prompt.trimmed is True
    assert len(prompt.samples) == MAX_SECONDS * SAMPLE_RATE
    assert_prepared(prompt, seconds=MAX_SECONDS)
    [record] = [r for r in caplog.records if r.name == "tokenizer.voice_prompt"]
    assert record.levelname == "WARNING"
    assert str(path) in record.getMessage()
    assert f"{MAX_SECONDS:g} s" in record.getMessage()


def test_exactly_max_seconds_is_not_trimmed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write(tmp_path / "sixty.wav", voice_like(MAX_SECONDS, 8_000), 8_000, subtype="PCM_16")

    with caplog.at_level(logging.WARNING, logger="tokenizer.voice_prompt"):
        prompt = load_voice_prompt(path)

    assert prompt.trimmed is False
    assert len(prompt.samples) == MAX_SECONDS * SAMPLE_RATE
    assert not caplog.records


def test_absurdly_long_file_is_refused(tmp_path: Path) -> None:
    seconds = 700.0
    lecture = np.tile(voice_like(1.0, 8_000), round(seconds))
    path = write(tmp_path / "lecture.wav", lecture, 8_000, subtype="PCM_16")

    with pytest.raises(VoicePromptError) as caught:
        load_voice_prompt(path)

    message = str(caught.value)
    assert str(path) in message
    assert f"{seconds:.1f} s" in message
    assert f"up to {MAX_FILE_SECONDS:g} s" in message


def test_oversized_file_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "huge.wav"
    with path.open("wb") as handle:  # sparse: nothing is actually written
        handle.truncate(MAX_FILE_BYTES + 1)

    with pytest.raises(VoicePromptError) as caught:
        load_voice_prompt(path)

    message = str(caught.value)
    assert str(path) in message
    assert f"up to {MAX_FILE_BYTES / 2**20:g} MiB" in message


def test_short_file_is_refused_with_duration_and_range(tmp_path: Path) -> None:
    path = write(tmp_path / "hi.wav", voice_like(1.0, 16_000), 16_000)

    with pytest.raises(VoicePromptError) as caught:
        load_voice_prompt(path)

    message = str(caught.value)
    assert str(path) in message
    assert "1.00 s" in message
    assert ALLOWED_LENGTH in message


# --- unusable content -----------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "samples"),
    [
        ("zeros.wav", np.zeros(4 * 16_000, dtype=np.float32)),
        ("hiss.wav", 1e-4 * np.random.default_rng(1).standard_normal(4 * 16_000).astype(np.float32)),
    ],
)
def test_silence_is_refused(tmp_path: Path, name: str, samples: np.ndarray) -> None:
    path = write(tmp_path / name, samples, 16_000, subtype="FLOAT")

    with pytest.raises(VoicePromptError) as caught:
        load_voice_prompt(path)

    message = str(caught.value)
    assert str(path) in message
    assert "is silent" in message
    assert "-60 dBFS" in message


@pytest.mark.parametrize("bad_value", [np.nan, np.inf])
def test_non_finite_samples_are_refused(tmp_path: Path, bad_value: float) -> None:
    samples = voice_like(4.0, 16_000)
    samples[1234] = bad_value
    path = write(tmp_path / "broken.wav", samples, 16_000, subtype="FLOAT")

    with pytest.raises(VoicePromptError) as caught:
        load_voice_prompt(path)

    message = str(caught.value)
    assert str(path) in message
    assert "NaN or infinite" in message
    assert "only finite" in message


def test_loud_peaks_are_limited_to_full_scale(tmp_path: Path) -> None:
    samples = voice_like(4.0, SAMPLE_RATE) * 0.01
    samples[SAMPLE_RATE] = 0.9  # a click far above the speech level
    path = write(tmp_path / "click.wav", samples, SAMPLE_RATE, subtype="FLOAT")

    prompt = load_voice_prompt(path)

    assert np.max(np.abs(prompt.samples)) == pytest.approx(1.0)
    assert dbfs(prompt.samples) < TARGET_DBFS


# --- files that are not (complete) audio -----------------------------------------


def assert_unreadable(path: Path, reason: str) -> None:
    with pytest.raises(VoicePromptError) as caught:
        load_voice_prompt(path)
    message = str(caught.value)
    assert f"could not read voice prompt '{path}' as audio" in message
    assert reason in message
    assert FORMATS_HINT in message


def test_missing_path(tmp_path: Path) -> None:
    assert_unreadable(tmp_path / "nowhere.wav", "no such file")


def test_directory(tmp_path: Path) -> None:
    assert_unreadable(tmp_path, "directory")


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.wav"
    path.touch()
    assert_unreadable(path, "empty")


def test_text_renamed_to_wav(tmp_path: Path) -> None:
    path = tmp_path / "notes.wav"
    path.write_text("Speaker 1: this is a script, not a recording\n" * 20)
    assert_unreadable(path, "corrupt, truncated or not audio (libsndfile: Format not recognised)")


@pytest.mark.parametrize("name", ["noise.wav", "noise.mp3"])
def test_random_bytes(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(np.random.default_rng(2).bytes(20_000))
    assert_unreadable(path, "corrupt, truncated or not audio")


def cut_off(source: Path, target: Path, keep_bytes: int) -> Path:
    target.write_bytes(source.read_bytes()[:keep_bytes])
    return target


def test_truncated_wav_loads_the_part_that_exists(tmp_path: Path) -> None:
    full = write(tmp_path / "full.wav", voice_like(10.0, 16_000), 16_000, subtype="PCM_16")
    header_bytes = 44
    truncated = cut_off(full, tmp_path / "cut.wav", header_bytes + 5 * 16_000 * 2)

    prompt = load_voice_prompt(truncated)

    assert_prepared(prompt, seconds=5.0)


def test_truncated_wav_shorter_than_minimum_is_refused(tmp_path: Path) -> None:
    full = write(tmp_path / "full.wav", voice_like(10.0, 16_000), 16_000, subtype="PCM_16")
    truncated = cut_off(full, tmp_path / "cut.wav", 44 + 2 * 16_000 * 2)

    with pytest.raises(VoicePromptError) as caught:
        load_voice_prompt(truncated)

    message = str(caught.value)
    assert str(truncated) in message
    assert "2.00 s" in message
    assert ALLOWED_LENGTH in message


def test_wav_header_without_data_has_no_audio(tmp_path: Path) -> None:
    full = write(tmp_path / "full.wav", voice_like(10.0, 16_000), 16_000, subtype="PCM_16")
    truncated = cut_off(full, tmp_path / "header.wav", 44)

    with pytest.raises(VoicePromptError) as caught:
        load_voice_prompt(truncated)

    message = str(caught.value)
    assert str(truncated) in message
    assert "no audio samples" in message
    assert ALLOWED_LENGTH in message


def test_truncated_flac_is_reported_unreadable(tmp_path: Path) -> None:
    full = write(tmp_path / "full.flac", voice_like(10.0, 16_000), 16_000)
    truncated = cut_off(full, tmp_path / "cut.flac", full.stat().st_size // 2)
    assert_unreadable(truncated, "corrupt, truncated or not audio (libsndfile: Error : flac decoder lost sync)")


# --- audio already in memory ---------------------------------------------------


def test_in_memory_matches_file(tmp_path: Path) -> None:
    samples = voice_like(4.0, 44_100, channels=2)
    path = write(tmp_path / "same.wav", samples, 44_100, subtype="FLOAT")

    from_memory = prepare_voice_samples(samples, 44_100, source="upload")
    from_file = load_voice_prompt(path)

    assert from_memory.source == "upload"
    assert from_memory.original_channels == 2
    np.testing.assert_allclose(from_memory.samples, from_file.samples, atol=1e-6)


def test_in_memory_int16_is_scaled_like_pcm() -> None:
    samples = voice_like(4.0, 16_000)
    pcm = np.round(samples * 32767).astype(np.int16)

    prompt = prepare_voice_samples(pcm, 16_000, source="mic")

    np.testing.assert_allclose(prompt.samples, prepare_voice_samples(samples, 16_000, source="mic").samples, atol=1e-3)
    # Quiet int16 must still count as silent: the threshold is relative to full scale.
    with pytest.raises(VoicePromptError, match="is silent"):
        prepare_voice_samples(np.full(4 * 16_000, 3, dtype=np.int16), 16_000, source="mic")


def test_in_memory_trim_and_absurd_length(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tokenizer.voice_prompt"):
        prompt = prepare_voice_samples(voice_like(61.0, 8_000), 8_000, source="upload")
    assert prompt.trimmed is True
    assert prompt.seconds == MAX_SECONDS
    assert "upload" in caplog.text

    with pytest.raises(VoicePromptError, match=rf"'upload' is 601\.0 s long.*up to {MAX_FILE_SECONDS:g} s"):
        prepare_voice_samples(np.zeros(601 * 8_000, dtype=np.float32), 8_000, source="upload")


@pytest.mark.parametrize(
    ("samples", "sample_rate", "expected"),
    [
        (np.zeros((10, 2, 2), dtype=np.float32), 16_000, r"shape \(10, 2, 2\).*expected \(samples,\) or"),
        (np.zeros((2, 48_000), dtype=np.float32), 16_000, r"more channels than samples.*transpose"),
        (np.zeros(48_000, dtype=np.complex64), 16_000, r"type complex64.*floating-point or integer"),
        (np.zeros(0, dtype=np.float32), 16_000, r"no audio samples.*3–60 s"),
        (np.zeros((48_000, 0), dtype=np.float32), 16_000, r"no audio samples.*3–60 s"),
        (voice_like(4.0, 16_000), 16_000.5, r"sample rate 16000\.5 Hz.*8000–192000 Hz"),
        (voice_like(4.0, 16_000), True, r"sample rate True Hz.*8000–192000 Hz"),
        (voice_like(4.0, 16_000), 7_999, r"sample rate 7999 Hz.*8000–192000 Hz"),
    ],
)
def test_in_memory_rejects_malformed_input(samples: np.ndarray, sample_rate: object, expected: str) -> None:
    with pytest.raises(VoicePromptError, match=rf"'clip\.wav'.*{expected}"):
        prepare_voice_samples(samples, sample_rate, source="clip.wav")  # type: ignore[arg-type]


@settings(max_examples=15, deadline=None)
@given(sample_rate=st.integers(MIN_SAMPLE_RATE, MAX_SAMPLE_RATE), seconds=st.floats(3.0, 3.5))
def test_any_allowed_rate_gives_a_levelled_24k_prompt(sample_rate: int, seconds: float) -> None:
    prompt = prepare_voice_samples(voice_like(seconds, sample_rate), sample_rate, source="any")

    assert prompt.original_sample_rate == sample_rate
    assert_prepared(prompt, seconds=round(seconds * sample_rate) / sample_rate, tolerance_s=seconds * 0.0035)


def test_prompt_is_frozen() -> None:
    prompt = prepare_voice_samples(voice_like(3.0, SAMPLE_RATE), SAMPLE_RATE, source="x")
    with pytest.raises(AttributeError):
        prompt.trimmed = True  # type: ignore[misc]

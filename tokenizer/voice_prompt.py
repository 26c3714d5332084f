"""Turn a user's voice recording into the prompt audio VibeVoice expects.

VibeVoice clones a speaker from a short reference clip: mono float32 at 24 kHz,
levelled to the same loudness the original VibeVoice processor used.  Both steps
follow the original: it loads voices with librosa, whose default resampler is
soxr at its high quality (the length rounded up as librosa does it, through a float ratio), then scales
to -25 dBFS by dividing by `rms + 1e-6` and, if that clipped, by `peak + 1e-6`.  Users
upload whatever their phone or DAW produced, so this module accepts any format
libsndfile decodes, any sensible sample rate and channel count, and turns every
problem (unreadable, silent, too short, absurdly long, NaNs) into one
:class:`VoicePromptError` whose message names the file and what is allowed.
"""

from __future__ import annotations

import logging
import math
import numbers
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from core.audio_rates import SAMPLE_RATE

__all__ = [
    "ACCEPTED_FORMATS",
    "MAX_FILE_BYTES",
    "MAX_FILE_SECONDS",
    "MAX_SAMPLE_RATE",
    "MAX_SECONDS",
    "MIN_SAMPLE_RATE",
    "MIN_SECONDS",
    "SILENCE_RMS",
    "TARGET_DBFS",
    "VoicePrompt",
    "VoicePromptError",
    "load_voice_prompt",
    "prepare_voice_samples",
    "resampled_length",
]

logger = logging.getLogger(__name__)

TARGET_DBFS = -25.0
MIN_SECONDS = 3.0
MAX_SECONDS = 60.0
MAX_FILE_SECONDS = 600.0
MAX_FILE_BYTES = 50 * 1024 * 1024
MIN_SAMPLE_RATE = 8_000
MAX_SAMPLE_RATE = 192_000
SILENCE_RMS = 1e-3  # -60 dBFS: below this there is no voice to clone

ACCEPTED_FORMATS = "WAV, FLAC, Ogg Vorbis, Ogg Opus, MP3 (or any other format libsndfile reads)"

_TARGET_RMS = 10 ** (TARGET_DBFS / 20)
_ALLOWED_LENGTH = f"{MIN_SECONDS:g}–{MAX_SECONDS:g} s"
# Samples (frames x channels) decoded at a time: 1 MiB of float32 whatever the channel count, so a header
# claiming 1024 channels costs no more memory than a mono file.
_READ_BLOCK_SAMPLES = 1 << 18
# What libsndfile reports as the length of a stream that does not say (a FLAC written to a pipe): the
# read below stops after MAX_SECONDS however long it really is.
_UNKNOWN_FRAMES = 2**63 - 1
_LEVEL_EPS = 1e-6  # the original processor's guard in both divisions of its levelling


class VoicePromptError(ValueError):
    """A voice recording that cannot be used; the message names the file and what is allowed."""


@dataclass(frozen=True, eq=False)  # eq=False: comparing ndarrays with == is ambiguous
class VoicePrompt:
    """A recording ready to condition VibeVoice on one speaker's voice."""

    samples: np.ndarray  # float32, mono, 24 kHz, levelled, shape (n,)
    source: str  # the path as given (for messages)
    original_sample_rate: int
    original_channels: int
    trimmed: bool  # True when it was cut to MAX_SECONDS

    @property
    def seconds(self) -> float:
        """Duration of the prepared prompt (after any trimming)."""
        return len(self.samples) / SAMPLE_RATE


def load_voice_prompt(path: str | os.PathLike) -> VoicePrompt:
    """Read a recording from disk and prepare it as a voice prompt.

    Size, sample rate and duration are checked from the header before any
    audio is decoded, so an oversized upload costs nothing, and only the first
    MAX_SECONDS (plus one frame, to know it was longer) are ever decoded.  A WAV whose data was cut off is
    read as far as it goes (libsndfile trusts the file size over the header);
    a compressed stream that breaks mid-way is reported as unreadable.  A stream whose header gives no
    length is decoded up to MAX_SECONDS too, never further, however much it would decompress to.
    """
    source = os.fspath(path)
    _check_file(Path(source), source)
    try:
        with sf.SoundFile(source) as audio_file:
            sample_rate, channels = audio_file.samplerate, audio_file.channels
            _check_sample_rate(sample_rate, source)
            if audio_file.frames != _UNKNOWN_FRAMES:
                _check_not_absurdly_long(audio_file.frames / sample_rate, source)
            mono = _read_mono(audio_file, _max_frames(sample_rate) + 1)
    except (RuntimeError, TypeError) as error:  # sf.LibsndfileError is a RuntimeError
        # libsndfile's own wording can mislead (random bytes named .mp3 give "File does
        # not exist"), so lead with what we know and quote it only as detail.
        detail = getattr(error, "error_string", str(error)).rstrip(".")
        raise _unreadable(source, f"corrupt, truncated or not audio (libsndfile: {detail})") from error
    return _finish(mono, sample_rate, source=source, channels=channels)


def prepare_voice_samples(samples: np.ndarray, sample_rate: int, *, source: str) -> VoicePrompt:
    """The same checks and conversion for audio already in memory (an upload); samples shape (n,) or (n, channels).

    Integer PCM (e.g. the int16 arrays Gradio hands over) is scaled to
    [-1, 1] first so the silence threshold means the same thing as for files.
    """
    _check_sample_rate(sample_rate, source)
    audio = _as_float_frames(np.asarray(samples), source)
    _check_not_absurdly_long(len(audio) / sample_rate, source)
    return _finish(audio.mean(axis=1), int(sample_rate), source=source, channels=audio.shape[1])


def _check_file(path: Path, source: str) -> None:
    """Refuse paths that are not a plausible audio file before libsndfile sees them."""
    if not path.exists():
        raise _unreadable(source, "no such file")
    if path.is_dir():
        raise _unreadable(source, "it is a directory")
    size = path.stat().st_size
    if size == 0:
        raise _unreadable(source, "the file is empty, 0 bytes")
    if size > MAX_FILE_BYTES:
        raise VoicePromptError(
            f"voice prompt {source!r} is {size / 2**20:.1f} MiB; "
            f"files up to {MAX_FILE_BYTES / 2**20:g} MiB are accepted"
        )


def _check_sample_rate(sample_rate: object, source: str) -> None:
    """Refuse rates outside what real recordings use (and what resampling handles well)."""
    whole = sample_rate if isinstance(sample_rate, numbers.Integral) and not isinstance(sample_rate, bool) else None
    if whole is None or not MIN_SAMPLE_RATE <= int(whole) <= MAX_SAMPLE_RATE:
        raise VoicePromptError(
            f"voice prompt {source!r} has sample rate {sample_rate!r} Hz; "
            f"the allowed range is {MIN_SAMPLE_RATE}–{MAX_SAMPLE_RATE} Hz"
        )


def _check_not_absurdly_long(seconds: float, source: str) -> None:
    """Refuse recordings far beyond a voice sample instead of silently using a sliver of them."""
    if seconds > MAX_FILE_SECONDS:
        raise VoicePromptError(
            f"voice prompt {source!r} is {seconds:.1f} s long; recordings up to "
            f"{MAX_FILE_SECONDS:g} s are accepted (only the first {MAX_SECONDS:g} s are used)"
        )


def _read_mono(audio_file: sf.SoundFile, max_frames: int) -> np.ndarray:
    """Decode up to max_frames, mixing each block to mono so memory does not grow with channels.

    Reads until the decoder returns nothing rather than trusting the header's
    frame count, which is only an estimate for truncated MP3 and WAV files.
    """
    blocks: list[np.ndarray] = []
    remaining = max_frames
    block_frames = max(1, _READ_BLOCK_SAMPLES // audio_file.channels)
    while remaining > 0:
        block = audio_file.read(min(block_frames, remaining), dtype="float32", always_2d=True)
        if len(block) == 0:
            break
        blocks.append(block.mean(axis=1))
        remaining -= len(block)
    return np.concatenate(blocks) if blocks else np.zeros(0, dtype=np.float32)


def _as_float_frames(samples: np.ndarray, source: str) -> np.ndarray:
    """Return float32 audio shaped (frames, channels), scaling integer PCM to [-1, 1]."""
    if samples.ndim not in (1, 2):
        raise VoicePromptError(
            f"voice prompt {source!r} has shape {samples.shape}; expected (samples,) or (samples, channels)"
        )
    frames = samples[:, np.newaxis] if samples.ndim == 1 else samples
    if frames.size == 0:
        raise _no_audio(source)
    if frames.shape[1] > frames.shape[0]:
        raise VoicePromptError(
            f"voice prompt {source!r} has shape {samples.shape}, more channels than samples; "
            "expected (samples,) or (samples, channels) — transpose a (channels, samples) array"
        )
    if np.issubdtype(frames.dtype, np.integer):
        return (frames / float(-np.iinfo(frames.dtype).min)).astype(np.float32)
    if np.issubdtype(frames.dtype, np.floating):
        return frames.astype(np.float32)
    raise VoicePromptError(
        f"voice prompt {source!r} has samples of type {frames.dtype}; expected floating-point or integer PCM samples"
    )


def _finish(mono: np.ndarray, sample_rate: int, *, source: str, channels: int) -> VoicePrompt:
    """Checks and conversion shared by files and in-memory audio, starting from the mono mix."""
    if not np.all(np.isfinite(mono)):
        raise VoicePromptError(
            f"voice prompt {source!r} contains NaN or infinite samples; only finite sample values are allowed"
        )
    mono, trimmed = _limit_length(mono, sample_rate, source)
    _check_not_silent(mono, source)
    levelled = _level(_resample(mono, sample_rate))
    return VoicePrompt(
        samples=levelled,
        source=source,
        original_sample_rate=sample_rate,
        original_channels=channels,
        trimmed=trimmed,
    )


def _max_frames(sample_rate: int) -> int:
    return round(MAX_SECONDS * sample_rate)


def _limit_length(mono: np.ndarray, sample_rate: int, source: str) -> tuple[np.ndarray, bool]:
    """Refuse clips too short to carry a voice; cut long ones to MAX_SECONDS (the model's useful context)."""
    if len(mono) == 0:
        raise _no_audio(source)
    seconds = len(mono) / sample_rate
    if seconds < MIN_SECONDS:
        raise VoicePromptError(
            f"voice prompt {source!r} is {seconds:.2f} s long; the allowed length is {_ALLOWED_LENGTH}"
        )
    if len(mono) <= _max_frames(sample_rate):
        return mono, False
    logger.warning(
        "voice prompt %r is longer than %g s; only the first %g s are used",
        source,
        MAX_SECONDS,
        MAX_SECONDS,
    )
    return mono[: _max_frames(sample_rate)], True


def _rms(samples: np.ndarray) -> float:
    # float64 so large-but-finite float input cannot overflow to inf.
    return math.sqrt(np.mean(np.square(samples, dtype=np.float64)))


def _check_not_silent(mono: np.ndarray, source: str) -> None:
    rms = _rms(mono)
    if rms < SILENCE_RMS:
        level = f"{20 * math.log10(rms):.1f} dBFS" if rms > 0 else "digital silence"
        raise VoicePromptError(
            f"voice prompt {source!r} is silent ({level}); it needs audible speech "
            f"louder than {20 * math.log10(SILENCE_RMS):g} dBFS RMS"
        )


def resampled_length(samples: int, sample_rate: int) -> int:
    """The length librosa gives `samples` resampled to 24 kHz: the float ratio of the rates times the length, rounded
    up. Where the exact length is whole, the float product can land just above it: 408,807 samples at 44.1 kHz
    give 222,481 (exactly 222,480), one sample the original keeps, and at a 3,200-sample boundary one frame more."""
    return math.ceil(samples * (SAMPLE_RATE / sample_rate))


def _resample(mono: np.ndarray, sample_rate: int) -> np.ndarray:
    """Resample to 24 kHz as librosa's default does: soxr at high quality, zero-padded or cut to
    `resampled_length`."""
    if sample_rate == SAMPLE_RATE:
        return mono
    resampled = soxr.resample(np.ascontiguousarray(mono, dtype=np.float32), sample_rate, SAMPLE_RATE, quality="HQ")
    length = resampled_length(len(mono), sample_rate)
    if len(resampled) >= length:
        return resampled[:length]
    return np.pad(resampled, (0, length - len(resampled)))


def _level(mono: np.ndarray) -> np.ndarray:
    """Scale to TARGET_DBFS RMS, then pull the peak back under 1 if that clipped, as the VibeVoice processor does
    (its divisions guarded by `_LEVEL_EPS`)."""
    levelled = mono.astype(np.float64) * (_TARGET_RMS / (_rms(mono) + _LEVEL_EPS))
    peak = np.max(np.abs(levelled))
    if peak > 1.0:
        levelled /= peak + _LEVEL_EPS
    return levelled.astype(np.float32)


def _no_audio(source: str) -> VoicePromptError:
    return VoicePromptError(
        f"voice prompt {source!r} contains no audio samples; the allowed length is {_ALLOWED_LENGTH}"
    )


def _unreadable(source: str, reason: str) -> VoicePromptError:
    return VoicePromptError(
        f"could not read voice prompt {source!r} as audio: {reason}; accepted formats: {ACCEPTED_FORMATS}"
    )

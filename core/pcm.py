"""The pipeline's audio as samples: mono (`require_mono`), and 16-bit PCM, the form live audio takes on the wire: job
events carry it, streamed speech responses send it.

Live audio is the raw generated signal, before the loudness normalisation a finished episode gets (that
needs the whole track), so it is clipped to [-1, 1] and rounded to 16 bits, nothing more.
"""

from __future__ import annotations

import struct

import numpy as np

PCM_BYTES_PER_SAMPLE = 2
_FULL_SCALE = 32767
_UNKNOWN_SIZE = 0xFFFFFFFF  # what a streamed WAV's RIFF and data sizes say before the end is known


def to_pcm16(samples: np.ndarray) -> bytes:
    """Float samples in [-1, 1] as 16-bit little-endian PCM (values beyond full scale are clipped)."""
    scaled = np.rint(np.clip(np.asarray(samples, dtype=np.float32), -1.0, 1.0) * _FULL_SCALE)
    return scaled.astype("<i2").tobytes()


def streaming_wav_header(sample_rate: int) -> bytes:
    """A 44-byte header of a mono 16-bit WAV whose length is not known yet.

    The RIFF and data sizes are 0xFFFFFFFF, as OpenAI's streamed WAVs have them: players and decoders
    read such a file to its end instead of trusting the sizes.
    """
    byte_rate = sample_rate * PCM_BYTES_PER_SAMPLE
    return (
        b"RIFF"
        + struct.pack("<I", _UNKNOWN_SIZE)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, byte_rate, PCM_BYTES_PER_SAMPLE, 16)
        + b"data"
        + struct.pack("<I", _UNKNOWN_SIZE)
    )


def require_mono(audio: np.ndarray) -> None:
    """The whole pipeline is mono; a stray channel axis would silently skew loudness and duration."""
    if audio.ndim != 1:
        raise ValueError(f"expected mono (1-D) audio, got shape {audio.shape}")

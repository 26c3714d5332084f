"""Levelling the episode: podcast loudness (BS.1770, -16 LUFS) under a -1 dBFS peak ceiling, and silences.

The whole pipeline is mono at `core.audio_rates.SAMPLE_RATE`.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torchaudio.functional as AF

from core.audio_rates import SAMPLE_RATE
from core.pcm import require_mono

TARGET_LUFS = -16.0
PEAK_CEILING_DBFS = -1.0
# BS.1770 gates in 400 ms blocks; anything shorter has no defined loudness.
_MIN_LOUDNESS_SECONDS = 0.4


def normalize_loudness(audio: np.ndarray, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Level audio to TARGET_LUFS, then pull it under PEAK_CEILING_DBFS if needed.

    The ceiling wins over the loudness target: a spiky track ends up quieter than
    TARGET_LUFS rather than clipping. Silence and clips too short to measure are
    returned unchanged (as a float32 copy) because their loudness is undefined.
    """
    require_mono(audio)
    out = np.array(audio, dtype=np.float32, copy=True)
    if len(out) < _MIN_LOUDNESS_SECONDS * sample_rate:
        return out
    measured = float(AF.loudness(torch.from_numpy(out).unsqueeze(0), sample_rate))
    if not math.isfinite(measured):
        return out
    scaled = out.astype(np.float64) * 10.0 ** ((TARGET_LUFS - measured) / 20.0)
    peak = float(np.max(np.abs(scaled)))
    ceiling = 10.0 ** (PEAK_CEILING_DBFS / 20.0)
    if peak > ceiling:
        scaled *= ceiling / peak
    return scaled.astype(np.float32)


def silence(seconds: float) -> np.ndarray:
    """Float32 zeros for pauses between turns, rounded to whole samples."""
    if seconds < 0:
        raise ValueError(f"silence length must be >= 0 seconds, got {seconds}")
    return np.zeros(round(seconds * SAMPLE_RATE), dtype=np.float32)

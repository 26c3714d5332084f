"""Synthetic speech-shaped audio for tests that need a valid voice recording without shipping one."""

from __future__ import annotations

import numpy as np


def voice_like(seconds: float, sample_rate: int, channels: int = 1, seed: int = 0) -> np.ndarray:
    """A harmonic tone with syllable-rate amplitude modulation and a little noise, roughly speech-shaped."""
    rng = np.random.default_rng(seed)
    t = np.arange(round(seconds * sample_rate)) / sample_rate
    pitch = 140 * (1 + 0.05 * np.sin(2 * np.pi * 0.7 * t))
    phase = 2 * np.pi * np.cumsum(pitch) / sample_rate
    harmonics = sum(np.sin(k * phase) / k for k in range(1, 6))
    syllables = 0.55 + 0.45 * np.sin(2 * np.pi * 4 * t)
    frames = np.stack(
        [0.2 * harmonics * syllables + 0.005 * rng.standard_normal(len(t)) for _ in range(channels)],
        axis=1,
    ).astype(np.float32)
    return frames[:, 0] if channels == 1 else frames

"""The episode's waveform, as peaks the Listen screen hands to the browser's waveform player (wavesurfer.js).

Computed here from the file the studio already downloaded, so the browser draws an episode of up to 90 minutes
without fetching and decoding all of its audio a second time (wavesurfer would otherwise decode the whole file
in the page, hundreds of MB of samples for a long episode). Read in blocks: memory stays flat however long.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

# Enough for a sharp waveform at any page width, few enough to keep the page small (a value is ~5 characters).
PEAKS_PER_SECOND = 50
MAX_PEAKS = 4000
# Lossless files first: they decode fastest and exactly; otherwise whatever the job has.
_SOURCE_PREFERENCE = ("wav", "flac", "mp3", "ogg", "opus")
_BLOCK_SECONDS = 10


@dataclass(frozen=True)
class Waveform:
    """`peaks[i]`: the loudest sample (0..1, relative to the episode's loudest) of the i-th equal slice."""

    duration: float
    peaks: tuple[float, ...]


def waveform_source(audio: Mapping[str, Path]) -> Path:
    """Which of an episode's files (by format) to read the waveform from."""
    return next(audio[fmt] for fmt in (*_SOURCE_PREFERENCE, *audio) if fmt in audio)


def read_waveform(path: Path) -> Waveform:
    """The waveform of the audio file at `path`, in `PEAKS_PER_SECOND` slices (at most `MAX_PEAKS`)."""
    info = sf.info(str(path))
    frames = info.frames
    if frames <= 0:
        return Waveform(0.0, ())
    duration = frames / info.samplerate
    count = min(MAX_PEAKS, frames, max(1, round(duration * PEAKS_PER_SECOND)))
    peaks = np.zeros(count, dtype=np.float32)
    offset = 0
    for block in sf.blocks(str(path), blocksize=info.samplerate * _BLOCK_SECONDS, dtype="float32", always_2d=True):
        magnitude = np.abs(block[: frames - offset]).max(axis=1)  # a compressed file may decode past its count
        if not len(magnitude):
            break
        first = offset * count // frames
        last = (offset + len(magnitude) - 1) * count // frames
        # slice b holds frames [ceil(b·frames/count), ceil((b+1)·frames/count)); every slice holds one at least
        starts = (np.arange(first, last + 1, dtype=np.int64) * frames + count - 1) // count - offset
        starts[0] = 0
        np.maximum(peaks[first : last + 1], np.maximum.reduceat(magnitude, starts), out=peaks[first : last + 1])
        offset += len(magnitude)
    loudest = float(peaks.max())
    if loudest > 0:
        peaks /= loudest
    return Waveform(duration, tuple(round(float(peak), 3) for peak in peaks))

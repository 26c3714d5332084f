"""The episode's audio formats: each one's name, how it is encoded, its media type, and what a second of it takes.

One table for every layer: the worker's encoder (`assembly.episode`), the api's schemas, download routes and
storage estimate, the CLI's output extensions and the studio's choices. `AudioFormat` is the same names as a
type for request bodies and route paths (`tests/test_assembly.py` holds the two equal).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tokenizer.rates import SAMPLE_RATE

AudioFormat = Literal["wav", "flac", "mp3", "ogg", "opus"]


@dataclass(frozen=True)
class AudioFormatSpec:
    name: str  # also the file extension, without its dot
    container: str  # soundfile's format
    subtype: str | None  # soundfile's subtype (None: the container's default)
    media_type: str
    # The most a second of mono 24 kHz audio takes in it: 16-bit PCM for the lossless formats (FLAC never more),
    # 128 kbit/s for the lossy ones (above what their encoders write at default quality).
    bytes_per_second: int


AUDIO_FORMATS: dict[str, AudioFormatSpec] = {
    spec.name: spec
    for spec in (
        AudioFormatSpec("wav", "WAV", "PCM_16", "audio/wav", 2 * SAMPLE_RATE),
        AudioFormatSpec("flac", "FLAC", "PCM_16", "audio/flac", 2 * SAMPLE_RATE),
        AudioFormatSpec("mp3", "MP3", "MPEG_LAYER_III", "audio/mpeg", 16_000),
        AudioFormatSpec("ogg", "OGG", "VORBIS", "audio/ogg", 16_000),
        AudioFormatSpec("opus", "OGG", "OPUS", "audio/ogg; codecs=opus", 16_000),
    )
}

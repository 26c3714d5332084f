"""The episode's audio formats: each one's name, how it is encoded (and at which bitrates), its media type, and what a
second of it takes.

One table for every layer: the worker's encoder (`assembly.episode`), the api's schemas, download routes and
storage estimate, the CLI's output extensions and the studio's choices. `AudioFormat` is the same names as a
type for request bodies and route paths (`tests/test_assembly.py` holds the two equal).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from core.audio_rates import SAMPLE_RATE

AudioFormat = Literal["wav", "flac", "mp3", "ogg", "opus"]
BitrateFormat = Literal["mp3", "opus"]  # the formats whose bitrate a job may choose (`AudioFormatSpec.bitrates`)


@dataclass(frozen=True)
class Bitrates:
    """The bitrates a job may ask of a lossy format, its default, and how libsndfile takes one for 24 kHz mono.

    libsndfile sets a bitrate as a compression level, 0 for the highest of its range and 1 for the lowest, in a
    straight line between (measured with libsndfile 1.2: MP3 at 128 kbit/s writes 129, Opus at 64 writes 66).
    """

    choices: tuple[int, ...]  # kbit/s
    default: int
    highest: int  # kbit/s at compression level 0
    lowest: int  # kbit/s at compression level 1
    mode: str | None  # libsndfile's bitrate mode ("CONSTANT"), or None for the encoder's own

    def compression_level(self, kbps: int) -> float:
        return (self.highest - kbps) / (self.highest - self.lowest)


@dataclass(frozen=True)
class AudioFormatSpec:
    name: str  # also the file extension, without its dot
    container: str  # soundfile's format
    subtype: str | None  # soundfile's subtype (None: the container's default)
    media_type: str
    # The most a second of mono 24 kHz audio takes in it: 16-bit PCM for the lossless formats (FLAC never more),
    # the highest bitrate a job may ask for the lossy ones (Vorbis's default quality writes less than 128 kbit/s).
    bytes_per_second: int
    bitrates: Bitrates | None = None  # None: not adjustable (lossless, or Vorbis at its default quality)

    def kbps(self, asked: Mapping[str, int]) -> int | None:
        """The bitrate this format is written at given a job's `kbps`: as asked, else its default (None: lossless
        or not adjustable)."""
        return None if self.bitrates is None else asked.get(self.name, self.bitrates.default)


AUDIO_FORMATS: dict[str, AudioFormatSpec] = {
    spec.name: spec
    for spec in (
        AudioFormatSpec("wav", "WAV", "PCM_16", "audio/wav", 2 * SAMPLE_RATE),
        AudioFormatSpec("flac", "FLAC", "PCM_16", "audio/flac", 2 * SAMPLE_RATE),
        # MPEG-2 Layer III at 24 kHz: 8 to 160 kbit/s; 128 is a publishing rate for spoken mono.
        AudioFormatSpec(
            "mp3",
            "MP3",
            "MPEG_LAYER_III",
            "audio/mpeg",
            20_000,
            Bitrates((48, 64, 96, 128, 160), 128, 160, 8, "CONSTANT"),
        ),
        AudioFormatSpec("ogg", "OGG", "VORBIS", "audio/ogg", 16_000),
        # Opus: 6 to 256 kbit/s; 64 is transparent for speech.
        AudioFormatSpec(
            "opus", "OGG", "OPUS", "audio/ogg; codecs=opus", 16_000, Bitrates((48, 64, 96, 128), 64, 256, 6, None)
        ),
    )
}
# The formats whose bitrate a job may choose, and the rates offered (`BitrateFormat` names the same).
BITRATES: dict[str, Bitrates] = {name: spec.bitrates for name, spec in AUDIO_FORMATS.items() if spec.bitrates}

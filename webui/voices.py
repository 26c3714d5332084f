"""The studio's rules about voices, apart from any screen: which voice a speaker uses, and which library voice
already holds a bundled example.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from api.schemas import VoiceView
from tokenizer.voice_prompt import VoicePromptError, load_voice_prompt

_SECONDS_TOLERANCE = 0.0005  # the api stores a voice's length rounded to the millisecond


class VoiceUse(Enum):
    """Where a speaker's voice comes from when the job is sent."""

    UPLOAD = "upload"  # the recording uploaded or recorded on the speaker's row
    LIBRARY = "library"  # the library voice picked on the row
    NONE = "none"
    UNUSABLE = "unusable"  # a recording was given, and the api's voice loader refuses it (`recording_problem`)


def voice_in_use(library_voice: str | None, upload: str | None) -> VoiceUse:
    """The voice a speaker's row sends: its own recording when it has one, else its library voice.

    The recording wins because it was given for this speaker alone, after the library was there to pick from;
    the library voice stays picked, so clearing the recording brings it back. A recording the api would refuse is
    `UNUSABLE`: nothing is sent for the speaker until it is replaced or cleared.
    """
    if upload:
        return VoiceUse.UNUSABLE if recording_problem(upload) else VoiceUse.UPLOAD
    if library_voice:
        return VoiceUse.LIBRARY
    return VoiceUse.NONE


@dataclass(frozen=True)
class RecordingShape:
    """What the api records of an upload's source (`VoiceView`'s fields), enough to tell two files apart."""

    seconds: float
    sample_rate: int
    channels: int


_RECORDINGS_REMEMBERED = 64


@functools.lru_cache(maxsize=_RECORDINGS_REMEMBERED)
def recording_problem(path: str) -> str | None:
    """Why the api would refuse this recording as a voice (silent, corrupt, too short, too long...), read with its
    own voice loader once per uploaded file; None when it takes it."""
    try:
        load_voice_prompt(path)
    except VoicePromptError as error:
        return str(error).replace(path, Path(path).name)
    return None


@functools.lru_cache(maxsize=_RECORDINGS_REMEMBERED)
def recording_shape(path: Path) -> RecordingShape:
    """The shape the api will record for `path`, read with the api's own voice loader (once per file, while it is
    among the last `_RECORDINGS_REMEMBERED` asked about: a studio that runs for months sees many uploads)."""
    prompt = load_voice_prompt(path)
    return RecordingShape(round(prompt.seconds, 3), prompt.original_sample_rate, prompt.original_channels)


def same_voice_in(voices: Sequence[VoiceView], name: str, shape: RecordingShape) -> VoiceView | None:
    """The library voice with this name made from a recording of this shape, if there is one.

    The bundled example buttons reuse it rather than upload the same file a second time; a voice that was
    renamed, or a different recording under the example's name, is not the example.
    """
    for voice in voices:
        if (
            voice.name == name
            and voice.original_sample_rate == shape.sample_rate
            and voice.original_channels == shape.channels
            and abs(voice.seconds - shape.seconds) < _SECONDS_TOLERANCE
        ):
            return voice
    return None

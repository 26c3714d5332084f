"""Which voice each speaker gets, from the keys a user gave them: one rule for the CLI's `--voice` and the api's
`voices`.

A key picks a speaker by name or number (`script_text.parser.find_speaker`); a key that picks none, or a second key
for a speaker that already has a voice, is refused with the reason (`unknown_speaker_message`,
`same_speaker_message`); the speakers left without a voice are listed, for the caller to fill (the CLI's bare files)
or refuse.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from script_text.parser import Speaker, find_speaker, same_speaker_message, unknown_speaker_message

_V = TypeVar("_V")


@dataclass(frozen=True)
class Refusal(Generic[_V]):
    """A key refused: the voice it came with, why, and whether it picks no speaker at all (else: one voiced already)."""

    key: str
    voice: _V
    why: str
    unknown_speaker: bool


@dataclass
class VoiceAssignment(Generic[_V]):
    """What the keys gave: each speaker's voice (by speaker index) and the key that gave it, the keys refused (in the
    order given), and the speakers still without a voice."""

    voices: dict[int, _V] = field(default_factory=dict)
    keys: dict[int, str] = field(default_factory=dict)
    refused: list[Refusal[_V]] = field(default_factory=list)
    missing: list[Speaker] = field(default_factory=list)


def assign_voices(speakers: Sequence[Speaker], keyed: Iterable[tuple[str, _V]]) -> VoiceAssignment[_V]:
    """Give each (key, voice) to the speaker its key picks; refuse a key that picks none or a speaker already voiced."""
    assignment: VoiceAssignment[_V] = VoiceAssignment()
    for key, voice in keyed:
        index = find_speaker(speakers, key)
        if index is None:
            assignment.refused.append(Refusal(key, voice, unknown_speaker_message(speakers, key), unknown_speaker=True))
        elif index in assignment.voices:
            why = same_speaker_message(speakers, assignment.keys[index], key)
            assignment.refused.append(Refusal(key, voice, why, unknown_speaker=False))
        else:
            assignment.voices[index], assignment.keys[index] = voice, key
    assignment.missing = [speaker for index, speaker in enumerate(speakers) if index not in assignment.voices]
    return assignment

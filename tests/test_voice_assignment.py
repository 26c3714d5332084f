"""One rule gives speakers their voices, for the CLI's `--voice` and the api's `voices` alike."""

from __future__ import annotations

from script_text.parser import parse_script
from script_text.voice_assignment import assign_voices

SPEAKERS = parse_script("Speaker 0: Welcome.\nSpeaker 1: Thanks.\nSpeaker 2: Hello.\n").speakers


def test_keys_pick_speakers_by_number_or_name_and_the_rest_are_missing() -> None:
    assignment = assign_voices(SPEAKERS, [("0", "a.wav"), ("Speaker 2", "c.wav")])
    assert assignment.voices == {0: "a.wav", 2: "c.wav"}
    assert assignment.keys == {0: "0", 2: "Speaker 2"}
    assert [speaker.name for speaker in assignment.missing] == ["Speaker 1"] and assignment.refused == []


def test_an_unknown_key_and_a_second_key_for_one_speaker_are_refused_in_order_with_why() -> None:
    assignment = assign_voices(SPEAKERS, [("3", "x.wav"), ("1", "b.wav"), ("speaker 1", "again.wav")])
    assert assignment.voices == {1: "b.wav"}
    unknown, twice = assignment.refused
    assert (unknown.key, unknown.voice, unknown.unknown_speaker) == ("3", "x.wav", True)
    assert "no Speaker 3" in unknown.why
    assert (twice.key, twice.voice, twice.unknown_speaker) == ("speaker 1", "again.wav", False)
    assert "the same speaker" in twice.why

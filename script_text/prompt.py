"""The VibeVoice prompt for one generation segment.

The text follows the format VibeVoice was trained on (and that transformers' chat template writes):
a system line, one voice sample per speaker, the speaker-tagged text, then the speech-start token.
Each voice sample appears as one audio placeholder that the processor widens to one token per
3200 samples of the recording. Speakers are numbered from 0 in the order of the voices given, as the
original processor did; the numbers only tie each line of text to its voice.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from core.audio_rates import FRAMES_PER_SECOND

SYSTEM_PROMPT = (
    " Transform the text provided by various speakers into speech output, "
    "utilizing the distinct voice of each respective speaker.\n"
)


@dataclass(frozen=True)
class SegmentText:
    """What one generation must say: (speaker, text) lines, speakers as indices into the script's speakers."""

    lines: tuple[tuple[int, str], ...]

    @property
    def speakers(self) -> tuple[int, ...]:
        """Script speaker indices in order of first appearance."""
        return tuple(dict.fromkeys(speaker for speaker, _ in self.lines))


def build_prompt_text(segment: SegmentText, audio_bos: str, audio_token: str, audio_eos: str) -> str:
    """The prompt string, with one audio placeholder per speaker of the segment."""
    numbers = {speaker: number for number, speaker in enumerate(segment.speakers)}
    parts = [SYSTEM_PROMPT, " Voice input:\n"]
    parts += [f" Speaker {numbers[speaker]}:{audio_bos}{audio_token}{audio_eos}\n" for speaker in segment.speakers]
    parts.append(" Text input:\n")
    parts += [f" Speaker {numbers[speaker]}: {text}\n" for speaker, text in segment.lines]
    parts.append(f" Speech output:\n{audio_bos}")
    return "".join(parts)


Voice = TypeVar("Voice")


def voice_samples_in_prompt_order(segment: SegmentText, voices: Mapping[int, Voice]) -> list[Voice]:
    """The voice recordings in the order their placeholders appear in the prompt."""
    missing = [speaker for speaker in segment.speakers if speaker not in voices]
    if missing:
        raise KeyError(f"no voice for speaker index {missing[0]}")
    return [voices[speaker] for speaker in segment.speakers]


def estimated_prompt_tokens(segment: SegmentText, voice_seconds: Mapping[int, float], chars_per_token: float) -> int:
    """About how many tokens the prompt of `segment` takes, without its tokenizer: its text at `chars_per_token`
    (a tokenizer's rate on English), plus a token per 7.5 Hz frame of each speaker's voice (`voice_seconds`)."""
    text = build_prompt_text(segment, "", "", "")
    frames = sum(math.ceil(voice_seconds[speaker] * FRAMES_PER_SECOND) for speaker in segment.speakers)
    return math.ceil(len(text) / chars_per_token) + frames + 3 * len(segment.speakers) + 1

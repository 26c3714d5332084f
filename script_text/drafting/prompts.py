"""What the drafting stage says to the LLM: the reply schema, the two system prompts, and the retry note.

Small instruct models follow a worked example better than a formal schema, so the prompts show the reply
format as a JSON example written with the real speaker names; `SCRIPT_JSON_SCHEMA` is the formal contract
that `replies.script_from_reply` enforces (and the documentation shows). Source text goes between `<<<` and
`>>>` so the model can tell the material from the instructions.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from script_text.drafting.chat import ChatMessage
from script_text.parser import MAX_PAUSE_SECONDS, MAX_SPEAKERS

MAX_TURNS = 2_000  # a 90-minute script at ~7 words per turn; more means the model is looping

SCRIPT_JSON_SCHEMA: dict[str, object] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "voxcast script",
    "type": "object",
    "required": ["turns"],
    "properties": {
        "turns": {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_TURNS,
            "items": {
                "oneOf": [
                    {
                        "type": "object",
                        "required": ["speaker", "text"],
                        "additionalProperties": False,
                        "properties": {
                            "speaker": {"type": "string", "minLength": 1, "maxLength": 40},
                            "text": {"type": "string", "minLength": 1},
                        },
                    },
                    {
                        "type": "object",
                        "required": ["pause"],
                        "additionalProperties": False,
                        "properties": {
                            "pause": {
                                "description": f'"800ms", "1.5s" or seconds, up to {MAX_PAUSE_SECONDS:g} s',
                                "type": ["string", "number"],
                            }
                        },
                    },
                ]
            },
        }
    },
}

NAME_RULE = (
    "a name starts with a letter and has only letters, digits, spaces and . ' - _ (at most 40 characters and 4 words)"
)
_JSON_ONLY = "Reply with a single JSON object and nothing else: no explanation, no code fence. Its form:"
_SPOKEN_TEXT = (
    'Every "text" is plain words to be read aloud: no markdown, no brackets, no stage directions, and no '
    "speaker name at its start."
)


def reply_example(names: Sequence[str]) -> str:
    """A one-line example reply with these speaker names (the first two, or the only one)."""
    first, second = names[0], names[1 % len(names)]
    return json.dumps(
        {
            "turns": [
                {"speaker": first, "text": f"What {first} says."},
                {"pause": "800ms"},
                {"speaker": second, "text": f"What {second} says next."},
            ]
        },
        ensure_ascii=False,
    )


def normalise_messages(transcript: str) -> list[ChatMessage]:
    """The conversation that asks for a rough transcript to be turned into a clean script."""
    system = "\n".join(
        [
            "You turn a rough transcript into a clean podcast script that a text-to-speech engine will read aloud.",
            "",
            _JSON_ONLY,
            reply_example(["Alice", "Bob"]),
            "",
            "Rules:",
            "- One item per turn, in the order the turns were spoken. Keep what each person says, in their own "
            "words; fix only obvious transcription slips.",
            "- Give each person one consistent name: the fullest plain name the transcript uses for them "
            f'(for example "Alice" for "ALICE", "alice" and "A."). At most {MAX_SPEAKERS} speakers.',
            f"- Speaker names: {NAME_RULE}.",
            "- Leave out timestamps, stage directions and sound descriptions such as (laughs), [crosstalk] or "
            '[music]. Where one marks a silence, put a pause item instead, from "300ms" to "3s"; a tag such as '
            '[pause: 1s] in the transcript becomes the pause item {"pause": "1s"}.',
            "- Leave out filler sounds (um, uh) and backchannels that carry no content (mm-hmm); keep short real "
            "interjections as turns of their own.",
            f"- {_SPOKEN_TEXT}",
        ]
    )
    user = f"Transcript:\n<<<\n{transcript}\n>>>\nReply with the JSON object only."
    return [ChatMessage("system", system), ChatMessage("user", user)]


def draft_messages(source: str, names: Sequence[str], minutes: float, words: int, tone: str) -> list[ChatMessage]:
    """The conversation that asks for a script about `source`, for these hosts, of about `words` words."""
    system = "\n".join(
        [
            "You write podcast scripts that a text-to-speech engine will read aloud.",
            "",
            _JSON_ONLY,
            reply_example(names),
            "",
            "Rules:",
            f"- {_cast(names)}",
            f"- Length: about {words} words of speech in all (about {minutes:g} minutes).",
            f"- Tone: {tone}.",
            "- Base everything on the source material the user gives: explain it, discuss it, question it. Do "
            "not invent facts, figures or quotes that it does not contain.",
            f"- {_SPOKEN_TEXT} No headings, lists, sound effects or URLs.",
            "- Turns of one to five sentences. Open with a short welcome and end with a short goodbye; a pause "
            "item may separate sections.",
        ]
    )
    user = f"Source material:\n<<<\n{source}\n>>>\nWrite the script now, as the JSON object only."
    return [ChatMessage("system", system), ChatMessage("user", user)]


def retry_message(problem: str) -> ChatMessage:
    """The note that sends a rejected reply back, naming what was wrong with it."""
    return ChatMessage(
        "user",
        f"Your reply was rejected: {problem}\nReply again with the complete, corrected JSON object only, "
        "following every rule.",
    )


def _cast(names: Sequence[str]) -> str:
    quoted = [json.dumps(name, ensure_ascii=False) for name in names]
    if len(names) == 1:
        return f'This is a monologue: every turn\'s "speaker" is {quoted[0]}.'
    listed = ", ".join(quoted[:-1]) + " and " + quoted[-1]
    return (
        f'The hosts are exactly {listed}: every turn\'s "speaker" is one of these names, spelled as here, and '
        "every host speaks. The hosts talk with each other: they ask questions, answer and build on each "
        "other's points."
    )

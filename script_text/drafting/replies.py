"""Reading an LLM reply as a script: find the JSON object, check it against the schema, parse it.

A reply is accepted only if `parse_script` accepts it, so a drafted script obeys exactly the rules a typed
one does (speakers, names, pauses, lengths). Every rejection is a `ReplyError` whose message is written
for the model as much as for the user: it goes back into the conversation when the stage retries (and what the user
is shown differs where the model's wording would read as noise).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from decimal import Decimal

from script_text.drafting.prompts import MAX_TURNS, reply_example
from script_text.parser import Pause, Script, ScriptError, Speaker, parse_script

MIN_KEPT_SHARE = 0.4  # a normalised transcript keeps at least this share of the transcript's words...
MAX_GROWTH = 1.5  # ...and has at most this many times as many (plus a little slack for short ones)
_GROWTH_SLACK_WORDS = 20

_TURN_KEYS = frozenset({"speaker", "text"})
_PAUSE_KEYS = frozenset({"pause"})


class ReplyError(ValueError):
    """A reply that is not an acceptable script; the message says what to fix. `shown` is what a person reads of it
    where the two differ: a JSON decoder's wording helps the model fix its reply and means nothing to a producer."""

    def __init__(self, message: str, shown: str | None = None) -> None:
        super().__init__(message)
        self.shown = shown or message


def script_from_reply(reply: str) -> Script:
    """The script in an LLM reply: its first JSON object, checked against the schema, through parse_script."""
    document = extract_json_object(reply)
    _check_schema(document)
    try:
        return parse_script(json.dumps(document, ensure_ascii=False))
    except ScriptError as error:
        raise ReplyError(error.message) from error


def extract_json_object(reply: str) -> dict[str, object]:
    """The JSON object that starts at the reply's first `{`, ignoring prose or a code fence around it.

    Only the first `{` is tried: one decode, linear in the reply's length, and the error it gives is the
    one worth feeding back (a later `{` would be an inner item, not the script).
    """
    start = reply.find("{")
    if start == -1:
        raise ReplyError(f"the reply has no JSON object; reply with one JSON object like {reply_example(['Alice'])}")
    try:
        document, _ = json.JSONDecoder().raw_decode(reply, start)
    except json.JSONDecodeError as error:
        raise ReplyError(
            f"the reply is not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})",
            shown="the reply was broken JSON, so no script could be read from it",
        ) from None
    except RecursionError:
        raise ReplyError("the reply's JSON is nested too deeply; a script is one object with a flat list") from None
    except ValueError:  # an integer longer than Python will convert
        raise ReplyError("the reply's JSON has a number too long to read") from None
    return document


def _check_schema(document: dict[str, object]) -> None:
    """Enforce prompts.SCRIPT_JSON_SCHEMA; parse_script then checks the values."""
    turns = document.get("turns")
    if not isinstance(turns, list) or not turns:
        raise ReplyError('the JSON object needs a non-empty "turns" list')
    if len(turns) > MAX_TURNS:
        raise ReplyError(f'"turns" has {len(turns):,} items; at most {MAX_TURNS:,} are allowed')
    for number, item in enumerate(turns, start=1):
        _check_item(item, f"turn #{number}")


def _check_item(item: object, where: str) -> None:
    if not isinstance(item, dict):
        raise ReplyError(f'{where} is not an object; each item is {{"speaker": ..., "text": ...}} or {{"pause": ...}}')
    keys = frozenset(item)
    if keys == _PAUSE_KEYS:
        return
    if keys != _TURN_KEYS:
        shown = ", ".join(json.dumps(key) for key in sorted(keys)) or "no keys"
        raise ReplyError(f'{where} has {shown}; a turn has exactly "speaker" and "text", a pause only "pause"')
    if not isinstance(item["speaker"], str) or not item["speaker"].strip():
        raise ReplyError(f'{where}: "speaker" must be the speaker\'s name as a string')
    if not isinstance(item["text"], str) or not item["text"].strip():
        raise ReplyError(f'{where}: "text" must be a non-empty string of what is said')


def check_cast(script: Script, names: Sequence[str]) -> Script:
    """The script with its speakers spelled as `names`, if they are exactly those names (any case)."""
    wanted = {name.casefold(): name for name in names}
    found = [speaker.name for speaker in script.speakers]
    found_folded = {name.casefold() for name in found}
    strangers = [name for name in found if name.casefold() not in wanted]
    silent = [name for name in names if name.casefold() not in found_folded]
    if strangers or silent:
        problems = [f"{_listed(strangers)} {'is' if len(strangers) == 1 else 'are'} not a host"] if strangers else []
        problems += [f"{_listed(silent)} never {'speaks' if len(silent) == 1 else 'speak'}"] if silent else []
        raise ReplyError(f"the speakers must be exactly {_listed(list(names))}; " + " and ".join(problems))
    speakers = tuple(Speaker(key=wanted[name.casefold()], name=wanted[name.casefold()]) for name in found)
    return Script(speakers=speakers, items=script.items)


def check_kept_words(script: Script, transcript_words: int) -> None:
    """Refuse a normalised script that dropped most of the transcript, or invented much more."""
    words = sum(len(turn.text.split()) for turn in script.turns)
    if words < transcript_words * MIN_KEPT_SHARE:
        raise ReplyError(
            f"the script has {words} words but the transcript has about {transcript_words}; "
            "keep everything that is said"
        )
    if words > transcript_words * MAX_GROWTH + _GROWTH_SLACK_WORDS:
        raise ReplyError(
            f"the script has {words} words but the transcript has only about {transcript_words}; "
            "add nothing that was not said"
        )


def is_speaker_label(text: str) -> bool:
    """Whether parse_script reads `text` as a speaker (a name, or `Speaker N`), in any case."""
    try:
        speakers = parse_script(f"{text}: -").speakers
    except ScriptError:
        return False
    return speakers[0].name.casefold() == text.casefold()


def script_to_text(script: Script) -> str:
    """The script as `Name: text` lines and `[pause: 0.8s]` lines, which parse_script reads back as is."""
    lines = []
    for item in script.items:
        if isinstance(item, Pause):
            lines.append(f"[pause: {format(Decimal(repr(item.seconds)).normalize(), 'f')}s]")
        else:
            lines.append(f"{script.speakers[item.speaker].name}: {item.text}")
    return "\n".join(lines) + "\n"


def _listed(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]

"""Parse a speaker-tagged podcast script into speakers, turns and pauses.

Users paste scripts from many sources, so the parser accepts four formats and
works out which one it has been given:

* ``Speaker 1: Hello`` -- VibeVoice's own format. Any number 0..99 is a label
  (``Speaker 07`` is ``Speaker 7``; "speaker" in any case, the space before
  the number optional, text may follow the colon directly). Other numbers,
  ``Speaker -1`` included, are refused at their line as out of range.
* ``Alice: Hello`` -- a name, then a colon and a space (or the end of the line).
* ``[Alice] Hello`` -- a name in brackets at the start of a line.
* JSON, when the first non-blank character is ``{``::

      {"turns": [{"speaker": 1, "text": "Hello"},
                 {"pause": "800ms"},
                 {"speaker": "Alice", "text": "Hi"}]}

  An integer speaker (or a string of digits) means ``Speaker N``; a pause is
  a string such as ``"800ms"``/``"1.5s"`` or a number of seconds.

Rules for the text formats:

* A name starts with a letter and holds only letters, digits, spaces and
  ``. ' - _``; it has at most 40 characters and 4 words. Anything else before
  a colon is not a tag, so a sentence such as "As the report puts it: ..."
  stays text, and so do ``https://...`` and ``Re:x`` (no space after the
  colon). The flip side: a continuation line that opens with a short phrase
  and a colon ("Note: ...") does start a new speaker; keep such text on the
  line of its tag.
* The first speaker tag fixes the style. Colon style (``Speaker N:`` and
  ``Name:``, which may be mixed) treats a line starting with ``[Word]`` as
  text; bracket style treats a line starting with ``Word:`` as text.
* Speakers are numbered in order of first appearance; at most 4 distinct
  speakers. Later tags match names case-insensitively. A speaker's voice key
  is the number for ``Speaker N`` and the name as first written otherwise
  (see `find_speaker` for every key that picks a speaker).
* A line without a tag continues the current turn (joined with one space).
  Blank lines are ignored; only the next tag ends a turn. Non-blank text
  before the first tag is an error, as is a tag that never gets any text.
* Pause tags such as ``[pause: 800ms]``, ``[pause 1.5s]`` or ``[PAUSE:2 s]``
  (more than 0 and at most 30 seconds) may stand on their own line or inside
  a turn, which they split into two turns of the same speaker. A bracket that
  opens with "pause" and then a colon or a number must be a valid pause tag;
  ``[pause]`` without a length is rejected too. Other brackets, such as
  ``[laughs]``, stay in the text.
* Text is normalised: curly quotes and primes become ASCII quotes, unusual
  spaces become spaces, runs of whitespace collapse to one space,
  zero-width, bidirectional-override (U+202A-U+202E, U+2066-U+2069) and
  control characters (C0 but tab and line endings, DEL, C1) are dropped
  without a word, and any line ending works. They carry no speech,
  and dropping them here keeps them out of everything downstream: the
  model's prompt, transcripts, and messages stored in the database (whose
  PostgreSQL text columns refuse NUL).
* A script to generate must give every turn something to say aloud
  (`check_speakable`): a turn of only emoji, punctuation or symbols is
  refused at its line. `parse_script` itself accepts such turns, since
  callers also parse stand-in text such as "Name: -" to read a label.

Every regular expression here either has a bounded length or no two
quantifiers competing for the same characters, so parsing stays linear even
on hostile input of MAX_SCRIPT_CHARS characters.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from core.text_rules import BIDI_CONTROLS
from script_text.speech_text import has_words_to_say

MAX_SPEAKERS = 4
MAX_SCRIPT_CHARS = 200_000  # roughly twice a 90-minute script
MAX_PAUSE_SECONDS = 30.0

_MAX_NAME_CHARS = 40
_MAX_NAME_WORDS = 4

_TAG_FORMS = (
    "start each turn with 'Speaker 1: ...', 'Name: ...' or '[Name] ...', "
    'or give a JSON object like {"turns": [{"speaker": 1, "text": "Hello"}]}'
)
_JSON_SHAPE = 'expected {"turns": [{"speaker": 1, "text": "Hello"}, {"pause": "800ms"}, ...]}'
_PAUSE_FORMS = "write it like [pause: 800ms] or [pause: 1.5s]"
_NAME_RULE = (
    "a name starts with a letter, uses only letters, digits, spaces and . ' - _, "
    f"and has at most {_MAX_NAME_CHARS} characters and {_MAX_NAME_WORDS} words"
)


class ScriptError(ValueError):
    """A rejected script.

    `line` is the 1-based line in the source (None when it concerns the whole script),
    so a UI can point at it; str() reads "line 7: what is wrong; what is allowed".
    """

    def __init__(self, message: str, line: int | None = None) -> None:
        self.message = message
        self.line = line
        super().__init__(message if line is None else f"line {line}: {message}")

    def __reduce__(self) -> tuple[type[ScriptError], tuple[str, int | None]]:
        # Errors travel between worker processes; keep `line` when pickled.
        return type(self), (self.message, self.line)


@dataclass(frozen=True)
class Speaker:
    """A distinct voice in the script."""

    key: str  # what a user types to pick a voice: "1" for "Speaker 1", else the name
    name: str  # display name: "Speaker 1" or "Alice"


@dataclass(frozen=True)
class Turn:
    """Text that one speaker says without interruption."""

    speaker: int  # index into Script.speakers
    text: str  # cleaned, never empty, no pause tags
    line: int  # 1-based source line where this turn starts


@dataclass(frozen=True)
class Pause:
    """Silence between turns."""

    seconds: float
    line: int


@dataclass(frozen=True)
class Script:
    """A parsed script: its speakers in order of first appearance and its items in script order."""

    speakers: tuple[Speaker, ...]
    items: tuple[Turn | Pause, ...]

    @property
    def turns(self) -> tuple[Turn, ...]:
        """The Turn items only, for callers that ignore pauses."""
        return tuple(item for item in self.items if isinstance(item, Turn))


def parse_script(text: str) -> Script:
    """Parse a script in any accepted format; raise ScriptError saying where and what is allowed."""
    if len(text) > MAX_SCRIPT_CHARS:
        raise ScriptError(f"the script is {len(text):,} characters long; the limit is {MAX_SCRIPT_CHARS:,} characters")
    source = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    if source.lstrip().startswith("{"):
        return _parse_json(source)
    return _parse_lines(source)


@dataclass(frozen=True)
class ScriptWarning:
    """Something the parser accepted that is often a typo; shown beside its line, it blocks nothing."""

    line: int
    message: str


# One-word labels that open a note rather than a person's turn ("Note: check the figures").
_NOT_A_PERSON = frozenset(
    """
    note notes nb ps warning caution update edit summary recap question answer example tip hint source sources
    reference link title chapter section segment part topic intro outro disclaimer reminder todo fixme aside
    """.split()
)


def script_warnings(text: str, script: Script) -> tuple[ScriptWarning, ...]:
    """What in `text` (which parsed as `script`) is likely a mistake, in line order:

    - a line without a tag in the middle of the script, which joins the turn before it (once per turn);
    - a one-word label such as `Note:` read as a speaker who speaks once;
    - numbered speakers with a gap (`Speaker 5` beside Speaker 1 and 2), which makes one more speaker.
    """
    source = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    found = [] if source.lstrip().startswith("{") else _joined_lines(source)
    turns_by_speaker: dict[int, list[Turn]] = {}
    for turn in script.turns:
        turns_by_speaker.setdefault(turn.speaker, []).append(turn)
    for index, speaker in enumerate(script.speakers):
        spoken = turns_by_speaker.get(index, [])
        if len(spoken) == 1 and speaker.name.casefold().rstrip(".") in _NOT_A_PERSON:
            found.append(
                ScriptWarning(
                    spoken[0].line,
                    f"'{speaker.name}:' is read as a speaker named {speaker.name}, who speaks only here; if it is part "
                    "of the turn before, join it to that line or reword it so it does not start with 'Word:'",
                )
            )
    found += _numbering_gaps(script, turns_by_speaker)
    return tuple(sorted(found, key=lambda warning: warning.line))


def _joined_lines(source: str) -> list[ScriptWarning]:
    """The first untagged line of each turn that has one (a turn's text may run over lines; often it should not)."""
    warnings = []
    style: _Style | None = None
    turn: tuple[int, str] | None = None  # the open turn's first line and speaker
    warned = False
    for number, raw in enumerate(source.split("\n"), start=1):
        line = _clean(raw)
        if not line:
            continue
        tag = _read_tag(line, number, style)
        if tag is not None:
            style, turn, warned = tag.style, (number, tag.speaker.name), False
        elif turn is not None and not warned and _PAUSE_TAG.sub("", line).strip():
            warnings.append(
                ScriptWarning(
                    number,
                    f"this line has no speaker tag, so it continues {turn[1]}'s turn from line {turn[0]}; if someone "
                    "else speaks here, start the line with their tag",
                )
            )
            warned = True
    return warnings


def _numbering_gaps(script: Script, turns_by_speaker: dict[int, list[Turn]]) -> list[ScriptWarning]:
    """A numbered speaker after a gap in the numbers (Speaker 1, Speaker 2, then Speaker 5)."""
    numbered = sorted(
        (int(speaker.key), index) for index, speaker in enumerate(script.speakers) if speaker.key.isdigit()
    )
    warnings = []
    for (before, _), (number, index) in zip(numbered, numbered[1:], strict=False):
        if number > before + 1 and index in turns_by_speaker:
            others = _and_list([f"Speaker {n}" for n, i in numbered if i != index])
            warnings.append(
                ScriptWarning(
                    turns_by_speaker[index][0].line,
                    f"Speaker {number} is a speaker of its own beside {others}; if it is one of them, fix the number",
                )
            )
    return warnings


def check_speakable(script: Script) -> None:
    """Raise ScriptError at the first turn that gives its voice nothing to say aloud (see `nothing_to_say`).

    Everything that generates a script checks this after parsing: VibeVoice, given only emoji or punctuation,
    makes up sound rather than saying nothing.
    """
    for turn in script.turns:
        if (problem := nothing_to_say(turn.text)) is not None:
            raise ScriptError(
                f"{script.speakers[turn.speaker].name}'s turn {problem}; write the words to speak, "
                "or remove the turn (use a pause for silence)",
                turn.line,
            )


# --- text normalisation -------------------------------------------------------

_CLEAN_TABLE = str.maketrans(
    {
        **dict.fromkeys([*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20)]),  # C0 but \t \n \r
        **dict.fromkeys(range(0x7F, 0xA0)),  # DEL and C1
        **dict.fromkeys([0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF]),  # zero-width
        # Bidirectional embeddings, overrides and isolates: they reorder how text shows, never what is said.
        **dict.fromkeys(map(ord, BIDI_CONTROLS)),
        **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f\u2033", '"'),
    }
)


def _clean(text: str) -> str:
    """Normalise characters that TTS and tag matching should not have to care about."""
    return " ".join(text.translate(_CLEAN_TABLE).split())


def _excerpt(text: str, limit: int = 40) -> str:
    """Shorten user text quoted in an error so a hostile input cannot flood the message."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def nothing_to_say(text: str) -> str | None:
    """None when `text` gives a voice something to say; otherwise why not, as the rest of a sentence.

    Speakable means at least one Unicode letter or number (`str.isalnum`) once control characters are dropped
    and `normalize_for_speech` has spelled out what it reads ("%" is "percent", "$5" "five dollars"; see
    `has_words_to_say`). Emoji, punctuation and other symbols alone give VibeVoice nothing to read, so it
    would make up sound. The answer reads "has nothing to say aloud: '🎉🎉' is only emoji, symbols or
    punctuation (no letter or number)", for a caller to put after its subject ("Alice's turn", "input").
    """
    cleaned = _clean(text)
    if not cleaned:
        return "has nothing to say aloud: only spaces or control characters"
    if has_words_to_say(cleaned):
        return None
    return (
        f"has nothing to say aloud: {_excerpt(cleaned)!r} is only emoji, symbols or punctuation (no letter or number)"
    )


# --- speakers -------------------------------------------------------------------

# "Speaker -1" is a number out of range, not a name with a hyphen ("Speaker-1" without the space stays a name).
_NUMBERED = re.compile(r"speaker ?(?P<number>[0-9]+)|speaker (?P<negative>-[0-9]+)", re.IGNORECASE)
_NAME = re.compile(r"[^\W\d_][\w .'-]*")


def _numbered_speaker(digits: str, line: int, where: str = "") -> Speaker:
    """`Speaker N` for the digits as written; leading zeros do not make a new speaker."""
    number = digits.lstrip("0") or "0"
    if digits.startswith("-") or len(number) > 2:
        raise ScriptError(
            f"{where}speaker number {_excerpt(digits)} is out of range; use Speaker 0 to Speaker 99",
            line,
        )
    return Speaker(key=number, name=f"Speaker {number}")


def _is_name(label: str) -> bool:
    """Whether a cleaned label is short and plain enough to be a speaker name rather than prose."""
    return (
        _NAME.fullmatch(label) is not None and len(label) <= _MAX_NAME_CHARS and len(label.split()) <= _MAX_NAME_WORDS
    )


def _speaker_from_label(label: str, line: int, where: str = "") -> Speaker | None:
    """The speaker a cleaned tag label names, or None when the label is not a speaker."""
    if numbered := _NUMBERED.fullmatch(label):
        return _numbered_speaker(numbered["number"] or numbered["negative"], line, where)
    if _is_name(label):
        return Speaker(key=label, name=label)
    return None


# --- pauses ---------------------------------------------------------------------

# "[pause" then a colon or a number marks a pause tag; "[pauses]" or "[pause for effect]" do not.
_PAUSE_TAG = re.compile(r"\[ ?pause(?P<body>(?: ?:| ?[-+.\d])[^\[\]]*)? ?\]", re.IGNORECASE)
_DURATION = re.compile(r"(?P<number>\d+(?:\.\d+)?|\.\d+) ?(?P<unit>ms|s)", re.IGNORECASE)


def _duration_seconds(text: str) -> float | None:
    """Seconds in a duration like '800ms' or '1.5 s', or None when it is not one."""
    match = _DURATION.fullmatch(text)
    if match is None:
        return None
    divisor = 1000 if match["unit"].lower() == "ms" else 1
    return float(match["number"]) / divisor


def _checked_pause(seconds: float, shown: str, line: int, where: str = "") -> Pause:
    """A Pause, after checking that its length is one the renderer accepts."""
    if not 0 < seconds <= MAX_PAUSE_SECONDS:
        raise ScriptError(
            f"{where}pause {shown} is out of range; a pause must be longer than 0 s "
            f"and at most {MAX_PAUSE_SECONDS:g} s",
            line,
        )
    return Pause(seconds=seconds, line=line)


def _pause_from_tag(tag: re.Match[str], line: int) -> Pause:
    """The Pause a `[pause ...]` tag asks for."""
    body = (tag["body"] or "").strip().removeprefix(":").strip()
    seconds = _duration_seconds(body)
    if seconds is None:
        raise ScriptError(f"cannot read the pause {_excerpt(tag[0])}; {_PAUSE_FORMS}", line)
    return _checked_pause(seconds, _excerpt(tag[0]), line)


def _split_pauses(text: str, line: int) -> list[str | Pause]:
    """Cut cleaned text at its pause tags into non-empty text pieces and Pauses, in order."""
    pieces: list[str | Pause] = []
    start = 0
    for tag in _PAUSE_TAG.finditer(text):
        pieces += [text[start : tag.start()].strip(), _pause_from_tag(tag, line)]
        start = tag.end()
    pieces.append(text[start:].strip())
    return [piece for piece in pieces if not isinstance(piece, str) or piece]


# --- building a script ------------------------------------------------------------


class _ScriptBuilder:
    """Collects speakers, turns and pauses in order, enforcing the rules every format shares."""

    def __init__(self) -> None:
        self._speakers: list[Speaker] = []
        self._items: list[Turn | Pause] = []
        self._speaker: int | None = None  # speaker of the open turn
        self._if_empty = ""  # error for an open turn that never got text
        self._tag_line = 0
        self._tag_has_text = False
        self._parts: list[str] = []  # text of the open turn since the last pause
        self._parts_line = 0

    def start_turn(self, speaker: Speaker, line: int, if_empty: str) -> None:
        """Close the open turn and open one; `if_empty` is the error should it get no text."""
        self._end_turn()
        self._speaker = self._speaker_index(speaker, line)
        self._if_empty = if_empty
        self._tag_line = line
        self._tag_has_text = False

    def add_text(self, text: str, line: int) -> None:
        """Add cleaned text from `line` to the open turn, splitting it at pause tags."""
        for piece in _split_pauses(text, line):
            if isinstance(piece, Pause):
                self.add_pause(piece)
            elif self._speaker is None:
                raise ScriptError(f"text before the first speaker tag; {_TAG_FORMS}", line)
            else:
                if not self._parts:
                    self._parts_line = line
                self._parts.append(piece)

    def add_pause(self, pause: Pause) -> None:
        """Add a pause; text that follows it becomes a new turn of the same speaker."""
        self._flush()
        self._items.append(pause)

    def finish(self) -> Script:
        """The finished Script, once the last turn is checked and there is at least one turn."""
        self._end_turn()
        if self._speaker is None:
            raise ScriptError("the script has pauses but no turns; write one turn per line like 'Speaker 1: Hello'")
        return Script(speakers=tuple(self._speakers), items=tuple(self._items))

    def _speaker_index(self, speaker: Speaker, line: int) -> int:
        """Index of `speaker`, adding it if new; names match whatever their case."""
        for index, known in enumerate(self._speakers):
            if known.key.casefold() == speaker.key.casefold():
                return index
        if len(self._speakers) == MAX_SPEAKERS:
            found = ", ".join(known.name for known in self._speakers)
            raise ScriptError(
                f"{speaker.name} would be a 5th speaker; a script may have at most "
                f"{MAX_SPEAKERS} speakers and this one already has {found}",
                line,
            )
        self._speakers.append(speaker)
        return len(self._speakers) - 1

    def _flush(self) -> None:
        """Turn the text collected since the last pause into a Turn."""
        if self._parts and self._speaker is not None:
            self._items.append(Turn(self._speaker, " ".join(self._parts), self._parts_line))
            self._tag_has_text = True
        self._parts = []

    def _end_turn(self) -> None:
        """Close the open turn, rejecting its tag if it never got any text."""
        self._flush()
        if self._speaker is not None and not self._tag_has_text:
            raise ScriptError(self._if_empty, self._tag_line)


# --- text formats -------------------------------------------------------------------

_Style = Literal["colon", "bracket"]

# Labels are bounded (name + a space), so a failed match costs at most ~42 steps.
_COLON_TAG = re.compile(r"(?P<label>[^:]{1,42}):")
_BRACKET_TAG = re.compile(r"\[(?P<label>[^\[\]]{1,42})\]")


@dataclass(frozen=True)
class _Tag:
    """A speaker tag at the start of a line."""

    style: _Style
    speaker: Speaker
    written: str  # the tag as typed, for error messages
    rest: str  # the line after the tag


def _colon_tag(line: str, number: int) -> _Tag | None:
    """`Speaker N:` or `Name: ` at the start of a cleaned line."""
    match = _COLON_TAG.match(line)
    if match is None:
        return None
    label, rest = match["label"].strip(), line[match.end() :]
    if rest and not rest.startswith(" ") and not _NUMBERED.fullmatch(label):
        return None  # "https://...", "Re:x": a name tag needs a space after its colon
    speaker = _speaker_from_label(label, number)
    return None if speaker is None else _Tag("colon", speaker, match[0], rest)


def _bracket_tag(line: str, number: int) -> _Tag | None:
    """`[Name]` at the start of a cleaned line; a pause tag is never a name."""
    match = _BRACKET_TAG.match(line)
    if match is None or _PAUSE_TAG.match(line):
        return None
    speaker = _speaker_from_label(match["label"].strip(), number)
    return None if speaker is None else _Tag("bracket", speaker, match[0], line[match.end() :])


def _read_tag(line: str, number: int, style: _Style | None) -> _Tag | None:
    """The speaker tag opening a cleaned line, in the script's style once the first tag fixed it."""
    if style != "bracket" and (tag := _colon_tag(line, number)):
        return tag
    if style != "colon":
        return _bracket_tag(line, number)
    return None


def _parse_lines(source: str) -> Script:
    """Parse the line-based formats; each tag opens a turn, other lines continue it."""
    lines = [_clean(line) for line in source.split("\n")]
    if not any(lines):
        raise ScriptError("the script is empty; write one turn per line like 'Speaker 1: Hello'")
    builder = _ScriptBuilder()
    style: _Style | None = None
    for number, line in enumerate(lines, start=1):
        if not line:
            continue
        tag = _read_tag(line, number, style)
        if tag is not None:
            style = tag.style
            builder.start_turn(
                tag.speaker,
                number,
                f"{tag.written!r} has no text; write what {tag.speaker.name} says "
                "after the tag or on the lines below it",
            )
            line = tag.rest
        builder.add_text(line, number)
    return builder.finish()


# --- JSON ---------------------------------------------------------------------------


def _parse_json(source: str) -> Script:
    """Parse the JSON format, reporting errors at the line of the offending item."""
    document = _load_json(source)
    turns = document.get("turns")
    if not isinstance(turns, list) or not turns:
        raise ScriptError(f'the JSON object needs a non-empty "turns" list; {_JSON_SHAPE}')
    builder = _ScriptBuilder()
    lines = _json_turn_lines(source)
    for number, (item, line) in enumerate(zip(turns, lines, strict=True), start=1):
        _add_json_item(builder, item, f"turn #{number}", line)
    return builder.finish()


def _load_json(source: str) -> dict[str, object]:
    """Decode the document; an object, since parse_script only sends text starting with '{'."""
    try:
        return json.loads(source)
    except json.JSONDecodeError as err:
        raise ScriptError(f"invalid JSON at column {err.colno}: {err.msg}; {_JSON_SHAPE}", err.lineno) from err
    except RecursionError as err:
        raise ScriptError(f"the JSON is nested too deeply; {_JSON_SHAPE}") from err
    except ValueError as err:  # an integer longer than Python will convert
        raise ScriptError(f"the JSON has a number too long to read; {_JSON_SHAPE}") from err


def _add_json_item(builder: _ScriptBuilder, item: object, where: str, line: int) -> None:
    """Add one item of the "turns" list: a turn or a pause."""
    if not isinstance(item, dict):
        raise ScriptError(
            f"{where} is {_describe_json(item)}; each item must be an object like "
            '{"speaker": 1, "text": "Hello"} or {"pause": "800ms"}',
            line,
        )
    if "pause" in item:
        if "text" in item or "speaker" in item:
            raise ScriptError(
                f'{where} has both "pause" and a turn\'s keys; put the pause in its own item like {{"pause": "800ms"}}',
                line,
            )
        builder.add_pause(_json_pause(item["pause"], where, line))
        return
    speaker = _json_speaker(item.get("speaker"), where, line)
    text = item.get("text")
    if not isinstance(text, str):
        raise ScriptError(
            f'{where} has text {_describe_json(text)}; "text" must be a string of what is said',
            line,
        )
    builder.start_turn(speaker, line, f'{where} has no text; "text" must say something')
    builder.add_text(_clean(text), line)


def _json_speaker(value: object, where: str, line: int) -> Speaker:
    """The speaker of a JSON turn: a number 0..99, "Speaker N", or a name."""
    speaker = None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        speaker = _numbered_speaker(str(value), line, f"{where}: ")
    elif isinstance(value, str):
        label = _clean(value)
        if label.isascii() and label.isdigit():
            speaker = _numbered_speaker(label, line, f"{where}: ")
        else:
            speaker = _speaker_from_label(label, line, f"{where}: ")
    if speaker is None:
        raise ScriptError(
            f'{where} has speaker {_describe_json(value)}; "speaker" must be a number '
            f"from 0 to 99 or a name ({_NAME_RULE})",
            line,
        )
    return speaker


def _json_pause(value: object, where: str, line: int) -> Pause:
    """A JSON pause: a number of seconds or a duration string like "800ms"."""
    seconds = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _duration_seconds(_clean(value))
    if seconds is None:
        raise ScriptError(
            f'{where} has pause {_describe_json(value)}; "pause" must be a number of '
            'seconds or a string like "800ms" or "1.5s"',
            line,
        )
    return _checked_pause(seconds, _describe_json(value), line, where=f"{where}: ")


def _describe_json(value: object) -> str:
    """A short rendering of a JSON value for an error message."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return _excerpt(json.dumps(value)) if value is not None else "missing or null"


def _skip_space(source: str, pos: int) -> int:
    """Offset of the first character at or after `pos` that is not JSON whitespace."""
    while pos < len(source) and source[pos] in " \t\n\r":
        pos += 1
    return pos


def _json_turn_lines(source: str) -> list[int]:
    """1-based line of each item in the top-level "turns" list of an already decoded document.

    json.loads keeps no positions, so this walks the top-level object once more
    with raw_decode. Like json.loads, it lets the last "turns" key win.
    """
    decoder = json.JSONDecoder()
    offsets: list[int] = []
    pos = _skip_space(source, _skip_space(source, 0) + 1)  # just inside the "{"
    while source[pos] != "}":
        key, pos = decoder.raw_decode(source, pos)
        pos = _skip_space(source, _skip_space(source, pos) + 1)  # past the ":"
        if key == "turns" and source[pos] == "[":
            offsets, pos = _json_array_offsets(source, pos, decoder)
        else:
            pos = decoder.raw_decode(source, pos)[1]
        pos = _skip_space(source, pos)
        if source[pos] == ",":
            pos = _skip_space(source, pos + 1)
    return _line_numbers(source, offsets)


def _json_array_offsets(source: str, pos: int, decoder: json.JSONDecoder) -> tuple[list[int], int]:
    """Offsets of the items of the JSON array opening at `pos`, and the offset just past it."""
    offsets: list[int] = []
    pos = _skip_space(source, pos + 1)
    while source[pos] != "]":
        offsets.append(pos)
        pos = _skip_space(source, decoder.raw_decode(source, pos)[1])
        if source[pos] == ",":
            pos = _skip_space(source, pos + 1)
    return offsets, pos + 1


def _line_numbers(source: str, offsets: list[int]) -> list[int]:
    """1-based lines of ascending offsets, counting newlines only once overall."""
    lines: list[int] = []
    line, counted = 1, 0
    for offset in offsets:
        line += source.count("\n", counted, offset)
        counted = offset
        lines.append(line)
    return lines


# --- voice keys -----------------------------------------------------------------------

_KeyMeaning = Literal["number", "name", "order"]


def find_speaker(speakers: Sequence[Speaker], key: str) -> int | None:
    """The index of the speaker a user means by the voice key `key`, or None when no speaker fits.

    A key picks a speaker by its name (any case, spaces normalised; "Speaker 07" is "Speaker 7"), or by a
    number: the N of "Speaker N" as the script writes it. Only in a script without numbered speakers does a
    number count speakers in order of first appearance, from 1: where the script numbers its speakers,
    "1" always means Speaker 1, never the first speaker (which may be Speaker 0).
    """
    found = _match_speaker(speakers, key)
    return None if found is None else found[0]


def unknown_speaker_message(speakers: Sequence[Speaker], key: str) -> str:
    """Why no speaker answers to voice key `key`, the keys that do, and how a number picks a speaker."""
    folded = _folded_key(key)
    number = _key_number(folded)
    numbered = _numbers_speakers(speakers)
    if number is not None and numbered:
        missing = f"Speaker {number}"
    elif _NUMBERED.fullmatch(folded):
        missing = folded.capitalize()  # "Speaker 5"
    else:
        missing = f"speaker {_excerpt(key)!r}"
    keys = _quoted_list([speaker.key for speaker in speakers])
    if numbered:
        message = (
            f"the script has no {missing}; its speakers are {_names(speakers)} (voice keys {keys}, or their names)"
        )
        if number is not None:
            message += '; voice key N means "Speaker N" as written in the script, not the Nth speaker'
        return message
    order = _quoted_list([str(position) for position in range(1, len(speakers) + 1)])
    return (
        f"the script has no {missing}; its speakers are {_names(speakers)} "
        f"(voice keys {keys}, or {order} in order of first appearance)"
    )


def same_speaker_message(speakers: Sequence[Speaker], first_key: str, second_key: str) -> str:
    """Why two voice keys (each known to pick a speaker) pick the same one, for refusing the second voice."""
    first, second = _match_speaker(speakers, first_key), _match_speaker(speakers, second_key)
    assert first is not None and second is not None and first[0] == second[0], "only for keys of one speaker"
    speaker = speakers[first[0]].name
    if first_key == second_key:
        return f'{speaker} is given two voices under "{second_key}"; give each speaker one voice'
    if first[1] == second[1]:
        why = _SAME_MEANING[first[1]]
    else:
        why = f'"{first_key}" is its {_MEANINGS[first[1]]}, "{second_key}" its {_MEANINGS[second[1]]}'
    return f'"{first_key}" and "{second_key}" are the same speaker, {speaker} ({why}); give each speaker one voice'


_MEANINGS: dict[_KeyMeaning, str] = {"number": "number", "name": "name", "order": "place in order of first appearance"}
_SAME_MEANING: dict[_KeyMeaning, str] = {
    "number": "leading zeros do not change a number",
    "name": "names match whatever their case or spacing",
    "order": "leading zeros do not change a number",
}


def _match_speaker(speakers: Sequence[Speaker], key: str) -> tuple[int, _KeyMeaning] | None:
    """The index of the speaker `key` picks and what the key is to it (see `find_speaker`)."""
    folded = _folded_key(key)
    number = _key_number(folded)
    for index, speaker in enumerate(speakers):
        if number is not None and speaker.key == number:
            return index, "number"
        if folded == speaker.name.casefold():
            return index, "name"
    if number is not None and not _numbers_speakers(speakers) and 1 <= int(number) <= len(speakers):
        return int(number) - 1, "order"
    return None


def _folded_key(key: str) -> str:
    """A voice key with its spaces normalised and its case folded; "speaker 07" becomes "speaker 7"."""
    folded = " ".join(key.split()).casefold()
    if (numbered := _NUMBERED.fullmatch(folded)) and numbered["number"] is not None:
        return f"speaker {numbered['number'].lstrip('0') or '0'}"
    return folded


def _key_number(folded: str) -> str | None:
    """The number a bare-digits key stands for, without leading zeros; None for any other key."""
    if folded.isascii() and folded.isdigit():
        return folded.lstrip("0") or "0"
    return None


def _numbers_speakers(speakers: Sequence[Speaker]) -> bool:
    """Whether the script has a `Speaker N`, whose key is its number."""
    return any(speaker.key.isdigit() for speaker in speakers)


def _names(speakers: Sequence[Speaker]) -> str:
    return _and_list([speaker.name for speaker in speakers])


def _quoted_list(keys: Sequence[str]) -> str:
    return _and_list([f'"{key}"' for key in keys])


def _and_list(items: Sequence[str]) -> str:
    """'A', 'A and B', 'A, B and C'."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"

"""Cheap, deterministic clean-up of a rough transcript, tried before any LLM.

Transcripts from meeting tools and subtitle files carry timestamps, cue numbers and stage directions that
`parse_script` would read as speech or reject. Removing them often leaves a script the parser accepts, and
then no model is needed at all. Line by line:

* `WEBVTT` headers, cue numbers and cue timing lines (`00:01:02,000 --> 00:01:04,000`) are dropped.
* Timestamps go: in brackets or parentheses anywhere (`[00:01:23]`, `(1:23)`), and bare at the start of a
  line when they stand alone, have hours, or come before a speaker tag (`00:01:23 Alice: hi`); a time said
  in speech ("10:30 works") stays. A line holding only a name and a timestamp, as meeting tools head a
  speaker's lines (`Alice Smith  00:01:23`), becomes the tag `Alice Smith:`.
* Stage directions go: a bracket, parenthesis or `*...*` whose words include a direction word
  (`(laughs)`, `[crosstalk]`, `*sighs*`, `[inaudible 00:03:12]`), or a square bracket of lower-case
  words (`[door slams]`). A silence (`[pause]`, `(long pause)`, `[silence]`, `[beat]`) becomes a pause tag.
* Pause tags and `[Name]` speaker tags stay as they are.

Brackets are read innermost first, once: `[[laughs]]` loses its inner direction and the empty pair around
it, deeper nesting keeps its husk, and whatever remains goes to the parser or the model as text. Every
pattern is bounded, so a line costs time linear in its length.
"""

from __future__ import annotations

import re

from script_text.drafting.replies import is_speaker_label

_DIRECTION_WORDS = frozenset(
    """
    laugh laughs laughing laughter chuckle chuckles chuckling giggle giggles sigh sighs sighing cough coughs
    coughing applause applauding clapping cheering music jingle intro outro inaudible unintelligible indistinct
    crosstalk cross-talk overlapping overtalk silence pause pauses paused beat noise static background sound
    sounds clears throat sniffs sneezes smiles smiling nods gasps groans whispers whispering mumbles mumbling
    inhales exhales breath breathes sarcastically interrupts interrupting interruption
    """.split()
)
_SILENCE_WORDS = frozenset({"pause", "pauses", "paused", "silence", "beat"})
_SILENCE_LENGTHS = {"long": "2s", "short": "500ms", "brief": "500ms"}  # anything else: 1s

_TIME = r"(?:[0-9]{1,2}:)?[0-9]{1,2}:[0-9]{2}(?:[.,][0-9]{1,3})?"
_ENCLOSED_TIME = rf"\[ ?{_TIME} ?\]|\( ?{_TIME} ?\)"
_CUE_TIMING = re.compile(rf"{_TIME} ?--> ?{_TIME}(?: [^\n]*)?")
_CUE_NUMBER = re.compile(r"[0-9]{1,6}")
_LEADING_TIME = re.compile(rf"{_TIME}(?: ?[-–—|] ?| |$)")
_TRAILING_TIME = re.compile(rf" ?(?:{_ENCLOSED_TIME}|{_TIME})$")
_INNER_TIME = re.compile(_ENCLOSED_TIME)
_BRACKET = re.compile(r"\[(?P<square>[^\[\]()\n]{1,60})\]|\((?P<round>[^\[\]()\n]{1,60})\)|\*(?P<star>[^*\n]{1,40})\*")
_EMPTY_BRACKET = re.compile(r"\[ ?\]|\( ?\)")
_PAUSE_TAG_START = re.compile(r" ?pause ?[:0-9.]", re.IGNORECASE)  # "[pause: 800ms]" is the parser's business
_BRACKET_TAG = re.compile(r"\[(?P<label>[^\[\]]{1,42})\]")
_SPACE_BEFORE_PUNCTUATION = re.compile(r" (?=[.,;:!?])")  # left where a direction was cut out
_MAX_LABEL_CHARS = 42
_WORD = re.compile(r"[a-z'-]{1,40}")
_MAX_DIRECTION_WORDS = 6


def clean_transcript(text: str) -> str:
    """The transcript without timestamps, cue lines and stage directions (silences become pause tags)."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "\n".join(cleaned for line in lines if (cleaned := _clean_line(line)))


def _clean_line(line: str) -> str:
    line = " ".join(line.split())
    if line == "WEBVTT" or _CUE_NUMBER.fullmatch(line) or _CUE_TIMING.fullmatch(line):
        return ""
    line = _without_leading_time(line)
    if heading := _speaker_heading(line):
        return heading
    line = _INNER_TIME.sub("", line)
    line = _EMPTY_BRACKET.sub("", _BRACKET.sub(_replace_direction, line))
    return _SPACE_BEFORE_PUNCTUATION.sub("", " ".join(line.split()))


def _without_leading_time(line: str) -> str:
    """The line without a bare timestamp in front, when it is one: alone, with hours, or before a tag.

    "10:30 is when we start" keeps its time; "00:01:23 Alice: hi" and "01:23 Alice: hi" lose theirs.
    """
    match = _LEADING_TIME.match(line)
    if match is None:
        return line
    rest = line[match.end() :]
    if not rest or match[0].count(":") >= 2 or _opens_with_tag(rest):
        return rest
    return line


def _speaker_heading(line: str) -> str | None:
    """`Name:` for a line holding only a speaker's name and a timestamp, as meeting tools head a speech.

    Their names come capitalised ("Alice Smith", "Speaker 2"); "We said 00:01:23" is speech.
    """
    match = _TRAILING_TIME.search(line)
    if match is None:
        return None
    label = line[: match.start()]
    capitalised = all(word[0].isupper() or word.isdigit() for word in label.split())
    return label + ":" if label and capitalised and is_speaker_label(label) else None


def _opens_with_tag(text: str) -> bool:
    """Whether `text` starts with a speaker tag: `Name:`, `Speaker 1:` or `[Name]`."""
    label, colon, _ = text.partition(":")
    if colon and len(label) <= _MAX_LABEL_CHARS and is_speaker_label(label.strip()):
        return True
    bracket = _BRACKET_TAG.match(text)
    return bracket is not None and is_speaker_label(bracket["label"].strip())


def _replace_direction(bracket: re.Match[str]) -> str:
    """A pause tag for a silence, nothing for another stage direction, the bracket itself otherwise."""
    content = bracket["square"] or bracket["round"] or bracket["star"]
    if _PAUSE_TAG_START.match(content):
        return bracket[0]
    words = _WORD.findall(content.lower())
    if not words or len(words) > _MAX_DIRECTION_WORDS:
        return bracket[0]
    lower_case_aside = bracket["square"] is not None and content == content.lower() and content.strip()[:1].isalpha()
    if not (lower_case_aside or any(word in _DIRECTION_WORDS for word in words)):
        return bracket[0]
    if words[-1] in _SILENCE_WORDS and len(words) <= 2:
        return f" [pause: {_SILENCE_LENGTHS.get(words[0], '1s')}] "
    return " "

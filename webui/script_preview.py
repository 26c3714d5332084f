"""The Write screen's live preview, and the speaker names chosen on the Cast screen.

The api is the authority on scripts: it parses every submission again. The studio runs the same parser
(`script_text.parser`, pure Python, no model) on every keystroke so that a mistake shows at its line while
the script is being written, and it estimates the episode's length the way the api plans it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from script_text.drafting.replies import script_to_text
from script_text.parser import Script, ScriptError, ScriptWarning, Speaker, parse_script, script_warnings
from script_text.plan import plan_script


@dataclass(frozen=True)
class ScriptPreview:
    """A script as typed: parsed (with its estimated length in seconds of audio), or the error and its line."""

    text: str
    script: Script | None
    error: ScriptError | None
    estimated_seconds: float
    warnings: tuple[ScriptWarning, ...] = ()  # what is likely a typo; the api returns the same with the job

    @property
    def is_empty(self) -> bool:
        return not self.text.strip()


def preview_script(text: str) -> ScriptPreview:
    """Parse and plan `text` as the api will; an empty text is neither a script nor an error."""
    if not text.strip():
        return ScriptPreview(text, None, None, 0.0)
    try:
        script = parse_script(text)
        plan = plan_script(script, "whole")
    except ScriptError as error:
        return ScriptPreview(text, None, error, 0.0)
    return ScriptPreview(text, script, None, plan.estimated_seconds, script_warnings(text, script))


class SpeakerNameError(ValueError):
    """A name the script format cannot carry, or one two speakers would share; `index` is the speaker's."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index
        self.message = message


def renamed_script(script: Script, names: Sequence[str | None]) -> Script | None:
    """The script with its speakers renamed (blank names keep theirs), or None when no name changes.

    Names end up in the transcript and chapters, so they follow the script format's rules for a name.
    """
    wanted = [
        " ".join((name or "").split()) or speaker.name for name, speaker in zip(names, script.speakers, strict=False)
    ]
    if wanted == [speaker.name for speaker in script.speakers]:
        return None
    seen: dict[str, int] = {}
    for index, name in enumerate(wanted):
        if name.casefold() in seen:
            raise SpeakerNameError(index, f"speaker {seen[name.casefold()] + 1} is already called {name}")
        seen[name.casefold()] = index
        _check_name(index, name)
    speakers = tuple(Speaker(key=name, name=name) for name in wanted)
    return Script(speakers=speakers, items=script.items)


def script_text_to_send(preview: ScriptPreview, names: Sequence[str | None]) -> tuple[str, Script]:
    """What the api receives: the script as typed, or as `Name: text` lines when speakers were renamed.

    Returns the text and its parse, whose speaker keys are what voices are given under.
    """
    assert preview.script is not None, "only a parsed script is sent"
    renamed = renamed_script(preview.script, names)
    if renamed is None:
        return preview.text, preview.script
    text = script_to_text(renamed)
    return text, parse_script(text)


def _check_name(index: int, name: str) -> None:
    try:
        speakers = parse_script(f"{name}: -").speakers
    except ScriptError:
        speakers = ()
    if [speaker.name.casefold() for speaker in speakers] != [name.casefold()]:
        raise SpeakerNameError(
            index,
            f"{name!r} cannot be a speaker name: start with a letter, use only letters, digits, spaces and "
            ". ' - _, at most 40 characters and 4 words",
        )

"""The one rule for user text that ends up in a feed's XML, an MP3's ID3 tags or a web page: show and episode titles,
descriptions and notes, and the other words a show publishes.

Two kinds of characters have no place there:

* Characters XML 1.0 forbids (its `Char` production): NUL and the other C0 controls but tab, line feed and carriage
  return, lone surrogates, U+FFFE and U+FFFF. lxml refuses to write them, so one stored in a show would take its
  whole feed off the air; PostgreSQL refuses NUL too. Also refused: DEL and the C1 controls (U+007F to U+009F),
  which XML 1.0 tolerates but HTML calls control characters and no reader shows. Text is refused at its field
  (`forbidden_character`) and never silently changed, since a control character usually means something went
  wrong in a paste (a form feed from a PDF's page break, an escape code from a terminal).
* Bidirectional embeddings, overrides and isolates (U+202A to U+202E, U+2066 to U+2069): they change how the text
  around them is shown, never what it says, and can make a title read backwards. They are dropped without a word,
  as a script's speaker names drop them (`script_text.parser`).

Rows stored before the rule existed may hold either kind: `publishable` cleans text as a feed, a tag or a page is
built, so no stored row can break them.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

BIDI_CONTROLS = frozenset(chr(code) for code in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)])
_BIDI_TABLE = dict.fromkeys(map(ord, BIDI_CONTROLS))
LINE_BREAKS = "\t\n\r"  # XML 1.0 allows them; a one-line field (a title) does not
_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")
_FORBIDDEN_OR_LINE_BREAK = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")
_UNPUBLISHABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff\u202a-\u202e\u2066-\u2069]")
_CONTROL_NAMES = {  # what a person calls them; `unicodedata.name` has no name for a control character
    "\x00": "NUL",
    "\t": "tab",
    "\n": "line break",
    "\r": "carriage return",
    "\x0b": "vertical tab",
    "\x0c": "form feed",
    "\x1b": "escape",
    "\x7f": "DEL",
}


@dataclass(frozen=True)
class ForbiddenCharacter:
    """A character text may not hold: where (`position`, 1-based, in the text as sent) and which."""

    position: int
    character: str

    @property
    def name(self) -> str:
        """'U+000C (form feed)': the code point, and what it is called where it has a name."""
        code = ord(self.character)
        if 0xD800 <= code <= 0xDFFF:
            described = "half of a surrogate pair"
        elif code in (0xFFFE, 0xFFFF):
            described = "a noncharacter"
        else:
            described = _CONTROL_NAMES.get(self.character, "") or unicodedata.name(
                self.character, "a control character"
            )
        return f"U+{code:04X} ({described})"

    def message(self, single_line: bool) -> str:
        """Why the text is refused and what to do, as the rest of a field's 422."""
        if self.character in LINE_BREAKS:
            return f"character {self.position} is {self.name}: this field is one line; put a space there instead"
        allowed = "" if single_line else " (tabs and line breaks are fine)"
        return (
            f"character {self.position} is {self.name}: only printable text is allowed{allowed}, as a podcast feed, "
            "an MP3's tags and a web page cannot carry it; remove it or retype the text around it (control "
            "characters often come with text copied from a PDF or a terminal)"
        )


def forbidden_character(text: str, single_line: bool = False) -> ForbiddenCharacter | None:
    """The first character of `text` that published text may not hold; None when there is none.

    `single_line` also refuses tab, line feed and carriage return (a title is one line)."""
    found = (_FORBIDDEN_OR_LINE_BREAK if single_line else _FORBIDDEN).search(text)
    return None if found is None else ForbiddenCharacter(found.start() + 1, found.group())


def drop_bidi_controls(text: str) -> str:
    """`text` without bidirectional embeddings, overrides and isolates."""
    return text.translate(_BIDI_TABLE)


def publishable(text: str) -> str:
    """`text` as a feed, a tag or a page may carry it: what the rule refuses or drops is left out (for rows stored
    before the rule)."""
    return _UNPUBLISHABLE.sub("", text)

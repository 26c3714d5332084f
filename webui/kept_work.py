"""Work the browser keeps between visits: the script and the cast's drafts, Generate's settings and the job the page
follows, and, only when asked, the API key.

Both live in the browser's localStorage through Gradio's `BrowserState`. What comes back was read from the
browser, which may hold anything (an older studio's drafts, a hand-edited value), so it is checked and what
does not fit is dropped, never trusted.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from api.schemas import JobOptions
from script_text.parser import MAX_SCRIPT_CHARS, MAX_SPEAKERS

DRAFTS_STORAGE_KEY = "voxcast-studio-drafts"
KEY_STORAGE_KEY = "voxcast-studio-key"
# BrowserState encrypts with a secret it sends to the page in its config, so the secret hides nothing from
# someone who can read this browser's storage; a fixed one (Gradio's default is new in every process) keeps
# what was kept readable after the studio restarts.
STORAGE_SECRET = "voxcast-studio-kept-work"
_MAX_KEPT_NAME_CHARS = 100
_MAX_KEPT_KEY_CHARS = 256
_ID = re.compile(r"[0-9a-f]{32}")  # a voice's or a job's
GENERATE_FIELDS = ("title", "mode", "formats", "kbps", "queue", "priority", "cfg_scale", "diffusion_steps", "seed")


@dataclass(frozen=True)
class Drafts:
    """The page as the user left it: the script, each speaker row's name and library voice, Generate's settings
    (`GENERATE_FIELDS`, as its components hold them; none kept: the screen's defaults) and the job it followed."""

    script: str = ""
    names: tuple[str, ...] = ()
    voices: tuple[str | None, ...] = ()  # library voice ids, row by row
    generate: dict[str, Any] = field(default_factory=dict)
    job: str | None = None

    def stored(self) -> dict[str, Any]:
        """The JSON value BrowserState writes (always a non-empty object: Gradio skips storing empty values)."""
        return {
            "script": self.script,
            "names": list(self.names),
            "voices": list(self.voices),
            "generate": self.generate,
            "job": self.job,
        }

    @classmethod
    def from_stored(cls, value: object) -> Drafts:
        """Drafts read back from the browser; anything of the wrong type or size is left out."""
        if not isinstance(value, dict):
            return cls()
        script = value.get("script")
        names = _row_values(value.get("names"))
        voices = _row_values(value.get("voices"))
        job = value.get("job")
        return cls(
            script=script if isinstance(script, str) and len(script) <= MAX_SCRIPT_CHARS else "",
            names=tuple(name if isinstance(name, str) and len(name) <= _MAX_KEPT_NAME_CHARS else "" for name in names),
            voices=tuple(voice if isinstance(voice, str) and _ID.fullmatch(voice) else None for voice in voices),
            generate=checked_generate_settings(value.get("generate")),
            job=job if isinstance(job, str) and _ID.fullmatch(job) else None,
        )


def checked_generate_settings(value: object) -> dict[str, Any]:
    """Generate's settings read back, whole when the api would take them as a job's options, else none (the screen
    keeps its defaults): a value from an older studio, or edited by hand, never reaches a component unchecked."""
    if not isinstance(value, dict) or set(value) != set(GENERATE_FIELDS) or value["queue"] not in _QUEUES:
        return {}
    try:
        JobOptions.model_validate(
            {
                "mode": value["mode"],
                "formats": value["formats"],
                "kbps": value["kbps"],
                "queue": None if value["queue"] == "auto" else value["queue"],
                "priority": value["priority"],
                "title": value["title"] or None,
                "settings": {key: value[key] for key in ("cfg_scale", "diffusion_steps", "seed")},
            }
        )
    except (ValidationError, TypeError):
        return {}
    return dict(value)


_QUEUES = ("auto", "interactive", "batch")


def _row_values(value: object) -> list[object]:
    return list(value[:MAX_SPEAKERS]) if isinstance(value, list) else []


def drafts_to_keep(
    script: str | None,
    names: Sequence[str | None],
    voices: Sequence[str | None],
    pending: Sequence[str | None],
    generate: dict[str, Any],
    job: str | None,
) -> Drafts:
    """The drafts to store now. A row whose restored voice is still `pending` (the library is not loaded yet:
    no key was given) keeps that voice, so reloading before connecting loses no choice."""
    kept_voices = tuple(
        voice or (pending[index] if index < len(pending) else None) for index, voice in enumerate(voices)
    )
    return Drafts(script or "", tuple(name or "" for name in names), kept_voices, generate, job)


def key_to_keep(key: str | None, remember: bool) -> dict[str, str]:
    """What the key's storage holds: the key only when the user asked to remember it on this device.

    Otherwise an empty key, which replaces one remembered before (Gradio does not store an empty value, so
    the key sits inside an object).
    """
    return {"key": (key or "").strip() if remember else ""}


def remembered_key(value: object) -> str:
    """The key read back from the browser, or "" when none was remembered (or what is there is not a key)."""
    key = value.get("key") if isinstance(value, dict) else None
    if not isinstance(key, str) or len(key) > _MAX_KEPT_KEY_CHARS or not key.isprintable():
        return ""
    return key.strip()

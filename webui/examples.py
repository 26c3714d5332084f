"""The bundled example scripts and voices (`../shared/examples`), offered when they are present.

They live beside the project, not in it, so an install without them simply shows no examples.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "shared" / "examples"
SCRIPT_SUFFIXES = (".txt", ".md", ".json")
VOICE_SUFFIXES = (".wav", ".flac", ".mp3", ".ogg", ".opus")


@dataclass(frozen=True)
class Examples:
    """Example scripts by file name, and example voices by the name they get in a library."""

    scripts: dict[str, Path] = field(default_factory=dict)
    voices: dict[str, Path] = field(default_factory=dict)


def find_examples(root: Path = EXAMPLES_DIR) -> Examples:
    return Examples(
        scripts={path.name: path for path in _files(root / "scripts", SCRIPT_SUFFIXES)},
        voices={example_voice_name(path): path for path in _files(root / "voices", VOICE_SUFFIXES)},
    )


def example_voice_name(path: Path) -> str:
    """`en-Alice_woman.wav` -> `Alice (en, woman)`; any other file name -> its stem."""
    language, dash, rest = path.stem.partition("-")
    name, underscore, kind = rest.partition("_")
    if not (dash and underscore and name):
        return path.stem
    return f"{name} ({language}, {kind})"


def _files(folder: Path, suffixes: tuple[str, ...]) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(path for path in folder.iterdir() if path.is_file() and path.suffix.lower() in suffixes)

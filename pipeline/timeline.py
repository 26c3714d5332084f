"""Where each script turn sits in the finished episode: shared by the renderer and the output writers."""

from __future__ import annotations

import math
from dataclasses import dataclass


def check_span(kind: str, start: float, end: float) -> None:
    """Reject spans that would produce nonsense timestamps in subtitles and chapters."""
    if not (math.isfinite(start) and math.isfinite(end)):
        raise ValueError(f"{kind} times must be finite, got start={start!r} end={end!r}")
    if start < 0 or end < start:
        raise ValueError(f"{kind} needs 0 <= start <= end, got start={start} end={end}")


@dataclass(frozen=True)
class TimedTurn:
    """One script turn placed on the episode timeline."""

    index: int
    speaker_name: str
    text: str
    start: float
    end: float

    def __post_init__(self) -> None:
        check_span(f"turn {self.index} ({self.speaker_name})", self.start, self.end)

"""Where each script turn sits in the finished episode: shared by the renderer and the output writers."""

from __future__ import annotations

import math
from collections.abc import Sequence
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


def text_shares(texts: Sequence[str]) -> list[tuple[float, float]]:
    """Where each of a segment's turns sits in it, as fractions [start, end) of its length: by its share of the
    segment's text (one character at least). The one rule for a generation's turns, whether its length is known
    (the transcript, the chapters) or still growing (the studio's labels of what is heard while it generates)."""
    weights = [max(1, len(text)) for text in texts]
    total = sum(weights)
    bounds = [0.0]
    for weight in weights:
        bounds.append(bounds[-1] + weight / total)
    bounds[-1] = 1.0  # the last turn ends with the segment, whatever the rounding
    return list(zip(bounds, bounds[1:], strict=False))

"""Rendering a plan: every segment through the generation seam, silences between, turn timings recorded.

The result is one continuous 24 kHz track plus where each turn sits in it. Loudness, file formats and
side files are the output writers' business (`workers.assembly`), so this module stays free of I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import torch

from pipeline.generation import SAMPLE_RATE, GenerationSettings, SegmentAudio, SegmentRequest, generate_segment
from pipeline.model_loading import LoadedModel
from pipeline.plan import FRAMES_PER_SECOND, Plan, PlannedTurn, Segment, Silence
from pipeline.timeline import TimedTurn


@dataclass(frozen=True)
class Progress:
    """How far a render is: frames of speech so far against the plan's estimate."""

    frames_done: int
    frames_estimated: int
    segment: int  # 0-based index of the segment being generated
    segments: int

    @property
    def audio_seconds(self) -> float:
        return self.frames_done / FRAMES_PER_SECOND


ProgressCallback = Callable[[Progress], None]


@dataclass(frozen=True, eq=False)
class RenderedPodcast:
    audio: np.ndarray  # float32 mono at SAMPLE_RATE
    turns: tuple[TimedTurn, ...]
    segments: tuple[SegmentAudio, ...]

    @property
    def seconds(self) -> float:
        return len(self.audio) / SAMPLE_RATE

    @property
    def latents(self) -> tuple[torch.Tensor, ...]:
        return tuple(segment.latents for segment in self.segments)


class EmptySegmentError(RuntimeError):
    """The model ended a segment before saying anything."""


def render_podcast(
    loaded: LoadedModel,
    plan: Plan,
    voices: Mapping[int, np.ndarray],
    settings: GenerationSettings,
    on_progress: ProgressCallback | None = None,
) -> RenderedPodcast:
    """Generate every segment of `plan` in order and lay them out with the plan's silences.

    Segment k is seeded with `settings.seed + k`, so one segment can be regenerated alone and come out
    the same as in the full run.
    """
    pieces: list[np.ndarray] = []
    timings: list[TimedTurn] = []
    results: list[SegmentAudio] = []
    cursor = 0.0
    frames_before = 0
    total_segments = len(plan.segments)
    for item in plan.items:
        if isinstance(item, Silence):
            pieces.append(np.zeros(round(item.seconds * SAMPLE_RATE), dtype=np.float32))
            cursor += item.seconds
            continue
        report = _segment_reporter(on_progress, frames_before, plan.estimated_frames, item.index, total_segments)
        result = generate_segment(loaded, _request(item, voices, settings), on_frame=report)
        if result.frames == 0:
            raise EmptySegmentError(
                f"the model produced no audio for segment {item.index + 1} (script line {item.turns[0].line}); "
                "try another seed or the 'turns' mode"
            )
        results.append(result)
        pieces.append(result.audio)
        timings += _turn_timings(item, cursor, result.seconds, plan)
        cursor += result.seconds
        frames_before += result.frames
    audio = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)
    return RenderedPodcast(audio=audio, turns=_merge_pieces(timings), segments=tuple(results))


def _request(segment: Segment, voices: Mapping[int, np.ndarray], settings: GenerationSettings) -> SegmentRequest:
    segment_settings = GenerationSettings(
        cfg_scale=settings.cfg_scale, diffusion_steps=settings.diffusion_steps, seed=settings.seed + segment.index
    )
    return SegmentRequest(text=segment.text, voices=voices, max_frames=segment.max_frames, settings=segment_settings)


def _segment_reporter(
    on_progress: ProgressCallback | None, frames_before: int, estimated: int, segment: int, segments: int
) -> Callable[[int], None] | None:
    if on_progress is None:
        return None
    return lambda frames: on_progress(Progress(frames_before + frames, estimated, segment, segments))


def _turn_timings(segment: Segment, start: float, seconds: float, plan: Plan) -> list[TimedTurn]:
    """Place the segment's turns in [start, start + seconds], each by its share of the segment's text."""
    weights = [max(1, len(turn.text)) for turn in segment.turns]
    total = sum(weights)
    timings = []
    offset = start
    for turn, weight in zip(segment.turns, weights, strict=True):
        length = seconds * weight / total
        timings.append(_timed(turn, offset, offset + length, plan))
        offset += length
    return timings


def _timed(turn: PlannedTurn, start: float, end: float, plan: Plan) -> TimedTurn:
    return TimedTurn(turn.index, plan.speakers[turn.speaker].name, turn.text, start, end)


def _merge_pieces(timings: list[TimedTurn]) -> tuple[TimedTurn, ...]:
    """A long turn generated in pieces becomes one timed turn again, from its first start to its last end."""
    merged: list[TimedTurn] = []
    for timing in timings:
        if merged and merged[-1].index == timing.index:
            last = merged[-1]
            timing = TimedTurn(last.index, last.speaker_name, f"{last.text} {timing.text}", last.start, timing.end)
            merged[-1] = timing
        else:
            merged.append(timing)
    return tuple(merged)

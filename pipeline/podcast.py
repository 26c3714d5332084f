"""Rendering a plan: every segment through the engine at once, silences between, turn timings recorded.

All segments of a plan are independent generations (each with its own seed), so they are submitted
together and share the engine's batch: a 40-turn episode in `turns` mode runs 40 streams side by side
instead of one after another. The result is one continuous 24 kHz track plus where each turn sits in
it. Loudness, file formats and side files are the output writers' business (`assembly`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import torch

from pipeline.engine import Engine
from pipeline.generation import GenerationSettings, SegmentAudio, SegmentRequest, generate_segments
from pipeline.plan import Plan, Segment, Silence, segment_seed
from pipeline.timeline import TimedTurn, text_shares
from tokenizer.rates import FRAMES_PER_SECOND, SAMPLE_RATE


@dataclass(frozen=True)
class Progress:
    """How far a render is: frames of speech so far against the plan's estimate."""

    frames_done: int  # across all segments, which run concurrently
    frames_estimated: int

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
    engine: Engine,
    plan: Plan,
    voices: Mapping[int, np.ndarray],
    settings: GenerationSettings,
    on_progress: ProgressCallback | None = None,
) -> RenderedPodcast:
    """Generate every segment of `plan` concurrently and lay them out in order with the plan's silences."""
    segments = plan.segments
    requests = [segment_request(segment, voices, settings) for segment in segments]
    results = generate_segments(engine, requests, _progress_reporter(on_progress, plan, requests))
    for segment, result in zip(segments, results, strict=True):
        check_not_empty(segment, result.frames)
    placed = {
        segment.index: PlacedSegment(result.audio, segment_turn_timings(segment, result.seconds, plan))
        for segment, result in zip(segments, results, strict=True)
    }
    audio, turns = lay_out(plan, placed)
    return RenderedPodcast(audio=audio, turns=turns, segments=tuple(results))


@dataclass(frozen=True, eq=False)
class PlacedSegment:
    """A generated segment's audio and its turns' timings, relative to the segment's start."""

    audio: np.ndarray
    turns: tuple[TimedTurn, ...]


def segment_request(
    segment: Segment, voices: Mapping[int, np.ndarray], settings: GenerationSettings, *, seed: int | None = None
) -> SegmentRequest:
    """The generation for one segment, seeded `seed` when given (a seed stored for this segment), else
    `segment_seed(settings.seed, segment.index)`."""
    segment_settings = GenerationSettings(
        cfg_scale=settings.cfg_scale,
        diffusion_steps=settings.diffusion_steps,
        seed=segment_seed(settings.seed, segment.index) if seed is None else seed,
    )
    return SegmentRequest(text=segment.text, voices=voices, max_frames=segment.max_frames, settings=segment_settings)


def check_not_empty(segment: Segment, frames: int) -> None:
    """`EmptySegmentError` naming the segment and its script line when it came out with no frame."""
    if frames == 0:
        raise EmptySegmentError(
            f"the model produced no audio for segment {segment.index + 1} (script line {segment.turns[0].line}); "
            "try another seed or the 'turns' mode"
        )


def lay_out(plan: Plan, segments: Mapping[int, PlacedSegment]) -> tuple[np.ndarray, tuple[TimedTurn, ...]]:
    """The episode track: segments in plan order with the plan's silences, and every turn's timing.

    A long turn generated in pieces comes back as one timed turn, from its first start to its last end.
    """
    pieces: list[np.ndarray] = []
    timings: list[TimedTurn] = []
    cursor = 0.0
    for item in plan.items:
        if isinstance(item, Silence):
            pieces.append(np.zeros(round(item.seconds * SAMPLE_RATE), dtype=np.float32))
            cursor += item.seconds
            continue
        placed = segments[item.index]
        pieces.append(placed.audio)
        timings += [TimedTurn(t.index, t.speaker_name, t.text, cursor + t.start, cursor + t.end) for t in placed.turns]
        cursor += len(placed.audio) / SAMPLE_RATE
    audio = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)
    return audio, _merge_pieces(timings)


def _progress_reporter(
    on_progress: ProgressCallback | None, plan: Plan, requests: list[SegmentRequest]
) -> Callable[[int, int], None] | None:
    if on_progress is None:
        return None
    frames = [0] * len(requests)

    def report(index: int, frames_so_far: int) -> None:
        frames[index] = frames_so_far
        on_progress(Progress(sum(frames), plan.estimated_frames))

    return report


def segment_turn_timings(segment: Segment, seconds: float, plan: Plan) -> tuple[TimedTurn, ...]:
    """The segment's turns in [0, seconds], each by its share of the segment's text (exact for one turn)."""
    shares = text_shares([turn.text for turn in segment.turns])
    return tuple(
        TimedTurn(turn.index, plan.speakers[turn.speaker].name, turn.text, seconds * start, seconds * end)
        for turn, (start, end) in zip(segment.turns, shares, strict=True)
    )


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

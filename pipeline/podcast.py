"""Rendering a plan: its segments through the generation seam at once, silences between, turn timings recorded.

All segments of a plan are independent generations (each with its own seed), so they are submitted
together and share the engine's batch: a 40-turn episode in `turns` mode runs 40 streams side by side
instead of one after another. `PlanGeneration` is that run, as the CLI's `render_podcast` and the worker's job
(`workers.job_generation`) both drive it: frames as they come, and each segment, once finished, with its turns'
timings. `lay_out` makes one continuous 24 kHz track of the segments plus where each turn sits in it. Loudness,
file formats and side files are the output writers' business (`assembly`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from core.audio_rates import FRAMES_PER_SECOND, SAMPLE_RATE
from models.segment_io import GenerationSettings, SegmentAudio
from pipeline.engine.engine import Engine
from pipeline.engine.requests import Replay
from pipeline.generation import (
    GenerationError,
    SegmentDone,
    SegmentFailed,
    SegmentFrame,
    SegmentGeneration,
    SegmentRequest,
)
from script_text.plan import Plan, Segment, Silence, segment_seed
from script_text.timeline import TimedTurn, text_shares


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


def render_podcast(
    engine: Engine,
    plan: Plan,
    voices: Mapping[int, np.ndarray],
    settings: GenerationSettings,
    on_progress: ProgressCallback | None = None,
) -> RenderedPodcast:
    """Generate every segment of `plan` concurrently and lay them out in order with the plan's silences; the first
    segment to fail (or to come out empty) raises, and the others are cancelled."""
    pending = [PendingSegment(segment, segment_seed(settings.seed, segment.index)) for segment in plan.segments]
    generation = PlanGeneration.start(engine, plan, pending, voices, settings)
    frames = dict.fromkeys(range(len(plan.segments)), 0)
    finished: dict[int, GeneratedSegment] = {}
    try:
        while generation.running:
            for update in generation.updates():
                if isinstance(update, SegmentFailed):
                    raise GenerationError(update.message)
                if isinstance(update, SegmentFinished):
                    finished[update.index] = update.generated
                elif on_progress is not None:
                    frames[update.index] = update.frames
                    on_progress(Progress(sum(frames.values()), plan.estimated_frames))
    except BaseException:
        generation.cancel()
        raise
    audio, turns = lay_out(plan, {index: PlacedSegment(g.result.audio, g.turns) for index, g in finished.items()})
    return RenderedPodcast(audio, turns, tuple(finished[segment.index].result for segment in plan.segments))


@dataclass(frozen=True)
class Scheduling:
    """How the engine schedules a plan's generations beside other work (see `GenerationRequest`)."""

    job: str  # the job id: rows go round-robin between jobs
    interactive: bool  # admitted before batch work, and may preempt it
    priority: int  # 0..9, higher first within its class


@dataclass(frozen=True)
class PendingSegment:
    """A segment of the plan to generate now, with its own seed and the frames an interrupted attempt stored."""

    segment: Segment
    seed: int
    resume: Replay | None = None


@dataclass(frozen=True, eq=False)
class GeneratedSegment:
    """A finished segment: the engine's result (audio, latents) and its turns' timings, relative to its start."""

    result: SegmentAudio
    turns: tuple[TimedTurn, ...]


@dataclass(frozen=True)
class SegmentFinished:
    index: int
    generated: GeneratedSegment


PlanUpdate = SegmentFrame | SegmentFinished | SegmentFailed


class PlanGeneration:
    """A plan's pending segments generating side by side (`SegmentGeneration`), each finished one timed by its turns.

    A segment the model ended before saying anything comes back as a `SegmentFailed` naming its script line.
    """

    def __init__(self, plan: Plan, segments: SegmentGeneration) -> None:
        self.plan = plan
        self.segments = segments
        self._by_index = {segment.index: segment for segment in plan.segments}

    @classmethod
    def start(
        cls,
        engine: Engine,
        plan: Plan,
        pending: Sequence[PendingSegment],
        voices: Mapping[int, np.ndarray],
        settings: GenerationSettings,
        scheduling: Scheduling | None = None,
    ) -> PlanGeneration:
        """Submit every pending segment at once, each seeded with its own seed (the one on its job's row, or
        `segment_seed` for a first render); a segment with `resume` replays those frames (handed back as frames
        again) and generates only the frames after."""
        scheduled = {} if scheduling is None else dataclasses.asdict(scheduling)
        requests = {
            item.segment.index: SegmentRequest(
                text=item.segment.text,
                voices=voices,
                max_frames=item.segment.max_frames,
                settings=dataclasses.replace(settings, seed=item.seed),
                resume=item.resume,
                **scheduled,
            )
            for item in pending
        }
        return cls(plan, SegmentGeneration.start(engine, requests))

    @property
    def running(self) -> bool:
        return self.segments.running

    def updates(self, timeout: float | None = None) -> list[PlanUpdate]:
        """What the engine did since the last call (see `SegmentGeneration.updates`)."""
        updates = self.segments.updates() if timeout is None else self.segments.updates(timeout)
        return [self._timed(update) if isinstance(update, SegmentDone) else update for update in updates]

    def cancel(self) -> None:
        self.segments.cancel()

    def _timed(self, done: SegmentDone) -> SegmentFinished | SegmentFailed:
        segment = self._by_index[done.index]
        if done.result.frames == 0:
            return SegmentFailed(
                done.index,
                f"the model produced no audio for segment {segment.index + 1} (script line {segment.turns[0].line}); "
                "try another seed or the 'turns' mode",
            )
        turns = segment_turn_timings(segment, done.result.seconds, self.plan)
        return SegmentFinished(done.index, GeneratedSegment(done.result, turns))


@dataclass(frozen=True, eq=False)
class PlacedSegment:
    """A generated segment's audio and its turns' timings, relative to the segment's start."""

    audio: np.ndarray
    turns: tuple[TimedTurn, ...]


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

"""The worker's only door into the generation pipeline: start the engine, plan a job, generate its segments.

Everything else in `workers/` (claiming jobs, storing segments, progress, assembly) goes through these
functions, so a change of the generation seam changes this module alone. A worker process runs one engine
(one model, one GPU) in its background thread; every task thread hands all its job's pending segments to it
at once (`start_plan_generation`), each tagged with the job, its queue and its priority, and the engine
batches them across jobs: rows go round-robin between jobs, interactive work first.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from pipeline.engine import Engine, EngineConfig, EngineEvent, EventKind, Replay, RequestHandle
from pipeline.engine.engine import EngineLoad
from pipeline.engine.requests import FINAL_EVENTS
from pipeline.engine.step_records import RowOutcome, StepInput
from pipeline.generation import GenerationSettings, chars_per_token, submit_segment
from pipeline.model_loading import load_model
from pipeline.plan import Plan, Segment
from pipeline.plan import segment_seed as segment_seed  # the seed rule of a job's segment rows
from pipeline.podcast import (
    EmptySegmentError,
    PlacedSegment,
    check_not_empty,
    lay_out,
    segment_request,
    segment_turn_timings,
)
from pipeline.timeline import TimedTurn
from tokenizer.rates import SAMPLE_RATE

GenerationModel = Engine  # what a worker process starts once and every task thread shares

_model_lock = threading.Lock()


@dataclass(frozen=True, eq=False)
class GeneratedSegment:
    """One segment's 24 kHz mono float32 audio, its latents [frames, latent_dim] and its turns' timings.

    Turn timings are relative to the start of the segment.
    """

    audio: np.ndarray
    latents: np.ndarray
    frames: int
    turns: tuple[TimedTurn, ...]

    @property
    def seconds(self) -> float:
        return len(self.audio) / SAMPLE_RATE


def shared_model(
    source: str,
    device: str | None,
    dtype: str | None,
    *,
    slots: int,
    kv_memory: float | None,
    interactive_slowdown: float | None,
) -> GenerationModel:
    """The process's engine, started on first use (model loaded, stepping thread running) and then shared.

    The online policy: a worker serves interactive jobs and listeners beside batch work.
    """
    with _model_lock:
        config = EngineConfig(slots=slots, kv_memory=kv_memory, policy="online")
        if interactive_slowdown is not None:
            config = dataclasses.replace(config, interactive_slowdown=interactive_slowdown)
        return _start_once(source, device, dtype, config)


@functools.cache
def _start_once(source: str, device: str | None, dtype: str | None, config: EngineConfig) -> GenerationModel:
    engine = Engine.for_model(load_model(source, device=device, dtype=dtype), config)
    engine.warm_up()  # on a GPU: capture the decode step's graphs now, not while a listener waits
    engine.start()
    return engine


@dataclass(frozen=True)
class WorkerEngine:
    """What a worker's engine runs on, and how full it is right now."""

    model: str  # the source it was loaded from: hub id, folder or "tiny-random"
    device: str  # the GPU's name (e.g. "NVIDIA H200"), or "cpu"
    dtype: str
    chars_per_token: float  # its tokenizer's rate on English (for the api's estimate of prompt lengths)
    load: EngineLoad


def worker_engine(model: GenerationModel) -> WorkerEngine:
    """A snapshot of the engine's model and occupancy, safe to take from any thread while it steps."""
    loaded = model.loaded
    device = torch.cuda.get_device_name(loaded.device) if loaded.device.type == "cuda" else loaded.device.type
    dtype = str(loaded.dtype).removeprefix("torch.")
    return WorkerEngine(loaded.source, device, dtype, _chars_per_token(model), model.load())


@functools.cache
def _chars_per_token(model: GenerationModel) -> float:
    return chars_per_token(model.loaded)


def engine_failure(model: GenerationModel) -> str | None:
    """Why the engine's loop died (every request it held failed with it), or None while it runs."""
    return model.dead


@dataclass(frozen=True)
class Scheduling:
    """How the engine schedules a job's generations beside other jobs' (see `GenerationRequest`)."""

    job: str  # the job id: rows go round-robin between jobs
    interactive: bool  # admitted before batch work, and may preempt it
    priority: int  # 0..9, higher first within its class


@dataclass(frozen=True)
class PendingSegment:
    """A segment of the plan to generate now, with its own seed and the frames an interrupted attempt stored."""

    segment: Segment
    seed: int
    resume: Replay | None = None


@dataclass(frozen=True)
class SegmentFrame:
    """One more frame of a segment: its 3200 samples at 24 kHz, its latent [latent_dim], the tokens leading to it."""

    index: int  # the segment's index in the plan
    frames: int  # frames of the segment so far, this one included (a resumed segment's replay counts from 1)
    samples: np.ndarray
    latent: np.ndarray
    tokens: tuple[int, ...]  # chosen since the segment's previous frame, ending with this frame's


@dataclass(frozen=True)
class SegmentFinished:
    index: int
    generated: GeneratedSegment


@dataclass(frozen=True)
class SegmentFailed:
    index: int
    message: str  # names the segment, e.g. "segment 3 failed: generation failed: CUDA out of memory"


SegmentUpdate = SegmentFrame | SegmentFinished | SegmentFailed


class PlanGeneration:
    """Segments of one plan generating side by side in the engine; their frames and ends, as they come.

    Each segment's frames are collected here until its final event, which becomes one `SegmentFinished` (its
    audio, latents and turn timings) or `SegmentFailed`; the caller stores or gives up on each as it ends,
    while the others carry on. All calls come from the job's one task thread.
    """

    def __init__(self, model: GenerationModel, plan: Plan, handles: Mapping[int, RequestHandle]) -> None:
        self.model = model
        self.plan = plan
        self._handles = dict(handles)  # segment index -> handle, until its final event
        self._segments = {segment.index: segment for segment in plan.segments}
        self._admitted: set[int] = set()  # segments the engine has started (has given a row)
        self._audio: dict[int, list[np.ndarray]] = {index: [] for index in handles}
        self._latents: dict[int, list[np.ndarray]] = {index: [] for index in handles}

    @property
    def running(self) -> bool:
        """Whether a segment still has its final event to come."""
        return bool(self._handles)

    def updates(self, timeout: float) -> list[SegmentUpdate]:
        """What the engine did since the last call, waiting up to `timeout` seconds for the first event.

        It waits on a segment that holds a row (they all get their frames at the end of an engine step), so a
        call returns about once a step while any of the job's segments generates.
        """
        if not self._handles:
            return []
        first = next((index for index in self._handles if index in self._admitted), next(iter(self._handles)))
        updates: list[SegmentUpdate] = []
        for index, handle in list(self._handles.items()):
            for event in handle.drain(timeout if index == first else 0.0):
                updates += self._update(index, event)
        return updates

    def cancel(self) -> None:
        """Stop every segment still generating, at the engine's next step."""
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()

    def _update(self, index: int, event: EngineEvent) -> list[SegmentUpdate]:
        if event.kind is EventKind.STARTED:
            self._admitted.add(index)
        elif event.kind is EventKind.AUDIO:
            latent = event.latent.numpy()
            self._audio[index].append(event.audio)
            self._latents[index].append(latent)
            return [SegmentFrame(index, event.frames, event.audio, latent, event.tokens)]
        elif event.kind in FINAL_EVENTS:
            del self._handles[index]
            self._admitted.discard(index)
            audio, latents = self._audio.pop(index), self._latents.pop(index)
            if event.kind is not EventKind.FINISHED:
                return [SegmentFailed(index, f"segment {index + 1} {event.kind.value}: {event.reason}")]
            segment = self._segments[index]
            try:
                check_not_empty(segment, len(latents))
            except EmptySegmentError as error:
                return [SegmentFailed(index, str(error))]
            samples = np.concatenate(audio)
            turns = segment_turn_timings(segment, len(samples) / SAMPLE_RATE, self.plan)
            return [SegmentFinished(index, GeneratedSegment(samples, np.stack(latents), len(latents), turns))]
        return []


def start_plan_generation(
    model: GenerationModel,
    plan: Plan,
    pending: Sequence[PendingSegment],
    voices: Mapping[int, np.ndarray],
    *,
    cfg_scale: float,
    diffusion_steps: int,
    scheduling: Scheduling,
    engine_fault: bool = False,
) -> PlanGeneration:
    """Submit every pending segment of `plan` to the engine at once; their events come through the result.

    Each is seeded with its own seed (the one on its row: the job's `segment_seed` for a first render, another
    for a regenerated turn), and a segment with `resume` replays those frames (handed back as frames again)
    and generates only the frames after. `engine_fault` (fault tests only) makes the engine loop fail when it
    steps these segments.
    """
    settings = GenerationSettings(cfg_scale=cfg_scale, diffusion_steps=diffusion_steps)
    handles: dict[int, RequestHandle] = {}
    try:
        for item in pending:
            request = dataclasses.replace(
                segment_request(item.segment, voices, settings, seed=item.seed),
                job=scheduling.job,
                interactive=scheduling.interactive,
                priority=scheduling.priority,
            )
            if item.resume is not None:
                request = dataclasses.replace(request, resume=item.resume)
            handles[item.segment.index] = submit_segment(model, request)
    except BaseException:
        for handle in handles.values():
            handle.cancel()
        raise
    if engine_fault:
        _fail_engine_loop_on(model, handles.values())
    return PlanGeneration(model, plan, handles)


class EngineFault(Exception):
    """A fault injected for tests: an error inside the engine loop's step (a bug in it, not in a request)."""


_doomed: set[int] = set()  # request ids whose step makes the engine loop fail
_faulty_runners: set[int] = set()


def _fail_engine_loop_on(model: GenerationModel, handles: Iterable[RequestHandle]) -> None:
    """Make the engine loop fail (`EngineFault`, which no step handles) when it steps one of `handles`.

    For `Settings.engine_fault_on_script_text`: the runner's `run` is wrapped once; the engine then dies as it
    would of a bug in its loop (every request fails, `dead` says why), which is what the worker must survive.
    """
    with _model_lock:
        _doomed.update(handle.request_id for handle in handles)
        runner = model.runner
        if id(runner) in _faulty_runners:
            return
        _faulty_runners.add(id(runner))
        run = runner.run

        def run_or_fail(step: StepInput) -> list[RowOutcome]:
            if any(row.request_id in _doomed for row in (*step.prefill, *step.decode)):
                raise EngineFault("injected engine fault (VOXCAST_ENGINE_FAULT_ON_SCRIPT_TEXT)")
            return run(step)

        runner.run = run_or_fail  # type: ignore[method-assign]


def lay_out_episode(plan: Plan, segments: Mapping[int, PlacedSegment]) -> tuple[np.ndarray, tuple[TimedTurn, ...]]:
    """The episode track from stored segments, with the plan's silences, and every turn's timing."""
    return lay_out(plan, segments)

"""The worker's only door into the generation pipeline: start the engine, plan a job, generate one segment.

Everything else in `workers/` (claiming jobs, storing segments, progress, assembly) goes through these
functions, so a change of the generation seam changes this module alone. A worker process runs one engine
(one model, one GPU) in its background thread; every task thread submits its job's segments to it, and the
engine batches them across jobs.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch

from pipeline.engine import Engine, EngineConfig
from pipeline.generation import SAMPLE_RATE, GenerationSettings, generate_segment
from pipeline.model_loading import load_model
from pipeline.plan import FRAMES_PER_SECOND, Mode, Plan, Segment, plan_script
from pipeline.podcast import PlacedSegment, check_not_empty, lay_out, segment_request, segment_turn_timings
from pipeline.script import parse_script
from pipeline.timeline import TimedTurn

FrameReport = Callable[[int], None]
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
    source: str, device: str | None, dtype: str | None, *, slots: int, max_context: int
) -> GenerationModel:
    """The process's engine, started on first use (model loaded, stepping thread running) and then shared.

    The online policy: a worker serves interactive jobs and listeners beside batch work.
    """
    with _model_lock:
        return _start_once(source, device, dtype, slots, max_context)


@functools.cache
def _start_once(source: str, device: str | None, dtype: str | None, slots: int, max_context: int) -> GenerationModel:
    engine = Engine(
        load_model(source, device=device, dtype=dtype),
        EngineConfig(slots=slots, max_context=max_context, policy="online"),
    )
    engine.warm_up()  # on a GPU: capture the decode step's graphs now, not while a listener waits
    engine.start()
    return engine


@dataclass(frozen=True)
class EngineLoad:
    """What a worker's engine runs on, and how full it is right now."""

    model: str  # the source it was loaded from: hub id, folder or "tiny-random"
    device: str  # the GPU's name (e.g. "NVIDIA H200"), or "cpu"
    dtype: str
    slots: int
    slots_in_use: int
    waiting: int  # requests queued for a free slot


def engine_load(model: GenerationModel) -> EngineLoad:
    """A snapshot of the engine's occupancy, safe to take from any thread while it steps."""
    loaded = model.loaded
    device = torch.cuda.get_device_name(loaded.device) if loaded.device.type == "cuda" else loaded.device.type
    with model.lock:  # `waiting` changes under the lock; `active` only in the stepping thread (len is atomic)
        waiting = len(model.waiting)
        in_use = len(model.active)
    return EngineLoad(
        model=loaded.source,
        device=device,
        dtype=str(loaded.dtype).removeprefix("torch."),
        slots=model.config.slots,
        slots_in_use=in_use,
        waiting=waiting,
    )


def plan_job(script_text: str, mode: str, max_segment_seconds: float) -> Plan:
    """The job's plan; raises `ScriptError` (with the line) for a script the api should have refused."""
    return plan_script(parse_script(script_text), cast(Mode, mode), max_segment_seconds=max_segment_seconds)


def estimated_frames(segment: Segment) -> int:
    """Frames of speech the plan expects from `segment` (its share of `Plan.estimated_frames`)."""
    return math.ceil(segment.estimated_seconds * FRAMES_PER_SECOND)


def generate_plan_segment(
    model: GenerationModel,
    plan: Plan,
    segment: Segment,
    voices: Mapping[int, np.ndarray],
    *,
    cfg_scale: float,
    diffusion_steps: int,
    seed: int,
    on_frame: FrameReport,
    on_latent: Callable[[np.ndarray], None],
    on_audio: Callable[[np.ndarray], None] | None = None,
    resume_latents: np.ndarray | None = None,
) -> GeneratedSegment:
    """Generate one segment of `plan` with its own `seed` (the job's seed + index for a first render, as
    `segment_request` seeds a full render; another for a regenerated turn).

    `on_frame(frames_so_far)` is called after every frame; an exception it raises stops the generation
    (that is how a cancel lands within one engine step). `on_latent(latent)` gets each frame's latent
    [latent_dim] so the caller can store them, `on_audio(samples)` its 24 kHz samples so listeners can hear
    them; `resume_latents` [frames, latent_dim], stored by an interrupted attempt, are replayed instead of
    generated again (and handed to both callbacks like new frames).
    """
    # segment_request offsets the seed by the segment's index; the seed given here is already the segment's.
    settings = GenerationSettings(cfg_scale=cfg_scale, diffusion_steps=diffusion_steps, seed=seed - segment.index)
    request = segment_request(segment, voices, settings)
    if resume_latents is not None and len(resume_latents):
        request = dataclasses.replace(request, resume_latents=torch.from_numpy(resume_latents))
    result = generate_segment(
        model, request, on_frame=on_frame, on_latent=lambda latent: on_latent(latent.numpy()), on_audio=on_audio
    )
    check_not_empty(segment, result)
    return GeneratedSegment(
        audio=result.audio,
        latents=result.latents.numpy(),
        frames=result.frames,
        turns=segment_turn_timings(segment, result.seconds, plan),
    )


def lay_out_episode(plan: Plan, segments: Mapping[int, PlacedSegment]) -> tuple[np.ndarray, tuple[TimedTurn, ...]]:
    """The episode track from stored segments, with the plan's silences, and every turn's timing."""
    return lay_out(plan, segments)

"""Before an engine serves: capture its fast path's CUDA graphs, then check that path against the eager step.

The fast path (the fixed-shape step, replayed as CUDA graphs on a GPU) is a second implementation of the eager
step's arithmetic. On a GPU it has never met, a capture may fail, memory may run out, or a kernel may compute
something else; a worker must then serve more slowly, never die and never serve wrong audio. So after capturing,
one short request runs through the configured step and through the eager step, and their latents are compared
(`CHECK_TOKENS` tokens, the same seed). A failure or a difference beyond the tolerance makes the runner fall back
one step (graphs, then the fixed-shape step run eagerly, then the eager step) and the check runs again; the
reason is logged in one line and reported (`WarmUpReport`, which a worker announces).

The check request comes from the model's own processor (a short line and a second of synthetic voice), so it
runs on any checkpoint, the tiny test models included. On the CPU the default is the eager step, and there is
nothing to check.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
import torch

from models.loading import LoadedModel
from models.segment_io import prompt_inputs
from pipeline.engine.engine import Engine, FastPathRunner
from pipeline.engine.requests import EventKind, GenerationRequest
from pipeline.engine.step_records import StepMode, WarmUpReport
from script_text.prompt import SegmentText

logger = logging.getLogger(__name__)

CHECK_TOKENS = 6  # tokens the check request chooses (frames, for any model that speaks after a speech start)
CHECK_TEXT = "Hello, and welcome to the show."
# The largest latent difference the fast path may show against the eager step, relative to the latents' RMS: float32
# differs only in the order of additions; bf16 and fp16 round every product.
TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-8}
LOW_PRECISION_TOLERANCE = 2e-2


@dataclass(frozen=True)
class CheckRun:
    """What the check request made on one step: its tokens and latents, or why it failed."""

    tokens: tuple[int, ...] = ()
    latents: tuple[torch.Tensor, ...] = ()
    failure: str | None = None


def prepare_to_serve(engine: Engine, *, diffusion_steps: int = 10, max_keys: int = 8192) -> WarmUpReport:
    """Capture the decode step's graphs, check the fast path against the eager step (falling back until one
    passes), and record the outcome on the engine (`engine.warm_up_report`). Call before the engine's thread
    starts: the check steps the engine itself."""
    started = time.perf_counter()
    engine.warm_up(diffusion_steps, max_keys)
    runner = engine.runner
    difference: float | None = None
    if isinstance(runner, FastPathRunner) and runner.fast_path.mode is not StepMode.EAGER:
        if engine.loaded is None:
            raise ValueError("the fast path's check speaks through the model's processor: build the engine with it")
        difference = _check_fast_path(engine, runner, engine.loaded, diffusion_steps)
    fast_path = runner.fast_path
    report = WarmUpReport(
        seconds=time.perf_counter() - started,
        graphs=fast_path.graphs,
        mode=fast_path.mode,
        reason=fast_path.reason,
        difference=difference,
    )
    engine.warm_up_report = report
    logger.info(
        "engine warmed up",
        extra={
            "step": report.mode.value,
            "why": report.reason,
            "graphs": report.graphs,
            "seconds": round(report.seconds, 2),
            "check_difference": report.difference,
        },
    )
    return report


def _check_fast_path(engine: Engine, runner: FastPathRunner, loaded: LoadedModel, diffusion_steps: int) -> float | None:
    """Check the runner's fast path against its eager step, falling back one step at a time until one passes (or
    the eager step is left); the passing step's latent difference, None when none was checked."""
    request = check_request(loaded, diffusion_steps)
    reference: CheckRun | None = None
    difference: float | None = None
    while (mode := runner.fast_path.mode) is not StepMode.EAGER:
        fast = run_alone(engine, request)
        if fast.failure is not None:
            runner.fall_back(f"the {mode.value} step failed its self-check: {fast.failure}")
            continue
        if reference is None:
            with runner.eager_step():
                reference = run_alone(engine, request)
            if reference.failure is not None:
                raise RuntimeError(f"the eager step failed the warm-up check: {reference.failure}")
        difference = latent_difference(fast, reference)
        tolerance = TOLERANCE.get(runner.dtype, LOW_PRECISION_TOLERANCE)
        if difference <= tolerance:
            break
        runner.fall_back(
            f"the {mode.value} step differs from the eager step by {difference:.1e} of the latents' RMS "
            f"(tolerance {tolerance:.0e})"
        )
        difference = None
    return difference


def check_request(loaded: LoadedModel, diffusion_steps: int) -> GenerationRequest:
    """A short line spoken by a second of quiet synthetic voice, through the model's processor."""
    clock = np.arange(24_000) / 24_000
    voice = (0.1 * np.sin(2 * np.pi * 220 * clock) * np.exp(-3 * clock)).astype(np.float32)
    prompt = prompt_inputs(loaded, SegmentText(((0, CHECK_TEXT),)), {0: voice})
    return GenerationRequest(prompt, CHECK_TOKENS, seed=0, diffusion_steps=diffusion_steps, interactive=True)


def run_alone(engine: Engine, template: GenerationRequest) -> CheckRun:
    """The request through the idle engine by itself (a fresh copy each time, same seed): what it made."""
    request = GenerationRequest(
        template.prompt,
        template.max_new_tokens,
        seed=template.seed,
        cfg_scale=template.cfg_scale,
        diffusion_steps=template.diffusion_steps,
        interactive=True,
    )
    handle = engine.submit(request)
    engine.run_until_idle()
    tokens: list[int] = []
    latents: list[torch.Tensor] = []
    for event in handle.drain():
        if event.kind is EventKind.AUDIO and event.latent is not None:
            tokens.extend(event.tokens)
            latents.append(event.latent)
        elif event.kind is EventKind.FAILED:
            return CheckRun(failure=event.reason)
    return CheckRun(tuple(tokens), tuple(latents))


def latent_difference(fast: CheckRun, reference: CheckRun) -> float:
    """The largest difference between the two runs' latents, relative to the reference's RMS; infinite when they
    chose different tokens or made different frames (nothing after that compares)."""
    if fast.tokens != reference.tokens or len(fast.latents) != len(reference.latents):
        return float("inf")
    if not reference.latents:
        return 0.0
    got, expected = torch.stack(fast.latents), torch.stack(reference.latents)
    scale = float(expected.pow(2).mean().sqrt()) or 1.0
    return float((got - expected).abs().max()) / scale

"""Before serving, the fast path is checked against the eager step; a failure or a mismatch makes it fall back.

On the CPU the fixed-shape step is forced on (CUDA graphs need a GPU); the faults come in by replacing the step
function the fixed-shape decoder runs (`CapturedSteps.step`), which is where a failed kernel or a wrong one would
show on a GPU.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest
import torch

from models.loading import LoadedModel, load_model
from models.reference import reference_generate_segment
from models.segment_io import GenerationSettings
from pipeline.engine.engine import Engine, EngineConfig
from pipeline.engine.factory import engine_for_model
from pipeline.engine.frame_step import CapturedSteps, FrameStepKey, FrameStepOutputs
from pipeline.engine.requests import EventKind
from pipeline.engine.step_records import StepMode
from pipeline.engine.warm_up import TOLERANCE, prepare_to_serve
from pipeline.generation import SegmentRequest, submit_segment
from script_text.prompt import SegmentText
from tests.synthetic_audio import voice_like


@pytest.fixture(scope="module")
def tiny(tiny_attentive_checkpoint: Path) -> LoadedModel:
    return load_model(str(tiny_attentive_checkpoint), device="cpu")


def fixed_engine(tiny: LoadedModel) -> Engine:
    return engine_for_model(tiny, EngineConfig(slots=2, fixed_shapes=True, block_size=4, kv_blocks=512))


def serves_like_the_reference(engine: Engine, tiny: LoadedModel) -> None:
    request = SegmentRequest(
        SegmentText(((0, "After the check, a real request."),)), {0: voice_like(3.0, 24_000)}, 5, GenerationSettings()
    )
    handle = submit_segment(engine, request)
    engine.run_until_idle()
    events = list(handle.events(timeout=1))
    assert events[-1].kind is EventKind.FINISHED
    latents = torch.stack([event.latent for event in events if event.kind is EventKind.AUDIO])
    torch.testing.assert_close(latents, reference_generate_segment(tiny, request).latents, atol=1e-5, rtol=0)


def test_a_fast_path_that_agrees_with_the_eager_step_is_kept(tiny: LoadedModel) -> None:
    engine = fixed_engine(tiny)
    report = prepare_to_serve(engine, diffusion_steps=3)
    assert report.mode is StepMode.FIXED and report.reason == "CUDA graphs need a CUDA device"
    assert report.difference is not None and report.difference <= TOLERANCE[torch.float32]
    assert engine.warm_up_report == report and engine.load().warm_up_seconds == report.seconds
    serves_like_the_reference(engine, tiny)


def test_a_fast_path_that_fails_falls_back_to_the_eager_step_saying_why(
    tiny: LoadedModel, caplog: pytest.LogCaptureFixture
) -> None:
    engine = fixed_engine(tiny)

    def out_of_memory(key: FrameStepKey) -> FrameStepOutputs:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected)")

    engine.runner.fixed.captured.step = out_of_memory
    with caplog.at_level(logging.WARNING):
        report = prepare_to_serve(engine, diffusion_steps=3)
    assert report.mode is StepMode.EAGER and engine.runner.fast_path.mode is StepMode.EAGER
    assert report.reason.startswith("the fixed step failed its self-check: generation failed: CUDA out of memory")
    (line,) = [record for record in caplog.records if record.message == "decode step falls back"]
    assert line.why == report.reason
    serves_like_the_reference(engine, tiny)


@pytest.mark.parametrize("error", [1e-3, 1.0])
def test_a_fast_path_that_computes_something_else_falls_back(tiny: LoadedModel, error: float) -> None:
    """A fixed-shape step whose latents are off, by a little or a lot, is caught: the tolerance means something."""
    engine = fixed_engine(tiny)
    step = engine.runner.fixed.captured.step

    def off(key: FrameStepKey) -> FrameStepOutputs:
        outputs = step(key)
        return dataclasses.replace(outputs, latents=outputs.latents + error)

    engine.runner.fixed.captured.step = off
    report = prepare_to_serve(engine, diffusion_steps=3)
    assert report.mode is StepMode.EAGER
    assert "the fixed step differs from the eager step by" in report.reason and "(tolerance 1e-04)" in report.reason
    serves_like_the_reference(engine, tiny)


def test_a_graph_capture_that_fails_turns_graphs_off_and_runs_the_step_eagerly() -> None:
    """The capture itself needs a GPU; its failure path (an error from `_capture`) does not."""

    class FailingCapture(CapturedSteps):
        def _capture(self, key: FrameStepKey) -> tuple[torch.cuda.CUDAGraph, FrameStepOutputs]:
            raise RuntimeError("operation not permitted when stream is capturing")

    ran: list[FrameStepKey] = []

    def step(key: FrameStepKey) -> FrameStepOutputs:
        ran.append(key)
        return FrameStepOutputs(torch.zeros(1), torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1, 1, 1))

    captured = FailingCapture(step, inputs=None, block_size=4, enabled=True, max_graphs=4)  # type: ignore[arg-type]
    key = FrameStepKey(1, 1, 1, 10)
    captured.run(key)
    assert ran == [key] and not captured.enabled and not captured.graphs
    assert captured.failure == "CUDA graph capture failed: operation not permitted when stream is capturing"

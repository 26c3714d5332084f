"""Faults the crash tests inject into a real worker's engine, from outside production code.

A worker started with `VOXCAST_ENGINE_RUNNER_WRAPPER=tests.engine_faults:wrap_runner` runs its engine on a
`FaultyRunner`, which passes every call to the real runner and, for a generation whose prompt says a marker text:

- `FAULT_CRASH_ON_TEXT`: the worker process dies of SIGSEGV at the generation's 8th new frame (a poison job);
- `FAULT_ENGINE_ERROR_ON_TEXT`: the engine loop fails, with an exception inside its step that no step handles (as
  a bug in the loop would), once it steps such a generation.

`wrap_fast_path` instead breaks the fixed-shape decode step for every generation (`FAULT_FAST_PATH`), which the
worker's warm-up check must catch before it serves.

The marker is found in the prompt's own tokens, decoded, so the fault follows the job's script wherever the job runs.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from models.loading import LoadedModel
from pipeline.engine.frame_step import FrameStepKey, FrameStepOutputs
from pipeline.engine.runner import ModelRunner
from pipeline.engine.step_records import RequestStart, RowOutcome, StepInput

CRASH_AT_FRAME = 8
logger = logging.getLogger(__name__)


class EngineFault(Exception):
    """An injected error inside the engine loop's step (a bug in it, not in a request)."""


class FaultyRunner:
    """The real runner, with a crash or a loop error for generations whose prompt says a marker."""

    def __init__(self, runner: ModelRunner, loaded: LoadedModel, crash_text: str | None, error_text: str | None):
        self.runner = runner
        self.spec = runner.spec
        self.tokenizer = loaded.processor.tokenizer
        self.crash_text = crash_text
        self.error_text = error_text
        self.crashing: dict[int, int] = {}  # request id -> its new frames so far
        self.erroring: set[int] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runner, name)  # everything not faulted is the real runner's

    def start_request(self, start: RequestStart) -> np.ndarray | None:
        prompt = self.tokenizer.decode(start.prompt.input_ids[0])
        if self.crash_text and self.crash_text in prompt:
            self.crashing[start.request_id] = 0
        if self.error_text and self.error_text in prompt:
            self.erroring.add(start.request_id)
        return self.runner.start_request(start)

    def run(self, step: StepInput) -> list[RowOutcome]:
        if any(row.request_id in self.erroring for row in (*step.prefill, *step.decode)):
            raise EngineFault("injected engine fault (FAULT_ENGINE_ERROR_ON_TEXT)")
        return self._counted(self.runner.run(step))

    def flush(self) -> list[RowOutcome]:
        return self._counted(self.runner.flush())

    def _counted(self, outcomes: Iterable[RowOutcome]) -> list[RowOutcome]:
        outcomes = list(outcomes)
        for outcome in outcomes:
            if outcome.request_id in self.crashing and outcome.made_frame:
                self.crashing[outcome.request_id] += 1
                if self.crashing[outcome.request_id] >= CRASH_AT_FRAME:
                    logger.critical("crash test: this worker dies now")
                    os.kill(os.getpid(), signal.SIGSEGV)
        return outcomes


def wrap_runner(runner: ModelRunner, loaded: LoadedModel) -> FaultyRunner:
    """`VOXCAST_ENGINE_RUNNER_WRAPPER`'s callable: the faults the environment names, around the real runner."""
    return FaultyRunner(
        runner, loaded, os.environ.get("FAULT_CRASH_ON_TEXT"), os.environ.get("FAULT_ENGINE_ERROR_ON_TEXT")
    )


def wrap_fast_path(runner: ModelRunner, loaded: LoadedModel) -> ModelRunner:
    """`VOXCAST_ENGINE_RUNNER_WRAPPER`'s callable for the fast path's faults: with `FAULT_FAST_PATH=error` the
    fixed-shape step raises (as an out-of-memory or a failed kernel would), with `mismatch` its latents are off
    (as a wrong kernel's would); the eager step is untouched. The worker's warm-up check must catch either."""
    fault = os.environ.get("FAULT_FAST_PATH")
    if runner.fixed is None or fault is None:
        return runner
    step = runner.fixed.captured.step

    def faulty(key: FrameStepKey) -> FrameStepOutputs:
        if fault == "error":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected: FAULT_FAST_PATH=error)")
        outputs = step(key)
        return dataclasses.replace(outputs, latents=outputs.latents + 0.5)

    runner.fixed.captured.step = faulty
    return runner

"""A model on the CPU reuses freed memory: a request's start (its voices through the encoders, about 150 MiB of
activations) no longer faults in fresh pages from the kernel every time (about 40,000 per two-voice start of the
tiny model with glibc's defaults, most of the start's time)."""

from __future__ import annotations

import platform
import resource
import statistics

import numpy as np
import psutil
import pytest
import torch

from models.host_memory import keep_freed_memory, release_freed_memory
from models.segment_io import GenerationSettings
from models.tiny_checkpoint import random_model
from pipeline.engine.engine import EngineConfig
from pipeline.engine.factory import engine_for_model
from pipeline.engine.step_records import RequestStart
from pipeline.generation import SegmentRequest, submit_segment
from script_text.prompt import SegmentText
from tests.synthetic_audio import voice_like

FAULTS_LIMIT = 2_000  # pages (8 MiB) a warm start may still fault in: a twentieth of what glibc's defaults cost


def test_glibc_keeps_freed_memory_here() -> None:
    if platform.libc_ver()[0] != "glibc":
        pytest.skip(f"the C library here is {platform.libc_ver()[0] or 'unknown'}, not glibc: its defaults stay")
    assert keep_freed_memory(), "glibc's mallopt takes both thresholds"


def test_a_warm_start_on_the_cpu_faults_in_almost_no_pages() -> None:
    torch.manual_seed(0)
    loaded = random_model("tiny", torch.device("cpu"), torch.float32)
    engine = engine_for_model(loaded, EngineConfig(slots=1, policy="online", fixed_shapes=False))
    voices = {0: voice_like(5.0, 24_000, seed=0), 1: voice_like(7.0, 24_000, seed=1)}
    request = SegmentRequest(
        SegmentText(((0, "Welcome back to the show."), (1, "Thanks for having me."))),
        voices,
        2,
        GenerationSettings(seed=1, diffusion_steps=2),
    )
    faults: list[int] = []
    start_request = engine.runner.start_request

    def counted(start: RequestStart) -> np.ndarray | None:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        result = start_request(start)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        return result

    engine.runner.start_request = counted  # type: ignore[method-assign]
    for _ in range(6):
        handle = submit_segment(engine, request)
        engine.run_until_idle()
        handle.drain()
    assert len(faults) == 6
    # the first two set the heap up; after them a start now and then still finds a block gone (a few thousand pages)
    assert statistics.median(faults[2:]) < FAULTS_LIMIT, f"page faults per start: {faults}"


def test_released_memory_goes_back_to_the_kernel() -> None:
    # What bench/engine.py does before it samples a path's peak RSS: blocks an earlier path freed, kept by the
    # allocator, are not the next path's.
    if not keep_freed_memory():
        pytest.skip("the C library here keeps its own defaults (not glibc)")
    process = psutil.Process()
    blocks = [torch.ones(4 * 2**20) for _ in range(32)]  # 32 blocks of 16 MiB, each under the mmap threshold
    del blocks
    kept = process.memory_info().rss
    release_freed_memory()
    assert kept - process.memory_info().rss > 256 * 2**20, "most of the 512 MiB freed went back to the kernel"

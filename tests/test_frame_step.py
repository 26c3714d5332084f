"""The fixed-shape decode step: its buckets, its warm-up, and (on a GPU) its CUDA graphs.

Its arithmetic is held to `generate()` by the parity tests (`test_engine_parity.py`, the `fixed` cases);
here are the parts that decide shapes and graphs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from models.loading import load_model
from models.segment_io import GenerationSettings
from pipeline.engine.engine import Engine, EngineConfig
from pipeline.engine.factory import engine_for_model
from pipeline.engine.frame_step import (
    FrameStepKey,
    batch_buckets,
    bucket_for,
    chunk_count_bucket,
    chunk_count_buckets,
)
from pipeline.engine.requests import EventKind
from pipeline.engine.step_records import StepMode
from pipeline.generation import SegmentRequest, submit_segment
from script_text.prompt import SegmentText
from tests.synthetic_audio import voice_like


def test_batch_buckets_are_powers_of_two_up_to_the_slot_count() -> None:
    assert batch_buckets(1) == [1]
    assert batch_buckets(16) == [1, 2, 4, 8, 16]
    assert batch_buckets(48) == [1, 2, 4, 8, 16, 32, 48]
    assert batch_buckets(256)[-2:] == [128, 256]


@pytest.mark.parametrize(("needed", "expected"), [(1, 1), (3, 4), (4, 4), (33, 48), (48, 48)])
def test_a_batch_takes_the_smallest_bucket_that_holds_it(needed: int, expected: int) -> None:
    assert bucket_for(needed, batch_buckets(48)) == expected


def test_a_batch_beyond_the_slots_has_no_bucket() -> None:
    with pytest.raises(ValueError, match="49 rows exceed the largest bucket"):
        bucket_for(49, batch_buckets(48))


def test_chunk_counts_grow_by_at_most_half_and_stop_at_the_largest() -> None:
    assert chunk_count_buckets(40, 1000) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48]
    ladder = chunk_count_buckets(10**6, 10**6)
    assert all(1 < later / earlier <= 1.5 for earlier, later in zip(ladder[1:-1], ladder[2:], strict=True))
    assert chunk_count_buckets(100, 50)[-1] == 50


@pytest.mark.parametrize(("needed", "expected"), [(0, 1), (1, 1), (5, 6), (6, 6), (13, 16), (33, 48), (70, 70)])
def test_a_step_takes_the_smallest_chunk_count_that_holds_its_chunks(needed: int, expected: int) -> None:
    assert chunk_count_bucket(needed, largest=70) == expected
    assert expected <= max(1.5 * needed, 1)


def test_chunks_beyond_the_step_are_refused() -> None:
    with pytest.raises(ValueError, match="71 key chunks exceed the step's 70"):
        chunk_count_bucket(71, largest=70)


def _requests() -> list[SegmentRequest]:
    voices = {0: voice_like(4.0, 24_000, seed=0), 1: voice_like(5.0, 24_000, seed=1)}
    texts = [((0, "Hello there, and welcome."),), ((1, "A second voice, a longer line than the first one."),)]
    return [
        SegmentRequest(SegmentText(text), voices, frames, GenerationSettings(seed=seed))
        for text, frames, seed in zip(texts, (9, 14), (1, 2), strict=True)
    ]


def _latents(engine: Engine, requests: list[SegmentRequest]) -> list[torch.Tensor]:
    handles = [submit_segment(engine, request) for request in requests]
    engine.run_until_idle()
    results = []
    for handle in handles:
        events = list(handle.events(timeout=1))
        assert events[-1].kind is EventKind.FINISHED
        results.append(torch.stack([event.latent for event in events if event.kind is EventKind.AUDIO]))
    return results


@pytest.mark.slow  # two engines serve the same requests to the end
def test_a_step_with_no_row_decoding_changes_nothing(tiny_hf_checkpoint: Path) -> None:
    """What graph capture relies on: its warm-up runs the step for real, with no row decoding, mid-serving.

    (Read back at once: with overlap the warm-up also puts back what the step leaves for its successor.)
    """
    tiny = load_model(str(tiny_hf_checkpoint), device="cpu")
    requests = _requests()
    config = EngineConfig(slots=4, block_size=4, kv_blocks=1024, fixed_shapes=True, overlap=False)
    undisturbed = _latents(engine_for_model(tiny, config), requests)

    engine = engine_for_model(tiny, config)
    handles = [submit_segment(engine, request) for request in requests]
    for _ in range(6):
        engine.step()
    fixed = engine.runner.fixed
    with torch.inference_mode(), fixed.inputs.no_row_decoding(fixed.block_size):
        for rows in fixed.buckets:
            for positive, negative in ((1, 1), (2, 1), (8, 4)):
                fixed.step(FrameStepKey(rows, positive * rows, negative * rows, diffusion_steps=10))
    engine.run_until_idle()
    for handle, expected in zip(handles, undisturbed, strict=True):
        latents = torch.stack([e.latent for e in handle.events(timeout=1) if e.kind is EventKind.AUDIO])
        torch.testing.assert_close(latents, expected, atol=0, rtol=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device (bench/gpu.sh runs this)")
def test_cuda_graph_replays_match_the_eager_step(tiny_hf_checkpoint: Path) -> None:
    tiny = load_model(str(tiny_hf_checkpoint), device="cuda", dtype="float32")
    requests = _requests()
    eager = _latents(engine_for_model(tiny, EngineConfig(slots=4, fixed_shapes=True, cuda_graphs=False)), requests)
    engine = engine_for_model(tiny, EngineConfig(slots=4, fixed_shapes=True, cuda_graphs=True))
    assert engine.warm_up(max_keys=512) > 0
    graphed = _latents(engine, requests)
    assert engine.runner.fast_path.mode is StepMode.GRAPHS, engine.runner.fast_path.reason
    for got, expected in zip(graphed, eager, strict=True):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), atol=1e-4, rtol=0)


@pytest.mark.slow  # two engines serve the same requests to the end
def test_a_request_that_fills_its_blocks_ends_cleanly_while_another_goes_on(tiny_hf_checkpoint: Path) -> None:
    """With overlap a request is launched once more after its last token, writing one entry past what it holds;
    the row it leaves stays in the batch's rows, writing into the null block, and must not disturb the request
    still running (nor the one that takes the blocks it gave back)."""
    tiny = load_model(str(tiny_hf_checkpoint), device="cpu")
    two_voices = {0: voice_like(6.5, 24_000, seed=0), 1: voice_like(5.0, 24_000, seed=1)}
    text = SegmentText(((0, "A much longer line of text, which goes on for a while."), (1, "And a reply to it.")))
    full = SegmentRequest(text, two_voices, 9, GenerationSettings(seed=3))
    longer = SegmentRequest(
        SegmentText(((0, "Hi."),)), {0: voice_like(3.0, 24_000, seed=2)}, 40, GenerationSettings(seed=4)
    )
    third = SegmentRequest(SegmentText(((1, "Then a third."),)), two_voices, 12, GenerationSettings(seed=5))
    # Blocks of one token: every entry of every request lands in a block of its own.
    paged = {"block_size": 1, "kv_blocks": 4096}
    expected = _latents(
        engine_for_model(tiny, EngineConfig(slots=2, fixed_shapes=False, **paged)), [full, longer, third]
    )
    overlapped = EngineConfig(slots=2, fixed_shapes=True, overlap=True, **paged)
    got = _latents(engine_for_model(tiny, overlapped), [full, longer, third])
    for result, reference in zip(got, expected, strict=True):
        torch.testing.assert_close(result, reference, atol=1e-5, rtol=0)

"""The fixed-shape decode step: its buckets, its warm-up, and (on a GPU) its CUDA graphs.

Its arithmetic is held to `generate()` by the parity tests (`test_engine_parity.py`, the `fixed` cases);
here are the parts that decide shapes and graphs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline.engine import Engine, EngineConfig, EventKind
from pipeline.engine.frame_step import (
    FrameStepKey,
    batch_buckets,
    bucket_for,
    key_length_bucket,
    key_length_buckets,
)
from pipeline.generation import GenerationSettings, SegmentRequest, submit_segment
from pipeline.model_loading import load_model
from pipeline.prompt import SegmentText
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


@pytest.mark.parametrize(("needed", "expected"), [(1, 64), (64, 64), (65, 128), (700, 1024), (1025, 1025)])
def test_key_buckets_double_and_stop_at_the_cache(needed: int, expected: int) -> None:
    assert key_length_bucket(needed, columns=1025) == expected


@pytest.mark.parametrize("columns", [30, 513, 1025])
def test_warm_up_covers_exactly_the_key_buckets_steps_can_take(columns: int) -> None:
    taken = sorted({key_length_bucket(needed, columns) for needed in range(1, columns + 1)})
    assert key_length_buckets(columns, columns) == taken
    assert key_length_buckets(100, columns) == [b for b in taken if b <= key_length_bucket(min(100, columns), columns)]


def test_keys_beyond_the_tables_are_refused() -> None:
    with pytest.raises(ValueError, match="1026 keys exceed the block table's 1025 positions"):
        key_length_bucket(1026, columns=1025)


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


def test_a_step_with_no_row_decoding_changes_nothing(tiny_hf_checkpoint: Path) -> None:
    """What graph capture relies on: its warm-up runs the step for real, with no row decoding, mid-serving.

    (Read back at once: with overlap the warm-up also puts back what the step leaves for its successor.)
    """
    tiny = load_model(str(tiny_hf_checkpoint), device="cpu")
    requests = _requests()
    config = EngineConfig(slots=4, block_size=4, kv_blocks=1024, fixed_shapes=True, overlap=False)
    undisturbed = _latents(Engine.for_model(tiny, config), requests)

    engine = Engine.for_model(tiny, config)
    handles = [submit_segment(engine, request) for request in requests]
    for _ in range(6):
        engine.step()
    fixed = engine.runner.fixed
    with torch.inference_mode(), fixed.inputs.no_row_decoding(fixed.block_size):
        for rows in fixed.buckets:
            for positive, negative in ((64, 64), (128, 64), (512, 256)):
                fixed.step(FrameStepKey(rows, positive, negative, diffusion_steps=10))
    engine.run_until_idle()
    for handle, expected in zip(handles, undisturbed, strict=True):
        latents = torch.stack([e.latent for e in handle.events(timeout=1) if e.kind is EventKind.AUDIO])
        torch.testing.assert_close(latents, expected, atol=0, rtol=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device (bench/gpu.sh runs this)")
def test_cuda_graph_replays_match_the_eager_step(tiny_hf_checkpoint: Path) -> None:
    tiny = load_model(str(tiny_hf_checkpoint), device="cuda", dtype="float32")
    requests = _requests()
    eager = _latents(Engine.for_model(tiny, EngineConfig(slots=4, fixed_shapes=True, cuda_graphs=False)), requests)
    engine = Engine.for_model(tiny, EngineConfig(slots=4, fixed_shapes=True, cuda_graphs=True))
    assert engine.warm_up(max_keys=512) > 0
    graphed = _latents(engine, requests)
    assert engine.runner.graphs_captured, "a capture failed and the step fell back to eager"
    for got, expected in zip(graphed, eager, strict=True):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), atol=1e-4, rtol=0)


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
        Engine.for_model(tiny, EngineConfig(slots=2, fixed_shapes=False, **paged)), [full, longer, third]
    )
    overlapped = EngineConfig(slots=2, fixed_shapes=True, overlap=True, **paged)
    got = _latents(Engine.for_model(tiny, overlapped), [full, longer, third])
    for result, reference in zip(got, expected, strict=True):
        torch.testing.assert_close(result, reference, atol=1e-5, rtol=0)

"""Decode attention over key chunks equals transformers' attention over the same keys, row by row, and reads what
each row holds."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from models.loading import load_model
from models.segment_io import GenerationSettings, prompt_inputs
from pipeline.engine.engine import EngineConfig
from pipeline.engine.factory import engine_for_model
from pipeline.engine.kv_blocks import NULL_BLOCK, CacheSpan
from pipeline.engine.paged_attention import chunked_attention
from pipeline.engine.paged_kv import KeyChunks, KVPoolShape, PagedKVPool, eager_view
from pipeline.engine.requests import EventKind
from pipeline.generation import SegmentRequest, submit_segment
from script_text.prompt import SegmentText
from tests.synthetic_audio import voice_like

KV_HEADS, GROUPS, HEAD_DIM, BLOCK = 2, 3, 8, 16


class _Attention(torch.nn.Module):
    """What transformers' attention functions read of the module: its grouped-query factor."""

    num_key_value_groups = GROUPS
    is_causal = True
    training = False


def _filled_pool(generator: torch.Generator) -> PagedKVPool:
    pool = PagedKVPool(KVPoolShape(1, KV_HEADS, HEAD_DIM, BLOCK), 80, torch.device("cpu"), torch.float32)
    pool.keys[0].normal_(generator=generator)
    pool.values[0].normal_(generator=generator)
    return pool


def _dense(pool: PagedKVPool, span: CacheSpan, query: torch.Tensor) -> torch.Tensor:
    """One row alone through sdpa, over exactly its visible entries (the prefill path's dense view)."""
    view = eager_view(pool, [span], new_tokens=2, device=torch.device("cpu"))  # a dense view of its keys
    slots, mask = view.keys.slots[:, :-1], view.keys.mask[:, :, :1, :-1]  # as if the first new entry were the query
    keys = pool.keys[0][slots].transpose(1, 2)
    values = pool.values[0][slots].transpose(1, 2)
    out, _ = sdpa_attention_forward(_Attention(), query, keys, values, mask, scaling=HEAD_DIM**-0.5)
    return out


def test_chunked_attention_equals_dense_attention_for_every_row_whatever_its_length() -> None:
    generator = torch.Generator().manual_seed(0)
    pool = _filled_pool(generator)
    spans = [
        CacheSpan(tuple(range(1, 41)), length=639, visible_from=0),  # 640 keys: ten chunks
        CacheSpan((41,), length=2, visible_from=0),  # three keys
        CacheSpan((NULL_BLOCK, NULL_BLOCK, 42, 43, 44, 45, 46), length=100, visible_from=37),  # since a restart
    ]
    query = torch.randn(len(spans), KV_HEADS * GROUPS, 1, HEAD_DIM, generator=generator)
    view = eager_view(pool, spans, new_tokens=1, device=torch.device("cpu"))
    got = chunked_attention(pool, 0, view.keys, query, HEAD_DIM**-0.5)
    for row, span in enumerate(spans):
        # the decode view's window ends with its new entry: the dense view of `length` entries plus that one
        expected = _dense(pool, CacheSpan(span.blocks, span.length, span.visible_from), query[row : row + 1])
        torch.testing.assert_close(got[row : row + 1], expected, atol=1e-6, rtol=1e-5)


def test_padding_chunks_change_nothing_and_a_row_without_keys_gets_zeros() -> None:
    generator = torch.Generator().manual_seed(1)
    pool = _filled_pool(generator)
    view = eager_view(pool, [CacheSpan(tuple(range(1, 9)), length=100, visible_from=0)], 1, torch.device("cpu"))
    chunks = view.keys
    query = torch.randn(2, KV_HEADS * GROUPS, 1, HEAD_DIM, generator=generator)
    alone = chunked_attention(pool, 0, KeyChunks(chunks.rows, chunks.slots, chunks.visible, 2), query, 0.3)
    padded = KeyChunks(
        torch.cat([chunks.rows, torch.tensor([0, 1, 0])]),
        torch.cat([chunks.slots, torch.randint(0, 80 * BLOCK, (3, chunks.slots.shape[1]), generator=generator)]),
        torch.cat([chunks.visible, torch.zeros(3, chunks.visible.shape[1], dtype=torch.bool)]),
        row_count=2,
    )
    with_padding = chunked_attention(pool, 0, padded, query, 0.3)
    torch.testing.assert_close(with_padding, alone, atol=0, rtol=0)
    assert torch.count_nonzero(with_padding[1]) == 0 and torch.isfinite(with_padding).all()


@pytest.mark.parametrize("fixed_shapes", [False, True], ids=["eager", "fixed"])
def test_beside_a_long_generation_the_engine_reads_at_most_twice_the_keys_its_rows_can_see(
    tiny_hf_checkpoint: Path, fixed_shapes: bool
) -> None:
    """One long prompt among short ones: a dense gather would make every row read the long one's keys (about four
    times what they can see, here); chunks keep the whole run within twice, padding of the fixed shapes included."""
    tiny = load_model(str(tiny_hf_checkpoint), device="cpu")
    voices = {0: voice_like(3.0, 24_000, seed=0)}
    long_text = SegmentText(tuple((0, f"Line {i} of a long script that goes on and on.") for i in range(40)))
    requests = [SegmentRequest(long_text, voices, 6, GenerationSettings(seed=1))] + [
        SegmentRequest(SegmentText(((0, f"Short {i}."),)), voices, 6, GenerationSettings(seed=2 + i)) for i in range(3)
    ]
    config = EngineConfig(slots=4, block_size=4, kv_blocks=2048, fixed_shapes=fixed_shapes, overlap=False)
    engine = engine_for_model(tiny, config)
    handles = [submit_segment(engine, request) for request in requests]
    engine.run_until_idle()
    assert all(list(handle.events(timeout=1))[-1].kind is EventKind.FINISHED for handle in handles)
    longest = max(prompt_inputs(tiny, r.text, r.voices).length for r in requests)
    shortest = min(prompt_inputs(tiny, r.text, r.voices).length for r in requests)
    assert longest > 4 * shortest  # a batch where a dense gather would waste most of what it reads
    reads = engine.load().key_reads
    assert reads.visible > 0 and reads.ratio <= 2.0, reads

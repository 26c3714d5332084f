"""Slot-pooled streaming state against transformers' own per-batch caches and DynamicCache."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers.models.vibevoice_acoustic_tokenizer.modeling_vibevoice_acoustic_tokenizer import (
    VibeVoiceAcousticTokenizerConv1dPaddingCache,
)

from pipeline.engine.kv_cache import CacheFullError, KVCacheShape, SlotKVCache
from pipeline.model_loading import LoadedModel, load_model
from tokenizer.streaming import SlotConvCache


@pytest.fixture(scope="module")
def tiny(tiny_hf_checkpoint: Path) -> LoadedModel:
    return load_model(str(tiny_hf_checkpoint), device="cpu")


@torch.inference_mode()
def test_decoder_streams_per_slot_as_transformers_streams_one_batch(tiny: LoadedModel) -> None:
    decoder = tiny.model.model.audio_tower
    latents = torch.randn(2, 5, tiny.model.config.audio_config.hidden_size, generator=torch.Generator().manual_seed(0))
    reference_cache = VibeVoiceAcousticTokenizerConv1dPaddingCache()
    expected = [
        decoder.decode(latents[:, t : t + 1], padding_cache=reference_cache, use_cache=True).audio for t in range(5)
    ]
    pool = SlotConvCache(slots=4)
    pool.reset(1)
    got = []
    for t in range(5):
        # Slots 3 and 1 carry the two streams; slot 0 runs a stranger in between, which must not disturb them.
        got.append(
            decoder.decode(latents[:, t : t + 1], padding_cache=pool.rows(torch.tensor([3, 1])), use_cache=True).audio
        )
        decoder.decode(torch.randn_like(latents[:1, :1]), padding_cache=pool.rows(torch.tensor([0])), use_cache=True)
    for expected_frame, got_frame in zip(expected, got, strict=True):
        torch.testing.assert_close(got_frame, expected_frame, atol=1e-5, rtol=1e-5)
    assert pool.nbytes > 0
    pool.reset(3)
    assert all(not state[3].any() for state in pool.states.values())


def test_kv_view_masks_each_slot_to_its_own_length() -> None:
    cache = SlotKVCache(
        KVCacheShape(layers=1, kv_heads=1, head_dim=2, capacity=8), slots=3, device="cpu", dtype=torch.float32
    )
    cache.lengths[:] = [3, 0, 5]
    view = cache.view([2, 0], new_tokens=1, device=torch.device("cpu"))
    assert view.position_ids.tolist() == [[5], [3]]
    assert view.key_length == 6
    assert view.attention_mask[:, 0, 0].tolist() == [[True] * 6, [True] * 4 + [False] * 2]
    keys, _ = view.update(torch.ones(2, 1, 1, 2), torch.ones(2, 1, 1, 2), layer_idx=0)
    assert keys.shape == (2, 1, 6, 2) and cache.keys[0][2, 0, 5].tolist() == [1.0, 1.0]
    view.commit()
    assert cache.lengths == [4, 0, 6]


def test_hidden_history_stays_counted_but_invisible() -> None:
    cache = SlotKVCache(
        KVCacheShape(layers=1, kv_heads=1, head_dim=2, capacity=8), slots=1, device="cpu", dtype=torch.float32
    )
    cache.lengths[0] = 4
    cache.hide_history(0)
    view = cache.view([0], new_tokens=1, device=torch.device("cpu"))
    assert view.position_ids.tolist() == [[4]]
    assert view.attention_mask[0, 0, 0].tolist() == [False] * 4 + [True]


def test_a_full_slot_refuses_more_tokens() -> None:
    cache = SlotKVCache(
        KVCacheShape(layers=1, kv_heads=1, head_dim=2, capacity=4), slots=1, device="cpu", dtype=torch.float32
    )
    cache.lengths[0] = 4
    with pytest.raises(CacheFullError, match="capacity of 4 tokens"):
        cache.view([0], new_tokens=1, device=torch.device("cpu"))

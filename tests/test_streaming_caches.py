"""Row-pooled streaming state of the codec against transformers' own per-batch caches."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers.models.vibevoice_acoustic_tokenizer.modeling_vibevoice_acoustic_tokenizer import (
    VibeVoiceAcousticTokenizerConv1dPaddingCache,
)

from models.loading import LoadedModel, load_model
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

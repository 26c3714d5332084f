"""The K/V pool on a GPU leaves room for the largest decode step it allows (the arithmetic; the measuring needs a GPU)."""

from __future__ import annotations

import pytest

from pipeline.engine.memory_plan import StepMemory, pool_blocks_within
from pipeline.engine.paged_kv import CHUNK_KEYS

GIB = 1 << 30
BLOCK_BYTES = 16 * 28 * 2 * 2 * 128 * 2  # 16 tokens of VibeVoice-1.5B's keys and values, every layer, bf16


def test_two_runs_give_the_fixed_part_and_the_part_per_chunk() -> None:
    step = StepMemory.from_two_runs((16, 272), (400_000_000, 400_000_000 + 256 * 90_000))
    assert step == StepMemory(fixed_bytes=400_000_000 - 16 * 90_000, bytes_per_chunk=90_000)
    with pytest.raises(ValueError, match="two different chunk counts"):
        StepMemory.from_two_runs((16, 16), (1, 2))


@pytest.mark.parametrize("budget", [10 * GIB, 100 * GIB])
def test_the_pool_and_its_largest_step_fit_the_budget_and_one_block_more_would_not(budget: int) -> None:
    step = StepMemory(fixed_bytes=700 << 20, bytes_per_chunk=CHUNK_KEYS * 2 * 2 * 128 * 2 * 3)
    blocks = pool_blocks_within(budget, BLOCK_BYTES, 16, 64, CHUNK_KEYS, step)

    def total(blocks: int) -> int:
        return blocks * BLOCK_BYTES + step.largest_step(blocks * 16, 64, CHUNK_KEYS)

    assert total(blocks) <= budget < total(blocks + 1)
    # the step takes a small share: the gather of one layer's keys beside a pool of every layer's
    assert blocks * BLOCK_BYTES > 0.85 * (budget - step.fixed_bytes)


def test_a_budget_the_step_alone_fills_leaves_no_pool() -> None:
    assert pool_blocks_within(GIB, BLOCK_BYTES, 16, 16, CHUNK_KEYS, StepMemory(GIB, 1000)) == 0

"""The K/V books (`kv_blocks`) and what a forward reads of the pool (`paged_kv`), alone: no model."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.engine.kv_blocks import NULL_BLOCK, BlockPool, BranchBlocks, CacheSpan, PoolExhausted
from pipeline.engine.paged_kv import KVPoolShape, PagedKVPool, eager_view, token_slots


def test_the_pool_hands_out_every_block_but_the_null_one_once() -> None:
    pool = BlockPool(num_blocks=5, block_size=4)
    taken = pool.take(4)
    assert sorted(taken) == [1, 2, 3, 4] and pool.free == 0 and pool.in_use == 4
    with pytest.raises(PoolExhausted, match="1 K/V blocks wanted, 0 free"):
        pool.take(1)
    pool.give_back(taken[:2])
    assert pool.free == 2
    with pytest.raises(ValueError, match="given back twice"):
        pool.give_back(taken[:1])


def test_a_branch_grows_a_block_at_a_time_and_takes_nothing_when_short() -> None:
    pool = BlockPool(num_blocks=4, block_size=4)
    branch = BranchBlocks()
    branch.grow(pool, 4)
    assert branch.held == 1
    branch.grow(pool, 5)
    assert branch.held == 2
    with pytest.raises(PoolExhausted):
        branch.grow(pool, 20)  # three more wanted, one free
    assert branch.held == 2 and pool.free == 1
    branch.release(pool)
    assert pool.free == 3 and branch.table == [] and branch.length == 0


def test_hidden_history_gives_back_every_whole_block_but_the_first() -> None:
    pool = BlockPool(num_blocks=10, block_size=4)
    branch = BranchBlocks()
    branch.grow(pool, 18)  # five blocks
    branch.length = 17
    branch.hide_history(pool)
    assert branch.visible_from == 17
    assert branch.table[0] != NULL_BLOCK and branch.table[1:4] == [NULL_BLOCK] * 3 and branch.table[4] != NULL_BLOCK
    assert branch.held == 2 and pool.free == 7


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["grow", "write", "hide", "release"]), st.integers(1, 30)))
)
def test_no_block_is_lost_or_held_twice(operations) -> None:  # type: ignore[no-untyped-def]
    pool = BlockPool(num_blocks=24, block_size=3)
    branches = [BranchBlocks() for _ in range(6)]
    for index, operation, tokens in operations:
        branch = branches[index]
        if operation == "grow":
            try:
                branch.grow(pool, branch.length + tokens)
            except PoolExhausted:
                pass
        elif operation == "write":
            branch.length = min(branch.length + tokens, len(branch.table) * pool.block_size)
        elif operation == "hide":
            branch.hide_history(pool)
        else:
            branch.release(pool)
        held = [block for branch in branches for block in branch.table if block != NULL_BLOCK]
        assert len(held) == len(set(held)) == pool.in_use
    for branch in branches:
        branch.release(pool)
    assert pool.free == pool.total


def test_token_slots_follow_each_table_and_land_past_it_in_the_null_block() -> None:
    tables = torch.tensor([[3, 1], [2, 0]])
    positions = torch.tensor([[0, 3, 4, 7, 8], [1, 2, 5, 9, 100]])
    assert token_slots(tables, positions, block_size=4).tolist() == [[12, 15, 4, 7, 0], [9, 10, 1, 1, 0]]


def test_a_view_reads_the_visible_entries_and_position_zero_once() -> None:
    pool = PagedKVPool(
        KVPoolShape(layers=1, kv_heads=1, head_dim=1, block_size=2),
        num_blocks=8,
        device=torch.device("cpu"),
        dtype=torch.float32,
    )
    # A branch of 7 entries in blocks 5, 2, 7, 4 whose history before position 5 is hidden (blocks 1 of it given back).
    span = CacheSpan(blocks=(5, NULL_BLOCK, 7, 4), length=7, visible_from=5)
    view = eager_view(pool, [span], new_tokens=1, device=torch.device("cpu"))
    assert view.positions.tolist() == [[7]]
    assert view.write_slots.tolist() == [[4 * 2 + 1]]
    # position 0 apart, then the window from the start of position 5's block (4) to the new entry (7)
    assert view.read_slots.tolist() == [[10, 7 * 2, 7 * 2 + 1, 4 * 2, 4 * 2 + 1]]
    assert view.attention_mask[0, 0, 0].tolist() == [True, False, True, True, True]
    # before any history is hidden, position 0 is in the window and read once
    fresh = eager_view(pool, [CacheSpan((5, 2), 3, 0)], new_tokens=1, device=torch.device("cpu"))
    assert fresh.attention_mask[0, 0, 0].tolist() == [False, True, True, True, True]


def test_a_view_writes_each_new_entry_in_its_slot_and_returns_what_each_row_reads() -> None:
    shape = KVPoolShape(layers=1, kv_heads=1, head_dim=2, block_size=2)
    pool = PagedKVPool(shape, num_blocks=6, device=torch.device("cpu"), dtype=torch.float32)
    spans = [CacheSpan((3, 1), 2, 0), CacheSpan((2,), 0, 0)]
    view = eager_view(pool, spans, new_tokens=1, device=torch.device("cpu"))
    new = torch.tensor([[[[1.0, 1.0]]], [[[2.0, 2.0]]]])  # [rows, heads, new, dim]
    keys, values = view.update(new, new, layer_idx=0)
    assert pool.keys[0][1 * 2 + 0].tolist() == [[1.0, 1.0]]  # row 0's third entry: block 1, offset 0
    assert pool.keys[0][2 * 2 + 0].tolist() == [[2.0, 2.0]]  # row 1's first entry: block 2, offset 0
    assert keys.shape == (2, 1, 4, 2)  # position 0 apart, then the 3 keys of the longer row's window
    assert keys[0, 0, 3].tolist() == [1.0, 1.0] and keys[1, 0, 1].tolist() == [2.0, 2.0]

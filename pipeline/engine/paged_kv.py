"""The language model's K/V in one pool of fixed-size blocks, and what a forward reads and writes of it.

Every layer keeps its keys and values as `[blocks * block_size, kv_heads, head_dim]`: token slot
`block * block_size + offset`. Both CFG branches of every request share the pool; which blocks a request
holds is the engine's business (`kv_blocks.py`). A forward is handed a `PagedView`, which has the one
method Qwen2's attention calls on a cache (`update`): it writes each row's new entries at their slots and
returns, per row, the entries the row may read, gathered from its blocks into `[rows, kv_heads, keys,
head_dim]`, with a mask that hides what the row must not see. So the decoder layers stay transformers' own.

A row reads from the start of the block holding its first visible entry: the negative branch, which hides
its history at every speech start, reads only the blocks since then, and its first entry (position 0, the
speech start it began from), which stays visible for good: the original implementation copies that entry
over the last one at a restart and attends from there; attending to the entry itself is the same sum.
Every row reads position 0 as one extra key (masked where its window holds it already). Positions follow
`generate()`: an entry's RoPE position is the number of entries its branch held before it, masked or not.

Two ways to build a view, with the same arithmetic:
- `eager_view`: from the spans on the host, exact lengths (prefill chunks and the eager decode step);
- `fixed_view`: from device tensors of fixed shape (block tables, positions, visible starts) and a bucketed
  key length, so one CUDA graph replays over any tables. A position past the table's end maps to the null
  block, which is how rows that sit a step out write their token harmlessly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from pipeline.engine.kv_blocks import NULL_BLOCK, CacheSpan


@dataclass(frozen=True)
class KVPoolShape:
    layers: int
    kv_heads: int
    head_dim: int
    block_size: int

    def bytes_per_block(self, dtype: torch.dtype) -> int:
        """Keys and values of every layer for one block of tokens."""
        element = torch.empty(0, dtype=dtype).element_size()
        return 2 * self.layers * self.kv_heads * self.block_size * self.head_dim * element


class PagedKVPool:
    """The K/V tensors of every layer, `num_blocks` blocks of `block_size` token slots each."""

    def __init__(self, shape: KVPoolShape, num_blocks: int, device: torch.device, dtype: torch.dtype) -> None:
        size = (num_blocks * shape.block_size, shape.kv_heads, shape.head_dim)
        self.shape = shape
        self.num_blocks = num_blocks
        self.keys = [torch.zeros(size, device=device, dtype=dtype) for _ in range(shape.layers)]
        self.values = [torch.zeros(size, device=device, dtype=dtype) for _ in range(shape.layers)]

    @property
    def block_size(self) -> int:
        return self.shape.block_size

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


class PagedView:
    """What one LM forward sees: where its new entries go, which entries each row reads, and the mask."""

    def __init__(
        self,
        pool: PagedKVPool,
        write_slots: torch.Tensor,
        read_slots: torch.Tensor,
        attention_mask: torch.Tensor,
        positions: torch.Tensor,
    ) -> None:
        self.pool = pool
        self.write_slots = write_slots  # [rows, new] long: the token slot of each new entry
        self.read_slots = read_slots  # [rows, keys] long: the token slots each row reads, in position order
        self.attention_mask = attention_mask  # [rows, 1, new, keys] bool
        self.positions = positions  # [rows, new] long: RoPE positions of the new entries

    @property
    def position_ids(self) -> torch.Tensor:
        return self.positions

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store `[rows, kv_heads, new, head_dim]` at the rows' slots; return what each row reads, same layout."""
        keys, values = self.pool.keys[layer_idx], self.pool.values[layer_idx]
        heads, dim = keys.shape[1:]
        slots = self.write_slots.reshape(-1)
        keys[slots] = key_states.transpose(1, 2).reshape(-1, heads, dim).to(keys.dtype)
        values[slots] = value_states.transpose(1, 2).reshape(-1, heads, dim).to(values.dtype)
        return keys[self.read_slots].transpose(1, 2), values[self.read_slots].transpose(1, 2)


def token_slots(tables: torch.Tensor, positions: torch.Tensor, block_size: int) -> torch.Tensor:
    """The pool slot of each logical `position` [rows, n] through each row's block table [rows, width].

    A position past the table's width lands in the null block.
    """
    width = tables.shape[1]
    logical_block = torch.div(positions, block_size, rounding_mode="floor")
    inside = logical_block < width
    blocks = tables.gather(1, logical_block.clamp(max=width - 1))
    blocks = torch.where(inside, blocks, torch.full_like(blocks, NULL_BLOCK))
    return blocks * block_size + positions % block_size


def paged_view(
    pool: PagedKVPool,
    tables: torch.Tensor,
    first_position: torch.Tensor,
    new_tokens: int,
    visible_from: torch.Tensor,
    key_length: int,
) -> PagedView:
    """A view over rows with block `tables` [rows, width], each appending `new_tokens` entries at `first_position`
    [rows] and reading position 0 and `key_length` entries from the start of the block that holds its
    `visible_from` [rows]."""
    device = tables.device
    block_size = pool.block_size
    positions = first_position[:, None] + torch.arange(new_tokens, device=device)[None, :]  # [rows, new]
    key_start = torch.div(visible_from, block_size, rounding_mode="floor") * block_size
    window = key_start[:, None] + torch.arange(key_length, device=device)[None, :]  # [rows, keys]
    keys = window[:, None, :]
    visible = (keys <= positions[:, :, None]) & ((keys >= visible_from[:, None, None]) | (keys == 0))
    first_apart = (key_start > 0)[:, None, None].expand(-1, new_tokens, 1)  # position 0 outside the window
    key_positions = torch.cat([torch.zeros_like(window[:, :1]), window], dim=1)
    return PagedView(
        pool,
        write_slots=token_slots(tables, positions, block_size),
        read_slots=token_slots(tables, key_positions, block_size),
        attention_mask=torch.cat([first_apart, visible], dim=-1)[:, None],
        positions=positions,
    )


def eager_view(pool: PagedKVPool, spans: Sequence[CacheSpan], new_tokens: int, device: torch.device) -> PagedView:
    """A view for rows given by their spans on the host, reading exactly as many keys as the longest needs."""
    block_size = pool.block_size
    width = max(1, max(len(span.blocks) for span in spans))
    tables = torch.full((len(spans), width), NULL_BLOCK, dtype=torch.long)
    for row, span in enumerate(spans):
        tables[row, : len(span.blocks)] = torch.tensor(span.blocks, dtype=torch.long)
    starts = [span.visible_from // block_size * block_size for span in spans]
    key_length = max(span.length + new_tokens - start for span, start in zip(spans, starts, strict=True))
    return paged_view(
        pool,
        tables.to(device),
        torch.tensor([span.length for span in spans], device=device),
        new_tokens,
        torch.tensor([span.visible_from for span in spans], device=device),
        key_length,
    )

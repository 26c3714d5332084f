"""Slot-contiguous KV caches for the language model, one per CFG branch.

Each layer keeps `[slots, kv_heads, capacity, head_dim]` keys and values, allocated once. A slot is one
request's row; its entries fill positions `0..length-1`. A forward over some slots hands the Qwen2
attention a `SlotCacheView`, which has the one method attention calls on a cache (`update`): it writes
the new keys and values at each slot's own position and returns the slots' keys and values up to the
longest of them, with a mask that hides what lies beyond each slot's length. So no request pays for
recomputing a prefix, rows of different lengths share a forward, and the decoder layers stay
transformers' own.

The fixed-shape decode step (`frame_step.py`) uses a `FixedSlotView` instead: rows `0..n-1` of the cache
as they lie (views, not copies), one new token per row at a position read from a device tensor, keys up
to a bucketed length. Rows that sit a step out still write their token, one past their length, where
nothing reads it; each slot has one spare column so a full slot can do that too.

Positions follow `generate()`: a token's RoPE position is the number of entries its slot held before it,
masked or not. The negative (CFG) branch, when a new speech segment starts, hides everything it held
before (`hide_history`), as `generate()` does by zeroing its attention mask, while positions keep counting.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class KVCacheShape:
    layers: int
    kv_heads: int
    head_dim: int
    capacity: int  # tokens per slot


class SlotKVCache:
    """The K/V tensors of every slot for one branch, and each slot's length and visible start."""

    def __init__(self, shape: KVCacheShape, slots: int, device: torch.device | str, dtype: torch.dtype) -> None:
        size = (slots, shape.kv_heads, shape.capacity + 1, shape.head_dim)  # + the spare column
        self.shape = shape
        self.keys = [torch.zeros(size, device=device, dtype=dtype) for _ in range(shape.layers)]
        self.values = [torch.zeros(size, device=device, dtype=dtype) for _ in range(shape.layers)]
        self.lengths = [0] * slots
        self.visible_from = [0] * slots

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    def reset(self, slot: int) -> None:
        """Empty `slot` for a new request (stale entries stay in memory but are never visible)."""
        self.lengths[slot] = 0
        self.visible_from[slot] = 0

    def hide_history(self, slot: int) -> None:
        """From now on `slot` attends only to entries written after this call."""
        self.visible_from[slot] = self.lengths[slot]

    def view(self, slots: Sequence[int], new_tokens: int, device: torch.device) -> SlotCacheView:
        """A cache for one forward that appends `new_tokens` entries to each of `slots`."""
        for slot in slots:
            if self.lengths[slot] + new_tokens > self.shape.capacity:
                raise CacheFullError(
                    f"slot {slot} holds {self.lengths[slot]} tokens; {new_tokens} more exceed the "
                    f"capacity of {self.shape.capacity} tokens per slot"
                )
        return SlotCacheView(self, list(slots), new_tokens, device)


class CacheFullError(RuntimeError):
    """A request grew past the tokens a slot can hold."""


class SlotCacheView:
    """What one LM forward sees: the chosen slots, their positions and attention mask, the cache update."""

    def __init__(self, cache: SlotKVCache, slots: list[int], new_tokens: int, device: torch.device) -> None:
        self.cache = cache
        self.slots = slots
        self.new_tokens = new_tokens
        starts = torch.tensor([cache.lengths[s] for s in slots], device=device)
        offsets = torch.arange(new_tokens, device=device)
        self.rows = torch.tensor(slots, device=device)
        self.write_positions = starts[:, None] + offsets[None, :]  # [batch, new_tokens]
        self.key_length = max(cache.lengths[s] for s in slots) + new_tokens
        keys = torch.arange(self.key_length, device=device)
        visible_from = torch.tensor([cache.visible_from[s] for s in slots], device=device)
        # [batch, 1, new_tokens, key_length]: causal within the new tokens, nothing before visible_from.
        self.attention_mask = (keys[None, None, :] <= self.write_positions[:, :, None]) & (
            keys[None, None, :] >= visible_from[:, None, None]
        )
        self.attention_mask = self.attention_mask[:, None]

    @property
    def position_ids(self) -> torch.Tensor:
        return self.write_positions

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store `[batch, kv_heads, new_tokens, head_dim]` at each slot's positions; return the slots' K/V."""
        rows = self.rows[:, None].expand_as(self.write_positions)
        keys, values = self.cache.keys[layer_idx], self.cache.values[layer_idx]
        keys[rows, :, self.write_positions] = key_states.transpose(1, 2).to(keys.dtype)
        values[rows, :, self.write_positions] = value_states.transpose(1, 2).to(values.dtype)
        return keys[self.rows, :, : self.key_length], values[self.rows, :, : self.key_length]

    def commit(self) -> None:
        """Count the new entries as written; call once the forward has run every layer."""
        for slot in self.slots:
            self.cache.lengths[slot] += self.new_tokens


class FixedSlotView:
    """One fixed-shape decode forward over cache rows `0..rows-1`: a new token each, keys up to `key_length`.

    Everything that changes between steps (each row's write position and visible start) is read from
    device tensors, so a CUDA graph captured over this view replays for any lengths below its key
    bucket, and attention reads the cache in place instead of a gathered copy. The caller keeps the
    host-side lengths; nothing here commits.
    """

    def __init__(
        self,
        cache: SlotKVCache,
        rows: int,
        key_length: int,
        positions: torch.Tensor,
        visible_from: torch.Tensor,
        row_index: torch.Tensor,
    ) -> None:
        self.cache = cache
        self.rows = rows
        self.key_length = key_length
        self.positions = positions  # [rows] long: where each row's new entry goes, also its RoPE position
        self.row_index = row_index  # [rows] long: 0..rows-1
        keys = torch.arange(key_length, device=positions.device)
        visible = (keys[None, :] <= positions[:, None]) & (keys[None, :] >= visible_from[:, None])
        self.attention_mask = visible[:, None, None, :]  # [rows, 1, 1, key_length]

    @property
    def position_ids(self) -> torch.Tensor:
        return self.positions[:, None]

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store `[rows, kv_heads, 1, head_dim]` at each row's position; return the rows' K/V as views."""
        keys, values = self.cache.keys[layer_idx], self.cache.values[layer_idx]
        keys[self.row_index, :, self.positions] = key_states[:, :, 0].to(keys.dtype)
        values[self.row_index, :, self.positions] = value_states[:, :, 0].to(values.dtype)
        return keys[: self.rows, :, : self.key_length], values[: self.rows, :, : self.key_length]

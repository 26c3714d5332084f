"""Slot-contiguous KV caches for the language model, one per CFG branch.

Each layer keeps `[slots, kv_heads, capacity, head_dim]` keys and values, allocated once. A slot is one
request's row; its entries fill positions `0..length-1`. A forward over some slots hands the Qwen2
attention a `SlotCacheView`, which has the one method attention calls on a cache (`update`): it writes
the new keys and values at each slot's own position and returns the slots' keys and values up to the
longest of them, with a mask that hides what lies beyond each slot's length. So no request pays for
recomputing a prefix, rows of different lengths share a forward, and the decoder layers stay
transformers' own.

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
        size = (slots, shape.kv_heads, shape.capacity, shape.head_dim)
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

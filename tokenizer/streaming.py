"""Streaming state of the acoustic decoder and semantic encoder, pooled over engine slots.

transformers' `VibeVoiceAcousticTokenizerConv1dPaddingCache` keeps, per causal conv layer, the last
`left_pad` input samples of each batch row: a `[batch, channels, left_pad]` tensor created lazily for a
batch whose rows never change. The engine's batches change every step (requests join and leave), so
here each layer's state lives in one preallocated `[slots, channels, left_pad]` tensor, and a step works
on the rows of the slots it runs. A slot's rows are zeroed when a new request takes it, which is what a
fresh cache in `generate()` starts from.

`SlotConvCache.rows(slots)` hands the model a padding cache for just those slots; it is passed to the
tokenizer modules exactly where `generate()` passes its own cache, so the convolutions are transformers'.
"""

from __future__ import annotations

from typing import cast

import torch
from transformers.models.vibevoice_acoustic_tokenizer.modeling_vibevoice_acoustic_tokenizer import (
    VibeVoiceAcousticTokenizerConv1dPaddingCache,
)


class SlotConvCache:
    """Per-layer conv states for every slot; layers appear on first use, sized for all slots at once."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.states: dict[str, torch.Tensor] = {}

    def reset(self, slot: int) -> None:
        """Start `slot` from silence, as a new stream does."""
        for state in self.states.values():
            state[slot].zero_()

    def reset_where(self, slots: torch.Tensor, mask: torch.Tensor) -> None:
        """Start each of `slots` whose `mask` (bool, one per slot) is set from silence; on the device, without a
        host synchronisation, so a captured step can do it."""
        keep = ~mask[:, None, None]
        for state in self.states.values():
            previous = state.index_select(0, slots)
            state.index_copy_(
                0, slots, torch.where(keep, previous, torch.zeros((), dtype=state.dtype, device=state.device))
            )

    def rows(self, slots: torch.Tensor, keep: torch.Tensor | None = None) -> _SlotRowsPaddingCache:
        """A padding cache over the given slot indices (a 1-D long tensor), in that order.

        `keep` (bool, one per row) limits which rows remember this call: a fixed-shape step runs rows
        whose frame is thrown away, and their streams must stay where they were. None: all rows keep.
        """
        return _SlotRowsPaddingCache(self, slots, keep)

    def state(self, key: str, like: torch.Tensor, channels: int, left_pad: int) -> torch.Tensor:
        if key not in self.states:
            self.states[key] = torch.zeros(self.slots, channels, left_pad, device=like.device, dtype=like.dtype)
        return self.states[key]

    @property
    def nbytes(self) -> int:
        return sum(state.numel() * state.element_size() for state in self.states.values())


class _SlotRowsPaddingCache(VibeVoiceAcousticTokenizerConv1dPaddingCache):
    """The padding-cache interface the tokenizer convolutions call, reading and writing pooled slot rows."""

    def __init__(self, pool: SlotConvCache, slots: torch.Tensor, keep: torch.Tensor | None) -> None:
        super().__init__()
        self.pool = pool
        self.slots = slots
        self.keep = None if keep is None else keep[:, None, None]

    def update(self, hidden_states: torch.Tensor, cache_key: str, conv_module: torch.nn.Module) -> torch.Tensor:
        """Prepend each row's remembered samples to its new input and remember the new tail.

        Same contract as transformers' cache layer: returns `[previous state, hidden_states]` along time;
        the new state is the last `left_pad` samples of that concatenation.
        """
        # Module's `__getattr__` is typed as returning a tensor or a module; these two are the conv layer's ints.
        left_pad = cast(int, conv_module.left_pad)
        if left_pad == 0:
            return hidden_states
        state = self.pool.state(cache_key, hidden_states, cast(int, conv_module.in_channels), left_pad)
        previous = state.index_select(0, self.slots)
        padded = torch.cat([previous, hidden_states], dim=-1)
        tail = padded[:, :, -left_pad:]
        state.index_copy_(0, self.slots, tail if self.keep is None else torch.where(self.keep, tail, previous))
        return padded

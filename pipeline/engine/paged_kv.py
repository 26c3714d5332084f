"""The language model's K/V in one pool of fixed-size blocks, and what a forward reads and writes of it.

Every layer keeps its keys and values as `[blocks * block_size, kv_heads, head_dim]`: token slot
`block * block_size + offset`. Both CFG branches of every request share the pool; which blocks a request
holds is the engine's business (`kv_blocks.py`). A forward is handed a `PagedView`, which has the one
method Qwen2's attention calls on a cache (`update`): it writes each row's new entries at their slots.
What each row then reads comes in one of two shapes:

- `DenseKeys` (prompt chunks, a replay: many new entries): `update` returns the row's entries gathered into
  `[rows, kv_heads, keys, head_dim]` with a mask, and transformers' own attention runs on them. A step's prompt
  chunks of several requests go as one packed row (`packed_view`): each new entry sees only its own request's
  entries, so one forward serves them all with no token padded;
- `KeyChunks` (a decode step: many rows, one new entry each): each row's visible entries in chunks of
  `CHUNK_KEYS`, every chunk of every row in one batch, attended by `paged_attention.chunked_attention`. Rows
  of a batch hold very different histories (a 60,000-token generation beside rows of a few hundred); a dense
  gather would make every row read as many keys as the longest, chunks make each read its own, rounded up to
  a chunk (at most twice its visible keys, or one chunk).

A row reads only what it may see: the negative branch, which hides its history at every speech start,
reads only the entries since then. That is the original implementation's rule: at a speech start it masks
every entry its negative branch held (the copy of the first entry it writes over the last one is masked too),
so from then on the branch attends only to the entries since the restart. RoPE positions follow the
original's too: it derives them from that mask (its count of visible entries), so an entry's position is its
index since its branch's last restart (for the positive branch, which never restarts, its index).

Views are built from spans on the host, exact (`eager_view`: a prefill chunk, a replay and the eager decode step;
`packed_view`: several prefill chunks), or
from device tensors of fixed shape with a bucketed chunk count (`chunked_view`, for CUDA graphs; the
fixed-shape step in `fixed_decoder.py`). A position past a row's table maps to the null block, which is
how rows that sit a step out write their token harmlessly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from pipeline.engine.kv_blocks import NULL_BLOCK, CacheSpan
from pipeline.engine.step_records import KeyReads

CHUNK_KEYS = 64  # consecutive positions of one row's window that one chunk of a decode step's keys holds


@dataclass(frozen=True)
class KVPoolShape:
    layers: int
    kv_heads: int
    head_dim: int
    block_size: int

    def bytes_per_block(self, dtype: torch.dtype) -> int:
        """Keys and values of every layer for one block of tokens."""
        return self.block_size * self.bytes_per_token(dtype)

    def bytes_per_token(self, dtype: torch.dtype) -> int:
        """Keys and values of every layer for one token."""
        element = torch.empty(0, dtype=dtype).element_size()
        return 2 * self.layers * self.kv_heads * self.head_dim * element


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


@dataclass(frozen=True)
class DenseKeys:
    """Every row reads the same number of keys, gathered into one tensor, with a mask."""

    slots: torch.Tensor  # [rows, keys] long: the token slots each row reads, in position order
    mask: torch.Tensor  # [rows, 1, new, keys] bool


@dataclass(frozen=True)
class KeyChunks:
    """A decode step's keys as chunks: chunk i holds `CHUNK_KEYS` consecutive positions of row `rows[i]`'s window."""

    rows: torch.Tensor  # [chunks] long: the row whose query reads the chunk
    slots: torch.Tensor  # [chunks, CHUNK_KEYS] long: the token slots of its positions
    visible: torch.Tensor  # [chunks, CHUNK_KEYS] bool: what the row may attend to (nothing, in a padding chunk)
    row_count: int


class PagedView:
    """What one LM forward sees: where its new entries go, what each row reads, and the new entries' positions."""

    def __init__(
        self,
        pool: PagedKVPool,
        write_slots: torch.Tensor,
        positions: torch.Tensor,
        keys: DenseKeys | KeyChunks,
        reads: KeyReads,
    ) -> None:
        self.pool = pool
        self.write_slots = write_slots  # [rows, new] long: the token slot of each new entry
        self.positions = positions  # [rows, new] long: RoPE positions of the new entries (since the restart)
        self.keys = keys
        self.reads = reads  # keys this forward reads and keys its rows may see (for one layer, as the host planned)

    @property
    def position_ids(self) -> torch.Tensor:
        return self.positions

    @property
    def attention_mask(self) -> torch.Tensor | None:
        """The dense mask for transformers' attention; None for chunks, which carry their own."""
        return self.keys.mask if isinstance(self.keys, DenseKeys) else None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store `[rows, kv_heads, new, head_dim]` at the rows' slots; return what each row reads, same layout
        (chunks are read by the attention itself: the new entries come back as they are)."""
        keys, values = self.pool.keys[layer_idx], self.pool.values[layer_idx]
        heads, dim = keys.shape[1:]
        slots = self.write_slots.reshape(-1)
        keys[slots] = key_states.transpose(1, 2).reshape(-1, heads, dim).to(keys.dtype)
        values[slots] = value_states.transpose(1, 2).reshape(-1, heads, dim).to(values.dtype)
        if isinstance(self.keys, KeyChunks):
            return key_states, value_states
        return keys[self.keys.slots].transpose(1, 2), values[self.keys.slots].transpose(1, 2)


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


def chunks_for(keys: int) -> int:
    """Chunks that hold a window of `keys` positions."""
    return -(-keys // CHUNK_KEYS)


def plan_chunks(windows: Sequence[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """The chunks of each row's window `(first, end)` of positions: (row, first position) of each, row by row."""
    rows, starts = [], []
    for row, (first, end) in enumerate(windows):
        for start in range(first, end, CHUNK_KEYS):
            rows.append(row)
            starts.append(start)
    return rows, starts


def dense_view(
    pool: PagedKVPool,
    tables: torch.Tensor,
    first_position: torch.Tensor,
    new_tokens: int,
    visible_from: torch.Tensor,
    key_length: int,
    reads: KeyReads,
) -> PagedView:
    """A view over rows with block `tables` [rows, width], each appending `new_tokens` entries at `first_position`
    [rows] and reading `key_length` entries from the start of the block that holds its `visible_from` [rows]; the
    entries before `visible_from` are masked, and the new ones take RoPE positions counted from it."""
    device = tables.device
    block_size = pool.block_size
    positions = first_position[:, None] + torch.arange(new_tokens, device=device)[None, :]  # [rows, new]
    key_start = torch.div(visible_from, block_size, rounding_mode="floor") * block_size
    window = key_start[:, None] + torch.arange(key_length, device=device)[None, :]  # [rows, keys]
    keys = window[:, None, :]
    visible = (keys <= positions[:, :, None]) & (keys >= visible_from[:, None, None])
    return PagedView(
        pool,
        write_slots=token_slots(tables, positions, block_size),
        positions=positions - visible_from[:, None],
        keys=DenseKeys(token_slots(tables, window, block_size), visible[:, None]),
        reads=reads,
    )


def chunked_view(
    pool: PagedKVPool,
    tables: torch.Tensor,
    position: torch.Tensor,
    visible_from: torch.Tensor,
    chunk_rows: torch.Tensor,
    chunk_starts: torch.Tensor,
    chunk_valid: torch.Tensor,
    reads: KeyReads,
) -> PagedView:
    """A decode view: rows with block `tables` [rows, width] each append one entry at `position` [rows] and attend
    to their entries from `visible_from` [rows] through it, read as chunks: chunk i covers `CHUNK_KEYS` positions
    from `chunk_starts[i]` of row `chunk_rows[i]`, and reads nothing where `chunk_valid[i]` is false (padding)."""
    device = tables.device
    keys = chunk_starts[:, None] + torch.arange(CHUNK_KEYS, device=device)[None, :]  # [chunks, CHUNK_KEYS]
    visible = (keys >= visible_from[chunk_rows, None]) & (keys <= position[chunk_rows, None]) & chunk_valid[:, None]
    chunk_slots = token_slots(tables[chunk_rows], keys, pool.block_size)
    return PagedView(
        pool,
        write_slots=token_slots(tables, position[:, None], pool.block_size),
        positions=(position - visible_from)[:, None],
        keys=KeyChunks(chunk_rows, chunk_slots, visible, row_count=len(position)),
        reads=reads,
    )


def eager_view(pool: PagedKVPool, spans: Sequence[CacheSpan], new_tokens: int, device: torch.device) -> PagedView:
    """A view for rows given by their spans on the host, reading exactly the keys each row may see: chunks of its
    own window for one new entry a row (a decode step), else a dense window as long as the longest row needs."""
    block_size = pool.block_size
    width = max(1, max(len(span.blocks) for span in spans))
    tables = torch.full((len(spans), width), NULL_BLOCK, dtype=torch.long)
    for row, span in enumerate(spans):
        tables[row, : len(span.blocks)] = torch.tensor(span.blocks, dtype=torch.long)
    tables = tables.to(device)
    lengths = torch.tensor([span.length for span in spans], device=device)
    visible_from = torch.tensor([span.visible_from for span in spans], device=device)
    visible = sum(span.length + new_tokens - span.visible_from for span in spans)
    if new_tokens == 1:
        rows, starts = plan_chunks([(span.visible_from, span.length + 1) for span in spans])
        return chunked_view(
            pool,
            tables,
            lengths,
            visible_from,
            torch.tensor(rows, dtype=torch.long, device=device),
            torch.tensor(starts, dtype=torch.long, device=device),
            torch.ones(len(rows), dtype=torch.bool, device=device),
            KeyReads(read=len(rows) * CHUNK_KEYS, visible=visible),
        )
    starts = [span.visible_from // block_size * block_size for span in spans]
    key_length = max(span.length + new_tokens - start for span, start in zip(spans, starts, strict=True))
    reads = KeyReads(read=len(spans) * key_length, visible=visible)
    return dense_view(pool, tables, lengths, new_tokens, visible_from, key_length, reads)


def packed_view(
    pool: PagedKVPool, spans: Sequence[CacheSpan], tokens: Sequence[int], device: torch.device
) -> PagedView:
    """Several requests' prompt chunks as one packed row: chunk i appends `tokens[i]` entries after `spans[i]`, and
    each new entry attends to its own request's entries from the span's `visible_from` through itself, nothing of
    another's (a block-diagonal mask, as vLLM's packed prefill). One LM forward serves every chunk of a step: its
    fixed cost is paid once, and no token is padded (a batch of rows would pad each chunk to the longest).

    The view's rows dimension is 1; new entries come in chunk order, `tokens[0]` of the first chunk first."""
    block_size = pool.block_size
    writes, positions, owners, query_positions, query_from = [], [], [], [], []
    key_slots, key_positions, key_owners = [], [], []
    for owner, (span, count) in enumerate(zip(spans, tokens, strict=True)):
        table = torch.full((1, max(1, len(span.blocks))), NULL_BLOCK, dtype=torch.long)
        table[0, : len(span.blocks)] = torch.tensor(span.blocks, dtype=torch.long)
        new = torch.arange(span.length, span.length + count)
        window = torch.arange(span.visible_from // block_size * block_size, span.length + count)
        writes.append(token_slots(table, new[None], block_size)[0])
        positions.append(new - span.visible_from)
        owners.append(torch.full((count,), owner))
        query_positions.append(new)
        query_from.append(torch.full((count,), span.visible_from))
        key_slots.append(token_slots(table, window[None], block_size)[0])
        key_positions.append(window)
        key_owners.append(torch.full((len(window),), owner))
    query_position, query_owner, visible_from = torch.cat(query_positions), torch.cat(owners), torch.cat(query_from)
    key_position, key_owner = torch.cat(key_positions), torch.cat(key_owners)
    visible = (
        (key_owner[None, :] == query_owner[:, None])
        & (key_position[None, :] <= query_position[:, None])
        & (key_position[None, :] >= visible_from[:, None])
    )
    seen = sum(span.length + count - span.visible_from for span, count in zip(spans, tokens, strict=True))
    return PagedView(
        pool,
        write_slots=torch.cat(writes)[None].to(device),
        positions=torch.cat(positions)[None].to(device),
        keys=DenseKeys(torch.cat(key_slots)[None].to(device), visible[None, None].to(device)),
        reads=KeyReads(read=len(key_position), visible=seen),
    )

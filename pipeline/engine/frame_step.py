"""The decode step at fixed shapes: no host synchronisation inside, so one CUDA graph can replay it.

The eager step (`runner.py`) is shaped by the data: it gathers the decoding rows' entries, runs the
negative branch and the diffusion only for the rows that chose the diffusion token, and reads the chosen
tokens in between. On a GPU that is a few hundred small kernel launches and several host round trips
per frame, which cost more than the arithmetic. This step instead runs, for rows `0..rows-1`:

1. the positive LM forward (one token a row; each row reads its own window of keys, in chunks: `paged_kv`);
2. the token choice against the choosable rows of the LM head, on the device;
3. the negative LM forward (its own chunks: the branch reads only its entries since its last speech start),
   the whole diffusion loop, the acoustic decode and the semantic encode for every row, whether or not it
   chose the diffusion token;
4. each row's next input: its frame's embedding where it made a frame, its token's embedding otherwise.

Rows that did not decode this step, or did not choose the diffusion token, throw their results away:
a row that sits the step out writes its entries past the end of its block table, into the null block that
nothing reads; its codec streams keep their state (a masked update) and the host commits nothing for it.
So the step is the eager step's arithmetic on a padded batch, and the parity tests hold it to the same audio.

The host need not wait for a step before launching the next (`overlap`): what a row's next step depends on
in its previous one (did it make a frame, did it start a new speech segment) stays on the device, in
`previous`, and the host marks which rows carry on from the step still in flight (`carried`). For those,
the step itself adds the unread frame to the negative branch's position, hides its history after an unread
speech-start token, and takes the noise after the one the unread frame used.

Shapes are bucketed (rows: powers of two up to the row count; each branch's key chunks: a ladder growing by at
most half, so padding adds at most half of what a step reads), so a few graphs cover every batch. On CUDA each
(rows, positive chunks, negative chunks, diffusion steps) is captured once, at warm-up or on first use, into
one shared memory pool, at most `max_graphs` at a time (the least recently used let go); elsewhere, or with
graphs off, the same function runs eagerly. If a capture fails, graphs are switched off for good with a
warning and the step runs eagerly, so a model that cannot be captured is slower, never wrong; before serving,
`warm_up.prepare_to_serve` also checks the step against the eager one and falls back where it differs.
"""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from pipeline.engine.kv_blocks import CacheSpan

logger = logging.getLogger(__name__)


def batch_buckets(slots: int) -> list[int]:
    """The row counts graphs are captured for: powers of two below `slots`, and `slots` itself."""
    buckets = []
    size = 1
    while size < slots:
        buckets.append(size)
        size *= 2
    return [*buckets, slots]


def bucket_for(needed: int, buckets: list[int]) -> int:
    """The smallest bucket that holds `needed` rows."""
    for size in buckets:
        if size >= needed:
            return size
    raise ValueError(f"{needed} rows exceed the largest bucket ({buckets[-1]})")


def chunk_count_buckets(up_to: int, largest: int) -> list[int]:
    """The key chunk counts a step is padded to, up to the one holding `up_to` (within `largest`): 1, 2, 3, 4, 6,
    8, 12, 16, 24, ...: each at most 1.5 times the one before, so padding adds at most half the keys a step reads."""
    buckets = [1]
    while buckets[-1] < min(up_to, largest):
        size = buckets[-1]
        step = 1 if size < 4 else size // 2 if size & (size - 1) == 0 else size // 3
        buckets.append(min(size + step, largest))
    return buckets


def chunk_count_bucket(needed: int, largest: int) -> int:
    """The chunk count a step that needs `needed` key chunks (at least one) is padded to."""
    if needed > largest:
        raise ValueError(f"{needed} key chunks exceed the step's {largest}")
    return chunk_count_buckets(max(needed, 1), largest)[-1]


@dataclass(frozen=True)
class FrameStepKey:
    """What fixes a step's shapes, and so one captured graph."""

    rows: int
    positive_chunks: int
    negative_chunks: int
    diffusion_steps: int


@dataclass(frozen=True)
class ChunkPlan:
    """One branch's key chunks for a step: the row and first position of each, and the count it is padded to."""

    rows: list[int]
    starts: list[int]
    padded: int


class _HostStaging:
    """Host copies of the per-step inputs; pinned on a GPU, so they go over in a few asynchronous copies."""

    def __init__(self, rows: int, latent: int, table_width: int, max_chunks: int, pinned: bool) -> None:
        self.tables = torch.zeros(2, rows, table_width, dtype=torch.long, pin_memory=pinned)
        self.indices = torch.zeros(6, rows, dtype=torch.long, pin_memory=pinned)
        self.chunks = torch.zeros(2, 3, max_chunks, dtype=torch.long, pin_memory=pinned)
        self.noise = torch.zeros(2, rows, latent, dtype=torch.float32, pin_memory=pinned)
        self.guidance = torch.zeros(rows, dtype=torch.float32, pin_memory=pinned)


class FrameStepInputs:
    """The static input buffers of every step, sized for all rows; a step of `rows` uses their first rows.

    The host fills them before each step (`fill`: a few small copies, from pinned memory on a GPU);
    captured graphs read them at fixed addresses. The host side is double-buffered: with overlap, the host
    fills one step while the copies of the step before may still be waiting on the device stream.
    Block tables are copied a row at a time, only for rows whose table changed since it was last sent
    (a row takes a new block every `block_size` frames). Each branch's key chunks (`ChunkPlan`: the row and first
    position of each, whether it is real or padding) go over with the step, as many as it is padded to.
    """

    def __init__(
        self,
        rows: int,
        hidden: int,
        latent: int,
        table_width: int,
        max_chunks: int,
        device: torch.device,
        dtype: torch.dtype,
    ) -> None:
        self.rows = rows
        self.table_width = table_width
        self.max_chunks = max_chunks
        self.inputs = torch.zeros(rows, 1, hidden, device=device, dtype=dtype)  # fed to both branches
        # One long tensor for every per-row integer, so the host sends them in one copy.
        self.indices = torch.zeros(6, rows, dtype=torch.long, device=device)
        self.positive_positions, self.positive_visible_from = self.indices[0], self.indices[1]
        self.negative_positions, self.negative_visible_from = self.indices[2], self.indices[3]
        self.decoding = self.indices[4]  # 1 where the row decodes this step
        self.carried = self.indices[5]  # 1 where the row decoded in the step still in flight, for the same request
        self.tables = torch.zeros(2, rows, table_width, dtype=torch.long, device=device)  # positive, negative
        # Per branch, per chunk: its row, its first position, 1 where it is real (0: padding, reads nothing).
        self.chunks = torch.zeros(2, 3, max_chunks, dtype=torch.long, device=device)
        # The noise of the row's next frame, and of the one after (used when the unread step made a frame).
        self.noise = torch.zeros(2, rows, latent, device=device, dtype=dtype)
        self.guidance = torch.zeros(rows, dtype=torch.float32, device=device)
        self.row_index = torch.arange(rows, device=device)
        # Written by each step for the next: did the row make a frame, did it choose the speech-start token.
        self.previous = torch.zeros(2, rows, dtype=torch.long, device=device)
        pinned = device.type == "cuda"
        self._staging = [_HostStaging(rows, latent, table_width, max_chunks, pinned) for _ in range(2)]
        self._launches = 0
        self._sent_tables: list[list[tuple[int, ...] | None]] = [[None] * rows for _ in range(2)]

    def past_every_table(self, block_size: int) -> int:
        """A position beyond every row's block table: an entry written there lands in the null block."""
        return self.table_width * block_size

    @contextlib.contextmanager
    def no_row_decoding(self, block_size: int) -> Iterator[None]:
        """Steps run inside leave no trace: no row decodes, every write lands in the null block, and what
        they write for the next step is put back.

        For steps run only to warm up or capture, which may come while requests are mid-generation.
        """
        indices, previous, chunks = self.indices.clone(), self.previous.clone(), self.chunks.clone()
        self.decoding.zero_()
        self.positive_positions.fill_(self.past_every_table(block_size))
        self.negative_positions.fill_(self.past_every_table(block_size))
        self.chunks.zero_()  # every chunk padding: no row reads a key
        try:
            yield
        finally:
            self.indices.copy_(indices)
            self.previous.copy_(previous)
            self.chunks.copy_(chunks)

    def fill(
        self, rows: int, decoding: dict[int, RowInputs], chunks: tuple[ChunkPlan, ChunkPlan], block_size: int
    ) -> None:
        """Rows `0..rows-1`: the decoding rows' positions, visible starts, block tables, noise and guidance, and
        each branch's key chunks; every other row writes past its table (into the null block) and reads nothing."""
        staging = self._staging[self._launches % 2]
        self._launches += 1
        host = staging.indices[:, :rows]
        host.zero_()
        host[0] = host[2] = self.past_every_table(block_size)
        staging.noise[:, :rows].zero_()
        # Whole columns at once: a step of a few hundred rows would otherwise pay a tensor write per row and field.
        row_ids = torch.tensor(list(decoding), dtype=torch.long)
        row_inputs = list(decoding.values())
        columns = [
            [(inputs.positive.length, inputs.positive.visible_from) for inputs in row_inputs],
            [(inputs.negative.length, inputs.negative.visible_from) for inputs in row_inputs],
        ]
        for branch, values in enumerate(columns):
            host[2 * branch : 2 * branch + 2, row_ids] = torch.tensor(values, dtype=torch.long).T
        host[4, row_ids] = 1
        host[5, row_ids] = torch.tensor([inputs.carried for inputs in row_inputs], dtype=torch.long)
        staging.noise[0, row_ids] = torch.stack([inputs.noise for inputs in row_inputs])
        staging.noise[1, row_ids] = torch.stack([inputs.noise_after_frame for inputs in row_inputs])
        staging.guidance[row_ids] = torch.tensor([inputs.guidance for inputs in row_inputs])
        padded = max(plan.padded for plan in chunks)
        host_chunks = staging.chunks[:, :, :padded]
        host_chunks.zero_()
        for branch, plan in enumerate(chunks):
            count = len(plan.rows)
            host_chunks[branch, 0, :count] = torch.tensor(plan.rows, dtype=torch.long)
            host_chunks[branch, 1, :count] = torch.tensor(plan.starts, dtype=torch.long)
            host_chunks[branch, 2, :count] = 1
        self.chunks[:, :, :padded].copy_(host_chunks, non_blocking=True)
        self.indices[:, :rows].copy_(host, non_blocking=True)
        self.noise[:, :rows].copy_(staging.noise[:, :rows], non_blocking=True)
        self.guidance[:rows].copy_(staging.guidance[:rows], non_blocking=True)
        for row, inputs in decoding.items():
            for branch, span in enumerate((inputs.positive, inputs.negative)):
                self._send_table(staging.tables, branch, row, span.blocks)

    def _send_table(self, tables: torch.Tensor, branch: int, row: int, blocks: tuple[int, ...]) -> None:
        if self._sent_tables[branch][row] == blocks:
            return
        if len(blocks) > self.table_width:
            raise ValueError(f"a block table of {len(blocks)} blocks is wider than the step's {self.table_width}")
        tables[branch, row].zero_()
        tables[branch, row, : len(blocks)] = torch.tensor(blocks, dtype=torch.long)
        self.tables[branch, row].copy_(tables[branch, row], non_blocking=True)
        self._sent_tables[branch][row] = blocks


@dataclass(frozen=True)
class RowInputs:
    """What the host gives one decoding row."""

    positive: CacheSpan
    negative: CacheSpan
    noise: torch.Tensor  # [latent] the noise of its next frame
    noise_after_frame: torch.Tensor  # the next frame's, if the step in flight made one for it (else = noise)
    guidance: float
    carried: bool  # it decoded in the step still in flight


@dataclass(frozen=True)
class FrameStepOutputs:
    """One step's results for rows `0..rows-1`; a captured graph rewrites them in place on every replay."""

    tokens: torch.Tensor  # [rows] long
    audio: torch.Tensor  # [rows, samples_per_frame]
    latents: torch.Tensor  # [rows, latent]
    next_inputs: torch.Tensor  # [rows, 1, hidden]


class CapturedSteps:
    """Runs a step function per key: replaying a CUDA graph captured on first use, or eagerly.

    At most `max_graphs` graphs are held; capturing one more lets the least recently replayed go (its memory
    returns to the shared pool), so a long run that meets many shapes keeps those it uses. A capture that fails
    turns graphs off for good (`failure` says why) and the step runs eagerly: slower, never wrong.
    """

    def __init__(
        self,
        step: Callable[[FrameStepKey], FrameStepOutputs],
        inputs: FrameStepInputs,
        block_size: int,
        enabled: bool,
        max_graphs: int,
    ) -> None:
        if max_graphs < 1:
            raise ValueError(f"at least one CUDA graph must be allowed, got {max_graphs}")
        self.step = step
        self.inputs = inputs
        self.block_size = block_size
        self.enabled = enabled
        self.max_graphs = max_graphs
        self.graphs: OrderedDict[FrameStepKey, tuple[torch.cuda.CUDAGraph, FrameStepOutputs]] = OrderedDict()
        self.captures = 0  # graphs captured since the start, the ones let go included
        self.failure: str | None = None
        self.pool: torch.cuda._POOL_HANDLE | None = None  # the graphs' shared memory pool, made at the first capture

    def run(self, key: FrameStepKey) -> FrameStepOutputs:
        if not self.enabled:
            return self.step(key)
        if key not in self.graphs:
            try:
                captured = self._capture(key)
            except RuntimeError as error:
                self.disable(f"CUDA graph capture failed: {error}")
                return self.step(key)
            if len(self.graphs) >= self.max_graphs:
                self.graphs.popitem(last=False)
            self.graphs[key] = captured
        self.graphs.move_to_end(key)
        graph, outputs = self.graphs[key]
        graph.replay()
        return outputs

    def disable(self, why: str) -> None:
        """Run eagerly from now on, letting every graph go."""
        logger.warning("CUDA graphs off; steps run eagerly", extra={"why": why})
        self.enabled = False
        self.failure = why
        self.graphs.clear()

    def _capture(self, key: FrameStepKey) -> tuple[torch.cuda.CUDAGraph, FrameStepOutputs]:
        """Warm the step up once (lazy buffers, kernel choices), then record it.

        The warm-up really runs, so it runs with no row decoding: its K/V writes land in the null block and
        the codec streams keep their state; what it writes for the next step is put back. Recording runs
        nothing.
        """
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with self.inputs.no_row_decoding(self.block_size), torch.cuda.stream(side):
            self.step(key)
        torch.cuda.current_stream().wait_stream(side)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            outputs = self.step(key)
        self.captures += 1
        logger.info("captured a decode step graph", extra={"key": str(key), "graphs": len(self.graphs) + 1})
        return graph, outputs

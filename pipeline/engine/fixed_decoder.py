"""Decoding through the fixed-shape step: fill its inputs, launch it, read it back while the next one runs.

The runner hands this the decoding rows of a step when they share one diffusion step count. A launch copies
the rows' inputs (their spans, noise and guidance, as the engine gives them) to the step's static buffers,
runs the step, starts its results on their way to host memory without waiting, and returns. With `overlap`,
the step is read back only after the next one has been launched, so the GPU never waits for the host's
bookkeeping (events, stop decisions, storage); the step reads what it needs of its unread predecessor on
the device (see `frame_step.py`). Without it, each step is read as soon as it is launched.

A row read back after its request left the row (finished, cancelled, preempted) is dropped: its work was
wasted, never wrong, because everything it wrote lies in blocks its request held or in the null block.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from pipeline.engine.frame_step import (
    CapturedSteps,
    ChunkPlan,
    FrameStepInputs,
    FrameStepKey,
    FrameStepOutputs,
    RowInputs,
    batch_buckets,
    bucket_for,
    chunk_count_bucket,
)
from pipeline.engine.memory_plan import StepMemory
from pipeline.engine.paged_kv import CHUNK_KEYS, PagedKVPool, PagedView, chunked_view, chunks_for, plan_chunks
from pipeline.engine.step_records import DecodeRow, KeyReads, RowOutcome, RunnerSpec


@dataclass(frozen=True)
class SpeechTokens:
    """The token ids the step acts on: the one that makes a frame, and those that start and end speech."""

    frame: int
    speech_start: int
    speech_end: int


class FrameStepModel(Protocol):
    """What the fixed-shape step needs of the model runner (`runner.ModelRunner` is one): where it runs, its K/V pool,
    the model's parts as batched functions, and the two pieces of row state the eager step shares with it: each
    row's next input (`next_embeds`, which a step writes for the rows it decodes) and who holds each row now
    (`row_owner`, read to drop a step read back after its request left)."""

    device: torch.device
    dtype: torch.dtype
    pool: PagedKVPool
    spec: RunnerSpec
    next_embeds: torch.Tensor  # [rows, 1, hidden]
    row_owner: list[int | None]

    def language_model(self, embeds: torch.Tensor, view: PagedView) -> torch.Tensor: ...

    def choose_token_ids(self, hidden: torch.Tensor) -> torch.Tensor: ...

    def sample_frames(
        self, positive: torch.Tensor, negative: torch.Tensor, noise: torch.Tensor, guidance: torch.Tensor, steps: int
    ) -> torch.Tensor: ...

    def stream_frames(
        self, latents: torch.Tensor, rows: torch.Tensor, keep: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def end_speech_where(self, rows: torch.Tensor, ends_speech: torch.Tensor) -> None: ...

    def token_embeddings(self, tokens: torch.Tensor) -> torch.Tensor: ...


@dataclass(frozen=True)
class _Launched:
    """A step on its way: who decoded in it, and its results on their way to host memory."""

    decode: tuple[DecodeRow, ...]
    tokens: torch.Tensor  # [rows] long
    audio: torch.Tensor  # [rows, samples_per_frame] float32
    latents: torch.Tensor  # [rows, latent] float32
    ready: torch.cuda.Event | None  # recorded after the copies (None on the CPU, where copies are done at once)


class FixedDecoder:
    """The decoding rows' step at fixed shapes (captured as CUDA graphs where it can), over a `FrameStepModel`."""

    def __init__(
        self,
        runner: FrameStepModel,
        tokens: SpeechTokens,
        rows: int,
        hidden: int,
        *,
        cuda_graphs: bool,
        overlap: bool,
        max_graphs: int,
    ) -> None:
        self.runner = runner
        self.tokens = tokens
        self.device = runner.device
        self.block_size = runner.pool.block_size
        self.buckets = batch_buckets(rows)
        # A row's table spans the model's context (and no request holds more blocks than the pool has).
        table_width = min(runner.pool.num_blocks, -(-runner.spec.max_context // self.block_size) + 1)
        self.columns = table_width * self.block_size
        # A branch's windows lie in the blocks its rows hold: no more chunks than the pool fills, plus a partial
        # chunk a row.
        pool_tokens = runner.pool.num_blocks * self.block_size
        self.max_chunks = min(rows * chunks_for(self.columns), chunks_for(pool_tokens) + rows)
        latent_dim = runner.spec.latent_dim
        self.inputs = FrameStepInputs(rows, hidden, latent_dim, table_width, self.max_chunks, self.device, runner.dtype)
        enabled = cuda_graphs and self.device.type == "cuda"
        self.captured = CapturedSteps(self.step, self.inputs, self.block_size, enabled=enabled, max_graphs=max_graphs)
        self.overlap = overlap
        self.in_flight: _Launched | None = None
        self.key_reads = KeyReads()

    def unread(self) -> frozenset[int]:
        """Requests that decoded in the step in flight and still hold their row."""
        if self.in_flight is None:
            return frozenset()
        owner = self.runner.row_owner
        return frozenset(row.request_id for row in self.in_flight.decode if owner[row.row] == row.request_id)

    def decode(self, decode: Sequence[DecodeRow]) -> list[RowOutcome]:
        """Launch a step for `decode`; return the outcomes of the step read back now (the previous, with overlap)."""
        launched = self._launch(tuple(decode))
        previous, self.in_flight = self.in_flight, launched
        outcomes = self._read(previous) if previous is not None else []
        return outcomes if self.overlap else outcomes + self.flush()

    def flush(self) -> list[RowOutcome]:
        """Read back the step in flight, if any: before an eager step, a preemption, or when idle."""
        launched, self.in_flight = self.in_flight, None
        return self._read(launched) if launched is not None else []

    def measure_step_memory(self, diffusion_steps: int) -> StepMemory:
        """Run the step over every row (no row decoding) at two chunk counts and fit the CUDA memory it allocates
        above what was allocated before: a GPU only, before the pool is sized (`memory_plan`)."""
        rows = self.buckets[-1]
        counts = (rows, self.max_chunks) if self.max_chunks > rows else (1, self.max_chunks)
        peaks = []
        with torch.inference_mode(), self.inputs.no_row_decoding(self.block_size):
            self.step(FrameStepKey(rows, counts[0], counts[0], diffusion_steps))  # lazy state (codec streams) first
            for chunks in counts:
                torch.cuda.synchronize(self.device)
                torch.cuda.reset_peak_memory_stats(self.device)
                before = torch.cuda.memory_allocated(self.device)
                self.step(FrameStepKey(rows, chunks, chunks, diffusion_steps))
                torch.cuda.synchronize(self.device)
                peaks.append(torch.cuda.max_memory_allocated(self.device) - before)
        return StepMemory.from_two_runs(counts, (peaks[0], peaks[1]))

    def warm_up(self, diffusion_steps: int, max_keys: int) -> int:
        """Capture the graphs of typical steps before serving (harmless mid-serving); returns the graphs held.

        For every row bucket: each row holding a positive window of 256, 1,024 or 4,096 keys (a prompt and what
        follows it) and a negative one of 64, 256 or 1,024 (the frames since its speech start), up to `max_keys`,
        smallest first, as many as the graph limit holds. Other shapes are captured on first use.
        """
        if not self.captured.enabled:
            return 0
        with self.inputs.no_row_decoding(self.block_size):
            for key in self.warm_up_keys(diffusion_steps, max_keys)[: self.captured.max_graphs]:
                self.captured.run(key)
        return len(self.captured.graphs)

    def warm_up_keys(self, diffusion_steps: int, max_keys: int) -> list[FrameStepKey]:
        """The shapes `warm_up` captures, smallest first."""
        keys: set[FrameStepKey] = set()
        for rows in self.buckets:
            for positive in (window for window in (256, 1024, 4096) if window <= max(max_keys, 256)):
                for negative in (window for window in (64, 256, 1024) if window <= positive):
                    positive_chunks, negative_chunks = (
                        chunk_count_bucket(min(rows * chunks_for(window), self.max_chunks), self.max_chunks)
                        for window in (positive, negative)
                    )
                    keys.add(FrameStepKey(rows, positive_chunks, negative_chunks, diffusion_steps))
        return sorted(keys, key=lambda key: (key.rows, key.positive_chunks, key.negative_chunks))

    def _launch(self, decode: tuple[DecodeRow, ...]) -> _Launched:
        runner = self.runner
        rows = bucket_for(max(row.row for row in decode) + 1, self.buckets)
        positive = [(row.positive.visible_from, row.positive.length + 1) for row in decode]
        # One more negative entry than the host knows of, for a frame the step in flight may have made (a speech
        # start in flight only hides more: the step masks it).
        negative = [
            (row.frame.negative.visible_from, row.frame.negative.length + 1 + row.frame.carried) for row in decode
        ]
        plans = (self._chunk_plan(decode, positive), self._chunk_plan(decode, negative))
        key = FrameStepKey(rows, plans[0].padded, plans[1].padded, decode[0].frame.diffusion_steps)
        visible = sum(end - first for first, end in (*positive, *negative))
        self.key_reads += KeyReads(read=(key.positive_chunks + key.negative_chunks) * CHUNK_KEYS, visible=visible)
        self.inputs.inputs[:rows] = runner.next_embeds[:rows]
        self.inputs.fill(rows, {row.row: _row_inputs(row) for row in decode}, plans, self.block_size)
        step = self.captured.run(key)
        keep = self.inputs.decoding[:rows, None, None].bool()
        runner.next_embeds[:rows] = torch.where(keep, step.next_inputs, runner.next_embeds[:rows])
        return self._copy_out(decode, step)

    def _copy_out(self, decode: tuple[DecodeRow, ...], step: FrameStepOutputs) -> _Launched:
        """Start the step's results on their way to host memory; a graph's outputs are rewritten by its next replay."""
        non_blocking = self.device.type == "cuda"
        tokens = step.tokens.to("cpu", non_blocking=non_blocking)
        audio = step.audio.float().to("cpu", non_blocking=non_blocking)
        latents = step.latents.float().to("cpu", non_blocking=non_blocking)
        ready = None
        if non_blocking:
            ready = torch.cuda.Event()
            ready.record()
        return _Launched(decode, tokens, audio, latents, ready)

    def _read(self, launched: _Launched) -> list[RowOutcome]:
        """Wait for a step's results (the one synchronisation) and hand over what each still-current row made."""
        if launched.ready is not None:
            launched.ready.synchronize()
        runner = self.runner
        tokens = launched.tokens.tolist()
        audio = launched.audio.numpy()
        outcomes = []
        for row in launched.decode:
            if runner.row_owner[row.row] != row.request_id:
                continue
            token = tokens[row.row]
            if token == self.tokens.frame:
                outcomes.append(
                    RowOutcome(row.request_id, token, audio[row.row].copy(), launched.latents[row.row].clone())
                )
            else:
                outcomes.append(RowOutcome(row.request_id, token))
        return outcomes

    def step(self, key: FrameStepKey) -> FrameStepOutputs:
        """The whole decode step for rows `0..key.rows-1`, free of host synchronisation (see frame_step.py)."""
        runner, inputs, rows = self.runner, self.inputs, key.rows
        decoding = inputs.decoding[:rows].bool()
        carried = inputs.carried[:rows].bool()
        unread_frame = inputs.previous[0, :rows].bool() & carried
        unread_speech_start = inputs.previous[1, :rows].bool() & carried
        negative_positions = inputs.negative_positions[:rows] + unread_frame.long()
        negative_visible_from = torch.where(
            unread_speech_start, inputs.negative_positions[:rows], inputs.negative_visible_from[:rows]
        )
        noise = torch.where(unread_frame[:, None], inputs.noise[1, :rows], inputs.noise[0, :rows])

        embeds = inputs.inputs[:rows]
        positive_view = self._view(
            0, key.positive_chunks, inputs.positive_positions[:rows], inputs.positive_visible_from[:rows]
        )
        positive = runner.language_model(embeds, positive_view)
        tokens = runner.choose_token_ids(positive)
        makes_frame = (tokens == self.tokens.frame) & decoding
        negative = runner.language_model(
            embeds, self._view(1, key.negative_chunks, negative_positions, negative_visible_from)
        )
        latents = runner.sample_frames(positive, negative, noise, inputs.guidance[:rows], key.diffusion_steps)
        audio, frame_embeds = runner.stream_frames(latents.unsqueeze(1), inputs.row_index[:rows], keep=makes_frame)
        runner.end_speech_where(inputs.row_index[:rows], (tokens == self.tokens.speech_end) & decoding)
        token_embeds = runner.token_embeddings(tokens).unsqueeze(1)
        next_inputs = torch.where(makes_frame[:, None, None], frame_embeds, token_embeds)
        inputs.previous[0, :rows] = makes_frame
        inputs.previous[1, :rows] = (tokens == self.tokens.speech_start) & decoding
        return FrameStepOutputs(tokens, audio.reshape(rows, -1), latents, next_inputs)

    def _view(self, branch: int, chunks: int, positions: torch.Tensor, visible_from: torch.Tensor) -> PagedView:
        """Branch `branch`'s view of the step's rows, its key chunks as the host filled them (`chunks` of them)."""
        rows = len(positions)
        chunk_rows, chunk_starts, chunk_valid = self.inputs.chunks[branch, :, :chunks]
        tables = self.inputs.tables[branch, :rows]
        reads = KeyReads()  # counted on the host, at launch
        return chunked_view(
            self.runner.pool, tables, positions, visible_from, chunk_rows, chunk_starts, chunk_valid.bool(), reads
        )

    def _chunk_plan(self, decode: tuple[DecodeRow, ...], windows: list[tuple[int, int]]) -> ChunkPlan:
        """The key chunks of the decoding rows' `windows` (first, end), each chunk naming its row."""
        chunk_rows, starts = plan_chunks(windows)
        rows = [decode[index].row for index in chunk_rows]
        return ChunkPlan(rows, starts, chunk_count_bucket(len(rows), self.max_chunks))


def _row_inputs(row: DecodeRow) -> RowInputs:
    frame = row.frame
    return RowInputs(row.positive, frame.negative, frame.noise, frame.noise_after_frame, frame.cfg_scale, frame.carried)

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
from typing import TYPE_CHECKING

import torch

from pipeline.engine.frame_step import (
    CapturedSteps,
    FrameStepInputs,
    FrameStepKey,
    FrameStepOutputs,
    RowInputs,
    batch_buckets,
    bucket_for,
    key_length_bucket,
    key_length_buckets,
)
from pipeline.engine.kv_blocks import CacheSpan
from pipeline.engine.paged_kv import paged_view
from pipeline.engine.step_records import DecodeRow, RowOutcome

if TYPE_CHECKING:
    from pipeline.engine.runner import ModelRunner


@dataclass(frozen=True)
class _Launched:
    """A step on its way: who decoded in it, and its results on their way to host memory."""

    decode: tuple[DecodeRow, ...]
    tokens: torch.Tensor  # [rows] long
    audio: torch.Tensor  # [rows, samples_per_frame] float32
    latents: torch.Tensor  # [rows, latent] float32
    ready: torch.cuda.Event | None  # recorded after the copies (None on the CPU, where copies are done at once)


class FixedDecoder:
    def __init__(self, runner: ModelRunner, rows: int, hidden: int, *, cuda_graphs: bool, overlap: bool) -> None:
        self.runner = runner
        self.device = runner.device
        self.block_size = runner.pool.block_size
        self.buckets = batch_buckets(rows)
        # A row's table spans the model's context (and no request holds more blocks than the pool has).
        table_width = min(runner.pool.num_blocks, -(-runner.spec.max_context // self.block_size) + 1)
        self.columns = table_width * self.block_size
        self.choosable = torch.tensor(runner.choosable_ids, device=self.device)
        self.inputs = FrameStepInputs(rows, hidden, runner.latent_dim, table_width, self.device, runner.dtype)
        enabled = cuda_graphs and self.device.type == "cuda"
        self.captured = CapturedSteps(self.step, self.inputs, self.block_size, enabled=enabled)
        self.overlap = overlap
        self.in_flight: _Launched | None = None

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

    def warm_up(self, diffusion_steps: int, max_keys: int) -> int:
        """Capture a graph for every row bucket and pair of key buckets up to `max_keys` (the negative branch's
        never above the positive's); harmless mid-serving."""
        if not self.captured.enabled:
            return 0
        with self.inputs.no_row_decoding(self.block_size):
            buckets = key_length_buckets(max_keys, self.columns)
            for rows in self.buckets:
                for positive in buckets:
                    for negative in (bucket for bucket in buckets if bucket <= positive):
                        self.captured.run(FrameStepKey(rows, positive, negative, diffusion_steps))
        return len(self.captured.graphs)

    def _launch(self, decode: tuple[DecodeRow, ...]) -> _Launched:
        runner = self.runner
        rows = bucket_for(max(row.row for row in decode) + 1, self.buckets)
        positive_keys = max(row.positive.length + 1 for row in decode)
        # One more negative entry than the host knows of, for a frame the step in flight may have made.
        negative_keys = max(
            row.frame.negative.length + 1 + row.frame.carried - _block_start(row.frame.negative, self.block_size)
            for row in decode
        )
        key = FrameStepKey(
            rows,
            key_length_bucket(positive_keys, self.columns),
            key_length_bucket(negative_keys, self.columns),
            decode[0].frame.diffusion_steps,
        )
        self.inputs.inputs[:rows] = runner.next_embeds[:rows]
        self.inputs.fill(rows, {row.row: _row_inputs(row) for row in decode}, self.block_size)
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
            if token == runner.audio_token_id:
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
        positive_view = paged_view(
            runner.pool,
            inputs.tables[0, :rows],
            inputs.positive_positions[:rows],
            1,
            inputs.positive_visible_from[:rows],
            key.positive_keys,
        )
        positive = runner.language_model(embeds, positive_view)
        tokens = self.choose(positive)
        makes_frame = (tokens == runner.audio_token_id) & decoding
        negative_view = paged_view(
            runner.pool, inputs.tables[1, :rows], negative_positions, 1, negative_visible_from, key.negative_keys
        )
        negative = runner.language_model(embeds, negative_view)
        latents = runner.sample_frames(positive, negative, noise, inputs.guidance[:rows], key.diffusion_steps)
        audio, frame_embeds = runner.stream_frames(latents.unsqueeze(1), inputs.row_index[:rows], keep=makes_frame)
        runner.end_speech_where(inputs.row_index[:rows], (tokens == runner.audio_eos_token_id) & decoding)
        token_embeds = runner.token_embeddings(tokens).unsqueeze(1)
        next_inputs = torch.where(makes_frame[:, None, None], frame_embeds, token_embeds)
        inputs.previous[0, :rows] = makes_frame
        inputs.previous[1, :rows] = (tokens == runner.audio_bos_token_id) & decoding
        return FrameStepOutputs(tokens, audio.reshape(rows, -1), latents, next_inputs)

    def choose(self, positive: torch.Tensor) -> torch.Tensor:
        """Each row's token, on the device: the best scored of the few VibeVoice may emit."""
        scores = positive.to(self.runner.choosable_head.dtype) @ self.runner.choosable_head.T
        return self.choosable[scores.float().argmax(dim=-1)]


def _block_start(span: CacheSpan, block_size: int) -> int:
    """The first position a row reads: the start of the block holding its first visible entry."""
    return span.visible_from // block_size * block_size


def _row_inputs(row: DecodeRow) -> RowInputs:
    frame = row.frame
    return RowInputs(row.positive, frame.negative, frame.noise, frame.noise_after_frame, frame.cfg_scale, frame.carried)

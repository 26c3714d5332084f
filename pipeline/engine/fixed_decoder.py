"""Decoding through the fixed-shape step: fill its inputs, launch it, read it back while the next one runs.

The runner hands this the decoding rows of a step when they share one diffusion step count. A launch
commits what the host can know without the step's result (every decoding row's positive branch grows by
one entry), copies the results to host memory without waiting, and returns. With `overlap`, the step is
read back only after the next one has been launched, so the GPU never waits for the host's bookkeeping
(events, stop decisions, storage); the step reads what it needs of its unread predecessor on the device
(see `frame_step.py`). Without it, each step is read as soon as it is launched.

A row read back after its request finished, was cancelled or lost its slot to another request is dropped:
its work was wasted, never wrong, because everything it wrote lies past what its slot's next owner reads.
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
from pipeline.engine.kv_cache import FixedSlotView, SlotKVCache
from pipeline.engine.requests import RequestState, RowOutcome

if TYPE_CHECKING:
    from pipeline.engine.runner import ModelRunner


@dataclass(frozen=True)
class _Launched:
    """A step on its way: who decoded in it, and its results on their way to host memory."""

    decode: list[RequestState]
    tokens: torch.Tensor  # [rows] long
    audio: torch.Tensor  # [rows, samples_per_frame] float32
    latents: torch.Tensor  # [rows, latent] float32
    ready: torch.cuda.Event | None  # recorded after the copies (None on the CPU, where copies are done at once)


class FixedDecoder:
    def __init__(self, runner: ModelRunner, slots: int, hidden: int, *, cuda_graphs: bool, overlap: bool) -> None:
        self.runner = runner
        self.device = runner.device
        self.buckets = batch_buckets(slots)
        self.columns = runner.positive.shape.capacity + 1
        self.choosable = torch.tensor(runner.choosable_ids, device=self.device)
        self.inputs = FrameStepInputs(slots, hidden, runner.latent_dim, self.device, runner.dtype)
        self.captured = CapturedSteps(self.step, self.inputs, enabled=cuda_graphs and self.device.type == "cuda")
        self.overlap = overlap
        self.owners: list[RequestState | None] = [None] * slots
        self.in_flight: _Launched | None = None

    def takes(self, decode: Sequence[RequestState]) -> bool:
        """The step samples one diffusion step count per batch; mixed counts take the eager step."""
        return len({state.request.diffusion_steps for state in decode}) == 1

    def admit(self, state: RequestState) -> None:
        self.owners[state.slot] = state

    def release(self, slot: int) -> None:
        self.owners[slot] = None

    def decode(self, decode: Sequence[RequestState]) -> list[RowOutcome]:
        """Launch a step for `decode`; return the outcomes of the step read back now (the previous, with overlap)."""
        launched = self._launch(decode)
        previous, self.in_flight = self.in_flight, launched
        outcomes = self._read(previous) if previous is not None else []
        return outcomes if self.overlap else outcomes + self.flush()

    def flush(self) -> list[RowOutcome]:
        """Read back the step in flight, if any: before the eager step touches the same slots, or when idle."""
        launched, self.in_flight = self.in_flight, None
        return self._read(launched) if launched is not None else []

    def warm_up(self, diffusion_steps: int, max_keys: int) -> int:
        """Capture a graph for every row bucket and key bucket up to `max_keys`; harmless mid-serving."""
        if not self.captured.enabled:
            return 0
        with self.inputs.no_row_decoding():
            for rows in self.buckets:
                for key_length in key_length_buckets(max_keys, self.columns):
                    self.captured.run(FrameStepKey(rows, key_length, diffusion_steps))
        return len(self.captured.graphs)

    def _launch(self, decode: Sequence[RequestState]) -> _Launched:
        runner = self.runner
        rows = bucket_for(max(state.slot for state in decode) + 1, self.buckets)
        carried = self._carried()
        # One more negative entry than the host knows of, for a frame the step in flight may have made.
        needed = 1 + max(max(runner.positive.lengths[:rows]), 1 + max(runner.negative.lengths[:rows]))
        key = FrameStepKey(rows, key_length_bucket(needed, self.columns), decode[0].request.diffusion_steps)
        self.inputs.inputs[:rows] = runner.next_embeds[:rows]
        self.inputs.fill(
            rows,
            (runner.positive.lengths, runner.positive.visible_from),
            (runner.negative.lengths, runner.negative.visible_from),
            {state.slot: self._row_inputs(state, state.slot in carried) for state in decode},
        )
        for state in decode:
            runner.positive.lengths[state.slot] += 1
        step = self.captured.run(key)
        keep = self.inputs.decoding[:rows, None, None].bool()
        runner.next_embeds[:rows] = torch.where(keep, step.next_inputs, runner.next_embeds[:rows])
        return self._copy_out(list(decode), step)

    def _carried(self) -> set[int]:
        """Slots whose request decoded in the step still in flight."""
        if self.in_flight is None:
            return set()
        return {state.slot for state in self.in_flight.decode if self.owners[state.slot] is state}

    def _row_inputs(self, state: RequestState, carried: bool) -> RowInputs:
        noise = self.runner.noise_at(state, 0)
        after = self.runner.noise_at(state, 1) if carried else noise
        return RowInputs(noise, after, state.request.cfg_scale, carried)

    def _copy_out(self, decode: list[RequestState], step: FrameStepOutputs) -> _Launched:
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
        """Wait for a step's results (the one synchronisation) and commit what each still-current row kept."""
        if launched.ready is not None:
            launched.ready.synchronize()
        runner = self.runner
        tokens = launched.tokens.tolist()
        audio = launched.audio.numpy()
        outcomes = []
        for state in launched.decode:
            slot = state.slot
            if self.owners[slot] is not state:
                continue
            token = tokens[slot]
            if token == runner.audio_token_id:
                runner.negative.lengths[slot] += 1
                state.noise_queue.pop(0)
                outcomes.append(RowOutcome(state, token, audio[slot].copy(), launched.latents[slot].clone()))
                continue
            if token == runner.audio_bos_token_id:
                runner.negative.hide_history(slot)  # the CFG branch restarts with the speech
            outcomes.append(RowOutcome(state, token))
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
        positive = self._forward(
            runner.positive, key, embeds, inputs.positive_positions[:rows], inputs.positive_visible_from[:rows]
        )
        scores = positive.to(runner.choosable_head.dtype) @ runner.choosable_head.T
        tokens = self.choosable[scores.float().argmax(dim=-1)]
        makes_frame = (tokens == runner.audio_token_id) & decoding
        negative = self._forward(runner.negative, key, embeds, negative_positions, negative_visible_from)
        latents = runner.sample_frames(positive, negative, noise, inputs.guidance[:rows], key.diffusion_steps)
        audio, frame_embeds = runner.stream_frames(latents.unsqueeze(1), inputs.row_index[:rows], keep=makes_frame)
        token_embeds = runner.inner.get_input_embeddings()(tokens).unsqueeze(1)
        next_inputs = torch.where(makes_frame[:, None, None], frame_embeds, token_embeds)
        inputs.previous[0, :rows] = makes_frame
        inputs.previous[1, :rows] = (tokens == runner.audio_bos_token_id) & decoding
        return FrameStepOutputs(tokens, audio.reshape(rows, -1), latents, next_inputs)

    def _forward(
        self,
        cache: SlotKVCache,
        key: FrameStepKey,
        embeds: torch.Tensor,
        positions: torch.Tensor,
        visible_from: torch.Tensor,
    ) -> torch.Tensor:
        view = FixedSlotView(
            cache, key.rows, key.key_length, positions, visible_from, self.inputs.row_index[: key.rows]
        )
        return self.runner.language_model(embeds, view)

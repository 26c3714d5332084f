"""The model side of an engine step: the only place in the engine that touches tensors.

The runner owns the K/V pool (`paged_kv.py`), and for every row: the acoustic decoder's and semantic
encoder's streaming states, the embedding the row feeds the LM next, and the prompt embeddings of a
request still prefilling. It takes plain records from the engine (`step_records.py`) and returns plain
outcomes; which blocks a request holds, how long its branches are and what it draws next are the
engine's, handed over in each record. A step is:

1. the step's prompt chunks through the LM in one forward (packed: `paged_kv.packed_view`), and one batched LM
   forward for every decoding row;
2. the token choice among the handful of tokens VibeVoice may emit, scored against just their rows of
   the LM head (the full 151,936-row head is never read);
3. for the rows that chose the diffusion token: one batched negative-branch forward, one batched
   diffusion sampling per step count, one batched acoustic decode and one batched semantic encode,
   giving each row its frame of audio and its next input embedding.

With `fixed_shapes`, the decoding rows of a step go through `fixed_decoder.py` instead: the same arithmetic at
bucketed shapes with no host synchronisation inside, replayed as a CUDA graph on a GPU. Prefill stays here.

Where transformers' port differs from the original VibeVoice, the runner follows the original, as the parity
reference does (`models/reference.py`): when a row chooses the speech-end token, its acoustic and semantic streams
are zeroed (`end_speech`), so the next speech start decodes from silence (`generate()` carries them over); every
step path does it (here, the fixed-shape step, a replay). The negative branch's restart is the other such rule
(its mask and positions: `paged_kv.py`).

Randomness follows `generate()` for a request run alone: the engine draws each frame's noise from the
request's own generator and hands it over; the runner draws, from the same generator, the σ-VAE noise of
the request's voice latents when the request starts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from core.engine_defaults import ENGINE_SLOTS, KV_BLOCK_TOKENS, MAX_CUDA_GRAPHS
from diffusion.dpm_solver import sample_with_guidance
from models.loading import LoadedModel
from models.segment_io import PromptInputs
from pipeline.engine.fixed_decoder import FixedDecoder, SpeechTokens
from pipeline.engine.kv_blocks import CacheSpan
from pipeline.engine.memory_plan import StepMemory, pool_blocks_within
from pipeline.engine.paged_attention import use_chunked_attention
from pipeline.engine.paged_kv import CHUNK_KEYS, KVPoolShape, PagedKVPool, PagedView, eager_view, packed_view
from pipeline.engine.requests import Replay
from pipeline.engine.step_records import (
    FastPath,
    FrameInputs,
    KeyReads,
    PrefillChunk,
    RequestStart,
    RowOutcome,
    RunnerSpec,
    StepInput,
    StepMode,
)
from tokenizer.streaming import SlotConvCache

logger = logging.getLogger(__name__)

DEFAULT_CPU_KV_BYTES = 1 << 30  # K/V pool on the CPU when no budget is given
# Of the GPU memory free once the model is loaded: the pool and the largest decode step it allows (measured) share
# it; the rest is for CUDA graphs' bookkeeping, the caching allocator's slack and what else shares the GPU.
DEFAULT_GPU_KV_FRACTION = 0.9
# Attention scores (new entries times keys, per head) one packed prefill forward may hold: it scores every new entry
# against every key of its pack, its own request's or another's (masked), so chunks with long windows (a replay's, a
# long prompt's late chunks) go alone. 4M: four fresh 455-token prompts pack (3.3M); 12 heads of bf16, 100 MB.
PACKED_SCORES = 1 << 22
REPLAY_CHUNK_FRAMES = 64  # frames streamed through the codec, and negative entries written, per forward


@dataclass(frozen=True)
class RunnerConfig:
    rows: int = ENGINE_SLOTS  # requests in one step at once
    block_size: int = KV_BLOCK_TOKENS  # tokens per K/V block
    # The K/V pool: bytes (> 1), or a fraction (<= 1) of the GPU memory free once the model is loaded;
    # None: DEFAULT_GPU_KV_FRACTION on a GPU, DEFAULT_CPU_KV_BYTES on the CPU. `kv_blocks` (blocks) wins.
    kv_memory: float | None = None
    kv_blocks: int | None = None
    fixed_shapes: bool | None = None  # None: on a GPU only
    cuda_graphs: bool = True  # replay the fixed-shape step as CUDA graphs (on a GPU, with fixed_shapes)
    overlap: bool = True  # read a fixed-shape step back while the next one runs
    max_graphs: int = MAX_CUDA_GRAPHS  # CUDA graphs held at once (and captured at warm-up at most)


@dataclass(frozen=True)
class ChosenRow:
    """A row whose token the eager step chooses, with what making its frame needs."""

    request_id: int
    row: int
    hidden: torch.Tensor  # [hidden] last positive hidden state
    positive_input: torch.Tensor | None  # [1, hidden] what the positive branch was fed (None: it was the prompt)
    frame: FrameInputs


class ModelRunner:
    def __init__(self, loaded: LoadedModel, config: RunnerConfig | None = None) -> None:
        config = config or RunnerConfig()
        self.loaded = loaded
        self.model = loaded.model
        self.inner = loaded.model.model
        self.device = loaded.device
        self.dtype = loaded.dtype
        model_config = loaded.model.config
        # transformers types the sub-configs loosely (`dict | PreTrainedConfig | None`); a loaded VibeVoice has both.
        text: Any = model_config.text_config
        audio_config: Any = model_config.audio_config
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        shape = KVPoolShape(text.num_hidden_layers, text.num_key_value_heads, head_dim, config.block_size)
        # On a GPU given a fraction, the pool is sized after measuring the decode step: provisional until then.
        shared_budget = _shared_gpu_budget(config, self.device)
        blocks = _pool_blocks(config, shape, self.device, self.dtype) if shared_budget is None else None
        self.pool = PagedKVPool(shape, blocks or _provisional_blocks(config), self.device, self.dtype)
        self.step_memory: StepMemory | None = None  # measured on a GPU before the pool took its share
        self.acoustic = SlotConvCache(config.rows)
        self.semantic = SlotConvCache(config.rows)
        self.next_embeds = torch.zeros(config.rows, 1, text.hidden_size, device=self.device, dtype=self.dtype)
        self.prompt_embeds: dict[int, torch.Tensor] = {}  # request id -> prompt (and replayed frames) not yet prefilled
        self.row_owner: list[int | None] = [None] * config.rows  # request id per row, to drop stale read-backs
        use_chunked_attention(self.inner.language_model)  # decode rows read only the keys they hold
        self._eager_reads = KeyReads()
        self.audio_token_id = model_config.audio_token_id
        self.audio_bos_token_id = model_config.audio_bos_token_id
        self.audio_eos_token_id = model_config.audio_eos_token_id
        # Sorted, so ties resolve to the lowest token id, as an argmax over the masked vocabulary does.
        self.choosable_ids = sorted(
            {
                model_config.audio_bos_token_id,
                model_config.audio_eos_token_id,
                model_config.audio_token_id,
                model_config.eos_token_id,
            }
        )
        self.choosable_head = self.model.lm_head.weight[self.choosable_ids].detach()
        self._choosable = torch.tensor(self.choosable_ids, device=self.device)
        self.latent_dim = audio_config.hidden_size
        self.vae_std = audio_config.vae_std
        self.hop_length = audio_config.hop_length
        self.spec = RunnerSpec(
            rows=config.rows,
            num_blocks=self.pool.num_blocks,
            block_size=config.block_size,
            max_context=text.max_position_embeddings,
            latent_dim=self.latent_dim,
            eos_token_ids=_eos_token_ids(loaded),
            diffusion_token_id=self.audio_token_id,
            speech_start_token_id=self.audio_bos_token_id,
        )
        fixed = config.fixed_shapes if config.fixed_shapes is not None else self.device.type == "cuda"
        self._config = config
        self.fixed = self._fixed_decoder(config.cuda_graphs) if fixed else None
        self._mode_reason = _configured_reason(config, self.device, fixed)
        if shared_budget is not None:
            self._fit_pool(shared_budget)

    def _fixed_decoder(self, cuda_graphs: bool) -> FixedDecoder:
        config = self._config
        return FixedDecoder(
            self,
            SpeechTokens(self.audio_token_id, self.audio_bos_token_id, self.audio_eos_token_id),
            config.rows,
            self.next_embeds.shape[-1],
            cuda_graphs=cuda_graphs,
            overlap=config.overlap,
            max_graphs=config.max_graphs,
        )

    def _fit_pool(self, budget: float) -> None:
        """Measure the decode step over every row (with the provisional pool), then give the pool what is left of
        `budget` once the largest step it allows is paid for (`memory_plan`)."""
        measuring = self.fixed or self._fixed_decoder(cuda_graphs=False)  # the eager step needs no more than it
        self.step_memory = measuring.measure_step_memory(diffusion_steps=10)
        shape = self.pool.shape
        blocks = pool_blocks_within(
            budget, shape.bytes_per_block(self.dtype), shape.block_size, self.spec.rows, CHUNK_KEYS, self.step_memory
        )
        if blocks < 2:
            raise ValueError(
                f"the K/V memory budget ({int(budget)} bytes) leaves no room for a pool beside the decode step "
                f"({self.step_memory.fixed_bytes} bytes and {self.step_memory.bytes_per_chunk} a key chunk)"
            )
        del self.pool  # the provisional pool's memory goes back first
        torch.cuda.empty_cache()
        self.pool = PagedKVPool(shape, blocks, self.device, self.dtype)
        self.spec = dataclasses.replace(self.spec, num_blocks=blocks)
        if self.fixed is not None:
            self.fixed = self._fixed_decoder(self._config.cuda_graphs)
        logger.info(
            "K/V pool sized",
            extra={"blocks": blocks, "pool_bytes": self.pool.nbytes, "step_bytes": self.step_memory.fixed_bytes},
        )

    @property
    def fast_path(self) -> FastPath:
        """Which step decodes now, why, and the CUDA graphs it holds."""
        if self.fixed is None:
            return FastPath(StepMode.EAGER, self._mode_reason)
        captured = self.fixed.captured
        if not captured.enabled:
            return FastPath(StepMode.FIXED, captured.failure or self._mode_reason, captures=captured.captures)
        return FastPath(StepMode.GRAPHS, self._mode_reason, len(captured.graphs), captured.captures)

    def fall_back(self, why: str) -> StepMode:
        """Decode with the next slower step from now on (graphs, then the fixed-shape step run eagerly, then the
        eager step), because of `why`; returns the step now used. Only between steps: nothing may be in flight."""
        if self.unread:
            raise RuntimeError("a step is still in flight; read it back before falling back")
        mode = self.fast_path.mode
        if mode is StepMode.GRAPHS and self.fixed is not None:
            self.fixed.captured.disable(why)
        elif mode is StepMode.FIXED:
            self.fixed = None
        self._mode_reason = why
        logger.warning(
            "decode step falls back", extra={"from_step": mode.value, "to_step": self.fast_path.mode.value, "why": why}
        )
        return self.fast_path.mode

    @contextlib.contextmanager
    def eager_step(self) -> Iterator[None]:
        """Decode with the eager step inside, whatever the runner uses outside (a self-check's reference)."""
        fixed, self.fixed = self.fixed, None
        try:
            yield
        finally:
            self.fixed = fixed

    def overlaps(self, diffusion_steps: set[int]) -> bool:
        """Whether decoding rows of these step counts go through the fixed-shape step, which can run while a
        step is still unread; otherwise the engine reads every step back before building the next."""
        return self.fixed is not None and len(diffusion_steps) == 1

    @property
    def key_reads(self) -> KeyReads:
        """K/V entries attention read against those its rows could see, every forward so far."""
        return self._eager_reads + (self.fixed.key_reads if self.fixed is not None else KeyReads())

    @property
    def unread(self) -> frozenset[int]:
        """Requests with a decode step launched and not yet read back."""
        return frozenset() if self.fixed is None else self.fixed.unread()

    @torch.inference_mode()
    def start_request(self, start: RequestStart) -> np.ndarray | None:
        """Give `start.row` to the request: clear its codec streams, embed its prompt, replay its frames.

        Returns the replayed frames' audio ([frames, samples_per_frame]), or None without frames to replay.
        """
        row = start.row
        self.row_owner[row] = start.request_id
        for streams in (self.acoustic, self.semantic):
            streams.reset(row)
        self.prompt_embeds[start.request_id] = self._embed_prompt(start.prompt, start.generator)
        if start.replay is None or not start.replay.tokens:
            return None
        return self._replay(start, start.replay)

    def finish_request(self, request_id: int, row: int) -> None:
        """The request left its row (finished, cancelled, failed or preempted): drop what is left of it."""
        self.prompt_embeds.pop(request_id, None)
        if self.row_owner[row] == request_id:
            self.row_owner[row] = None

    @torch.inference_mode()
    def run(self, step: StepInput) -> list[RowOutcome]:
        """One engine step; returns an outcome for every row that chose a token (with overlap, the previous
        step's rows too, read back now)."""
        chosen: list[ChosenRow] = []
        if step.prefill:
            for chunk, hidden in zip(step.prefill, self._prefill(step.prefill), strict=True):
                if chunk.frame is not None:
                    chosen.append(ChosenRow(chunk.request_id, chunk.row, hidden, None, chunk.frame))
        outcomes: list[RowOutcome] = []
        if step.decode and self.fixed is not None and self.overlaps({row.frame.diffusion_steps for row in step.decode}):
            outcomes = self.fixed.decode(step.decode)
        elif step.decode:
            outcomes = self.flush()  # the engine reads a step in flight back before an eager one; none is left
            inputs = self.next_embeds[[row.row for row in step.decode]]
            hidden = self._forward([row.positive for row in step.decode], inputs)
            for i, row in enumerate(step.decode):
                chosen.append(ChosenRow(row.request_id, row.row, hidden[i], inputs[i], row.frame))
        if not chosen:
            return outcomes
        return outcomes + self._advance(chosen, self.choose_tokens(chosen))  # older outcomes (read back late) first

    @torch.inference_mode()
    def warm_up(self, diffusion_steps: int, max_keys: int) -> int:
        """Capture the fixed-shape step's graphs before serving, so no request waits on a capture.

        Returns the graphs held; 0 when graphs are off.
        """
        return 0 if self.fixed is None else self.fixed.warm_up(diffusion_steps, max_keys)

    @torch.inference_mode()
    def flush(self) -> list[RowOutcome]:
        """The outcomes of a fixed-shape step still in flight (none without one)."""
        return [] if self.fixed is None else self.fixed.flush()

    def language_model(self, embeds: torch.Tensor, view: PagedView) -> torch.Tensor:
        """The LM over `embeds` [rows, tokens, hidden] against `view`; each row's last hidden state."""
        return self._hidden_states(embeds, view)[:, -1]

    def _hidden_states(self, embeds: torch.Tensor, view: PagedView) -> torch.Tensor:
        """The LM over `embeds` [rows, tokens, hidden] against `view`; every token's last hidden state."""
        output = self.inner.language_model(
            inputs_embeds=embeds,
            attention_mask={"full_attention": view.attention_mask},
            position_ids=view.position_ids,
            past_key_values=view,
            use_cache=True,
            paged_view=view,  # to the attention (`paged_attention`), which reads a decode view's chunks itself
        )
        return output.last_hidden_state

    def sample_frames(
        self, positive: torch.Tensor, negative: torch.Tensor, noise: torch.Tensor, guidance: torch.Tensor, steps: int
    ) -> torch.Tensor:
        return sample_with_guidance(self.inner.diffusion_head, positive, negative, noise, guidance, steps)

    def stream_frames(
        self, latents: torch.Tensor, rows: torch.Tensor, keep: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Latents [rows, frames, latent] through each row's streaming decoder and semantic encoder.

        Returns the audio [rows, 1, frames * samples_per_frame] and the LM input embedding of every frame
        [rows, frames, hidden]: acoustic connector of the latent plus semantic connector of its audio.
        `keep` (bool per row) says whose streams remember these frames; None: everyone's.
        """
        scaled = latents / self.inner.latent_scaling_factor - self.inner.latent_bias_factor
        acoustic = self.acoustic.rows(rows, keep)
        audio = self.inner.audio_tower.decode(scaled, padding_cache=acoustic, use_cache=True).audio
        semantic = self.inner.semantic_tokenizer_encoder(
            audio, padding_cache=self.semantic.rows(rows, keep), use_cache=True
        ).latents
        embeds = self.inner.multi_modal_projector(latents) + self.inner.semantic_connector(semantic)
        return audio, embeds.to(self.dtype)

    def token_embeddings(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.inner.get_input_embeddings()(tokens)

    def end_speech(self, row: int) -> None:
        """The row chose the speech-end token: its codec streams start again from silence, as in the original."""
        for streams in (self.acoustic, self.semantic):
            streams.reset(row)

    def end_speech_where(self, rows: torch.Tensor, ends_speech: torch.Tensor) -> None:
        """`end_speech` for each of `rows` whose `ends_speech` is set, on the device (the fixed-shape step)."""
        for streams in (self.acoustic, self.semantic):
            streams.reset_where(rows, ends_speech)

    # --- starting a request -------------------------------------------------------------------------------

    def _replay(self, start: RequestStart, replay: Replay) -> np.ndarray:
        """Bring the row and the branches to where an uninterrupted run stood after the replayed tokens.

        After tokens t1..tn (frames among them), `generate()` has fed the positive branch the prompt and the
        inputs of t1..t(n-1) (tn's is the next input), fed the negative branch, for every frame, what the
        positive branch was fed in that frame's step (the speech start after the prompt for the first), with
        its history hidden at each speech start, and streamed every frame through the decoder and encoder (which
        start again from silence after each speech end, the original's rule).
        """
        tokens = torch.tensor(replay.tokens, device=self.device)
        inputs = self.token_embeddings(tokens)  # the input each chosen token became, in order
        audio, frame_inputs = [torch.zeros(0, self.hop_length)], []
        for first, end, ends_speech in _replay_runs(replay.tokens, self.audio_token_id, self.audio_eos_token_id):
            chunk_audio, chunk_inputs = self._replay_frames(replay.latents[first:end], start.row)
            audio.append(chunk_audio)
            frame_inputs.append(chunk_inputs)
            if ends_speech:
                self.end_speech(start.row)
        if len(replay.latents):
            inputs[tokens == self.audio_token_id] = torch.cat(frame_inputs).to(inputs.dtype)
        prompt = self.prompt_embeds[start.request_id]
        self.prompt_embeds[start.request_id] = torch.cat([prompt, inputs[None, :-1]], dim=1)
        self.next_embeds[start.row] = inputs[-1:]
        self._replay_negative(start, replay.tokens, inputs)
        return torch.cat(audio).numpy()

    def _replay_frames(self, latents: torch.Tensor, row: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Latents [frames, latent] through the row's streams, `REPLAY_CHUNK_FRAMES` at a time: their audio
        [frames, samples_per_frame] and input embeddings [frames, hidden]."""
        rows = torch.tensor([row], device=self.device)
        audio = [torch.zeros(0, self.hop_length)]
        embeds = [torch.zeros(0, self.next_embeds.shape[-1], device=self.device, dtype=self.dtype)]
        for first in range(0, len(latents), REPLAY_CHUNK_FRAMES):
            chunk = latents[first : first + REPLAY_CHUNK_FRAMES].to(self.device, self.dtype)
            chunk_audio, chunk_embeds = self.stream_frames(chunk.unsqueeze(0), rows)
            audio.append(chunk_audio.float().reshape(len(chunk), -1).cpu())
            embeds.append(chunk_embeds[0])
        return torch.cat(audio), torch.cat(embeds)

    def _replay_negative(self, start: RequestStart, tokens: tuple[int, ...], inputs: torch.Tensor) -> None:
        """Write the negative branch's entries that are still visible: those since the last speech start."""
        bos = self.token_embeddings(torch.tensor([self.audio_bos_token_id], device=self.device))
        frame_steps = [step for step, token in enumerate(tokens) if token == self.audio_token_id]
        fed = [bos[0] if step == 0 else inputs[step - 1] for step in frame_steps]
        visible = start.negative.visible_from
        blocks = start.negative.blocks
        for first in range(visible, len(fed), REPLAY_CHUNK_FRAMES):
            chunk = torch.stack(fed[first : first + REPLAY_CHUNK_FRAMES])[None]
            self._forward([CacheSpan(blocks, first, visible)], chunk)

    def _embed_prompt(self, prompt: PromptInputs, generator: torch.Generator) -> torch.Tensor:
        input_ids = prompt.input_ids.to(self.device)
        embeds = self.token_embeddings(input_ids)
        if prompt.input_values is None or prompt.padding_mask is None:
            return embeds
        voices = self._voice_embeddings(prompt.input_values, prompt.padding_mask, generator)
        placeholders = (input_ids == self.audio_token_id).unsqueeze(-1).expand_as(embeds)
        return embeds.masked_scatter(placeholders, voices.to(embeds.dtype))

    def _voice_embeddings(
        self, input_values: torch.Tensor, padding_mask: torch.Tensor, generator: torch.Generator
    ) -> torch.Tensor:
        """The acoustic-connector embeddings of the voice samples, σ-VAE noise included.

        `generate()` samples that noise inside the tokenizer's `encode(sample=True)` from the global
        generator: a scale per voice, then one value per latent element. The same draws, in the same
        shapes and order, come here from the request's own generator.
        """
        values = input_values.to(self.device, self.dtype)
        latents = self.inner.audio_tower.encode(values, sample=False).latents
        scale = self.vae_std * torch.randn(latents.shape[0], generator=generator, dtype=torch.float32)
        # randn_like keeps the encoder output's (non-contiguous) strides, which decides the draw order.
        noise = torch.empty_strided(latents.shape, latents.stride(), dtype=torch.float32).normal_(generator=generator)
        latents = latents + (scale[:, None, None] * noise).to(latents.device, latents.dtype)
        latents = (latents + self.inner.latent_bias_factor) * self.inner.latent_scaling_factor
        frames = torch.ceil(padding_mask.sum(dim=-1) / self.hop_length).long()
        valid = torch.arange(latents.shape[1])[None, :] < frames[:, None]
        return self.inner.multi_modal_projector(latents)[valid.to(self.device)]

    # --- a step ---------------------------------------------------------------------------------------------

    def _prefill(self, chunks: Sequence[PrefillChunk]) -> torch.Tensor:
        """The step's prompt chunks through the LM; each chunk's last hidden state [chunks, hidden]. Chunks go packed
        into one row (`packed_view`, `packs`), so the forward's fixed cost is paid once a pack rather than once a
        chunk, which is what lets a GPU take many new streams a step; a chunk alone goes as a row of its own."""
        embeds = [self.prompt_embeds[chunk.request_id][:, chunk.start : chunk.start + chunk.tokens] for chunk in chunks]
        for chunk in chunks:
            if chunk.start + chunk.tokens >= self.prompt_embeds[chunk.request_id].shape[1]:
                del self.prompt_embeds[chunk.request_id]
        hidden = []
        for pack in packs(chunks):
            if len(pack) == 1:
                hidden.append(self._forward([chunks[pack[0]].positive], embeds[pack[0]]))
                continue
            packed = [chunks[i] for i in pack]
            view = packed_view(self.pool, [c.positive for c in packed], [c.tokens for c in packed], self.device)
            self._eager_reads += view.reads
            ends = torch.tensor(list(itertools.accumulate(c.tokens for c in packed)), device=self.device) - 1
            hidden.append(self._hidden_states(torch.cat([embeds[i] for i in pack], dim=1), view)[0, ends])
        return torch.cat(hidden)

    def _forward(self, spans: Sequence[CacheSpan], embeds: torch.Tensor) -> torch.Tensor:
        """The LM over `embeds` [rows, tokens, hidden] appended to each span's entries; last hidden states."""
        view = eager_view(self.pool, spans, embeds.shape[1], self.device)
        self._eager_reads += view.reads
        return self.language_model(embeds, view)

    def choose_tokens(self, chosen: Sequence[ChosenRow]) -> list[int]:
        """Each row's token (the eager step's choice; see `choose_token_ids`)."""
        return self.choose_token_ids(torch.stack([row.hidden for row in chosen])).tolist()

    def choose_token_ids(self, hidden: torch.Tensor) -> torch.Tensor:
        """Each row's token, on the device: the best scored of the few VibeVoice may emit, from its last hidden
        state [rows, hidden] (scoring 5 rows of the LM head, not its whole vocabulary)."""
        scores = hidden.to(self.choosable_head.dtype) @ self.choosable_head.T
        return self._choosable[scores.float().argmax(dim=-1)]

    def _advance(self, chosen: list[ChosenRow], tokens: list[int]) -> list[RowOutcome]:
        """Set every chosen row's next input: a token embedding, or a new frame's embedding."""
        frames = [i for i, token in enumerate(tokens) if token == self.audio_token_id]
        others = [i for i, token in enumerate(tokens) if token != self.audio_token_id]
        if others:
            ids = torch.tensor([tokens[i] for i in others], device=self.device)
            self.next_embeds[[chosen[i].row for i in others]] = self.token_embeddings(ids).unsqueeze(1)
        outcomes = {i: RowOutcome(chosen[i].request_id, tokens[i]) for i in others}
        for i in others:
            if tokens[i] == self.audio_eos_token_id:
                self.end_speech(chosen[i].row)
        if frames:
            audio, latents = self._make_frames([chosen[i] for i in frames])
            for j, i in enumerate(frames):
                outcomes[i] = RowOutcome(chosen[i].request_id, tokens[i], audio[j], latents[j])
        return [outcomes[i] for i in range(len(chosen))]

    def _make_frames(self, rows: list[ChosenRow]) -> tuple[np.ndarray, torch.Tensor]:
        negative = self._negative_conditions(rows)
        positive = torch.stack([row.hidden for row in rows])
        noise = torch.stack([row.frame.noise for row in rows]).to(self.device, self.dtype)
        latents = torch.empty_like(noise)
        for steps in sorted({row.frame.diffusion_steps for row in rows}):
            group = [i for i, row in enumerate(rows) if row.frame.diffusion_steps == steps]
            guidance = torch.tensor([rows[i].frame.cfg_scale for i in group], device=self.device)
            latents[group] = self.sample_frames(positive[group], negative[group], noise[group], guidance, steps)
        row_index = torch.tensor([row.row for row in rows], device=self.device)
        audio, embeds = self.stream_frames(latents.unsqueeze(1), row_index)
        self.next_embeds[[row.row for row in rows]] = embeds
        return audio.float().reshape(len(rows), -1).cpu().numpy(), latents.float().cpu()

    def _negative_conditions(self, rows: list[ChosenRow]) -> torch.Tensor:
        """The CFG branch's hidden states for the rows making a frame, after one step of their own entries.

        Like `generate()`, the branch is fed what the positive branch was fed this step; on the step right
        after the prompt (no such input yet) it is fed the speech-start token it begins from.
        """
        bos = self.token_embeddings(torch.tensor([self.audio_bos_token_id], device=self.device))
        inputs = torch.stack([bos if row.positive_input is None else row.positive_input for row in rows])
        return self._forward([row.frame.negative for row in rows], inputs)


def packs(chunks: Sequence[PrefillChunk]) -> list[list[int]]:
    """The chunks' indices in packs of one forward each, in order: a pack grows while its new entries times the keys
    they read stay within `PACKED_SCORES`."""
    grouped: list[list[int]] = []
    tokens = keys = 0
    for index, chunk in enumerate(chunks):
        window = chunk.positive.length + chunk.tokens - chunk.positive.visible_from
        if grouped and (tokens + chunk.tokens) * (keys + window) <= PACKED_SCORES:
            grouped[-1].append(index)
            tokens, keys = tokens + chunk.tokens, keys + window
        else:
            grouped.append([index])
            tokens, keys = chunk.tokens, window
    return grouped


def _replay_runs(tokens: Sequence[int], frame_token: int, end_token: int) -> list[tuple[int, int, bool]]:
    """The replayed frames in runs (first, end) between speech ends, each with whether a speech end follows it."""
    runs, first, frames = [], 0, 0
    for token in tokens:
        if token == frame_token:
            frames += 1
        elif token == end_token:
            runs.append((first, frames, True))
            first = frames
    if frames > first:
        runs.append((first, frames, False))
    return runs


def _shared_gpu_budget(config: RunnerConfig, device: torch.device) -> float | None:
    """Bytes the pool and the decode step share, when the pool is sized by measuring the step: a fraction of the
    GPU memory free now (the model loaded); None when blocks or bytes are given, or on the CPU."""
    budget = config.kv_memory if config.kv_memory is not None else DEFAULT_GPU_KV_FRACTION
    if config.kv_blocks is not None or device.type != "cuda" or budget > 1:
        return None
    free, _ = torch.cuda.mem_get_info(device)
    return budget * free


def _provisional_blocks(config: RunnerConfig) -> int:
    """A pool big enough to measure a step reading 16 key chunks a row."""
    return 16 * config.rows * CHUNK_KEYS // config.block_size + 1


def _pool_blocks(config: RunnerConfig, shape: KVPoolShape, device: torch.device, dtype: torch.dtype) -> int:
    """Blocks in the K/V pool: `kv_blocks`, or as many as a budget in bytes holds (the null block among them)."""
    if config.kv_blocks is not None:
        return config.kv_blocks
    budget = config.kv_memory if config.kv_memory is not None else DEFAULT_CPU_KV_BYTES
    if budget <= 1:
        raise ValueError(f"a K/V memory fraction ({budget}) needs a GPU; give the CPU a size in bytes")
    blocks = int(budget // shape.bytes_per_block(dtype))
    if blocks < 2:
        raise ValueError(
            f"the K/V memory budget ({int(budget)} bytes) holds no block of {shape.bytes_per_block(dtype)} bytes"
        )
    return blocks


def _configured_reason(config: RunnerConfig, device: torch.device, fixed: bool) -> str:
    """Why the runner starts with the step it does, as its settings and device decide."""
    if not fixed:
        return "fixed shapes off (the default on a CPU)" if config.fixed_shapes is None else "fixed shapes off"
    if device.type != "cuda":
        return "CUDA graphs need a CUDA device"
    return "as configured" if config.cuda_graphs else "CUDA graphs off"


def _eos_token_ids(loaded: LoadedModel) -> frozenset[int]:
    """The tokens that end a generation: the generation config's eos ids, else the model's."""
    configured = loaded.model.generation_config.eos_token_id
    if configured is None:
        configured = loaded.model.config.eos_token_id
    return frozenset(configured if isinstance(configured, list) else [configured])

"""The model side of an engine step: the only place in the engine that touches tensors.

The runner owns, for every slot: both CFG branches' KV caches, the acoustic decoder's and semantic
encoder's streaming states, and the embedding the slot feeds the LM next. A step is:

1. prompt chunks through the LM (one forward per chunk), and one batched LM forward for every decoding slot;
2. the token choice among the handful of tokens VibeVoice may emit, scored against just their rows of
   the LM head (the full 151,936-row head is never read);
3. for the slots that chose the diffusion token: one batched negative-branch forward, one batched
   diffusion sampling per step count, one batched acoustic decode and one batched semantic encode,
   giving each slot its frame of audio and its next input embedding.

With `fixed_shapes`, the decode rows of a step go through `frame_step.py` instead: the same arithmetic at
bucketed shapes with no host synchronisation inside, replayed as a CUDA graph on a GPU. Prefill stays here.

Randomness follows `generate()` for a request run alone (each request draws from its own generator, in
the order and shapes `generate()` draws from the global one), so a request's audio does not depend on
what else shares its batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from diffusion.dpm_solver import sample_with_guidance
from pipeline.engine.fixed_decoder import FixedDecoder
from pipeline.engine.kv_cache import FixedSlotView, KVCacheShape, SlotCacheView, SlotKVCache
from pipeline.engine.requests import PromptInputs, RequestState, RowOutcome
from pipeline.model_loading import LoadedModel
from tokenizer.streaming import SlotConvCache


@dataclass(frozen=True)
class _ChosenRow:
    state: RequestState
    hidden: torch.Tensor  # [hidden] last positive hidden state
    positive_input: torch.Tensor | None  # [1, hidden] what the positive branch was fed (None: it was the prompt)


class ModelRunner:
    def __init__(
        self,
        loaded: LoadedModel,
        slots: int,
        capacity: int,
        *,
        fixed_shapes: bool = False,
        cuda_graphs: bool = False,
        overlap: bool = False,
    ) -> None:
        self.model = loaded.model
        self.inner = loaded.model.model
        self.device = loaded.device
        self.dtype = loaded.dtype
        config = loaded.model.config
        text = config.text_config
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        shape = KVCacheShape(text.num_hidden_layers, text.num_key_value_heads, head_dim, capacity)
        self.positive = SlotKVCache(shape, slots, self.device, self.dtype)
        self.negative = SlotKVCache(shape, slots, self.device, self.dtype)
        self.acoustic = SlotConvCache(slots)
        self.semantic = SlotConvCache(slots)
        self.next_embeds = torch.zeros(slots, 1, text.hidden_size, device=self.device, dtype=self.dtype)
        self.prompt_embeds: dict[int, torch.Tensor] = {}
        self.audio_token_id = config.audio_token_id
        self.audio_bos_token_id = config.audio_bos_token_id
        # Sorted, so ties resolve to the lowest token id, as an argmax over the masked vocabulary does.
        self.choosable_ids = sorted(
            {config.audio_bos_token_id, config.audio_eos_token_id, config.audio_token_id, config.eos_token_id}
        )
        self.choosable_head = self.model.lm_head.weight[self.choosable_ids].detach()
        self.latent_dim = config.audio_config.hidden_size
        self.vae_std = config.audio_config.vae_std
        self.hop_length = config.audio_config.hop_length
        self.fixed = (
            FixedDecoder(self, slots, text.hidden_size, cuda_graphs=cuda_graphs, overlap=overlap)
            if fixed_shapes
            else None
        )

    @property
    def cache_nbytes(self) -> int:
        """Memory held for all slots: both KV caches, the next-input buffer (conv states grow on first use)."""
        buffers = self.next_embeds.numel() * self.next_embeds.element_size()
        return self.positive.nbytes + self.negative.nbytes + buffers

    @torch.inference_mode()
    def admit(self, state: RequestState) -> np.ndarray | None:
        """Give `state`'s slot a clean start and embed its prompt (voice latents drawn from its generator).

        A request resuming from stored latents gets them replayed, and their audio is returned
        ([frames, samples_per_frame]); otherwise None.
        """
        slot = state.slot
        for cache in (self.positive, self.negative):
            cache.reset(slot)
        for streams in (self.acoustic, self.semantic):
            streams.reset(slot)
        self.prompt_embeds[slot] = self._embed_prompt(state.request.prompt, state.generator)
        state.prefill_length = state.request.prompt.length
        if self.fixed is not None:
            self.fixed.admit(state)
        latents = state.request.resume_latents
        if latents is None or len(latents) == 0:
            return None
        return self._replay(state, latents)

    def _replay(self, state: RequestState, latents: torch.Tensor) -> np.ndarray:
        """Bring a slot to where an uninterrupted run stood after these frames, without regenerating them.

        After frame k, `generate()` has fed the positive branch the prompt and the embeddings of frames
        1..k-1 (frame k's is its next input), fed the negative branch the speech start and frames 1..k-1,
        streamed all k frames through the decoder and semantic encoder, and drawn k CFG noise pairs.
        """
        slot = state.slot
        frames = len(latents)
        for _ in range(frames):
            torch.randn(2, self.latent_dim, generator=state.generator, dtype=torch.float32)
        latents = latents.to(self.device, self.dtype)
        audio, embeds = self.stream_frames(latents.unsqueeze(0), torch.tensor([slot], device=self.device))
        self.prompt_embeds[slot] = torch.cat([self.prompt_embeds[slot], embeds[:, :-1]], dim=1)
        state.prefill_length += frames - 1
        self.next_embeds[slot] = embeds[0, -1:]
        bos = self.inner.get_input_embeddings()(torch.tensor([[self.audio_bos_token_id]], device=self.device))
        self._forward(self.negative, [slot], torch.cat([bos, embeds[:, :-1]], dim=1))
        state.resumed = True
        return audio.float().reshape(frames, -1).cpu().numpy()

    def release(self, slot: int) -> None:
        """The slot's request is over: whatever of it is still in flight is dropped when read back."""
        self.prompt_embeds.pop(slot, None)
        if self.fixed is not None:
            self.fixed.release(slot)

    @torch.inference_mode()
    def run(self, prefill: Sequence[tuple[RequestState, int]], decode: Sequence[RequestState]) -> list[RowOutcome]:
        """One engine step; returns an outcome for every slot that chose a token this step."""
        chosen: list[_ChosenRow] = []
        for state, tokens in prefill:
            hidden = self._prefill_chunk(state, tokens)
            if not state.in_prefill and not state.resumed:  # a resumed slot's next input is its last frame
                chosen.append(_ChosenRow(state, hidden, None))
        if decode and self.fixed is not None and self.fixed.takes(decode):
            outcomes = self.fixed.decode(decode)
        else:
            outcomes = self.flush()  # the eager step below may touch the slots of a step in flight
            if decode:
                slots = [state.slot for state in decode]
                inputs = self.next_embeds[slots]
                hidden = self._forward(self.positive, slots, inputs)
                chosen += [_ChosenRow(s, hidden[i], inputs[i]) for i, s in enumerate(decode)]
        if not chosen:
            return outcomes
        tokens = self._choose_tokens(torch.stack([row.hidden for row in chosen]))
        return outcomes + self._advance(chosen, tokens)  # older outcomes (read back late) first

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

    def noise_at(self, state: RequestState, index: int) -> torch.Tensor:
        """The noise of the request's frame `index` frames from now, drawn in order and kept until used.

        `generate()` draws a CFG pair per frame and denoises the first. The fixed-shape step hands rows
        their noise before it knows which make a frame, so draws wait in the request's queue until one does.
        """
        while len(state.noise_queue) <= index:
            state.noise_queue.append(torch.randn(2, self.latent_dim, generator=state.generator, dtype=torch.float32)[0])
        return state.noise_queue[index]

    def language_model(self, embeds: torch.Tensor, cache: SlotCacheView | FixedSlotView) -> torch.Tensor:
        """The LM over `embeds` [batch, tokens, hidden] against `cache`; each row's last hidden state."""
        output = self.inner.language_model(
            inputs_embeds=embeds,
            attention_mask={"full_attention": cache.attention_mask},
            position_ids=cache.position_ids,
            past_key_values=cache,
            use_cache=True,
        )
        return output.last_hidden_state[:, -1]

    def sample_frames(
        self, positive: torch.Tensor, negative: torch.Tensor, noise: torch.Tensor, guidance: torch.Tensor, steps: int
    ) -> torch.Tensor:
        return sample_with_guidance(self.inner.diffusion_head, positive, negative, noise, guidance, steps)

    def _embed_prompt(self, prompt: PromptInputs, generator: torch.Generator) -> torch.Tensor:
        input_ids = prompt.input_ids.to(self.device)
        embeds = self.inner.get_input_embeddings()(input_ids)
        if prompt.input_values is None:
            return embeds
        voices = self._voice_embeddings(prompt, generator)
        placeholders = (input_ids == self.audio_token_id).unsqueeze(-1).expand_as(embeds)
        return embeds.masked_scatter(placeholders, voices.to(embeds.dtype))

    def _voice_embeddings(self, prompt: PromptInputs, generator: torch.Generator) -> torch.Tensor:
        """The acoustic-connector embeddings of the voice samples, σ-VAE noise included.

        `generate()` samples that noise inside the tokenizer's `encode(sample=True)` from the global
        generator: a scale per voice, then one value per latent element. The same draws, in the same
        shapes and order, come here from the request's own generator.
        """
        values = prompt.input_values.to(self.device, self.dtype)
        latents = self.inner.audio_tower.encode(values, sample=False).latents
        scale = self.vae_std * torch.randn(latents.shape[0], generator=generator, dtype=torch.float32)
        # randn_like keeps the encoder output's (non-contiguous) strides, which decides the draw order.
        noise = torch.empty_strided(latents.shape, latents.stride(), dtype=torch.float32).normal_(generator=generator)
        latents = latents + (scale[:, None, None] * noise).to(latents.device, latents.dtype)
        latents = (latents + self.inner.latent_bias_factor) * self.inner.latent_scaling_factor
        frames = torch.ceil(prompt.padding_mask.sum(dim=-1) / self.hop_length).long()
        valid = torch.arange(latents.shape[1])[None, :] < frames[:, None]
        return self.inner.multi_modal_projector(latents)[valid.to(self.device)]

    def _prefill_chunk(self, state: RequestState, tokens: int) -> torch.Tensor:
        start = state.prefilled
        chunk = self.prompt_embeds[state.slot][:, start : start + tokens]
        hidden = self._forward(self.positive, [state.slot], chunk)
        state.prefilled += tokens
        if not state.in_prefill:
            self.prompt_embeds.pop(state.slot)
        return hidden[0]

    def _forward(self, cache: SlotKVCache, slots: list[int], embeds: torch.Tensor) -> torch.Tensor:
        """The LM over `embeds` [batch, tokens, hidden] appended to each slot's cache; last hidden states."""
        view = cache.view(slots, embeds.shape[1], self.device)
        hidden = self.language_model(embeds, view)
        view.commit()
        return hidden

    def _choose_tokens(self, hidden: torch.Tensor) -> list[int]:
        scores = hidden.to(self.choosable_head.dtype) @ self.choosable_head.T
        return [self.choosable_ids[i] for i in scores.float().argmax(dim=-1).tolist()]

    def _advance(self, chosen: list[_ChosenRow], tokens: list[int]) -> list[RowOutcome]:
        """Set every chosen slot's next input: a token embedding, or a new frame's embedding."""
        frames = [i for i, token in enumerate(tokens) if token == self.audio_token_id]
        others = [i for i, token in enumerate(tokens) if token != self.audio_token_id]
        if others:
            ids = torch.tensor([tokens[i] for i in others], device=self.device)
            slots = [chosen[i].state.slot for i in others]
            self.next_embeds[slots] = self.inner.get_input_embeddings()(ids).unsqueeze(1)
        for i in others:
            if tokens[i] == self.audio_bos_token_id:
                self.negative.hide_history(chosen[i].state.slot)  # the CFG branch restarts with the speech
        outcomes = {i: RowOutcome(chosen[i].state, tokens[i]) for i in others}
        if frames:
            audio, latents = self._make_frames([chosen[i] for i in frames])
            for j, i in enumerate(frames):
                outcomes[i] = RowOutcome(chosen[i].state, tokens[i], audio[j], latents[j])
        return [outcomes[i] for i in range(len(chosen))]

    def _make_frames(self, rows: list[_ChosenRow]) -> tuple[np.ndarray, torch.Tensor]:
        slots = [row.state.slot for row in rows]
        negative = self._negative_conditions(rows)
        positive = torch.stack([row.hidden for row in rows])
        noise = torch.stack([self.noise_at(row.state, 0) for row in rows]).to(self.device, self.dtype)
        for row in rows:
            row.state.noise_queue.pop(0)
        latents = torch.empty_like(noise)
        for steps in sorted({row.state.request.diffusion_steps for row in rows}):
            group = [i for i, row in enumerate(rows) if row.state.request.diffusion_steps == steps]
            guidance = torch.tensor([rows[i].state.request.cfg_scale for i in group], device=self.device)
            latents[group] = self.sample_frames(positive[group], negative[group], noise[group], guidance, steps)
        audio, embeds = self.stream_frames(latents.unsqueeze(1), torch.tensor(slots, device=self.device))
        self.next_embeds[slots] = embeds
        return audio.float().reshape(len(rows), -1).cpu().numpy(), latents.float().cpu()

    def stream_frames(
        self, latents: torch.Tensor, slot_index: torch.Tensor, keep: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Latents [slots, frames, latent] through each slot's streaming decoder and semantic encoder.

        Returns the audio [slots, 1, frames * samples_per_frame] and the LM input embedding of every frame
        [slots, frames, hidden]: acoustic connector of the latent plus semantic connector of its audio.
        `keep` (bool per slot) says whose streams remember these frames; None: everyone's.
        """
        scaled = latents / self.inner.latent_scaling_factor - self.inner.latent_bias_factor
        audio = self.inner.audio_tower.decode(
            scaled, padding_cache=self.acoustic.rows(slot_index, keep), use_cache=True
        ).audio
        semantic = self.inner.semantic_tokenizer_encoder(
            audio, padding_cache=self.semantic.rows(slot_index, keep), use_cache=True
        ).latents
        embeds = self.inner.multi_modal_projector(latents) + self.inner.semantic_connector(semantic)
        return audio, embeds.to(self.dtype)

    def _negative_conditions(self, rows: list[_ChosenRow]) -> torch.Tensor:
        """The CFG branch's hidden states for the rows making a frame, after one step of their own caches.

        Like `generate()`, the branch is fed what the positive branch was fed this step; on the step right
        after the prompt (no such input yet) it is fed the speech-start token it begins from.
        """
        bos = self.inner.get_input_embeddings()(torch.tensor([self.audio_bos_token_id], device=self.device))
        inputs = torch.stack([bos if row.positive_input is None else row.positive_input for row in rows])
        return self._forward(self.negative, [row.state.slot for row in rows], inputs)

"""What the engine hands the model runner, and what it gets back: plain records, the seam between the two.

The engine owns every request's state (where its prompt prefill stands, its noise, its blocks and their
lengths) and decides what runs; the runner owns tensors and computes. For each step the engine builds a
`StepInput` from the requests' state as it stands; the runner returns one `RowOutcome` per row that chose
a token, and never writes the engine's state. A fake runner that honours these records drives the engine
in tests with no model at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import torch

from models.segment_io import PromptInputs
from pipeline.engine.kv_blocks import CacheSpan
from pipeline.engine.requests import Replay


@dataclass(frozen=True)
class RequestStart:
    """A request takes a row: embed its prompt, clear the row's codec streams, replay frames it already has."""

    request_id: int
    row: int
    prompt: PromptInputs
    generator: torch.Generator  # the request's own: draws the σ-VAE noise of its voice latents
    # What it made before (a resumed job, a preempted request): the runner streams the frames through the
    # codec, appends the inputs of the tokens (but the last, the next input) to the prompt, and writes the
    # negative branch's visible entries for them into `negative` (from its `visible_from` to its `length`).
    replay: Replay | None
    negative: CacheSpan


@dataclass(frozen=True)
class FrameInputs:
    """What a row that chooses a token needs in case it is the diffusion token: the rest of a frame's inputs."""

    negative: CacheSpan  # the negative branch, as the host knows it
    noise: torch.Tensor  # [latent_dim] the noise of the row's next frame
    noise_after_frame: torch.Tensor  # the one after: used when the unread step in flight made a frame (carried)
    cfg_scale: float
    diffusion_steps: int
    carried: bool  # the row decoded in the step still in flight, for this request


@dataclass(frozen=True)
class PrefillChunk:
    """`tokens` prompt positions from `start` through the positive branch."""

    request_id: int
    row: int
    start: int
    tokens: int
    positive: CacheSpan
    frame: FrameInputs | None  # the chunk ends the prompt and the row chooses its first token (None: it does not)


@dataclass(frozen=True)
class DecodeRow:
    """One token through the positive branch from the row's next input, then the token choice and maybe a frame."""

    request_id: int
    row: int
    positive: CacheSpan
    frame: FrameInputs


@dataclass(frozen=True)
class StepInput:
    prefill: tuple[PrefillChunk, ...]
    decode: tuple[DecodeRow, ...]

    @property
    def empty(self) -> bool:
        return not self.prefill and not self.decode


@dataclass(frozen=True)
class RowOutcome:
    """What one request got from a step: the chosen token and, for the diffusion token, a frame."""

    request_id: int
    token: int
    audio: np.ndarray | None = None  # [samples_per_frame] float32
    latent: torch.Tensor | None = None  # [latent_dim] float32 CPU

    @property
    def frame(self) -> tuple[np.ndarray, torch.Tensor] | None:
        """The frame this step made for the request (its audio and latent), or None for a token without one."""
        if self.audio is None or self.latent is None:
            return None
        return self.audio, self.latent

    @property
    def made_frame(self) -> bool:
        return self.frame is not None


class StepMode(StrEnum):
    """How a runner decodes, fastest first; a runner falls back down this list, never up."""

    GRAPHS = "graphs"  # the fixed-shape step, replayed as CUDA graphs
    FIXED = "fixed"  # the fixed-shape step, run eagerly (no graphs)
    EAGER = "eager"  # the data-shaped step


@dataclass(frozen=True)
class FastPath:
    """Which step a runner decodes with and why, and the CUDA graphs it holds."""

    mode: StepMode
    reason: str
    graphs: int = 0  # held now
    captures: int = 0  # captured since it started (those let go included)


@dataclass(frozen=True)
class WarmUpReport:
    """How an engine got ready to serve (`warm_up.prepare_to_serve`): the step it decodes with and why."""

    seconds: float  # capturing and checking, before the first request
    graphs: int  # CUDA graphs held once ready
    mode: StepMode
    reason: str
    difference: float | None  # the check's largest latent difference (relative to their RMS); None: not compared


@dataclass(frozen=True)
class KeyReads:
    """K/V entries attention read, against those its rows may see: per layer and branch, summed over forwards.

    What a row may see is its window (its entries since its visible start, the new ones included); what is read
    is that rounded up to the runner's reading unit (a chunk of keys), plus any padding a fixed shape adds.
    """

    read: int = 0
    visible: int = 0

    def __add__(self, other: KeyReads) -> KeyReads:
        return KeyReads(self.read + other.read, self.visible + other.visible)

    @property
    def ratio(self) -> float | None:
        """Keys read per key visible (1.0 at best); None before anything was read."""
        return self.read / self.visible if self.visible else None


@dataclass(frozen=True)
class RunnerSpec:
    """What the engine must know of its runner's model and memory to keep the books."""

    rows: int  # requests that can be in a step at once (each holds a row of codec state)
    num_blocks: int  # K/V blocks in the pool, the null block included
    block_size: int  # tokens per block
    max_context: int  # positions the model can attend over (the checkpoint's `max_position_embeddings`)
    latent_dim: int
    eos_token_ids: frozenset[int]
    diffusion_token_id: int  # the token that makes a frame
    speech_start_token_id: int  # the token after which the negative branch starts again

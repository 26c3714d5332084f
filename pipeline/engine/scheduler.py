"""Which requests run in the next engine step: pure Python over request views, no tensors, no model.

Every step has a budget: at most `max_batch` rows decode together, and at most `token_budget` tokens go
through the language model (decode rows count one each; the rest can prefill prompts in chunks). A
policy orders the candidates and fills the budget:

- `OnlinePolicy` (after VoxServe): a request that has not produced audio yet is urgent (time to first
  audio), and so is a streaming request whose audio buffered ahead of real time has dropped under a
  margin. Urgent requests go first; the rest fill the spare room. Prefill chunks are kept small so the
  streams already playing keep their cadence.
- `OfflinePolicy`: no listener is waiting, so every decodable request runs every step and prompts
  prefill in large chunks, which maximises frames per second.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class RequestView:
    """What a policy may know about a request."""

    request_id: int
    arrival: float
    prompt_remaining: int  # prompt tokens not yet prefilled (0 once decoding)
    has_audio: bool
    streaming: bool
    buffered_seconds: float  # audio produced ahead of real-time playback (streaming only)


@dataclass(frozen=True)
class StepPlan:
    """What to run: rows to decode, and (request, token count) prompt chunks to prefill."""

    decode: tuple[int, ...]
    prefill: tuple[tuple[int, int], ...]

    @property
    def empty(self) -> bool:
        return not self.decode and not self.prefill


@dataclass(frozen=True)
class StepBudget:
    max_batch: int
    token_budget: int
    prefill_chunk: int  # largest prompt chunk one request gets in one step


class OnlinePolicy:
    """Latency first: no-audio-yet and starving streams lead; chunked prefill keeps streams on time."""

    def __init__(self, buffer_margin_seconds: float = 2.0) -> None:
        self.buffer_margin_seconds = buffer_margin_seconds

    def plan(self, requests: Sequence[RequestView], budget: StepBudget) -> StepPlan:
        decodable = sorted((r for r in requests if r.prompt_remaining == 0), key=self._urgency)
        decode = tuple(r.request_id for r in decodable[: budget.max_batch])
        waiting = sorted((r for r in requests if r.prompt_remaining > 0), key=lambda r: r.arrival)
        return StepPlan(decode, _prefill_chunks(waiting, budget.token_budget - len(decode), budget.prefill_chunk))

    def _urgency(self, request: RequestView) -> tuple[int, float, float]:
        if not request.has_audio:
            return (0, 0.0, request.arrival)
        if request.streaming and request.buffered_seconds < self.buffer_margin_seconds:
            return (1, request.buffered_seconds, request.arrival)
        return (2, request.buffered_seconds if request.streaming else 0.0, request.arrival)


class OfflinePolicy:
    """Throughput first: everything decodable decodes, oldest first; prompts prefill in big chunks."""

    def plan(self, requests: Sequence[RequestView], budget: StepBudget) -> StepPlan:
        decodable = sorted((r for r in requests if r.prompt_remaining == 0), key=lambda r: r.arrival)
        decode = tuple(r.request_id for r in decodable[: budget.max_batch])
        waiting = sorted((r for r in requests if r.prompt_remaining > 0), key=lambda r: r.arrival)
        return StepPlan(decode, _prefill_chunks(waiting, budget.token_budget - len(decode), budget.prefill_chunk))


def _prefill_chunks(waiting: Sequence[RequestView], tokens: int, chunk: int) -> tuple[tuple[int, int], ...]:
    """Give the token budget to waiting prompts in arrival order, at most `chunk` tokens each."""
    chunks = []
    for request in waiting:
        if tokens <= 0:
            break
        take = min(request.prompt_remaining, chunk, tokens)
        chunks.append((request.request_id, take))
        tokens -= take
    return tuple(chunks)


POLICIES = {"online": OnlinePolicy, "offline": OfflinePolicy}

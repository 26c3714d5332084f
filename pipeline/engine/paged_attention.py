"""Decode attention over key chunks: each row reads the keys it holds, not as many as the batch's longest row.

A decode step's rows each hold a window of the paged pool (`paged_kv.KeyChunks`): their chunks, of every row,
are gathered as one `[chunks, CHUNK_KEYS]` batch; each chunk attends for its row's query (its partial softmax:
the chunk's largest score, the sum of its exponentials, their weighted values); then each row's chunks are
combined by the log-sum-exp rule, as split-K ("flash-decoding") kernels do. Keys read: the step's chunks times
`CHUNK_KEYS`, each row its own window rounded up to a chunk. The arithmetic is float32 from the scores on, so on
the CPU in float32 it agrees with transformers' attention over the same keys to rounding.

It plugs into transformers' own attention through its `AttentionInterface`, under a name of its own that
carries the implementation the model had (`voxcast-chunks+sdpa`): the runner switches its language model to it
(`use_chunked_attention`), the decoder layers stay transformers', and every forward without chunks (a prompt
chunk, a replay, `generate()` on the same model) goes to the implementation the model had, unchanged.

On a GPU the combination adds chunks into rows with `index_add`, whose order of additions is not fixed: two runs
may differ in the last bits of float arithmetic (on the CPU it is exact and repeatable).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.qwen2.modeling_qwen2 import eager_attention_forward

from pipeline.engine.paged_kv import KeyChunks, PagedKVPool, PagedView

CHUNKED_PREFIX = "voxcast-chunks+"


def chunked_attention(
    pool: PagedKVPool, layer: int, chunks: KeyChunks, query: torch.Tensor, scaling: float
) -> torch.Tensor:
    """Attention of `query` [rows, heads, 1, head_dim] over each row's chunks of layer `layer`'s pool entries.

    Returns [rows, 1, heads, head_dim] (transformers' attention output layout); a row without a visible key gets
    zeros (a row that sits a fixed-shape step out).
    """
    keys = pool.keys[layer][chunks.slots]  # [chunks, keys, kv_heads, head_dim]
    values = pool.values[layer][chunks.slots]
    count, _, kv_heads, head_dim = keys.shape
    rows, heads = query.shape[0], query.shape[1]
    groups = heads // kv_heads
    chunk_queries = query[chunks.rows, :, 0].reshape(count, kv_heads, groups, head_dim)
    scores = torch.matmul(chunk_queries, keys.permute(0, 2, 3, 1)).float() * scaling  # [chunks, kv, groups, keys]
    scores = scores.masked_fill(~chunks.visible[:, None, None, :], -torch.inf)
    chunk_max = scores.amax(dim=-1)  # [chunks, kv, groups]; -inf for a chunk with nothing visible
    weights = torch.exp(scores - _finite_or_zero(chunk_max)[..., None])
    chunk_sum = weights.sum(dim=-1)
    chunk_out = torch.matmul(weights.to(values.dtype), values.permute(0, 2, 1, 3)).float()  # [chunks, kv, groups, d]

    index = chunks.rows[:, None, None].expand_as(chunk_max)
    row_max = torch.full((rows, kv_heads, groups), -torch.inf, device=query.device)
    row_max = row_max.scatter_reduce(0, index, chunk_max, reduce="amax", include_self=True)
    scale = torch.exp(chunk_max - _finite_or_zero(row_max)[chunks.rows])  # 0 for an empty chunk
    total = torch.zeros(rows, kv_heads, groups, device=query.device).index_add(0, chunks.rows, scale * chunk_sum)
    out = torch.zeros(rows, kv_heads, groups, head_dim, device=query.device)
    out = out.index_add(0, chunks.rows, scale[..., None] * chunk_out)
    out = out / total.clamp_min(torch.finfo(torch.float32).tiny)[..., None]
    return out.reshape(rows, heads, head_dim)[:, None].to(query.dtype)


def _finite_or_zero(values: torch.Tensor) -> torch.Tensor:
    return torch.where(torch.isfinite(values), values, torch.zeros((), device=values.device))


def use_chunked_attention(language_model: torch.nn.Module) -> None:
    """Switch `language_model` (transformers' Qwen2Model) to attention that reads a `PagedView`'s chunks itself,
    and keeps its implementation for every other forward. Harmless to call again."""
    config: Any = language_model.config  # a submodule attribute, typed `Tensor | Module` by torch
    current: str = config._attn_implementation or "sdpa"
    if current.startswith(CHUNKED_PREFIX):
        return
    name = CHUNKED_PREFIX + current
    AttentionInterface.register(name, _dispatching_to(_implementation(current)))
    AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[current])
    config._attn_implementation = name


def _implementation(name: str) -> Callable[..., tuple[torch.Tensor, torch.Tensor | None]]:
    """The attention function transformers' Qwen2 runs for `name` (its own eager one for "eager")."""
    if name == "eager":
        return eager_attention_forward
    return ALL_ATTENTION_FUNCTIONS[name]


def _dispatching_to(
    fallback: Callable[..., tuple[torch.Tensor, torch.Tensor | None]],
) -> Callable[..., tuple[torch.Tensor, torch.Tensor | None]]:
    def attention(
        module: torch.nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        paged_view: PagedView | None = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if paged_view is not None and isinstance(paged_view.keys, KeyChunks):
            scaling = kwargs.get("scaling") or query.shape[-1] ** -0.5
            layer = cast(int, module.layer_idx)  # Qwen2's attention sets it; torch types attributes loosely
            return chunked_attention(paged_view.pool, layer, paged_view.keys, query, scaling), None
        return fallback(module, query, key, value, attention_mask, **kwargs)

    return attention

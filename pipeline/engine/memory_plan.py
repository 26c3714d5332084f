"""How many K/V blocks a GPU's pool may take, leaving measured room for the decode step's own memory.

The pool is sized once the model is loaded, from the memory then free. What a decode step needs beside it (its
activations, the diffusion and codec work for every row, and the keys it gathers) is measured by running the
fixed-shape step twice before the pool exists, at two key chunk counts (`StepMemory`: a part that does not
depend on the keys read, and a part per chunk). The largest step a pool allows reads every entry the pool holds
in one branch, in chunks padded by up to half (`frame_step.chunk_count_buckets`), so the pool and that step
together must fit the budget: what the pool gets is what is left once that step is paid for. CUDA graphs
captured afterwards share one memory pool, whose size is that of the largest step they replay.

Plain arithmetic: tested on any machine; only the measurement needs a GPU (`fixed_decoder.measure_step_memory`).
"""

from __future__ import annotations

from dataclasses import dataclass

CHUNK_PADDING = 1.5  # a step's chunk count is padded to at most this many times what it needs


@dataclass(frozen=True)
class StepMemory:
    """Bytes a decode step over every row allocates beyond the pool: fixed, and for each key chunk it reads."""

    fixed_bytes: int
    bytes_per_chunk: int

    @staticmethod
    def from_two_runs(chunks: tuple[int, int], peak_bytes: tuple[int, int]) -> StepMemory:
        """The line through two measured runs (chunk count, peak bytes above what was allocated before each)."""
        (few, many), (low, high) = chunks, peak_bytes
        if many <= few:
            raise ValueError(f"two different chunk counts are needed, the second larger: got {few} and {many}")
        per_chunk = max(0, -(-(high - low) // (many - few)))
        return StepMemory(fixed_bytes=max(0, low - per_chunk * few), bytes_per_chunk=per_chunk)

    def largest_step(self, pool_tokens: int, rows: int, chunk_keys: int) -> int:
        """Bytes of the largest step a pool of `pool_tokens` allows: one branch reading all of them."""
        chunks = CHUNK_PADDING * (pool_tokens / chunk_keys + rows)
        return int(self.fixed_bytes + self.bytes_per_chunk * chunks)


def pool_blocks_within(
    budget_bytes: float, bytes_per_block: int, block_size: int, rows: int, chunk_keys: int, step: StepMemory
) -> int:
    """The most blocks a pool may have so that it and its largest step fit in `budget_bytes` together."""
    per_token = bytes_per_block / block_size + step.bytes_per_chunk * CHUNK_PADDING / chunk_keys
    room = budget_bytes - step.fixed_bytes - step.bytes_per_chunk * CHUNK_PADDING * rows
    if room <= 0:
        return 0
    return int(room // per_token) // block_size

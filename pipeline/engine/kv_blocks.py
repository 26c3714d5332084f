"""Which K/V blocks each request holds: the engine's side of the paged pool, plain Python, no tensors.

The runner keeps the K/V of every layer in one pool of fixed-size blocks (`paged_kv.py`), shared by all
requests and both CFG branches. Here the engine keeps the books: which blocks are free (`BlockPool`), and
for each request and branch a block table mapping its logical blocks (positions `i * block_size` up to
`(i + 1) * block_size - 1`) to pool blocks, how many entries it holds and from where they are visible
(`BranchBlocks`). The runner is handed a frozen snapshot (`CacheSpan`) for each step; it writes and reads
only the blocks named there, so memory follows what requests really hold: a 60,000-token generation takes
its blocks one at a time beside many short ones, and a finished request's blocks go back at once.

Block 0 (`NULL_BLOCK`) is never handed out. A table points at it where a request holds no block (not yet
grown, or released): the fixed-shape step writes a token for every row, even rows that sit a step out, one
past their length, and such a write lands in the null block, which nothing ever reads.

The negative branch restarts at every speech start (`hide_history`): the entries before it stay masked
forever, as the original's mask hides them, so the blocks wholly before the new start go back to the pool, and
the branch holds only the frames since its last speech start.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

NULL_BLOCK = 0


class PoolExhausted(RuntimeError):
    """Not enough free blocks for a request to grow: the engine preempts another request, or waits."""


class BlockPool:
    """The free blocks of a pool of `num_blocks` (block 0 is the null block and never free)."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 2:
            raise ValueError(f"a K/V pool needs at least 2 blocks (one is the null block), got {num_blocks}")
        if block_size < 1:
            raise ValueError(f"a K/V block holds at least 1 token, got {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free = list(range(num_blocks - 1, NULL_BLOCK, -1))  # popped from the end: lowest ids first
        self._is_free = [False] + [True] * (num_blocks - 1)

    @property
    def total(self) -> int:
        """Blocks that can be handed out (all but the null block)."""
        return self.num_blocks - 1

    @property
    def free(self) -> int:
        return len(self._free)

    @property
    def in_use(self) -> int:
        return self.total - self.free

    def blocks_for(self, tokens: int) -> int:
        """Blocks that hold `tokens` entries starting at a block boundary."""
        return -(-tokens // self.block_size)

    def take(self, count: int) -> list[int]:
        """`count` free blocks, or `PoolExhausted` (taking none) when there are fewer."""
        if count > len(self._free):
            raise PoolExhausted(f"{count} K/V blocks wanted, {len(self._free)} free")
        taken = [self._free.pop() for _ in range(count)]
        for block in taken:
            self._is_free[block] = False
        return taken

    def give_back(self, blocks: Iterable[int]) -> None:
        for block in blocks:
            if block == NULL_BLOCK:
                continue
            if self._is_free[block]:
                raise ValueError(f"K/V block {block} given back twice")
            self._is_free[block] = True
            self._free.append(block)


@dataclass(frozen=True)
class CacheSpan:
    """One request's entries in one branch, as a forward sees them: what the runner is given, never changes."""

    blocks: tuple[int, ...]  # logical block -> pool block (NULL_BLOCK where none is held)
    length: int  # entries written before this step (the next one goes at this position)
    visible_from: int  # entries before this position are masked


@dataclass
class BranchBlocks:
    """A request's block table in one branch, how many entries it holds, and where its visible history starts."""

    table: list[int] = field(default_factory=list)
    length: int = 0
    visible_from: int = 0

    @property
    def held(self) -> int:
        """Pool blocks this branch holds."""
        return sum(1 for block in self.table if block != NULL_BLOCK)

    def missing(self, pool: BlockPool, tokens: int) -> int:
        """Blocks to take so that this branch can hold `tokens` entries."""
        return max(0, pool.blocks_for(tokens) - len(self.table))

    def grow(self, pool: BlockPool, tokens: int) -> None:
        """Hold enough blocks for `tokens` entries; `PoolExhausted` (nothing taken) when the pool is short."""
        if missing := self.missing(pool, tokens):  # most steps need none: spare the pool's bookkeeping
            self.table.extend(pool.take(missing))

    def hide_history(self, pool: BlockPool) -> None:
        """From now on nothing before the current length is visible; the blocks wholly before it go back."""
        self.visible_from = self.length
        hidden = slice(0, self.visible_from // pool.block_size)
        pool.give_back(self.table[hidden])
        self.table[hidden] = [NULL_BLOCK] * len(self.table[hidden])

    def release(self, pool: BlockPool) -> None:
        """Every block back to the pool; the branch is empty again."""
        pool.give_back(self.table)
        self.table.clear()
        self.length = self.visible_from = 0

    def span(self) -> CacheSpan:
        return CacheSpan(tuple(self.table), self.length, self.visible_from)

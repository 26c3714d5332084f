"""Who runs, who gets a row, who gives memory back: pure Python over request views, no tensors, no model.

Three decisions, each a small function or policy class over plain views:

- **The step** (`OnlinePolicy`, `OfflinePolicy`): at most `max_batch` rows decode together, and at most
  `token_budget` tokens go through the language model (decode rows count one each; the rest prefill prompts
  in chunks).
  - `OnlinePolicy` (after VoxServe): interactive work goes before batch work; within a class, a request that
    has not produced audio yet is urgent (time to first audio), and so is a streaming request whose audio
    buffered ahead of real time has dropped under a margin; then higher priority. Prefill chunks are kept
    small so the streams already playing keep their cadence, a stream's prompt goes before batch work's, and
    while a playing stream has less than `THIN_BUFFER_SECONDS` of audio ahead of its listener a step takes
    prompt chunks only while its predicted time (`StepCosts` and `PrefillCosts`, learnt from the steps the
    engine ran) stays within the thinnest playing stream's buffered audio less a margin, so the step ends
    before that stream stalls: as many as fit (the runner prefills a step's chunks in one forward), none when
    even one would not (that stream's buffer grows by the decode step, and the prompts go on a step later).
    While the most important work present is interactive (a speech request at priority 9 beside short jobs at
    5, or any interactive work beside batch),
    its rows lead every step, and the step holds only as many other rows as keep it within
    `interactive_slowdown` times the cost of the leading rows alone (`StepCosts` learns a step's cost by its
    rows from the steps the engine ran): on a GPU a step of 16 rows costs about what one row does, so nothing
    waits; on a CPU each row adds to the step, and a one-line speech request would otherwise take three times
    as long beside a full batch. The rows left out keep their memory and step again once the leading work
    is done.
  - `OfflinePolicy`: no listener is waiting, so every decodable request runs every step, oldest first, and
    prompts prefill in large chunks, which maximises frames per second.
- **Admission** (`admission_order`): which waiting request takes the next free row. Interactive before
  batch, then higher priority, then the job holding the fewest rows (counting those just given out), then
  arrival: so the rows go round the jobs, and a 200-segment job cannot keep a 2-segment one waiting for
  more than the next free row.
- **Preemption** (`choose_victim`): when the K/V pool runs dry, or an interactive request finds no room,
  the engine takes the memory of the request that matters least: batch before interactive, lower priority
  first, then work nobody listens to before a stream, then the most recently admitted (it has the least work
  to replay). The engine replays its tokens
  when it comes back, so it loses nothing; interactive work therefore gets a row within one step even when
  batch work fills the engine (preemption rather than reserved rows, which would sit idle most of the time).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass

INTERACTIVE_SLOWDOWN = 1.5  # how much slower than its own rows alone a step holding interactive work may be
# Online: while a playing stream has less audio than this ahead of its listener, a step takes prompt chunks only as
# far as its predicted time keeps clear of that stream's buffer by `STALL_MARGIN_SECONDS` (none if one would not).
THIN_BUFFER_SECONDS = 0.2
# What a thin stream's buffer keeps clear of a step's predicted time: the host's work after planning (not in the
# learnt step costs: about 1.5 ms at 128 rows) and the prediction's error. On the H200 cost file 5 ms lets a packed
# prefill take two prompts beside a stream that has just started (a tenth of a frame, 13 ms, lets it take one).
STALL_MARGIN_SECONDS = 0.005


@dataclass(frozen=True)
class RequestView:
    """What a policy may know about a request."""

    request_id: int
    arrival: float
    prompt_remaining: int  # prompt tokens not yet prefilled (0 once decoding)
    has_audio: bool
    streaming: bool
    buffered_seconds: float  # audio produced ahead of real-time playback (streaming only)
    job: str | None = None  # the requests of one job share it
    interactive: bool = False
    priority: int = 5  # 0 to 9, higher first
    admitted: int = 0  # admission order, higher for more recent (0 while waiting)

    @property
    def importance(self) -> tuple[int, int]:
        """Interactive over batch, then priority; compares higher for what matters more."""
        return (int(self.interactive), self.priority)


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


class StepCosts:
    """How long a decode step takes by the rows it holds, learnt from the steps the engine ran.

    Each row count keeps a moving average of its steps' seconds (steps that prefilled nothing); a count not
    seen yet is read off the least-squares line through those seen. Pure bookkeeping: the engine tells it.
    """

    def __init__(self, smoothing: float = 0.2) -> None:
        self.smoothing = smoothing
        self.seconds: dict[int, float] = {}  # rows -> moving average of a step's seconds

    def record(self, rows: int, seconds: float) -> None:
        known = self.seconds.get(rows)
        self.seconds[rows] = seconds if known is None else known + self.smoothing * (seconds - known)

    def estimate(self, rows: int) -> float | None:
        """A step's seconds with `rows` rows; None until steps of two different sizes were seen."""
        if rows in self.seconds:
            return self.seconds[rows]
        line = _line_through(list(self.seconds.items()))
        if line is None:
            return None
        intercept, slope, mean_rows = line
        return intercept + max(slope, 0.0) * (rows - mean_rows)

    def rows_within(self, seconds: float, least: int, most: int) -> int:
        """The most rows (from `least` to `most`) a step may hold and still take at most `seconds`."""
        rows = least
        while rows < most and (cost := self.estimate(rows + 1)) is not None and cost <= seconds:
            rows += 1
        return rows


class PrefillCosts:
    """What a step's prompt chunks add to its decode rows' time, learnt from the steps that prefilled beside rows.

    A step's prefill is priced `first + per_token * tokens + more * (chunks - 1)`: a runner that runs a forward per
    chunk pays each further chunk's fixed part again (`more` about `first`'s fixed part), one that prefills every
    chunk of a step in one forward pays next to nothing more. `first` and `per_token` are the least-squares line
    through the one-chunk steps' extra seconds (a step's seconds less the learnt decode step of its rows) by their
    tokens; `more` is what the steps of several chunks took beyond that line, per further chunk. Until a step of
    several chunks was seen, each further chunk is priced as a one-chunk step's fixed part: the cautious guess.
    Recent steps only (`window`), so the figures follow the device. Pure bookkeeping: the engine tells it.
    """

    def __init__(self, window: int = 64) -> None:
        self.single: deque[tuple[int, float]] = deque(maxlen=window)  # (tokens, extra seconds) of one-chunk steps
        self.several: deque[tuple[int, int, float]] = deque(maxlen=window)  # (chunks, tokens, extra seconds)
        self.first: float | None = None  # seconds a one-chunk step adds beyond its tokens' part
        self.per_token = 0.0
        self.more: float | None = None  # seconds each further chunk adds beyond its tokens' part

    def record(self, chunks: int, tokens: int, extra_seconds: float) -> None:
        if chunks == 1:
            self.single.append((tokens, extra_seconds))
            self._fit_single()
        elif chunks > 1:
            self.several.append((chunks, tokens, extra_seconds))
        if self.several and self.first is not None:
            further = [(extra - self.first - self.per_token * t) / (n - 1) for n, t, extra in self.several]
            self.more = max(0.0, sum(further) / len(further))

    def estimate(self, chunks: int, tokens: int) -> float | None:
        """Seconds `chunks` chunks of `tokens` tokens in all add to a step; None until a one-chunk step was seen."""
        if self.first is None or chunks <= 0:
            return None if chunks > 0 else 0.0
        more = self.first if self.more is None else self.more
        return max(0.0, self.first + self.per_token * tokens + more * (chunks - 1))

    def _fit_single(self) -> None:
        line = _line_through(list(self.single))
        if line is None:  # one prompt size seen: price by the token, which errs high for the longer chunks
            tokens = sum(t for t, _ in self.single)
            self.first, self.per_token = 0.0, max(0.0, sum(e for _, e in self.single)) / max(tokens, 1)
            return
        intercept, slope, mean_tokens = line
        self.per_token = max(slope, 0.0)
        self.first = max(0.0, intercept - self.per_token * mean_tokens)


def _line_through(points: Sequence[tuple[int, float]]) -> tuple[float, float, float] | None:
    """(mean y, slope, mean x) of the least-squares line through `points`; None without two different x."""
    if len({x for x, _ in points}) < 2:
        return None
    mean_x, mean_y = sum(x for x, _ in points) / len(points), sum(y for _, y in points) / len(points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    return mean_y, sum((x - mean_x) * (y - mean_y) for x, y in points) / spread, mean_x


class OnlinePolicy:
    """Latency first: interactive work, no-audio-yet and starving streams lead; chunked prefill keeps streams on
    time; batch rows are held back from steps whose interactive work they would slow down too much."""

    def __init__(
        self,
        buffer_margin_seconds: float = 2.0,
        interactive_slowdown: float = INTERACTIVE_SLOWDOWN,
        thin_buffer_seconds: float = THIN_BUFFER_SECONDS,
        stall_margin_seconds: float = STALL_MARGIN_SECONDS,
    ) -> None:
        if interactive_slowdown < 1:
            raise ValueError(
                f"interactive_slowdown must be at least 1 (a step's time over its leading rows'), "
                f"not {interactive_slowdown}"
            )
        self.buffer_margin_seconds = buffer_margin_seconds
        self.interactive_slowdown = interactive_slowdown
        self.thin_buffer_seconds = thin_buffer_seconds
        self.stall_margin_seconds = stall_margin_seconds
        self.costs = StepCosts()
        self.prefill_costs = PrefillCosts()

    def observe(self, rows: int, prefill_tokens: int, seconds: float, chunks: int = 1) -> None:
        """A step ran: `rows` decode rows and `prefill_tokens` prompt tokens (in `chunks` chunks) in `seconds`."""
        if rows and not prefill_tokens:
            self.costs.record(rows, seconds)
        elif rows and (decode := self.costs.estimate(rows)) is not None:  # (a prompt alone: no decode step to add to)
            self.prefill_costs.record(chunks, prefill_tokens, seconds - decode)

    def plan(self, requests: Sequence[RequestView], budget: StepBudget) -> StepPlan:
        decodable = sorted((r for r in requests if r.prompt_remaining == 0), key=self._urgency)
        rows = budget.max_batch
        if (leading := _leading(requests)) is not None:  # its rows first, then as many others as keep it fast
            decodable.sort(key=lambda r: r.importance != leading)  # stable: each part keeps its urgency order
            rows = self._rows(sum(r.importance == leading for r in decodable), budget.max_batch)
        decode = tuple(r.request_id for r in decodable[:rows])
        waiting = sorted((r for r in requests if r.prompt_remaining > 0), key=_first_served)
        chunks = _prefill_chunks(waiting, budget.token_budget - len(decode), budget.prefill_chunk)
        thin = [r.buffered_seconds for r in decodable[:rows] if self._thin(r)]
        if thin and chunks:  # a stream could hear a stall: only the prompts the step has time for
            chunks = chunks[: self._chunks_within(min(thin) - self.stall_margin_seconds, len(decode), chunks)]
        return StepPlan(decode, chunks)

    def _chunks_within(self, seconds: float, rows: int, chunks: Sequence[tuple[int, int]]) -> int:
        """How many of `chunks` a step of `rows` decode rows may take and still be predicted to end within
        `seconds`. None when even one would not: that step decodes alone, and each playing stream gains a frame's
        audio less a step's time, so the prompts go on a step or two later instead of a stream stalling (a prompt
        waits only while some stream is that thin; a stream just started has room for one). One while the costs
        are not learnt yet (a step must prefill beside rows for them to be)."""
        decode = self.costs.estimate(rows)
        count, tokens = 0, 0
        while count < len(chunks):
            tokens += chunks[count][1]
            predicted = self.prefill_costs.estimate(count + 1, tokens)
            if decode is None or predicted is None:
                return max(count, 1)
            if decode + predicted > seconds:
                break
            count += 1
        return count

    def _thin(self, request: RequestView) -> bool:
        """A stream playing with less than `thin_buffer_seconds` of audio ahead: this step must end before that."""
        return request.streaming and request.has_audio and request.buffered_seconds < self.thin_buffer_seconds

    def _rows(self, leading_rows: int, max_batch: int) -> int:
        """The rows a step may decode beside `leading_rows` rows of the leading work: within the slowdown."""
        alone = min(max(leading_rows, 1), max_batch)  # a leading prompt prefilling costs a row's step at least
        cost = self.costs.estimate(alone)
        if cost is None:  # nothing learnt yet: this step learns what the leading rows cost alone
            return alone
        return self.costs.rows_within(self.interactive_slowdown * cost, alone, max_batch)

    def _urgency(self, request: RequestView) -> tuple[int, int, int, float, float]:
        interactive, priority = request.importance
        if not request.has_audio:
            return (-interactive, 0, -priority, 0.0, request.arrival)
        if request.streaming and request.buffered_seconds < self.buffer_margin_seconds:
            return (-interactive, 1, -priority, request.buffered_seconds, request.arrival)
        buffered = request.buffered_seconds if request.streaming else 0.0
        return (-interactive, 2, -priority, buffered, request.arrival)


class OfflinePolicy:
    """Throughput first: everything decodable decodes, oldest first; prompts prefill in big chunks."""

    def observe(self, rows: int, prefill_tokens: int, seconds: float, chunks: int = 1) -> None:
        """Step times do not change what this policy does."""

    def plan(self, requests: Sequence[RequestView], budget: StepBudget) -> StepPlan:
        decodable = sorted((r for r in requests if r.prompt_remaining == 0), key=lambda r: r.arrival)
        decode = tuple(r.request_id for r in decodable[: budget.max_batch])
        waiting = sorted((r for r in requests if r.prompt_remaining > 0), key=lambda r: r.arrival)
        return StepPlan(decode, _prefill_chunks(waiting, budget.token_budget - len(decode), budget.prefill_chunk))


def _leading(requests: Sequence[RequestView]) -> tuple[int, int] | None:
    """The importance of the work whose steps are kept fast: the most important present, when it is interactive
    and something less important runs beside it (batch work, or interactive work of a lower priority)."""
    if not requests:
        return None
    top = max(r.importance for r in requests)
    interactive, _ = top
    if not interactive or all(r.importance == top for r in requests):
        return None
    return top


def _first_served(request: RequestView) -> tuple[int, int, bool, float]:
    """Prompts prefill by importance, a stream's before batch work's (a listener waits for it), then arrival."""
    interactive, priority = request.importance
    return (-interactive, -priority, not request.streaming, request.arrival)


def _prefill_chunks(waiting: Sequence[RequestView], tokens: int, chunk: int) -> tuple[tuple[int, int], ...]:
    """Give the token budget to waiting prompts in order, at most `chunk` tokens each."""
    chunks = []
    for request in waiting:
        if tokens <= 0:
            break
        take = min(request.prompt_remaining, chunk, tokens)
        chunks.append((request.request_id, take))
        tokens -= take
    return tuple(chunks)


def admission_order(waiting: Sequence[RequestView], active: Sequence[RequestView]) -> list[int]:
    """The waiting requests in the order they should take free rows (see the module's docstring)."""
    if all(view.job is None for view in waiting):  # no job to take turns with: importance, then arrival
        return [view.request_id for view in sorted(waiting, key=lambda r: (*(-v for v in r.importance), r.arrival))]
    held = Counter(view.job for view in active if view.job is not None)
    remaining = list(waiting)
    order = []
    while remaining:
        best = min(remaining, key=lambda r: (*(-v for v in r.importance), held[r.job] if r.job else 0, r.arrival))
        remaining.remove(best)
        order.append(best.request_id)
        if best.job is not None:
            held[best.job] += 1
    return order


def choose_victim(active: Sequence[RequestView], below: tuple[int, int] | None = None) -> int | None:
    """The request to preempt: least important, then batch work before a stream (a listener hears a preempted
    stream stall; a batch job only finishes a little later), then most recently admitted; None when there is none.

    With `below`, only requests less important than that (an interactive request never preempts another).
    """
    candidates = [view for view in active if below is None or view.importance < below]
    if not candidates:
        return None
    return min(candidates, key=lambda view: (view.importance, view.streaming, -view.admitted)).request_id


Policy = OnlinePolicy | OfflinePolicy
POLICIES = ("online", "offline")

"""A simulated device: a runner that does no tensor work and takes, on a virtual clock, what a cost model says.

The engine's scheduling was built for a GPU, where a frame step costs about the same for 1 or 64 rows; this
project mostly runs on a CPU, where every row adds to a step. `SimulatedRunner` lets the real engine (scheduler,
policies, block books, preemption, request lifecycle: nothing of it is replaced) meet a GPU's cost shape on any
machine. It honours the `Runner` protocol and the step records like a real runner, chooses tokens itself (a
frame every step unless a request's script says otherwise), and for each step advances a `VirtualClock` by the
seconds `CostModel` gives for that step's rows, prefill tokens, K/V keys read, diffusion steps and decodes.

The clock runs on the host's real time while the engine works (scheduling, books, records, noise draws: all
measured for real as the stepping thread's CPU time, never modelled), stops while the simulation itself works
(choosing tokens, pricing the step), and jumps by the modelled device time at each step; so a load of many
minutes runs in seconds, and the engine's own host cost is in every figure. Steps are serial: the modelled
device time and the engine's host work add up (no overlap of host work with the device step is assumed, which is
the conservative choice).

The cost model reads a cost file of the form in `shared/device_costs/` (measured parts of a frame by batch
size, and prefill costs). Where nothing was measured it assumes, and `CostModel.assumptions` says, exactly:

- between measured batch sizes a part's cost is linear in the rows; a step of B rows never costs more than
  the cheapest measured batch of at least B rows (the fixed-shape step pads rows to a power of two anyway, so
  a smaller batch can always run as the larger one);
- past the largest measured batch a part stays flat (`past_measured_rows: "flat"`, a launch-bound GPU) or
  grows along its last measured slope (`"linear"`, a CPU), and a step never costs less than its arithmetic
  and memory traffic allow at the device's spec figures times `ROOFLINE_EFFICIENCY`;
- the paged decode step (attention over block tables) costs what the measured dense decode step costs: the
  keys it reads only count through the memory-traffic bound;
- no CUDA graphs and no overlapped read-back: eager costs, as measured;
- a frame's cost beyond its measured parts (token choice, the step's own host work on the device side) is
  the file's `other_ms` where measured, else what `generate()`'s steady per-frame time exceeds the parts by;
- prefill costs a fixed part per forward plus a part per token, fitted to the file's chunks measured alone; the
  runner packs a step's chunks into one forward (`paged_kv.packed_view`), so a step pays the fixed part once
  (`packed_prefill`; off, a forward per chunk, as the runner did before);
  a request's start (its prompt embedded, its voices encoded) costs what the file's `request_starts` give for
  its voice samples (the voices as the encoders take them, padded to the longest: the work is there, not in the
  text's tokens), linear between the measured sizes and on the last slope past them: with a seeded runner a
  draw from the measured starts (the same place among each size's starts), so that their spread reaches the
  tail of time to first audio as the real starts' does; unseeded, their median. An older file without samples
  gives a line through its starts by prompt tokens; a file without starts, nothing (the H200 file's
  `generate()` prefill figures include the voices' encoding).

It imports torch only because the engine's records carry tensors (latents, noise); it creates none per step.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from pipeline.engine.kv_blocks import CacheSpan
from pipeline.engine.step_records import (
    FastPath,
    KeyReads,
    RequestStart,
    RowOutcome,
    RunnerSpec,
    StepInput,
    StepMode,
)

PARTS = ("lm_step_ms", "diffusion_sampling_ms", "acoustic_decode_ms", "semantic_encode_ms", "connectors_ms")
MEASURED_DIFFUSION_STEPS = 10  # the cost files' diffusion_sampling is the whole 10-step loop
GENERATE_PROMPT_TOKENS = 455  # the H200 file's generate() rows prefill this prompt (its "what")
ROOFLINE_EFFICIENCY = 0.5  # share of the spec's arithmetic and bandwidth an eager step reaches at best (assumed)
KEY_CHUNK = 64  # keys the paged decode step reads at a time (`paged_attention.py`)
GFLOP_PER_FRAME = 17.4  # arithmetic per frame per request (the H200 file's notes), both branches and the codec


@dataclass(frozen=True)
class StepShape:
    """What one step does, as far as its cost goes."""

    decode_rows: int = 0  # rows one token through the positive LM branch
    frame_rows: int = 0  # rows that make a frame: negative branch, diffusion, acoustic decode, semantic encode
    prefill_chunks: tuple[int, ...] = ()  # tokens of each prompt chunk (one forward for all, or one each)
    keys_read: int = 0  # K/V entries the decode rows' attention reads, per layer, both branches
    diffusion_steps: int = MEASURED_DIFFUSION_STEPS  # the most of any frame row


class PartCurve:
    """One part's milliseconds by rows: linear between measured batch sizes, flat or linear past them."""

    def __init__(self, points: Sequence[tuple[int, float]], past_measured: str) -> None:
        if not points:
            raise ValueError("a part needs at least one measured batch size")
        self.points = sorted(points)
        self.past_measured = past_measured

    @property
    def batches(self) -> list[int]:
        return [batch for batch, _ in self.points]

    def __call__(self, rows: int) -> float:
        if rows <= 0:
            return 0.0
        points = self.points
        if rows <= points[0][0]:
            return points[0][1]
        for (low, low_ms), (high, high_ms) in zip(points, points[1:], strict=False):
            if rows <= high:
                return low_ms + (high_ms - low_ms) * (rows - low) / (high - low)
        last, last_ms = points[-1]
        if self.past_measured == "linear" and len(points) > 1:
            before, before_ms = points[-2]
            return last_ms + max(0.0, (last_ms - before_ms) / (last - before)) * (rows - last)
        return last_ms


@dataclass(frozen=True)
class Roofline:
    """The least a step can cost: its arithmetic and its memory traffic at a share of the device's spec."""

    flops_per_s: float
    bytes_per_s: float
    weight_bytes: float  # read by each LM forward (twice a frame step: both branches)
    bytes_per_key: float  # one K/V entry of every layer (K and V)
    lm_flops_per_token: float

    def seconds(self, shape: StepShape, prefill_forwards: int) -> float:
        flops = shape.frame_rows * GFLOP_PER_FRAME * 1e9 + sum(shape.prefill_chunks) * self.lm_flops_per_token
        forwards = (shape.decode_rows > 0) + (shape.frame_rows > 0) + prefill_forwards
        traffic = forwards * self.weight_bytes + shape.keys_read * self.bytes_per_key
        return max(flops / self.flops_per_s, traffic / self.bytes_per_s)


@dataclass
class CostModel:
    """Seconds a step takes on the modelled device (see the module's docstring for what it assumes)."""

    parts: dict[str, PartCurve]
    other: PartCurve  # the rest of a frame step, per frame rows
    prefill_fixed_ms: float  # per forward
    prefill_ms_per_token: float
    roofline: Roofline | None
    source: str
    start_fixed_ms: float = 0.0  # a request's start (prompt embedded, voices encoded), by prompt tokens
    start_ms_per_token: float = 0.0
    start_by_voice_samples: StartCosts | None = None  # the same, by voice samples: where the file has them
    assumptions: list[str] = field(default_factory=list)
    # The runner prefills all of a step's prompt chunks in one packed forward, paying the fixed part once a step;
    # False models a forward per chunk (the runner before packing), for comparing the two.
    packed_prefill: bool = True

    @classmethod
    def from_file(cls, path: Path | str) -> CostModel:
        return cls.from_costs(json.loads(Path(path).read_text()), str(path))

    @classmethod
    def from_costs(cls, costs: dict, source: str = "") -> CostModel:
        past = costs.get("past_measured_rows", "flat")
        if past not in ("flat", "linear"):
            raise ValueError(f"past_measured_rows must be 'flat' or 'linear', not {past!r}")
        rows = costs["parts_by_batch"]
        parts = {name: PartCurve([(row["batch_size"], row[name]) for row in rows], past) for name in PARTS}
        other = PartCurve(_other_ms(costs), past)
        fixed, per_token = _prefill_fit(costs)
        starts = costs.get("request_starts", [])
        by_samples = _starts_by_voice_samples(starts)
        by_tokens = [(row["tokens"], row["ms"]) for row in starts]
        start_fixed, start_per_token = _affine_fit(by_tokens) if by_tokens and by_samples is None else (0.0, 0.0)
        roofline = _roofline(costs)
        model = cls(parts, other, fixed, per_token, roofline, source, start_fixed, start_per_token, by_samples)
        model.assumptions = model._assumptions(past, costs)
        return model

    @classmethod
    def free(cls) -> CostModel:
        """A device that costs nothing: what is left of a step is the engine's own host work."""
        zero = PartCurve([(1, 0.0)], "flat")
        nothing = ["every step costs nothing on the device"]
        return cls(dict.fromkeys(PARTS, zero), zero, 0.0, 0.0, None, "free", assumptions=nothing)

    def step_seconds(self, shape: StepShape) -> float:
        forwards = min(len(shape.prefill_chunks), 1) if self.packed_prefill else len(shape.prefill_chunks)
        ms = forwards * self.prefill_fixed_ms + self.prefill_ms_per_token * sum(shape.prefill_chunks)
        ms += self._padded(shape.decode_rows, self.parts["lm_step_ms"])  # the positive branch
        ms += self._padded(shape.frame_rows, lambda rows: self._frame_tail_ms(rows, shape.diffusion_steps))
        seconds = ms / 1000
        return seconds if self.roofline is None else max(seconds, self.roofline.seconds(shape, forwards))

    def _frame_tail_ms(self, rows: int, diffusion_steps: int) -> float:
        """What making `rows` frames costs after the positive branch: the negative branch, diffusion, the
        acoustic decode, the semantic encode, the connectors and the rest of a frame step."""
        if rows <= 0:
            return 0.0
        diffusion = self.parts["diffusion_sampling_ms"](rows) * diffusion_steps / MEASURED_DIFFUSION_STEPS
        return (
            self.parts["lm_step_ms"](rows)
            + diffusion
            + self.other(rows)
            + sum(self.parts[name](rows) for name in PARTS[2:])
        )

    def _padded(self, rows: int, cost: Callable[[int], float]) -> float:
        """`cost` at `rows`, or at a larger measured batch where that is cheaper (the rows run padded)."""
        if rows <= 0:
            return 0.0
        return min(cost(batch) for batch in [rows, *(b for b in self.parts["lm_step_ms"].batches if b > rows)])

    def start_seconds(self, prompt_tokens: int, voice_samples: int = 0, draw: float | None = None) -> float:
        """A request taking its row: its prompt embedded (its `voice_samples` encoded), before any prefill chunk;
        `draw` in [0, 1) picks among the measured starts (see `StartCosts`), None takes their median."""
        if self.start_by_voice_samples is not None:
            return self.start_by_voice_samples(voice_samples, draw) / 1000 if voice_samples else 0.0
        return (self.start_fixed_ms + self.start_ms_per_token * prompt_tokens) / 1000

    def replay_seconds(self, frames: int) -> float:
        """Streaming `frames` replayed frames of one request through the codec (a preempted request's return),
        priced as the decode and encode of a batch of that many frames."""
        if frames <= 0:
            return 0.0
        return sum(self.parts[name](frames) for name in PARTS[2:]) / 1000

    def frame_step_seconds(self, rows: int) -> float:
        """A decode step of `rows` rows that all make a frame (no prefill, short context)."""
        return self.step_seconds(StepShape(decode_rows=rows, frame_rows=rows))

    def _start_assumption(self, costs: dict) -> str:
        curve = self.start_by_voice_samples
        if curve is not None:
            sizes = ", ".join(f"{size:,}" for size in curve.sizes)
            return (
                f"a request's start (prompt embedded, voices encoded) by its voice samples, padded as the encoders "
                f"take them: measured at {sizes}; linear between, the last slope past them, the smallest's below; "
                "a seeded run draws each start from the measured ones, an unseeded one takes their median"
            )
        return (
            f"a request's start (prompt embedded, voices encoded): {self.start_fixed_ms:.2f} ms + "
            f"{self.start_ms_per_token * 1000:.2f} us per prompt token"
            + ("" if costs.get("request_starts") else " (none in the file: its prefill figures include it)")
        )

    def _assumptions(self, past: str, costs: dict) -> list[str]:
        measured = sorted(row["batch_size"] for row in costs["parts_by_batch"])
        notes = [
            f"rows {measured[0]} to {measured[-1]} measured; between them each part is linear in the rows, and a step "
            "never costs more than the cheapest measured batch at least as large (rows can run padded)",
            f"past {measured[-1]} rows each part stays "
            + ("flat (launch-bound)" if past == "flat" else "on its last measured slope"),
            "the paged decode step costs the measured dense decode step; keys read count only through memory traffic",
            "eager costs as measured: no CUDA graphs, no overlap of the host's work with the device step",
            f"prefill: {self.prefill_fixed_ms:.2f} ms per chunk + {self.prefill_ms_per_token * 1000:.2f} us per token "
            "(fitted to the file)",
            self._start_assumption(costs),
            "a frame step's cost beyond its parts: the file's other_ms, else what generate()'s steady per-frame time "
            "exceeds the parts' sum by",
        ]
        if self.roofline is not None:
            notes.append(
                f"a step costs at least its arithmetic ({GFLOP_PER_FRAME} GFLOP a frame) and memory traffic (weights "
                f"twice a frame step, {self.roofline.bytes_per_key:.0f} B a key read) at {ROOFLINE_EFFICIENCY:.0%} of "
                "the device's spec"
            )
        return notes


class StartCosts:
    """A request start's milliseconds by its voice samples, from the starts a cost file measured at each size.

    A draw in [0, 1) takes the start at that place among each measured size's starts (sorted), linear between the
    sizes, on the last slope past them and the smallest's below: a resample of what was measured, so a run of
    draws has the measured mean and spread (a CPU's starts are skewed: a slow one costs twice the median, and
    the tail of time to first audio is made of them). No draw: each size's median."""

    def __init__(self, by_size: dict[int, list[float]]) -> None:
        self.by_size = {size: sorted(times) for size, times in sorted(by_size.items())}

    @property
    def sizes(self) -> list[int]:
        return list(self.by_size)

    def __call__(self, voice_samples: int, draw: float | None = None) -> float:
        if draw is not None and not 0.0 <= draw < 1.0:
            raise ValueError(f"a start's draw is in [0, 1), not {draw}")
        points = [
            (size, float(np.median(times)) if draw is None else times[int(draw * len(times))])
            for size, times in self.by_size.items()
        ]
        return PartCurve(points, "linear")(voice_samples)


def _starts_by_voice_samples(starts: Sequence[dict]) -> StartCosts | None:
    """The file's starts by voice samples; None where they do not say their samples (a file measured before they
    were recorded)."""
    if not starts or any("voice_samples" not in row for row in starts):
        return None
    by_size: dict[int, list[float]] = {}
    for row in starts:
        by_size.setdefault(row["voice_samples"], []).append(row["ms"])
    return StartCosts(by_size)


def _other_ms(costs: dict) -> list[tuple[int, float]]:
    """A frame step's cost beyond its parts, by rows: measured (`other_ms`), or generate()'s steady excess."""
    rows = costs["parts_by_batch"]
    if all("other_ms" in row for row in rows):
        return [(row["batch_size"], row["other_ms"]) for row in rows]
    steady = {row["batch_size"]: row["steady_per_frame_ms"] for row in costs.get("generate_by_batch", [])}
    points = []
    for row in rows:
        parts = 2 * row["lm_step_ms"] + sum(row[name] for name in PARTS[1:])
        points.append((row["batch_size"], max(0.0, steady.get(row["batch_size"], parts) - parts)))
    return points


def _prefill_fit(costs: dict) -> tuple[float, float]:
    """(fixed ms per chunk, ms per token), least squares over the file's prefill figures."""
    if "prefill_chunks" in costs:
        points = [(row["tokens"], row["ms"]) for row in costs["prefill_chunks"]]
    else:
        prompt = costs.get("generate_prompt_tokens", GENERATE_PROMPT_TOKENS)
        points = [(row["batch_size"] * prompt, row["prefill_s"] * 1000) for row in costs["generate_by_batch"]]
    return _affine_fit(points)


def _affine_fit(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through `points`, neither below 0."""
    if len(points) == 1 or len({t for t, _ in points}) == 1:
        return 0.0, sum(ms for _, ms in points) / len(points) / points[0][0]
    mean_tokens = sum(t for t, _ in points) / len(points)
    mean_ms = sum(ms for _, ms in points) / len(points)
    spread = sum((t - mean_tokens) ** 2 for t, _ in points)
    slope = max(0.0, sum((t - mean_tokens) * (ms - mean_ms) for t, ms in points) / spread)
    return max(0.0, mean_ms - slope * mean_tokens), slope


def _roofline(costs: dict) -> Roofline | None:
    device, model = costs.get("device", {}), costs.get("model", {})
    if "bf16_dense_tflops_spec" not in device or "hbm_tb_s_spec" not in device or "lm_layers" not in model:
        return None
    bytes_per_key = model["lm_layers"] * model["lm_kv_heads"] * model["head_dim"] * 2 * 2  # K and V, bf16
    lm_parameters = 12 * model["lm_layers"] * model["lm_hidden"] ** 2  # a transformer's weights, embeddings aside
    return Roofline(
        flops_per_s=device["bf16_dense_tflops_spec"] * 1e12 * ROOFLINE_EFFICIENCY,
        bytes_per_s=device["hbm_tb_s_spec"] * 1e12 * ROOFLINE_EFFICIENCY,
        weight_bytes=model["weights_gib_bf16"] * 2**30,
        bytes_per_key=bytes_per_key,
        lm_flops_per_token=2 * lm_parameters,
    )


class VirtualClock:
    """Seconds: real host time while the engine works, plus modelled device time; stopped while the simulation works.

    The host's time is the stepping thread's CPU time (`time.thread_time`), not the wall clock: on a shared machine
    the wall clock also counts the time other processes held the core, which is no work of the engine's. With
    `count_host=False` only modelled time passes (a test that checks modelled costs exactly).
    """

    def __init__(self, count_host: bool = True, real: Callable[[], float] = time.thread_time) -> None:
        self.count_host = count_host
        self._real = real
        self._virtual = 0.0
        self._since = real()
        self._stopped = not count_host

    def __call__(self) -> float:
        return self._virtual if self._stopped else self._virtual + self._real() - self._since

    def advance(self, seconds: float) -> None:
        """Let `seconds` of modelled time pass (a device step, or a wait for the next arrival)."""
        self._virtual += seconds

    def advance_to(self, at: float) -> None:
        """Jump to `at` when it is later (an idle engine waiting for the next arrival)."""
        self._virtual += max(0.0, at - self())

    @contextmanager
    def stopped(self) -> Iterator[None]:
        """Work inside is not the engine's: it takes no virtual time."""
        if self._stopped:
            yield
            return
        self._virtual += self._real() - self._since
        self._stopped = True
        try:
            yield
        finally:
            self._stopped = False
            self._since = self._real()


SIMULATED_SPEC = {"latent_dim": 64, "eos": 2, "frame": 1, "speech_start": 3}


def simulated_spec(rows: int, num_blocks: int, block_size: int = 16, max_context: int = 65_536) -> RunnerSpec:
    """A runner spec with the simulation's token ids (frame 1, eos 2, speech start 3)."""
    ids = SIMULATED_SPEC
    return RunnerSpec(
        rows, num_blocks, block_size, max_context, ids["latent_dim"], frozenset({ids["eos"]}), ids["frame"],
        ids["speech_start"],
    )  # fmt: skip


class SimulatedRunner:
    """A runner that honours the step records, makes a frame per row per step, and takes modelled time.

    `scripts` (request id -> tokens) makes a request choose other tokens first (a speech start, an early eos),
    as the lifecycle tests' fake runner does; after its script a request makes frames until the engine ends it.
    `start_seed` draws each start's cost from the cost file's measured starts (see `StartCosts`); None prices each
    at their median.
    """

    def __init__(
        self,
        spec: RunnerSpec,
        costs: CostModel,
        clock: VirtualClock,
        samples_per_frame: int = 3200,
        start_seed: int | None = None,
    ) -> None:
        self.spec = spec
        self.costs = costs
        self.clock = clock
        self._start_draws = None if start_seed is None else random.Random(start_seed)
        self.scripts: dict[int, list[int]] = {}
        self.chosen: dict[int, int] = {}  # request id -> tokens chosen since it was submitted
        self.owner: dict[int, int] = {}  # row -> request
        self.steps = 0
        self.device_seconds = 0.0  # modelled, summed over steps and replays
        self._reads = KeyReads()
        self._audio = np.zeros(samples_per_frame, dtype=np.float32)
        self._audio.flags.writeable = False  # one silent frame handed to every event: nobody may write it
        self._latent = torch.zeros(spec.latent_dim)

    @property
    def unread(self) -> frozenset[int]:
        return frozenset()  # steps are serial: nothing is in flight when the engine schedules

    @property
    def fast_path(self) -> FastPath:
        return FastPath(StepMode.EAGER, "a simulated device: eager costs from a cost file")

    @property
    def key_reads(self) -> KeyReads:
        return self._reads

    def overlaps(self, diffusion_steps: set[int]) -> bool:
        return False

    def start_request(self, start: RequestStart) -> np.ndarray | None:
        with self.clock.stopped():
            self.owner[start.row] = start.request_id
            draw = None if self._start_draws is None else self._start_draws.random()
            self._spend(self.costs.start_seconds(start.prompt.length, start.prompt.voice_samples, draw))
            if start.replay is None:
                return None
            frames = sum(token == self.spec.diffusion_token_id for token in start.replay.tokens)
            self._spend(self.costs.replay_seconds(frames))
            return np.zeros((frames, len(self._audio)), dtype=np.float32)

    def finish_request(self, request_id: int, row: int) -> None:
        if self.owner.get(row) == request_id:
            del self.owner[row]

    def run(self, step: StepInput) -> list[RowOutcome]:
        with self.clock.stopped():
            outcomes = [self._choose(chunk.request_id) for chunk in step.prefill if chunk.frame is not None]
            outcomes += [self._choose(row.request_id) for row in step.decode]
            frames = [outcome for outcome in outcomes if outcome.made_frame]
            steps = [row.frame.diffusion_steps for row in step.decode]
            steps += [chunk.frame.diffusion_steps for chunk in step.prefill if chunk.frame is not None]
            reads = sum((self._reads_of(row.positive, row.frame.negative) for row in step.decode), KeyReads())
            self._reads = self._reads + reads
            shape = StepShape(
                decode_rows=len(step.decode),
                frame_rows=len(frames),
                prefill_chunks=tuple(chunk.tokens for chunk in step.prefill),
                keys_read=reads.read,
                diffusion_steps=max(steps, default=MEASURED_DIFFUSION_STEPS),
            )
            self.steps += 1
            self._spend(self.costs.step_seconds(shape))
            return outcomes

    def flush(self) -> list[RowOutcome]:
        return []

    def warm_up(self, diffusion_steps: int, max_keys: int) -> int:
        return 0  # no graphs to capture

    def _spend(self, seconds: float) -> None:
        self.device_seconds += seconds
        self.clock.advance(seconds)

    def _choose(self, request_id: int) -> RowOutcome:
        count = self.chosen.get(request_id, 0)
        self.chosen[request_id] = count + 1
        script = self.scripts.get(request_id, ())
        token = script[count] if count < len(script) else self.spec.diffusion_token_id
        if token != self.spec.diffusion_token_id:
            return RowOutcome(request_id, token)
        return RowOutcome(request_id, token, self._audio, self._latent)

    @staticmethod
    def _reads_of(positive: CacheSpan, negative: CacheSpan) -> KeyReads:
        """Keys a decode row's attention sees in both branches (its new entry included), and reads in chunks."""
        visible = (positive.length - positive.visible_from + 1) + (negative.length - negative.visible_from + 1)
        read = sum(-(-(span.length - span.visible_from + 1) // KEY_CHUNK) * KEY_CHUNK for span in (positive, negative))
        return KeyReads(read, visible)

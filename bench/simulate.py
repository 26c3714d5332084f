"""The engine judged at a device's pace: the real engine on a simulated device priced by a measured cost file.

    python bench/simulate.py --costs ../shared/device_costs/h200-vibevoice-1.5b-bf16-eager.json --streams 64 \
        --arrivals poisson --json out.json
    python bench/simulate.py --costs FILE --sweep --json out.json --plot out.png

Everything but the device is real: the engine's scheduler, policies, block books, preemption and request lifecycle
run unchanged; the device is `pipeline.engine.simulated_device.SimulatedRunner`, which takes the time the cost file
gives for each step on a virtual clock, while the engine's own host work between steps is measured for real and
added (so a sweep of many minutes of load runs in seconds, and host costs are never modelled away).

Requests are like `bench/engine.py`'s: prompts of one to six lines and one or two voice prompts (their token
counts from the tiny checkpoint's processor), 5 to 60 s of audio each, streamed (playback starts at a request's
first frame). `--streams N` with Poisson arrivals means N streams playing at once on average (Little's law:
arrivals at N / mean audio seconds) over `--duration` seconds of arrivals; figures count the requests that
arrive after the first `--warm-up` seconds, once the load has built up. `--arrivals at-once`: N requests at 0.

`--workload mixed`: one 90-minute, 4-speaker whole-mode job (a 14,680-token prompt and 40,000 frames, the size the
README's long-form run measured) at time 0, beside N - 1 Poisson streams for as long as it runs; reported: the
streams' figures and the long job's time against its time alone.

Two reference schedulers run over the same cost model in the same run: `static_batch` (transformers'
`generate()` in static batches: the requests waiting when the device frees take it together, up to 64, and hold
it until the longest is done; its host work is not counted) and `four_rows` (at most 4 sequences, each with room
for its whole generation, no preemption: vLLM-Omni's VibeVoice serving; run as this engine with 4 slots).

`--sweep`: every scheduler over growing numbers of Poisson streams until it misses the SLO (TTFA p95 <= 250 ms
and >= 99.9% of frames on time); `max_streams_at_slo` is the most streams it met it at. Also measured: the
engine's host milliseconds per step at 16, 64 and 256 rows on a device that costs nothing, and 2x the sustainable
load (admission control: the admitted streams' figures, and the queue places' estimates against the real starts).
`--validation FILE` folds a CPU faithfulness report (`bench/gpu_costs.py --validate`) into the JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.audio_rates import FRAMES_PER_SECOND  # noqa: E402
from models.segment_io import PromptInputs  # noqa: E402
from pipeline.engine.engine import Engine, EngineConfig  # noqa: E402
from pipeline.engine.requests import EventKind, GenerationRequest, RequestHandle  # noqa: E402
from pipeline.engine.scheduler import STALL_MARGIN_SECONDS  # noqa: E402
from pipeline.engine.simulated_device import (  # noqa: E402
    CostModel,
    SimulatedRunner,
    StepShape,
    VirtualClock,
    simulated_spec,
)

FRAME_SECONDS = 1 / FRAMES_PER_SECOND
SLO_TTFA_P95_S = 0.25
SLO_ON_TIME = 0.999
AUDIO_SECONDS = (5.0, 60.0)
LONG_JOB = {"prompt_tokens": 14_680, "frames": 40_000}  # the README's 45-minute script's prompt; 90 min of audio
KV_GIB_DEFAULT = 64.0  # the simulated pool: room for every request of these workloads, so none is preempted
SWEEP_STREAMS = (1, 2, 4, 8, 16, 32, 64, 96, 128, 160, 192, 224, 256, 320, 384)
STATIC_MAX_BATCH = 64


@dataclass(frozen=True)
class Arrival:
    at: float  # seconds from the start
    prompt_tokens: int
    frames: int
    streaming: bool = True
    job: str | None = None
    voice_samples: int = 0  # its voices as the encoders take them (priced where the cost file measured starts)


@dataclass
class Trace:
    """What happened to one request: when it arrived, got a row, was promised a row, and made each frame."""

    arrival: Arrival
    started: float | None = None
    promised: float | None = None  # the start first estimated while it waited (None: it never waited)
    frames: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Figures:
    requests: int
    ttfa_p50_s: float
    ttfa_p95_s: float
    ttfa_p99_s: float
    on_time_share: float
    audio_s_per_s: float
    meets_slo: bool


# --- the workload --------------------------------------------------------------------------------------------


def prompt_tokens_pool(count: int = 60) -> list[int]:
    """Prompt tokens of `count` of `bench/engine.py`'s requests (one to six lines, one or two voices of 5 and 7 s),
    counted by the tiny checkpoint's processor (the 1.5B's tokenizer gives somewhat other counts; a cost file's
    prefill figures price whatever count it is given)."""
    from types import SimpleNamespace

    from transformers import VibeVoiceAcousticTokenizerFeatureExtractor, VibeVoiceProcessor

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from engine import workload  # bench/engine.py's requests, built the same way

    from models.segment_io import prompt_token_count
    from models.tiny_checkpoint import train_tiny_tokenizer

    processor = VibeVoiceProcessor(VibeVoiceAcousticTokenizerFeatureExtractor(), train_tiny_tokenizer())
    counter = SimpleNamespace(processor=processor)  # all prompt_token_count reads of a loaded model
    return [prompt_token_count(counter, r.text, r.voices) for _, r in workload(count, "at-once", 1.0, seed=0)]


def streams_workload(streams: int, arrivals: str, duration: float, seed: int, prompts: list[int]) -> list[Arrival]:
    """Streams of 5 to 60 s of audio: `streams` at once, or Poisson arrivals keeping `streams` playing on average."""
    rng = random.Random(seed)
    rate = streams / statistics.mean(AUDIO_SECONDS)
    work, clock = [], 0.0
    while (arrivals == "at-once" and len(work) < streams) or (arrivals == "poisson" and clock < duration):
        frames = rng.randint(
            math.ceil(AUDIO_SECONDS[0] * FRAMES_PER_SECOND), math.ceil(AUDIO_SECONDS[1] * FRAMES_PER_SECOND)
        )
        tokens = rng.choice(prompts)
        work.append(Arrival(clock if arrivals == "poisson" else 0.0, tokens, frames))
        clock += rng.expovariate(rate)
    return work


# --- running a workload --------------------------------------------------------------------------------------


@dataclass
class EngineRun:
    traces: list[Trace]
    wall_s: float  # virtual
    real_s: float
    steps: int
    preemptions: int
    host_s: float  # virtual time that was not the device's: the engine's own work


def run_engine(
    costs: CostModel,
    work: list[Arrival],
    config: EngineConfig,
    *,
    kv_gib: float = KV_GIB_DEFAULT,
    warm_rows: tuple[int, ...] = (1, 16, 64, 256),
    on_step: Callable[[float, int], None] | None = None,
    host_clock: Callable[[], float] = time.thread_time,
    start_seed: int = 0,
) -> EngineRun:
    """`work` through the real engine on the simulated device; `on_step(now, decode rows)` after each step; each
    request's start drawn from the cost file's measured starts with `start_seed` (where it has them).

    The online policy learns a step's cost by its rows from the steps it runs; a worker's warm-up step does the
    same for `warm_rows` before the first request (so admission knows the cost of a full step from the start).
    The engine's host work is timed by `host_clock`: its thread's CPU time, or the wall clock where the device's
    costs were measured on the same busy machine (the faithfulness check).
    """
    clock = VirtualClock(real=host_clock)
    blocks = int(kv_gib * 2**30 / (config.block_size * _bytes_per_token(costs)))
    runner = SimulatedRunner(
        simulated_spec(config.slots, blocks, config.block_size), costs, clock, start_seed=start_seed
    )
    engine = Engine(runner, config, clock=clock)
    for rows in warm_rows:
        if rows <= config.slots:
            engine.policy.observe(rows, 0, costs.frame_step_seconds(rows))
    pending = deque(sorted(range(len(work)), key=lambda i: work[i].at))
    traces = [Trace(arrival) for arrival in work]
    live: dict[int, tuple[int, RequestHandle]] = {}
    real = time.perf_counter()
    steps = 0
    while pending or live:
        with clock.stopped():
            while pending and work[pending[0]].at <= clock():
                index = pending.popleft()
                handle = engine.submit(_request(work[index], clock()))
                live[handle.request_id] = (index, handle)
            began = clock()  # the step admits before it runs: a request it starts started now
        stepped = engine.step()
        with clock.stopped():
            now = clock()
            steps += stepped
            if on_step is not None and stepped:
                on_step(now, len(engine.active))
            if any(traces[index].started is None and traces[index].promised is None for index, _ in live.values()):
                for place in engine.queue_places():  # a new arrival waits: what it is told, once
                    index = live[place.request_id][0]
                    if traces[index].promised is None:
                        traces[index].promised = now + place.start_in_seconds
            for request_id, (index, handle) in list(live.items()):
                if _record(traces[index], handle, began, now):
                    del live[request_id]
            if not stepped and pending:
                clock.advance_to(work[pending[0]].at)
    wall = clock()
    return EngineRun(traces, wall, time.perf_counter() - real, steps, engine.preemptions, wall - runner.device_seconds)


def _request(arrival: Arrival, now: float) -> GenerationRequest:
    # voices: a view of the right size and no memory, for the start's price (`SimulatedRunner.start_request`)
    voices = torch.zeros(()).expand(1, 1, arrival.voice_samples) if arrival.voice_samples else None
    prompt = PromptInputs(torch.zeros(1, arrival.prompt_tokens, dtype=torch.long), voices, None)
    return GenerationRequest(prompt, arrival.frames, streaming=arrival.streaming, job=arrival.job, arrival=now)


def _record(trace: Trace, handle: RequestHandle, began: float, now: float) -> bool:
    """Fold the new events of a step that `began` and ended `now` into a handle's trace; True once it has ended.
    A start is the step's beginning, where the engine admits: its first frame's time counts the whole step."""
    for event in handle.drain():
        if event.kind is EventKind.STARTED:
            trace.started = began
        elif event.kind is EventKind.AUDIO:
            trace.frames.append(now)
        elif event.kind is EventKind.FINISHED:
            return True
        elif event.kind in (EventKind.FAILED, EventKind.CANCELLED):
            raise RuntimeError(f"a simulated request {event.kind.value}: {event.reason}")
    return False


def _bytes_per_token(costs: CostModel) -> float:
    """K/V bytes a token takes in one branch (a block holds `block_size` of them): the cost file's model, or the
    1.5B's where it does not say (a CPU file: there the pool only has to be large enough)."""
    return costs.roofline.bytes_per_key if costs.roofline is not None else 28 * 2 * 128 * 2 * 2


def run_static_batch(costs: CostModel, work: list[Arrival], max_batch: int = STATIC_MAX_BATCH) -> list[Trace]:
    """`generate()` in static batches: whoever waits when the device frees starts together, up to `max_batch`,
    prefilled as one padded forward, and every row steps until the longest is done (its host work not counted)."""
    order = sorted(range(len(work)), key=lambda i: work[i].at)
    traces = [Trace(arrival) for arrival in work]
    now, next_up = 0.0, 0
    while next_up < len(order):
        now = max(now, work[order[next_up]].at)
        batch = []
        while next_up < len(order) and work[order[next_up]].at <= now and len(batch) < max_batch:
            batch.append(order[next_up])
            next_up += 1
        longest_prompt = max(work[i].prompt_tokens for i in batch)
        now += costs.step_seconds(StepShape(prefill_chunks=(longest_prompt * len(batch),)))
        for i in batch:
            traces[i].started = now
        step = costs.frame_step_seconds(len(batch))
        for frame in range(max(work[i].frames for i in batch)):
            now += step
            for i in batch:
                if frame < work[i].frames:
                    traces[i].frames.append(now)
    return traces


# --- figures ---------------------------------------------------------------------------------------------------


def figures(traces: list[Trace], since: float = 0.0, wall: float | None = None) -> Figures:
    """TTFA percentiles and the on-time share over the requests arriving from `since`; audio seconds per second
    over every request (from the first arrival to the last frame, or `wall`)."""
    measured = [t for t in traces if t.arrival.at >= since and t.frames]
    ttfa = sorted(t.frames[0] - t.arrival.at for t in measured)
    frames = on_time = 0
    for t in measured:
        for k, produced in enumerate(t.frames):
            frames += 1
            on_time += produced <= t.frames[0] + k * FRAME_SECONDS + 1e-9
    audio = sum(len(t.frames) for t in traces) * FRAME_SECONDS
    end = wall if wall is not None else max((t.frames[-1] for t in traces if t.frames), default=1.0)
    start = min(t.arrival.at for t in traces)
    share = on_time / frames if frames else 0.0
    p95 = _percentile(ttfa, 0.95)
    return Figures(
        requests=len(measured),
        ttfa_p50_s=_percentile(ttfa, 0.50),
        ttfa_p95_s=p95,
        ttfa_p99_s=_percentile(ttfa, 0.99),
        on_time_share=share,
        audio_s_per_s=audio / max(end - start, 1e-9),
        meets_slo=p95 <= SLO_TTFA_P95_S and share >= SLO_ON_TIME,
    )


def pooled(runs: list[list[Trace]], since: float = 0.0) -> Figures:
    """Figures over runs of one load drawn with different seeds: TTFA percentiles and the on-time share over every
    request of them all, audio seconds per second their mean (the runs overlap in time, not add up)."""
    whole = figures([trace for traces in runs for trace in traces], since)
    return replace(whole, audio_s_per_s=statistics.mean(figures(traces, since).audio_s_per_s for traces in runs))


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return math.inf
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


# --- the runs the JSON reports -------------------------------------------------------------------------------


@dataclass
class Settings:
    costs: CostModel
    config: EngineConfig
    duration: float
    warm_up: float
    seed: int
    prompts: list[int]
    repeats: int = 1  # runs of each load of the sweep and the overload, seeds `seed` onward, their figures pooled

    def streams(self, count: int, arrivals: str = "poisson", repeat: int = 0) -> list[Arrival]:
        return streams_workload(count, arrivals, self.duration, self.seed + repeat, self.prompts)

    def repeated(self, count: int) -> list[list[Arrival]]:
        """`count` Poisson streams, once for each repeat's seed."""
        return [self.streams(count, repeat=repeat) for repeat in range(self.repeats)]


SCHEDULERS = ("engine", "four_rows", "static_batch")


def run_scheduler(settings: Settings, scheduler: str, works: list[list[Arrival]]) -> tuple[Figures, float]:
    """One scheduler over each of `works`: their figures pooled (past the warm-up) and the real seconds it took."""
    since = settings.warm_up if any(a.at > 0 for work in works for a in work) else 0.0
    real = time.perf_counter()
    runs = []
    for work in works:
        if scheduler == "static_batch":
            runs.append(run_static_batch(settings.costs, work))
        else:
            config = settings.config if scheduler == "engine" else four_rows_config(settings.config)
            runs.append(run_engine(settings.costs, work, config).traces)
    return pooled(runs, since), time.perf_counter() - real


def four_rows_config(config: EngineConfig) -> EngineConfig:
    """vLLM-Omni's VibeVoice serving: 4 sequences at most, a whole prompt prefilled at once, no admission control."""
    return replace(config, slots=4, prefill_chunk=8192, token_budget=None, realtime_headroom=None)


def sweep(settings: Settings, counts: tuple[int, ...] = SWEEP_STREAMS) -> tuple[list[dict], dict[str, int]]:
    """Every scheduler over growing Poisson loads until it first misses the SLO; the table and each one's best."""
    rows: list[dict] = []
    best = dict.fromkeys(SCHEDULERS, 0)
    for scheduler in SCHEDULERS:
        for count in counts:
            result, real = run_scheduler(settings, scheduler, settings.repeated(count))
            rows.append({"scheduler": scheduler, "streams": count, **asdict(result), "real_s": round(real, 2)})
            print(_line(scheduler, count, result, real), flush=True)
            if not result.meets_slo:
                break
            best[scheduler] = count
    return rows, best


def _line(name: str, streams: int, result: Figures, real: float) -> str:
    return (
        f"{name:13s} streams {streams:4d}  ttfa p50 {result.ttfa_p50_s:7.3f}s p95 {result.ttfa_p95_s:7.3f}s "
        f"p99 {result.ttfa_p99_s:7.3f}s  on-time {result.on_time_share:8.4%}  audio/s {result.audio_s_per_s:7.1f}  "
        f"{'SLO met' if result.meets_slo else 'SLO missed'}  ({result.requests} requests, {real:.1f} s real)"
    )


def host_ms_per_step(config: EngineConfig, rows: tuple[int, ...] = (16, 64, 256), frames: int = 40) -> dict[str, float]:
    """The engine's own milliseconds per step with `rows` streams decoding, on a device that costs nothing:
    the median time between two consecutive steps that both decoded exactly that many rows."""
    result = {}
    for count in rows:
        seen: list[tuple[float, int]] = []
        work = [Arrival(0.0, 200, frames) for _ in range(count)]
        config_here = replace(config, slots=max(config.slots, count))
        run_engine(
            CostModel.free(), work, config_here, on_step=lambda now, active, seen=seen: seen.append((now, active))
        )
        intervals = [b[0] - a[0] for a, b in zip(seen, seen[1:], strict=False) if a[1] == b[1] == count]
        result[str(count)] = round(statistics.median(intervals) * 1000, 3) if intervals else math.nan
    return result


def overload(settings: Settings, sustainable: int) -> dict:
    """Twice the sustainable Poisson load: the admitted streams' figures from their start (those that waited
    heard nothing stutter once started), and the queue estimates against the real starts; every repeat pooled."""
    runs = [run_engine(settings.costs, work, settings.config) for work in settings.repeated(2 * max(sustainable, 1))]
    measured = [t for run in runs for t in run.traces if t.arrival.at >= settings.warm_up and t.frames]
    from_start = [replace(t, arrival=replace(t.arrival, at=t.started)) for t in measured if t.started is not None]
    admitted = figures(from_start)
    waited = [t for t in measured if t.promised is not None and t.started is not None]
    errors = [(t.promised - t.started) for t in waited]
    return {
        "streams": 2 * max(sustainable, 1),
        "admitted_from_start": asdict(admitted),
        "ttfa_from_arrival_p95_s": figures(measured).ttfa_p95_s,
        "waited": len(waited),
        "of": len(measured),
        "estimate_minus_start_s": {
            "median": statistics.median(errors) if errors else None,
            "p95_abs": _percentile(sorted(abs(e) for e in errors), 0.95) if errors else None,
            "late_starts": sum(e < -1.0 for e in errors),  # started more than a second after the estimate
        },
    }


def mixed(settings: Settings, streams: int, long_frames: int) -> dict:
    """One long whole-mode job beside Poisson streams for as long as it runs, and the same job alone."""
    long = Arrival(0.0, LONG_JOB["prompt_tokens"], long_frames, streaming=False, job="long")
    alone = run_engine(settings.costs, [long], settings.config)
    alone_s = alone.traces[0].frames[-1]
    duration = alone_s * 1.05
    beside = streams_workload(streams - 1, "poisson", duration, settings.seed, settings.prompts)
    run = run_engine(settings.costs, [long, *beside], settings.config)
    long_s = run.traces[0].frames[-1]
    result = figures(run.traces[1:], settings.warm_up)
    print(f"mixed: long job {long_s:.1f} s beside {streams - 1} streams, {alone_s:.1f} s alone; streams {result}")
    return {
        "streams": asdict(result),
        "long_job_frames": long_frames,
        "long_job_prompt_tokens": long.prompt_tokens,
        "long_job_s": long_s,
        "long_job_alone_s": alone_s,
        "long_job_slowdown": long_s / alone_s,
        "preemptions": run.preemptions,
        "real_s": round(alone.real_s + run.real_s, 1),
    }


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (ttfa, on_time) = plt.subplots(1, 2, figsize=(11, 4))
    for scheduler in SCHEDULERS:
        points = [(r["streams"], r["ttfa_p95_s"], r["on_time_share"]) for r in rows if r["scheduler"] == scheduler]
        if points:
            ttfa.plot([p[0] for p in points], [min(p[1], 60.0) for p in points], marker="o", label=scheduler)
            on_time.plot([p[0] for p in points], [100 * p[2] for p in points], marker="o", label=scheduler)
    ttfa.axhline(SLO_TTFA_P95_S, color="grey", linestyle="--", label="SLO 250 ms")
    on_time.axhline(100 * SLO_ON_TIME, color="grey", linestyle="--", label="SLO 99.9%")
    ttfa.set(xscale="log", yscale="log", xlabel="concurrent Poisson streams", ylabel="TTFA p95 (s)")
    on_time.set(xscale="log", xlabel="concurrent Poisson streams", ylabel="frames on time (%)")
    for axes in (ttfa, on_time):
        axes.legend()
        axes.grid(True, which="both", alpha=0.3)
    figure.suptitle("voxcast engine on the simulated device")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)


def table(rows: list[dict]) -> str:
    lines = [
        "| scheduler | streams | TTFA p50 s | TTFA p95 s | TTFA p99 s | on time | audio s/s | SLO |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['scheduler']} | {r['streams']} | {r['ttfa_p50_s']:.3f} | {r['ttfa_p95_s']:.3f} | "
            f"{r['ttfa_p99_s']:.3f} | {r['on_time_share']:.4%} | {r['audio_s_per_s']:.1f} | "
            f"{'met' if r['meets_slo'] else 'missed'} |"
        )
    return "\n".join(lines)


# --- the command -----------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--costs", type=Path, required=True, help="a cost file of shared/device_costs/'s form")
    parser.add_argument("--streams", type=int, default=64, help="concurrent streams (Poisson) or requests (at-once)")
    parser.add_argument("--arrivals", choices=["poisson", "at-once"], default="poisson")
    parser.add_argument("--workload", choices=["streams", "mixed"], default="streams")
    parser.add_argument("--slots", type=int, default=256, help="engine rows")
    parser.add_argument("--prefill-chunk", type=int, default=512, help="prompt tokens one request prefills a step")
    parser.add_argument("--token-budget", type=int, default=None, help="LM tokens a step (default slots + chunk)")
    parser.add_argument("--headroom", type=float, default=0.9, help="admission: a step's share of a frame's time")
    parser.add_argument(
        "--stall-margin",
        type=float,
        default=STALL_MARGIN_SECONDS,
        help="seconds a step's predicted time keeps within a thin stream's buffer (prompts beside it)",
    )
    parser.add_argument("--duration", type=float, default=150.0, help="seconds of Poisson arrivals")
    parser.add_argument("--warm-up", type=float, default=30.0, help="arrivals before this are not measured")
    parser.add_argument("--long-frames", type=int, default=LONG_JOB["frames"], help="mixed: the long job's frames")
    parser.add_argument("--sweep", action="store_true", help="every scheduler over growing loads; table and plot")
    parser.add_argument("--references", action="store_true", help="run the reference schedulers at --streams too")
    parser.add_argument(
        "--prefill-per-chunk",
        action="store_true",
        help="what-if: a prefill forward per prompt chunk, as the runner did before it packed a step's chunks",
    )
    parser.add_argument("--plot", type=Path, default=None, help="sweep: the PNG (default: beside --json)")
    parser.add_argument("--validation", type=Path, default=None, help="a faithfulness report to fold into the JSON")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="sweep and overload: runs of each load, seeds --seed onward, their figures pooled (default 3)",
    )
    parser.add_argument("--json", type=Path, default=None)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.validation is not None and not args.validation.exists():
        raise SystemExit(f"--validation {args.validation}: no such file (bench/gpu_costs.py --validate writes it)")
    started = time.perf_counter()
    costs = CostModel.from_file(args.costs)
    costs.packed_prefill = not args.prefill_per_chunk
    if args.prefill_per_chunk:
        costs.assumptions.append("what-if: a prefill forward per prompt chunk (the runner before it packed them)")
    config = EngineConfig(
        slots=args.slots,
        policy="online",
        prefill_chunk=args.prefill_chunk,
        token_budget=args.token_budget,
        realtime_headroom=args.headroom,
        stall_margin_seconds=args.stall_margin,
    )
    settings = Settings(costs, config, args.duration, args.warm_up, args.seed, prompt_tokens_pool(), args.repeats)
    print(f"# costs {args.costs}; engine {config}", flush=True)
    work = settings.streams(args.streams, args.arrivals)
    results: dict = {"costs": str(args.costs), "assumptions": costs.assumptions, "config": asdict(config)}
    for scheduler in SCHEDULERS if args.references else ("engine",):
        result, real = run_scheduler(settings, scheduler, [work])
        print(_line(scheduler, args.streams, result, real), flush=True)
        if scheduler == "engine":
            results |= asdict(result)
        else:
            results[scheduler] = {f"at_{args.streams}_streams": asdict(result)}
    results["max_streams_at_slo"] = None
    if args.sweep:
        rows, best = sweep(settings)
        results["max_streams_at_slo"] = best["engine"]
        for reference in ("four_rows", "static_batch"):
            results.setdefault(reference, {})["max_streams_at_slo"] = best[reference]
            results[f"engine_vs_{reference}"] = best["engine"] / max(best[reference], 1)
        results["sweep"] = rows
        results["overload"] = overload(settings, best["engine"])
        print(f"# overload: {results['overload']}", flush=True)
        plot_path = args.plot or (args.json.with_suffix(".png") if args.json else Path("simulate.png"))
        plot(rows, plot_path)
        results["plot"] = str(plot_path)
        print(table(rows))
    results["host_ms_per_step"] = host_ms_per_step(config)
    print(f"# host ms per step: {results['host_ms_per_step']}", flush=True)
    if args.workload == "mixed" or args.sweep:
        results["mixed"] = mixed(settings, args.streams, args.long_frames)
    results["validation"] = json.loads(args.validation.read_text()) if args.validation else None
    results["real_s"] = round(time.perf_counter() - started, 1)
    print(f"# done in {results['real_s']} s", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2, default=str))
    return results


if __name__ == "__main__":
    main()

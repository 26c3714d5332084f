"""Engine benchmark: the same workload through transformers' `generate()` and through voxcast's engine.

    python bench/engine.py --size tiny --concurrency 8 --arrivals poisson --json out.json
    python bench/engine.py --size tiny --workload longform --long-tokens 12000 --concurrency 15 --paths engine
    python bench/engine.py --size 7b --device cuda --concurrency 16 --paths hf_static,engine

`--size`: `tiny`, or a published member's shapes (`models.family`): `1.5b` (VibeVoice-1.5B: Qwen2.5-1.5B, 64K
context) or `7b` (VibeVoice-Large: Qwen2.5-7B, 32K context, about 18 GB of weights in bf16). A device without room
for the weights is refused before anything is allocated, with the figures.

Paths, measured in the same run on the same requests:
  hf_sequential  transformers' `generate()`, one request at a time (what VibeVoice demos do)
  hf_static      transformers' `generate()` in static batches of `--batch` requests that start and end together
  engine         voxcast's continuous-batching engine
Both transformers paths run without the redundant token-CFG pass (`--token-cfg-pass` adds it back, as
shipped). Per path it prints the aggregate real-time factor (audio seconds per wall second), time to
first audio p50/p95, the share of audio frames produced before their playback deadline (playback of a
request starts with its first frame), peak memory, and the engine's ratios against both references.

The weights are random: speed does not depend on their values. The LM is nudged to keep speaking (as
the tiny test checkpoints are), so every request produces exactly its frame budget on every path.

`--workload longform`: one long generation (`--long-tokens` of prompt and audio, most of it a long
script's prompt) arrives first, then `--concurrency` short ones as a Poisson process. Besides the figures
above it reports the short requests' time to first audio, the engine's preemptions, and the K/V memory: the
paged pool's peak in use against what the slot design it replaced reserved up front (every row sized for the
longest generation, both CFG branches; a formula, since that design allocated exactly that at start).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import psutil
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.family import SIZES
from models.host_memory import release_freed_memory
from models.loading import LoadedModel, choose_device, choose_dtype  # noqa: E402
from models.reference import reference_generate_segment  # noqa: E402
from models.segment_io import prompt_inputs
from models.tiny_checkpoint import random_model, random_model_bytes
from pipeline.engine.engine import Engine, EngineConfig
from pipeline.engine.factory import engine_for_model
from pipeline.engine.requests import EventKind
from pipeline.engine.warm_up import prepare_to_serve
from pipeline.generation import SegmentRequest, submit_segment
from script_text.prompt import SegmentText  # noqa: E402

FRAME_SECONDS = 1 / 7.5


@dataclass
class Timeline:
    """When each request arrived and when each of its frames was produced (seconds from the run's start)."""

    arrival: float
    frames: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class PathFigures:
    rtf: float
    ttfa_p50_s: float
    ttfa_p95_s: float
    on_time_share: float
    peak_mem_bytes: int
    audio_s: float
    wall_s: float


def workload(
    count: int, arrivals: str, rate: float, seed: int, seconds: tuple[float, float] = (2.0, 20.0)
) -> list[tuple[float, SegmentRequest]]:
    """`count` requests of mixed lengths (`seconds` of audio each, prompts of 1 to 6 lines, 1 or 2 voices)."""
    from tests.synthetic_audio import voice_like

    rng = random.Random(seed)
    voices = {0: voice_like(5.0, 24_000, seed=0), 1: voice_like(7.0, 24_000, seed=1)}
    lines = [
        "Welcome back to the show, where we unpack the week's biggest stories in technology.",
        "Thanks for having me; it has been quite a week.",
        "Let's start with the launch everyone is talking about.",
        "The short version is that the promises were bold and the rollout was bumpy.",
        "And the community noticed both, loudly.",
        "So what should listeners take away from all of it?",
    ]
    requests = []
    clock = 0.0
    for index in range(count):
        turns = tuple((i % 2, lines[(index + i) % len(lines)]) for i in range(rng.randint(1, 6)))
        frames = rng.randint(math.ceil(seconds[0] * 7.5), math.ceil(seconds[1] * 7.5))
        request = SegmentRequest(SegmentText(turns), voices, frames)
        requests.append((clock if arrivals == "poisson" else 0.0, request))
        clock += rng.expovariate(rate)
    return requests


class PeakMemory:
    """Peak memory while a path runs: CUDA's allocator peak, or the process RSS sampled every 10 ms."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.peak = 0
        self._stop = threading.Event()

    def __enter__(self) -> PeakMemory:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            release_freed_memory()  # what an earlier path freed and the process kept is not this one's
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        process = psutil.Process()
        while not self._stop.is_set():
            self.peak = max(self.peak, process.memory_info().rss)
            time.sleep(0.01)

    def __exit__(self, *exc: object) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak = torch.cuda.max_memory_allocated(self.device)
        else:
            self._stop.set()
            self._thread.join()


def run_hf_sequential(loaded: LoadedModel, work: list, token_cfg_pass: bool) -> list[Timeline]:
    timelines = [Timeline(arrival) for arrival, _ in work]
    start = time.perf_counter()
    for timeline, (arrival, request) in zip(timelines, work, strict=True):
        _sleep_until(start, arrival)
        reference_generate_segment(
            loaded,
            request,
            on_frame=lambda _, t=timeline: t.frames.append(_since(start)),
            token_cfg_pass=token_cfg_pass,
        )
    _synchronize(loaded.device)
    return timelines


def run_hf_static(loaded: LoadedModel, work: list, batch: int, token_cfg_pass: bool) -> list[Timeline]:
    """Batches of `batch` requests in arrival order; a batch starts once all its requests have arrived."""
    from models.reference import hf_static_batch_generate

    timelines = [Timeline(arrival) for arrival, _ in work]
    start = time.perf_counter()
    for first in range(0, len(work), batch):
        members = list(range(first, min(first + batch, len(work))))
        _sleep_until(start, max(work[i][0] for i in members))

        def on_frame(row: int, members: list[int] = members) -> None:
            timelines[members[row]].frames.append(_since(start))

        hf_static_batch_generate(loaded, [work[i][1] for i in members], on_frame, token_cfg_pass=token_cfg_pass)
    _synchronize(loaded.device)
    return timelines


def longform_workload(
    long_tokens: int,
    long_frames: int,
    count: int,
    rate: float,
    seed: int,
    seconds: tuple[float, float],
    loaded: LoadedModel,
) -> list[tuple[float, SegmentRequest]]:
    """One generation of about `long_tokens` (a long script's prompt, then `long_frames` frames) at time 0, then
    `count` short ones arriving as a Poisson process."""
    short = workload(count, "poisson", rate, seed + 1, seconds)
    frames = long_frames
    lines, prompt_tokens = [], 0
    speech = "We keep talking about the long story of the show, and every line adds a little more to say. "
    while prompt_tokens + frames < long_tokens:
        lines.append((len(lines) % 2, speech))
        prompt_tokens = prompt_inputs(loaded, SegmentText(tuple(lines)), short[0][1].voices).length
    long = SegmentRequest(SegmentText(tuple(lines)), short[0][1].voices, frames)
    return [(0.0, long), *((arrival + 0.5, request) for arrival, request in short)]


@dataclass
class EngineRun:
    """What the engine run saw besides the timelines: its peak K/V blocks in use."""

    peak_blocks: int = 0


def run_engine(engine: Engine, work: list, seen: EngineRun) -> list[Timeline]:
    """Requests are submitted at their arrival times while this thread steps the engine."""
    timelines = [Timeline(arrival) for arrival, _ in work]
    handles = []
    pending = list(range(len(work)))
    start = time.perf_counter()
    while pending or not engine.idle:
        while pending and work[pending[0]][0] <= _since(start):
            index = pending.pop(0)
            handles.append((index, submit_segment(engine, work[index][1], streaming=True)))
        if not engine.step() and pending:
            _sleep_until(start, work[pending[0]][0])
        seen.peak_blocks = max(seen.peak_blocks, engine.pool.in_use)
        for index, handle in handles:
            for event in handle.drain():
                if event.kind is EventKind.AUDIO:
                    timelines[index].frames.append(_since(start))
                elif event.kind in (EventKind.FAILED, EventKind.CANCELLED):
                    raise RuntimeError(f"request {index} {event.kind.value}: {event.reason}")
    _synchronize(engine.loaded.device)
    return timelines


def ttfa_percentiles(timelines: list[Timeline]) -> tuple[float, float]:
    """Time to first audio, p50 and p95, over the timelines that produced any."""
    ttfa = sorted(t.frames[0] - t.arrival for t in timelines if t.frames)
    return statistics.median(ttfa), ttfa[min(len(ttfa) - 1, math.ceil(0.95 * len(ttfa)) - 1)]


def summarise(timelines: list[Timeline], wall: float, peak: int) -> PathFigures:
    audio = sum(len(t.frames) for t in timelines) * FRAME_SECONDS
    ttfa_p50, ttfa_p95 = ttfa_percentiles(timelines)
    on_time = total = 0
    for t in timelines:
        for k, produced in enumerate(t.frames):
            total += 1
            on_time += produced <= t.frames[0] + k * FRAME_SECONDS
    return PathFigures(
        rtf=audio / wall,
        ttfa_p50_s=ttfa_p50,
        ttfa_p95_s=ttfa_p95,
        on_time_share=on_time / total if total else 0.0,
        peak_mem_bytes=peak,
        audio_s=audio,
        wall_s=wall,
    )


def _since(start: float) -> float:
    return time.perf_counter() - start


def _sleep_until(start: float, at: float) -> None:
    delay = at - _since(start)
    if delay > 0:
        time.sleep(delay)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(name: str, device: torch.device, run) -> tuple[PathFigures, list[Timeline]]:  # type: ignore[no-untyped-def]
    with PeakMemory(device) as memory:
        start = time.perf_counter()
        timelines = run()
        wall = time.perf_counter() - start
    figures = summarise(timelines, wall, memory.peak)
    print(
        f"{name:14s} rtf {figures.rtf:8.2f}x  ttfa p50 {figures.ttfa_p50_s:7.3f}s p95 {figures.ttfa_p95_s:7.3f}s  "
        f"on-time {figures.on_time_share:6.1%}  peak {figures.peak_mem_bytes / 2**20:8.0f} MiB  "
        f"audio {figures.audio_s:7.1f}s  wall {figures.wall_s:7.2f}s",
        flush=True,
    )
    return figures, timelines


def check_room(size: str, device: torch.device, dtype: torch.dtype) -> None:
    """Exit with a clear message when `device` has no room for the model's random weights: a 7B build on a CPU or a
    small GPU would otherwise swap, or die in the middle of its weights."""
    needed = random_model_bytes(size, dtype)
    available = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else psutil.virtual_memory().available
    if needed > available:
        name = SIZES[size].name if size in SIZES else size
        raise SystemExit(
            f"bench/engine.py --size {size}: {name}'s weights need {needed / 2**30:.1f} GiB in "
            f"{str(dtype).removeprefix('torch.')} and the {device} has {available / 2**30:.1f} GiB available; "
            "run it on a device with room (bench/gpu.sh does, on a GPU)"
        )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=["tiny", *SIZES], default="tiny")
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--concurrency", type=int, default=8, help="requests in the workload")
    parser.add_argument("--batch", type=int, default=None, help="static batch size (default: concurrency)")
    parser.add_argument("--arrivals", choices=["poisson", "at-once"], default="at-once")
    parser.add_argument("--rate", type=float, default=4.0, help="Poisson arrivals per second")
    parser.add_argument("--policy", choices=["online", "offline"], default=None, help="default: online for poisson")
    parser.add_argument("--slots", type=int, default=None, help="engine rows (default: every request of the workload)")
    parser.add_argument("--workload", choices=["mixed", "longform"], default="mixed")
    parser.add_argument("--long-tokens", type=int, default=12_000, help="longform: the long generation's tokens")
    parser.add_argument("--long-frames", type=int, default=None, help="longform: its frames (default: a tenth)")
    parser.add_argument(
        "--kv-memory", type=float, default=None, help="K/V pool: bytes, or a fraction of free GPU memory"
    )
    parser.add_argument("--kv-blocks", type=int, default=None, help="K/V pool: blocks (wins over --kv-memory)")
    parser.add_argument("--block-size", type=int, default=16, help="tokens per K/V block")
    parser.add_argument("--diffusion-steps", type=int, default=10)
    parser.add_argument("--token-cfg-pass", action="store_true", help="keep transformers' third LM pass, as shipped")
    parser.add_argument("--paths", default="hf_sequential,hf_static,engine")
    parser.add_argument("--audio-seconds", default="2,20", help="shortest,longest audio per request (seconds)")
    parser.add_argument(
        "--fixed-shapes", choices=["auto", "on", "off"], default="auto", help="engine decode step (auto: on a GPU)"
    )
    parser.add_argument("--no-cuda-graphs", action="store_true", help="run the fixed-shape step eagerly on a GPU")
    parser.add_argument("--no-overlap", action="store_true", help="read each fixed-shape step back before the next")
    parser.add_argument("--max-graphs", type=int, default=64, help="decode-step CUDA graphs held at once")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    device = choose_device(args.device)
    dtype = choose_dtype(device, args.dtype)
    torch.manual_seed(args.seed)
    check_room(args.size, device, dtype)
    loaded = random_model(args.size, device, dtype)
    shortest, longest = (float(value) for value in args.audio_seconds.split(","))
    if args.workload == "longform":
        frames = args.long_frames or max(8, args.long_tokens // 10)
        short = (shortest, longest)
        work = longform_workload(args.long_tokens, frames, args.concurrency, args.rate, args.seed, short, loaded)
    else:
        work = workload(args.concurrency, args.arrivals, args.rate, args.seed, (shortest, longest))
    work = [(arrival, _with_steps(request, args.diffusion_steps)) for arrival, request in work]
    policy = args.policy or ("online" if args.arrivals == "poisson" or args.workload == "longform" else "offline")
    prompt_tokens = [prompt_inputs(loaded, r.text, r.voices).length for _, r in work]
    longest_generation = max(tokens + r.max_frames for tokens, (_, r) in zip(prompt_tokens, work, strict=True))
    fixed_shapes = {"auto": None, "on": True, "off": False}[args.fixed_shapes]
    config = EngineConfig(
        slots=args.slots or len(work),
        policy=policy,
        kv_memory=args.kv_memory,
        kv_blocks=args.kv_blocks,
        block_size=args.block_size,
        fixed_shapes=fixed_shapes,
        cuda_graphs=not args.no_cuda_graphs,
        overlap=not args.no_overlap,
        max_graphs=args.max_graphs,
    )
    print(
        f"# size={args.size} device={device} dtype={str(dtype).removeprefix('torch.')} requests={len(work)} "
        f"arrivals={args.arrivals} policy={policy} audio={sum(r.max_frames for _, r in work) * FRAME_SECONDS:.1f}s "
        f"prompt tokens mean={statistics.mean(prompt_tokens):.0f}",
        flush=True,
    )
    seen = EngineRun()
    paths = {
        "hf_sequential": lambda: run_hf_sequential(loaded, work, args.token_cfg_pass),
        "hf_static": lambda: run_hf_static(loaded, work, args.batch or len(work), args.token_cfg_pass),
        "engine": lambda: run_engine(engine, work, seen),
    }
    names = args.paths.split(",")
    engine_setup: dict = {}
    if "engine" in names:
        engine = engine_for_model(loaded, config)
        reserved = _reserved_bytes(device)
        report = prepare_to_serve(engine, diffusion_steps=args.diffusion_steps, max_keys=longest_generation)
        step_memory = engine.runner.step_memory
        engine_setup = {
            "step_mode": report.mode.value,
            "step_mode_reason": report.reason,
            "self_check_difference": report.difference,
            "overlap": engine.config.overlap,
            "cuda_graphs": report.graphs,
            "warm_up_s": report.seconds,
            "graphs_memory_bytes": _reserved_bytes(device) - reserved,
            "kv_blocks": engine.pool.total,
            "block_size": engine.spec.block_size,
            "step_fixed_bytes": None if step_memory is None else step_memory.fixed_bytes,
            "step_bytes_per_key_chunk": None if step_memory is None else step_memory.bytes_per_chunk,
        }
        print(f"# engine: {engine_setup}", flush=True)
    measured = {name: measure(name, device, paths[name]) for name in names}
    figures = {name: value for name, (value, _) in measured.items()}
    results: dict = {name: asdict(value) for name, value in figures.items()}
    if "engine" in names:
        results["engine_memory"] = kv_memory_figures(engine, seen, longest_generation)
        print(f"# engine memory: {results['engine_memory']}", flush=True)
        reads = engine.runner.key_reads
        results["kv_read_ratio"] = reads.ratio
        results["kv_keys_read"], results["kv_keys_visible"] = reads.read, reads.visible
        print(f"# engine K/V reads: {reads.read} keys read for {reads.visible} visible: {reads.ratio:.2f}x", flush=True)
    if args.workload == "longform" and "engine" in measured:
        short_p50, short_p95 = ttfa_percentiles(measured["engine"][1][1:])
        results["engine_short_ttfa_p50_s"], results["engine_short_ttfa_p95_s"] = short_p50, short_p95
        print(f"# engine, short requests beside the long one: ttfa p50 {short_p50:.3f}s p95 {short_p95:.3f}s")
    for reference in ("hf_sequential", "hf_static"):
        if "engine" in figures and reference in figures:
            ratio = figures["engine"].rtf / figures[reference].rtf
            results[f"engine_vs_{reference}"] = ratio
            print(f"engine / {reference}: {ratio:.2f}x real-time factor", flush=True)
    results["setup"] = {k: str(v) for k, v in vars(args).items()} | {
        "policy": policy,
        "prompt_tokens_mean": statistics.mean(prompt_tokens),
        "engine": engine_setup,
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))
    return results


def _reserved_bytes(device: torch.device) -> int:
    """What CUDA's caching allocator holds (0 elsewhere): its growth over warm-up is the graphs' memory."""
    return torch.cuda.memory_reserved(device) if device.type == "cuda" else 0


def kv_memory_figures(engine: Engine, seen: EngineRun, longest_generation: int) -> dict:
    """The paged pool's size and peak use, against what the slot design reserved for the same rows."""
    block_bytes = engine.runner.pool.nbytes // engine.runner.pool.num_blocks
    token_bytes = block_bytes // engine.spec.block_size
    return {
        "block_bytes": block_bytes,
        "pool_bytes": engine.runner.pool.nbytes,
        "paged_peak_bytes": seen.peak_blocks * block_bytes,
        "slot_design_bytes": engine.spec.rows * (longest_generation + 1) * 2 * token_bytes,
        "preemptions": engine.preemptions,
    }


def _with_steps(request: SegmentRequest, steps: int) -> SegmentRequest:
    from dataclasses import replace

    return replace(request, settings=replace(request.settings, diffusion_steps=steps))


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()

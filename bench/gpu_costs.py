"""A device's cost file, measured through the real runner; and the simulated device checked against the real engine.

    python bench/gpu_costs.py --size 1.5b --device cuda --out costs.json      # on a GPU (bench/gpu.sh runs it)
    python bench/gpu_costs.py --size tiny --device cpu --out cpu.json --validate validation.json

The cost file has the form of `shared/device_costs/` (what `pipeline.engine.simulated_device.CostModel` reads):
each part of the real engine's eager decode steps is timed where the runner calls it (synchronised on a GPU):
`lm_step_ms` (one LM branch over the rows: the positive and the negative forwards, with their paged views),
`diffusion_sampling_ms` (the whole loop), `acoustic_decode_ms`, `semantic_encode_ms`, `connectors_ms`, and `other_ms`
(the rest of the step: token choice, the runner's own host work); means over the steps that decoded exactly that
many rows and neither started a request nor prefilled (a run's time is the sum of its steps, so it follows their mean:
a CPU's step times are skewed by stalls, which a median leaves out and the real run meets). Two kinds of run give
them: each batch size of `--batches` at once (offline policy), and Poisson runs of 24 streams as serving has them
(online policy, at each of `SERVING_RATES`), whose row counts with at least `MIN_SERVING_STEPS` steps take their
figures (`measured_in` says which): among other steps a step costs more than back to back on a CPU, whose caches the
previous step has filled with other weights.
`prefill_chunks` holds each prefill forward (a step's prompt chunks, packed into one: its tokens in all and its
chunks), in the batches and in the Poisson runs; `request_starts` each request's start in those runs (its
prompt embedded, its voices encoded, among decode steps as serving starts them), by prompt tokens and by voice samples
(the voices as the encoders take them, padded to the longest: what the start's cost follows).

`--validate OUT`: the faithfulness check. One Poisson workload of streams runs through the real engine, then through
the simulated device priced by the file just measured (same arrivals, prompt lengths, voices, frames and engine
settings; each simulated start drawn from the file's measured starts of its size, as real starts vary, in
`START_DRAWS` simulated runs of each workload). The real engine runs the workload once unmeasured first, on an
engine it throws away: the cost file prices steady steps, and on a CPU the first call of each shape costs its
kernels' set-up. OUT gets both runs' TTFA p50/p95 and audio seconds per second (both from the first arrival to the
last frame) and their relative errors. Run it on a quiet machine: the file and the real run are both measured on
whatever else shares the cores.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import simulate  # noqa: E402  (bench/simulate.py)
from engine import EngineRun as RealRun  # noqa: E402  (bench/engine.py)
from engine import Timeline, summarise, ttfa_percentiles, workload  # noqa: E402
from engine import run_engine as run_real_engine  # noqa: E402

from models.loading import choose_device, choose_dtype  # noqa: E402
from models.segment_io import prompt_inputs  # noqa: E402
from models.tiny_checkpoint import random_model  # noqa: E402
from pipeline.engine.engine import Engine, EngineConfig  # noqa: E402
from pipeline.engine.factory import engine_for_model  # noqa: E402
from pipeline.engine.simulated_device import CostModel  # noqa: E402
from pipeline.engine.step_records import RequestStart  # noqa: E402
from pipeline.generation import SegmentRequest, submit_segment  # noqa: E402

SERVING_RATES = (1.0, 2.0, 3.0)  # Poisson arrivals a second of the serving runs: from 1 to 4 rows to 7 or more
START_DRAWS = 4  # simulated runs of each workload, each drawing its starts anew: the figures are over all of them
MIN_SERVING_STEPS = 5  # decode steps of one row count the serving run needs before its mean replaces the batch's


class PartTimer:
    """Times the runner's parts where it calls them; `take()` hands over one step's milliseconds per part."""

    def __init__(self, engine: Engine, device: torch.device) -> None:
        self.device = device
        self.step: dict[str, list[tuple[Any, ...]]] = defaultdict(list)  # part -> (rows or tokens, ..., ms)
        runner = engine.runner
        inner = runner.inner
        runner._forward = self._timed("lm", runner._forward, lambda spans, embeds: (embeds.shape[0], embeds.shape[1]))
        runner.sample_frames = self._timed("diffusion", runner.sample_frames, lambda positive, *_: (positive.shape[0],))
        inner.audio_tower.decode = self._timed("acoustic", inner.audio_tower.decode, lambda latents, **_: (0,))
        # a step's prompt chunks go through one forward (packed): its tokens in all, its chunks, its milliseconds
        prefill = self._timed("prefill", runner._prefill, lambda chunks: (sum(c.tokens for c in chunks), len(chunks)))
        runner._prefill = prefill
        runner.start_request = self._timed("start", runner.start_request, _start_size)
        self._hook("semantic", inner.semantic_tokenizer_encoder)
        self._hook("connectors", inner.multi_modal_projector)
        self._hook("connectors", inner.semantic_connector)

    def take(self) -> dict[str, list[tuple[Any, ...]]]:
        step, self.step = self.step, defaultdict(list)
        return step

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _timed(self, part: str, call: Callable, size: Callable[..., tuple[int, ...]]) -> Callable:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._sync()
            started = time.perf_counter()
            result = call(*args, **kwargs)
            self._sync()
            ms = (time.perf_counter() - started) * 1000
            shape = size(*args, **kwargs)
            if part != "lm" or shape[1] == 1:  # an LM forward of many tokens is a prefill chunk's, timed there
                self.step[part].append((*shape, ms))
            return result

        return timed

    def _hook(self, part: str, module: torch.nn.Module) -> None:
        started: list[float] = []

        def before(*_: Any) -> None:
            self._sync()
            started.append(time.perf_counter())

        def after(*_: Any) -> None:
            self._sync()
            self.step[part].append((0, (time.perf_counter() - started.pop()) * 1000))

        module.register_forward_pre_hook(before)
        module.register_forward_hook(after)


def _start_size(start: RequestStart) -> tuple[int, int]:
    """A start's size: its prompt tokens, and its voice samples."""
    return start.prompt.length, start.prompt.voice_samples


class DecodeParts:
    """Each part's milliseconds over the decode steps seen, by their rows: steps that made a frame on every row
    through both LM branches, and neither started a request nor prefilled a prompt."""

    def __init__(self, diffusion_steps: int) -> None:
        self.diffusion_steps = diffusion_steps
        self.by_rows: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))

    def add(self, step: dict[str, list[tuple[Any, ...]]], step_ms: float) -> None:
        lm = step.get("lm", [])
        if step.get("prefill") or step.get("start") or len(lm) != 2 or lm[0][0] != lm[1][0]:
            return  # not a step of frames alone
        sums = {name: sum(entry[-1] for entry in step.get(name, [])) for name in ("diffusion", "acoustic", "semantic")}
        connectors = sum(entry[-1] for entry in step.get("connectors", []))
        lm_ms = [entry[-1] for entry in lm]
        parts = self.by_rows[lm[0][0]]
        parts["lm_step_ms"].append(statistics.mean(lm_ms))
        parts["diffusion_sampling_ms"].append(sums["diffusion"] * 10 / self.diffusion_steps)
        parts["acoustic_decode_ms"].append(sums["acoustic"])
        parts["semantic_encode_ms"].append(sums["semantic"])
        parts["connectors_ms"].append(connectors)
        parts["other_ms"].append(max(0.0, step_ms - sum(lm_ms) - sum(sums.values()) - connectors))

    def row(self, rows: int, measured_in: str) -> dict:
        """The cost file's row for `rows`: each part's mean over its steps."""
        parts = self.by_rows[rows]
        row = {"batch_size": rows, "steps": len(parts["lm_step_ms"]), "measured_in": measured_in}
        return row | {name: round(statistics.fmean(values), 3) for name, values in parts.items()}


def timed_step(step: Callable[[], bool], timer: PartTimer) -> tuple[bool, dict[str, list[tuple[Any, ...]]], float]:
    """One engine step: whether it stepped, its parts as the timer saw them, and its whole milliseconds."""
    timer._sync()
    started = time.perf_counter()
    stepped = step()
    timer._sync()
    return stepped, timer.take(), (time.perf_counter() - started) * 1000


def _prefill_rows(step: dict[str, list[tuple[Any, ...]]]) -> list[dict]:
    return [{"tokens": tokens, "chunks": chunks, "ms": round(ms, 3)} for tokens, chunks, ms in step.get("prefill", [])]


def measure_batch(loaded: Any, rows: int, frames: int, steps: int) -> tuple[dict, list[dict]]:
    """One batch size, all at once: the mean of each part over the steps that decoded `rows` rows alone, and each
    prefill forward's (tokens, chunks, ms). Its starts come back to back, not as serving has them: not kept."""
    engine = engine_for_model(loaded, EngineConfig(slots=rows, policy="offline", fixed_shapes=False))
    timer = PartTimer(engine, loaded.device)
    requests = [r for _, r in workload(rows, "at-once", 1.0, seed=rows)]
    prefills: list[dict] = []
    handles = [submit_segment(engine, _frames(request, frames, steps)) for request in requests]
    parts = DecodeParts(steps)
    while not engine.idle:
        _, step, step_ms = timed_step(engine.step, timer)
        prefills.extend(_prefill_rows(step))
        parts.add(step, step_ms)
    for handle in handles:
        handle.drain()
    if not parts.by_rows.get(rows):
        raise RuntimeError(f"no step decoded {rows} rows alone; raise --frames")
    return parts.row(rows, "batch"), prefills


def _frames(request: SegmentRequest, frames: int, steps: int) -> SegmentRequest:
    from dataclasses import replace

    return replace(request, max_frames=frames, settings=replace(request.settings, diffusion_steps=steps))


def measure_serving(loaded: Any, steps: int) -> tuple[DecodeParts, list[dict], list[dict]]:
    """Decode steps, request starts and prefill forwards as serving meets them: streams arriving one by one among
    decoding rows (Poisson workloads like the faithfulness check's, on other seeds, one, two and three a second:
    the first rarely holds more than 4 rows, and a row count the serving runs miss takes the back-to-back figures).

    On this machine's CPU a step among others costs more than the same step back to back (a start about a fifth
    more, a decode step of several rows a tenth or more: the previous step's weights are no longer in the caches), and
    serving runs them that way."""
    parts, starts, prefills = DecodeParts(steps), [], []
    for seed, rate in enumerate(SERVING_RATES, start=1):
        work = workload(24, "poisson", rate, seed=seed, seconds=(2.0, 8.0))
        engine = engine_for_model(loaded, EngineConfig(slots=len(work), policy="online", fixed_shapes=False))
        timer = PartTimer(engine, loaded.device)
        step_once = engine.step

        def step(step_once: Callable[[], bool] = step_once, timer: PartTimer = timer) -> bool:
            # the engine's step, timed, as `run_real_engine` drives it
            stepped, measured, step_ms = timed_step(step_once, timer)
            parts.add(measured, step_ms)
            prefills.extend(_prefill_rows(measured))
            starts.extend(
                {"tokens": t, "voice_samples": v, "ms": round(ms, 3)} for t, v, ms in measured.get("start", [])
            )
            return stepped

        engine.step = step  # type: ignore[method-assign]
        run_real_engine(engine, [(at, _frames(request, request.max_frames, steps)) for at, request in work], RealRun())
    return parts, starts, prefills


def measure(loaded: Any, batches: list[int], frames: int, steps: int, size: str) -> dict:
    device = loaded.device
    by_rows, prefills = {}, []
    measure_batch(loaded, 1, 3, steps)  # warm-up: first calls allocate and pick kernels
    for batch in batches:
        by_rows[batch], chunks = measure_batch(loaded, batch, frames, steps)
        prefills.extend(chunks)
    serving, starts, serving_prefills = measure_serving(loaded, steps)
    prefills.extend(serving_prefills)
    for count, parts in serving.by_rows.items():
        if len(parts["lm_step_ms"]) >= MIN_SERVING_STEPS:  # serving's own steps where it ran enough of them
            by_rows[count] = serving.row(count, "serving")
    rows = [by_rows[count] for count in sorted(by_rows)]
    for row in rows:
        print(f"  {row['batch_size']:4d} rows: {row}", flush=True)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    return {
        "what": (
            f"Parts of the engine's eager decode step and its prefill, timed where the real runner calls them "
            f"(bench/gpu_costs.py), {size} model with random weights, {str(loaded.dtype).removeprefix('torch.')}, "
            f"on {name}; means over the steps that decoded exactly batch_size rows and neither started a request nor "
            f"prefilled, at once (measured_in batch) or in Poisson runs of streams (serving). "
            f"diffusion_sampling_ms is scaled to 10 steps from the {steps} run."
        ),
        "measured": datetime.now(UTC).strftime("%Y-%m-%d"),
        "units": "milliseconds unless named otherwise",
        "past_measured_rows": "flat" if device.type == "cuda" else "linear",
        "parts_by_batch": rows,
        "prefill_chunks": prefills,
        "request_starts": starts,
        "device": {"name": name},
        "notes": [
            "other_ms: the rest of a decode step (token choice, the runner's own host work) beyond the timed parts.",
            "prefill_chunks: each step's prompt chunks through the LM (one packed forward), in the batches and in "
            "Poisson runs of 24 streams; request_starts: each request's prompt embedded (its voices through the "
            "acoustic and semantic encoders) when it takes its row, in those Poisson runs (starts among decode steps, "
            "as serving has them), with its voice samples (padded to the longest voice: the encoders' work).",
            "On a GPU the cost model also needs the device's spec figures (bf16_dense_tflops_spec, hbm_tb_s_spec) "
            "and the model's shapes for its memory-traffic bound; this script does not know them.",
        ],
    }


# --- faithfulness --------------------------------------------------------------------------------------------


def validate(
    loaded: Any,
    costs_path: Path,
    streams: int,
    rate: float,
    seconds: tuple[float, float],
    steps: int,
    repeats: int,
    predicted_by: Path | None = None,
) -> dict:
    """A Poisson workload through the real engine and through the simulated device with `costs_path`, on `repeats`
    seeds (7 onward) whose requests are pooled: with 8 streams a run's p95 is its slowest request, and the real
    engine's own p95 moves by a fifth or more from one run to the next (eight runs pool 64 requests: the p95 is the
    fourth slowest). Each workload is simulated `START_DRAWS` times, its starts drawn anew each time: the simulated
    figures are then what the measured starts give on average, not one draw's luck. With `predicted_by`, an earlier
    cost file simulated too: what the simulation predicted before this device was measured."""
    config = EngineConfig(slots=streams, policy="online", fixed_shapes=False)
    works = []
    for seed in range(7, 7 + repeats):
        work = workload(streams, "poisson", rate, seed=seed, seconds=seconds)
        works.append([(arrival, _frames(request, request.max_frames, steps)) for arrival, request in work])
    # Once unmeasured, on an engine thrown away: the first call of each shape (a batch of rows, a prompt's voices)
    # costs the CPU's kernels their set-up, several times a steady step, and the cost file prices steady steps.
    # Each measured run then starts on a new engine, its policy as new as the simulation's.
    run_real_engine(engine_for_model(loaded, config), works[0], RealRun())
    costs = CostModel.from_file(costs_path)
    real_runs, sim_runs, arrivals_by_run = [], [], []
    real_wall = sim_wall = 0.0
    for seed, work in enumerate(works, start=7):
        started = time.perf_counter()
        timelines = run_real_engine(engine_for_model(loaded, config), work, RealRun())
        wall = time.perf_counter() - started
        real_runs.append((timelines, summarise(timelines, _span(timelines), 0)))
        real_wall += wall
        prompts = [prompt_inputs(loaded, request.text, request.voices) for _, request in work]
        arrivals = [
            simulate.Arrival(arrival, prompt.length, request.max_frames, voice_samples=prompt.voice_samples)
            for (arrival, request), prompt in zip(work, prompts, strict=True)
        ]
        arrivals_by_run.append(arrivals)
        # The wall clock for the engine's host work, as the cost file's parts and the real run were timed on it.
        draws = [
            simulate.run_engine(
                costs, arrivals, config, warm_rows=(), host_clock=time.perf_counter, start_seed=100 * seed + draw
            )
            for draw in range(START_DRAWS)
        ]
        sim_runs.append([run.traces for run in draws])
        sim_wall += statistics.fmean(run.wall_s for run in draws)
    sim = simulate.pooled([traces for draws_of_run in sim_runs for traces in draws_of_run])
    real_p50, real_p95 = ttfa_percentiles([timeline for timelines, _ in real_runs for timeline in timelines])
    real_audio = statistics.mean(figures.rtf for _, figures in real_runs)
    pairs = {
        "ttfa_p50_s": (real_p50, sim.ttfa_p50_s),
        "ttfa_p95_s": (real_p95, sim.ttfa_p95_s),
        "audio_s_per_s": (real_audio, sim.audio_s_per_s),
    }
    report = {
        "workload": f"{streams} streams of {seconds[0]:g} to {seconds[1]:g} s, Poisson at {rate:g}/s, {steps} "
        f"diffusion steps, {streams} slots, online policy, eager step; {repeats} runs (seeds 7 onward) pooled, "
        f"each simulated with {START_DRAWS} draws of its starts",
        "costs": str(costs_path),
        "real": {name: round(real_value, 4) for name, (real_value, _) in pairs.items()},
        "simulated": {name: round(sim_value, 4) for name, (_, sim_value) in pairs.items()},
        "relative_error": {name: round((b - a) / a, 4) for name, (a, b) in pairs.items()},
        "real_p95_by_run": [round(ttfa_percentiles(timelines)[1], 4) for timelines, _ in real_runs],
        "simulated_p95_by_run": [round(simulate.pooled(draws).ttfa_p95_s, 4) for draws in sim_runs],
        "real_wall_s": round(real_wall, 2),
        "simulated_wall_s": round(sim_wall, 2),
    }
    if predicted_by is not None:
        earlier_model = CostModel.from_file(predicted_by)
        earlier = simulate.pooled(
            [
                simulate.run_engine(earlier_model, arrivals, config, start_seed=seed).traces
                for seed, arrivals in enumerate(arrivals_by_run, start=7)
            ]
        )
        predicted = {"ttfa_p50_s": earlier.ttfa_p50_s, "ttfa_p95_s": earlier.ttfa_p95_s}
        predicted["audio_s_per_s"] = earlier.audio_s_per_s
        report["predicted_by"] = str(predicted_by)
        report["predicted"] = {name: round(value, 4) for name, value in predicted.items()}
        report["predicted_relative_error"] = {
            name: round((predicted[name] - a) / a, 4) for name, (a, _) in pairs.items()
        }
    print(f"# validation: {report}", flush=True)
    return report


def _span(timelines: list[Timeline]) -> float:
    """Seconds from the first arrival to the last frame: what the simulation's audio seconds per second divide by.
    The wall clock around a real run also holds the engine's construction (its K/V pool allocated), which the
    simulation has none of: 0.3 s on this CPU for the check's 8 slots, about 7% of a run."""
    return max(t.frames[-1] for t in timelines if t.frames) - min(t.arrival for t in timelines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=["tiny", "1.5b"], default="tiny")
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--batches", default="1,4,16,64", help="batch sizes to measure")
    parser.add_argument("--frames", type=int, default=12, help="frames per request in each batch")
    parser.add_argument("--diffusion-steps", type=int, default=10)
    parser.add_argument("--out", type=Path, required=True, help="the cost file to write")
    parser.add_argument("--validate", type=Path, default=None, help="write the faithfulness report here")
    parser.add_argument("--validate-streams", type=int, default=8)
    parser.add_argument("--validate-rate", type=float, default=2.0, help="Poisson arrivals per second")
    parser.add_argument("--validate-seconds", default="2,8", help="shortest,longest audio per stream")
    parser.add_argument("--validate-repeats", type=int, default=8, help="runs of the workload, seeds 7 onward, pooled")
    parser.add_argument("--predicted-by", type=Path, default=None, help="validate: also simulate with this cost file")
    args = parser.parse_args(argv)
    device = choose_device(args.device)
    torch.manual_seed(0)
    loaded = random_model(args.size, device, choose_dtype(device, args.dtype))
    batches = [int(batch) for batch in args.batches.split(",")]
    costs = measure(loaded, batches, args.frames, args.diffusion_steps, args.size)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(costs, indent=1))
    print(f"# cost file: {args.out}", flush=True)
    if args.validate is not None:
        shortest, longest = (float(value) for value in args.validate_seconds.split(","))
        report = validate(
            loaded,
            args.out,
            args.validate_streams,
            args.validate_rate,
            (shortest, longest),
            args.diffusion_steps,
            args.validate_repeats,
            args.predicted_by,
        )
        args.validate.parent.mkdir(parents=True, exist_ok=True)
        args.validate.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

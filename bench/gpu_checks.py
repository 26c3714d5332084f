"""The checks only a GPU can make, with the figures the GPU benchmark reports beside its speeds.

    python bench/gpu_checks.py --json checks.json

1. CUDA graphs: the engine's fixed-shape step replayed as graphs against the same step run eagerly and
   against the eager (data-shaped) step, tiny model, float32: the latents must agree within 1e-4. The tiny
   model is the attentive one (`models.tiny_checkpoint`), so a key the graphed step reads wrongly (a block
   table, a key bucket, a visible start) moves the latents far beyond that.
2. Packed prefill: the same requests at once (their prompts' chunks packed into shared forwards) against each
   alone, eager step, tiny attentive model, float32: within 1e-4 (a mask that let one request's entries see
   another's moves the latents far beyond that).
3. bf16 against fp32: one request through the engine at the 1.5B shapes (random weights), the model
   in float32 and the same weights in bfloat16. Reported: the first frame's and the whole request's
   audio error (max absolute, and relative RMS); an autoregressive model's paths drift apart with
   every frame, so the first frame measures the arithmetic and the whole request the drift.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine import workload  # noqa: E402  (bench/engine.py)

from models.loading import LoadedModel  # noqa: E402
from models.segment_io import prompt_inputs
from models.tiny_checkpoint import random_model
from pipeline.engine.engine import EngineConfig
from pipeline.engine.factory import engine_for_model
from pipeline.engine.requests import EventKind
from pipeline.generation import SegmentRequest, submit_segment

GRAPH_TOLERANCE = 1e-4


def run(loaded: LoadedModel, requests: list[SegmentRequest], **config: object) -> tuple[list[np.ndarray], list]:
    """Every request's audio and latents through one engine built with `config`."""
    longest = max(prompt_inputs(loaded, r.text, r.voices).length + r.max_frames for r in requests)
    engine = engine_for_model(loaded, EngineConfig(slots=len(requests), policy="offline", **config))
    graphs = engine.warm_up(max_keys=longest)  # graphs captured, not yet checked: this compares them itself
    handles = [submit_segment(engine, request) for request in requests]
    engine.run_until_idle()
    audio, latents = [], []
    for handle in handles:
        events = list(handle.events(timeout=5))
        if events[-1].kind is not EventKind.FINISHED:
            raise RuntimeError(f"request ended {events[-1].kind.value}: {events[-1].reason}")
        frames = [event for event in events if event.kind is EventKind.AUDIO]
        audio.append(np.concatenate([frame.audio for frame in frames]))
        latents.append(torch.stack([frame.latent for frame in frames]))
    fast_path = engine.runner.fast_path
    print(f"  engine {config}: {graphs} graphs at warm-up, step {fast_path.mode.value} ({fast_path.reason})")
    return audio, latents


def max_difference(left: list, right: list) -> float:
    return max(float(np.abs(np.asarray(a) - np.asarray(b)).max()) for a, b in zip(left, right, strict=True))


def graph_parity() -> dict:
    loaded = random_model("tiny", torch.device("cuda"), torch.float32, attentive=True)
    requests = [request for _, request in workload(4, "at-once", 1.0, seed=0, seconds=(1.0, 3.0))]
    _, graphed = run(loaded, requests, fixed_shapes=True, cuda_graphs=True)
    _, fixed_eager = run(loaded, requests, fixed_shapes=True, cuda_graphs=False)
    _, eager = run(loaded, requests, fixed_shapes=False)
    figures = {
        "graphs_vs_fixed_eager_max_latent_diff": max_difference(graphed, fixed_eager),
        "graphs_vs_eager_max_latent_diff": max_difference(graphed, eager),
        "tolerance": GRAPH_TOLERANCE,
    }
    figures["pass"] = (
        max(figures["graphs_vs_fixed_eager_max_latent_diff"], figures["graphs_vs_eager_max_latent_diff"])
        <= GRAPH_TOLERANCE
    )
    return figures


def packed_prefill_parity() -> dict:
    loaded = random_model("tiny", torch.device("cuda"), torch.float32, attentive=True)
    requests = [request for _, request in workload(4, "at-once", 1.0, seed=0, seconds=(1.0, 3.0))]
    _, together = run(loaded, requests, fixed_shapes=False)
    alone = [run(loaded, [request], fixed_shapes=False)[1][0] for request in requests]
    difference = max_difference(together, alone)
    return {
        "together_vs_alone_max_latent_diff": difference,
        "tolerance": GRAPH_TOLERANCE,
        "pass": difference <= GRAPH_TOLERANCE,
    }


def relative_rms(got: np.ndarray, expected: np.ndarray) -> float:
    return float(np.sqrt(np.mean((got - expected) ** 2)) / max(np.sqrt(np.mean(expected**2)), 1e-12))


def bf16_against_fp32(seconds: float) -> dict:
    fp32 = random_model("1.5b", torch.device("cuda"), torch.float32)
    bf16 = dataclasses.replace(fp32, model=copy.deepcopy(fp32.model).to(torch.bfloat16), dtype=torch.bfloat16)
    requests = [request for _, request in workload(1, "at-once", 1.0, seed=0, seconds=(seconds, seconds))]
    (reference,), _ = run(fp32, requests)
    (got,), _ = run(bf16, requests)
    frame = got.shape[0] // requests[0].max_frames
    return {
        "audio_seconds": seconds,
        "first_frame_max_abs": float(np.abs(got[:frame] - reference[:frame]).max()),
        "first_frame_relative_rms": relative_rms(got[:frame], reference[:frame]),
        "whole_max_abs": float(np.abs(got - reference).max()),
        "whole_relative_rms": relative_rms(got, reference),
        "reference_peak": float(np.abs(reference).max()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--bf16-seconds", type=float, default=3.0)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gpu_checks.py needs a CUDA device")
    results = {"graph_parity": graph_parity()}
    print(f"graph parity: {results['graph_parity']}", flush=True)
    results["packed_prefill_parity"] = packed_prefill_parity()
    print(f"packed prefill parity: {results['packed_prefill_parity']}", flush=True)
    results["bf16_vs_fp32"] = bf16_against_fp32(args.bf16_seconds)
    print(f"bf16 vs fp32: {results['bf16_vs_fp32']}", flush=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    if not results["graph_parity"]["pass"]:
        raise SystemExit("CUDA graph replays differ from the eager step beyond the tolerance")
    if not results["packed_prefill_parity"]["pass"]:
        raise SystemExit("prompts prefilled packed together differ from each alone beyond the tolerance")


if __name__ == "__main__":
    main()

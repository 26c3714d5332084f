"""The table of a bench/gpu.sh run, in Markdown, from the JSON files it wrote.

python bench/gpu_report.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

FRAMES_PER_SECOND = 7.5


def run_rows(name: str, figures: dict) -> list[str]:
    setup = figures["setup"]
    rows = []
    for path in ("hf_sequential", "hf_static", "engine"):
        if path not in figures:
            continue
        f = figures[path]
        # One stream makes 7.5 frames per audio second, so its frame step takes 1 / (7.5 * rtf) seconds.
        step_ms = f"{1000 / (FRAMES_PER_SECOND * f['rtf']):.1f}" if setup["concurrency"] == "1" else ""
        ratio = figures.get(f"engine_vs_{path}")
        engine = setup.get("engine") or {}
        step = engine.get("step_mode", "") if path == "engine" else ""
        reads = figures.get("kv_read_ratio") if path == "engine" else None
        rows.append(
            f"| {name} | {setup['concurrency']} | {setup['policy']} | {path} | {step} | {f['rtf']:.2f}x | {step_ms} | "
            f"{f['ttfa_p50_s'] * 1000:.0f} / {f['ttfa_p95_s'] * 1000:.0f} | {f['on_time_share']:.1%} | "
            f"{f['peak_mem_bytes'] / 2**30:.1f} | {'' if reads is None else f'{reads:.2f}'} | "
            f"{'' if ratio is None else f'{ratio:.2f}x'} |"
        )
    return rows


def engine_lines(name: str, figures: dict) -> list[str]:
    """How the run's engine got ready: its step and why, the self-check, graphs, warm-up and memory."""
    engine = figures["setup"].get("engine") or {}
    if not engine:
        return []
    difference = engine.get("self_check_difference")
    checked = "not compared" if difference is None else f"self-check difference {difference:.1e}"
    step_memory = ""
    if engine.get("step_fixed_bytes") is not None:
        step_memory = (
            f"; the pool sized beside a measured step of {engine['step_fixed_bytes'] / 2**30:.2f} GiB + "
            f"{engine['step_bytes_per_key_chunk'] / 2**20:.2f} MiB a key chunk"
        )
    return [
        "",
        f"{name}: step {engine['step_mode']} ({engine['step_mode_reason']}; {checked}); {engine['cuda_graphs']} "
        f"CUDA graphs, {engine['graphs_memory_bytes'] / 2**30:.2f} GiB, warm-up {engine['warm_up_s']:.1f} s; "
        f"{engine['kv_blocks']} K/V blocks of {engine['block_size']} tokens{step_memory}.",
    ]


def memory_lines(name: str, figures: dict) -> list[str]:
    """The long-form run's K/V memory and its short requests' time to first audio."""
    memory = figures.get("engine_memory")
    if memory is None or figures["setup"].get("workload") != "longform":
        return []
    return [
        "",
        f"{name}: K/V pool {memory['pool_bytes'] / 2**30:.2f} GiB, peak in use "
        f"{memory['paged_peak_bytes'] / 2**30:.2f} GiB; the slot design would reserve "
        f"{memory['slot_design_bytes'] / 2**30:.2f} GiB for the same rows; {memory['preemptions']} preemptions; "
        f"short requests' TTFA p50 / p95 {figures['engine_short_ttfa_p50_s'] * 1000:.0f} / "
        f"{figures['engine_short_ttfa_p95_s'] * 1000:.0f} ms.",
    ]


def packed_lines(packed: dict | None) -> list[str]:
    """The packed-prefill check's line (none in a checks file from before it existed)."""
    if packed is None:
        return []
    return [
        f"Prompts prefilled packed together against each alone (tiny model, fp32): max latent difference "
        f"{packed['together_vs_alone_max_latent_diff']:.2e}; tolerance {packed['tolerance']:.0e}: "
        f"{'pass' if packed['pass'] else 'FAIL'}."
    ]


def checks_lines(checks: dict) -> list[str]:
    graphs = checks["graph_parity"]
    precision = checks["bf16_vs_fp32"]
    return [
        "",
        f"CUDA graphs against the eager step (tiny model, fp32): max latent difference "
        f"{graphs['graphs_vs_fixed_eager_max_latent_diff']:.2e} (fixed-shape step run eagerly), "
        f"{graphs['graphs_vs_eager_max_latent_diff']:.2e} (data-shaped step); tolerance {graphs['tolerance']:.0e}: "
        f"{'pass' if graphs['pass'] else 'FAIL'}.",
        *packed_lines(checks.get("packed_prefill_parity")),
        f"bf16 against fp32 (1.5B shapes, {precision['audio_seconds']:.0f} s request): first frame max |Δ| "
        f"{precision['first_frame_max_abs']:.2e}, relative RMS {precision['first_frame_relative_rms']:.2e}; whole "
        f"request max |Δ| {precision['whole_max_abs']:.2e}, relative RMS {precision['whole_relative_rms']:.2e} "
        f"(reference peak {precision['reference_peak']:.2e}).",
    ]


def main() -> None:
    folder = Path(sys.argv[1])
    lines = [
        "| run | requests | policy | path | step | RTF | ms/step | TTFA p50 / p95 ms | on time | peak GiB | "
        "K/V read | engine / path |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for file in sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime):
        if file.name == "checks.json":
            continue
        figures = json.loads(file.read_text())
        lines += run_rows(file.stem, figures)
        notes += engine_lines(file.stem, figures) + memory_lines(file.stem, figures)
    lines += notes
    checks = folder / "checks.json"
    if checks.exists():
        lines += checks_lines(json.loads(checks.read_text()))
    print("\n".join(lines))


if __name__ == "__main__":
    main()

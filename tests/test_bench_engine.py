"""The engine benchmark runs end to end on a tiny model and writes the figures it promises (no timing asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIELDS = {"rtf", "ttfa_p50_s", "ttfa_p95_s", "on_time_share", "peak_mem_bytes", "audio_s", "wall_s"}


@pytest.mark.slow  # the benchmark's own process loads the model and generates on three paths
def test_bench_writes_every_path_and_the_ratios(tmp_path: Path) -> None:
    output = tmp_path / "bench.json"
    command = [sys.executable, "bench/engine.py", "--size", "tiny", "--concurrency", "2", "--arrivals", "poisson"]
    command += ["--rate", "8", "--diffusion-steps", "2", "--audio-seconds", "1,2", "--json", str(output)]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    figures = json.loads(output.read_text())
    for path in ("hf_sequential", "hf_static", "engine"):
        assert set(figures[path]) == FIELDS
        assert figures[path]["audio_s"] > 0 and 0 <= figures[path]["on_time_share"] <= 1
    # Every path made the same audio: the workload, not the path, decides how much.
    assert figures["hf_sequential"]["audio_s"] == figures["hf_static"]["audio_s"] == figures["engine"]["audio_s"]
    assert figures["engine_vs_hf_sequential"] > 0 and figures["engine_vs_hf_static"] > 0
    assert "engine / hf_static" in result.stdout


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_gpu_script_runs_end_to_end_small_on_the_cpu(tmp_path: Path) -> None:
    """bench/gpu.sh meets its GPU once per task at best: its plumbing is proven here, at tiny sizes."""
    settings = {
        "PYTHON": sys.executable,
        "VOXCAST_BENCH_SIZE": "tiny",
        "VOXCAST_BENCH_DEVICE": "cpu",
        "VOXCAST_BENCH_CONCURRENCY": "1 2",
        "VOXCAST_BENCH_STREAMING": "2",
        "VOXCAST_BENCH_ABLATION": "1",
        "VOXCAST_BENCH_AUDIO_SECONDS": "0.5,1",
        "VOXCAST_BENCH_DIFFUSION_STEPS": "2",
        "VOXCAST_BENCH_LONGFORM": "1500 20 2",
    }
    result = subprocess.run(
        ["bash", "bench/gpu.sh", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, **settings},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    runs = {
        "offline-c1",
        "offline-c2",
        "streaming-c2",
        "longform",
        "engine-c1-no-overlap",
        "engine-c1-no-graphs",
        "engine-c1-eager",
    }
    assert {file.stem for file in tmp_path.glob("*.json")} == runs
    table = (tmp_path / "table.md").read_text().splitlines()
    assert table[0].startswith("| run | requests | policy | path | step | RTF |")
    assert sum(line.startswith("| offline-c1 | 1 | offline |") for line in table) == 2  # hf_sequential, engine
    assert "# done in" in (tmp_path / "gpu.log").read_text()
    (memory,) = [line for line in table if line.startswith("longform: K/V pool")]
    assert "the slot design would reserve" in memory and "short requests' TTFA" in memory
    longform = json.loads((tmp_path / "longform.json").read_text())
    assert 0 < longform["engine_memory"]["paged_peak_bytes"] < longform["engine_memory"]["slot_design_bytes"]
    # beside the long generation, the short ones read their own keys: at most twice what the rows could see
    assert 1.0 <= longform["kv_read_ratio"] <= 2.0
    # how each run's engine got ready: the step it decodes with (the eager one on a CPU by default) and why
    assert longform["setup"]["engine"]["step_mode"] == "eager"
    (ready,) = [line for line in table if line.startswith("longform: step eager (")]
    assert "CUDA graphs" in ready and "K/V blocks of 16 tokens" in ready

"""The engine benchmark runs end to end on a tiny model and writes the figures it promises (no timing asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIELDS = {"rtf", "ttfa_p50_s", "ttfa_p95_s", "on_time_share", "peak_mem_bytes", "audio_s", "wall_s"}


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

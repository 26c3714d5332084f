"""A worker whose fast path fails its warm-up check serves with the eager step, says why, and its jobs finish.

The worker runs the fixed-shape step (forced on: a CPU has no CUDA graphs), broken on purpose through
`tests.engine_faults:wrap_fast_path`; the api's worker list and `/metrics` must name the step it fell back to and
the reason, and a job must come out as it would from a healthy worker.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.service_client import submit_four_turns, upload_voice, wait_for


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("mismatch", "the fixed step differs from the eager step by"),
        ("error", "the fixed step failed its self-check: generation failed: CUDA out of memory (injected"),
    ],
)
def test_a_fast_path_that_fails_its_check_falls_back_and_the_worker_serves(
    make_service_stack: Callable, tmp_path: Path, examples: Path, fault: str, reason: str
) -> None:
    stack = make_service_stack(engine_step="fixed", engine_runner_wrapper="tests.engine_faults:wrap_fast_path")
    stack.env["FAULT_FAST_PATH"] = fault
    stack.start()
    admin = stack.client(stack.mint_key("admin", admin=True))
    voice = upload_voice(admin, examples / "voices" / "en-Alice_woman.wav", "Alice")
    job = wait_for(admin, submit_four_turns(admin, voice), {"done", "failed"}, timeout=180)
    assert job["state"] == "done", job

    (worker,) = admin.get("/v1/admin/workers").json()["workers"]
    assert worker["step_mode"] == "eager" and worker["step_mode_reason"].startswith(reason)
    assert worker["warm_up_seconds"] > 0 and worker["cuda_graphs"] == 0
    assert 1.0 <= worker["kv_read_ratio"] <= 2.0
    metrics = admin.get("/metrics")
    (step,) = [
        sample
        for family in text_string_to_metric_families(metrics.text)
        for sample in family.samples
        if sample.name == "voxcast_engine_step_info"
    ]
    assert step.labels["step_mode"] == "eager" and step.labels["reason"] == worker["step_mode_reason"]
    log = (stack.root / "worker-0.log").read_text(errors="replace")
    assert sum("decode step falls back" in line for line in log.splitlines()) == 1

"""The seeded chaos run's short schedule (bench/chaos.py, issue 37): every fault kind once over the production
topology (a private PostgreSQL and Redis, the api, two speech workers and a scripts worker as processes), then
zero invariant violations.

It needs what the run needs: root (a tmpfs for the data folder, `runuser` to `postgres`, `unshare --uts`), PostgreSQL's
`initdb` and `pg_ctl`, and `redis-server`; without them it is skipped, saying which is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NEEDED = ("initdb", "pg_ctl", "redis-server", "runuser", "unshare", "mount")


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_the_short_chaos_schedule_breaks_no_invariant(tmp_path: Path) -> None:
    missing = [tool for tool in NEEDED if shutil.which(tool) is None]
    if missing or os.geteuid() != 0:
        pytest.skip(f"the chaos run needs root and {', '.join(NEEDED)}; missing: {missing or 'root'}")
    report_path = tmp_path / "chaos.json"
    done = subprocess.run(
        [sys.executable, "bench/chaos.py", "--seed", "1", "--json", str(report_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1400,
        check=False,
    )
    assert report_path.exists(), done.stdout[-4000:] + done.stderr[-4000:]
    report = json.loads(report_path.read_text())
    assert set(report["faults_by_kind"]) | set(report["faults_unavailable"]) == {
        "worker_sigkill", "worker_sigstop", "api_sigterm", "api_sigkill", "postgres_stop_fast",
        "postgres_stop_immediate", "redis_kill_aof", "redis_kill_no_aof", "disk_full",
    }  # fmt: skip
    assert report["leftover_processes"] == []
    assert report["run_problems"] == [], report["run_problems"]
    assert report["violations"] == [], report["violations"]
    assert report["responses_500"] == 0
    assert done.returncode == 0, done.stderr[-4000:]

"""`voxcast serve` and `voxcast keys` as a user runs them: real subprocesses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from core.api_keys import find_api_key
from core.db import Database
from core.settings import Settings

ROOT = Path(__file__).resolve().parents[1]


def voxcast(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    import os

    command = [sys.executable, "-m", "cli.main", *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, **env})


def test_serve_without_redis_says_how_to_start_it(tmp_path: Path) -> None:
    env = {"VOXCAST_DATA_DIR": str(tmp_path), "VOXCAST_REDIS_URL": "redis://127.0.0.1:9/0"}
    result = voxcast("serve", env=env)
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: no Redis answers at redis://127.0.0.1:9/0") and "redis-server" in line
    assert not (tmp_path / "voxcast.db").exists()  # nothing started, nothing written


def test_keys_create_prints_a_key_the_database_knows_only_by_hash(tmp_path: Path) -> None:
    env = {"VOXCAST_DATA_DIR": str(tmp_path)}
    result = voxcast("keys", "create", "--name", "ci", "--admin", env=env)
    assert result.returncode == 0, result.stderr
    secret = result.stdout.strip().splitlines()[-1]
    assert secret.startswith("vxc_")
    database = Database.from_settings(Settings(data_dir=tmp_path))
    try:
        with database.session() as session:
            key = find_api_key(session, secret)
            assert key is not None and key.is_admin and key.name == "ci"
    finally:
        database.dispose()
    listed = voxcast("keys", "list", env=env)
    assert "ci" in listed.stdout and secret not in listed.stdout

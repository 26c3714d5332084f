"""The one settings object: defaults for one machine, overridable by VOXCAST_* environment variables.

Everything that varies between installations lives here, so the CLI, the api and the workers read the
same values and a deployment changes them in one place (the environment, or docker-compose).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

ENV_PREFIX = "VOXCAST_"
_BOOLEANS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


class SettingsError(ValueError):
    """An environment variable that does not parse; the message names the variable."""


@dataclass(frozen=True)
class Settings:
    model: str = "vibevoice/VibeVoice-1.5B-hf"  # hub id, local folder, or "tiny-random"
    device: str | None = None  # None: a CUDA GPU when there is one, else the CPU
    dtype: str | None = None  # None: bfloat16 on a GPU, float32 on a CPU
    data_dir: Path = Path.home() / ".local" / "share" / "voxcast"
    log_level: str = "WARNING"
    log_format: str = "text"  # "text" (key=value) or "json"
    max_segment_seconds: float = 120.0  # longest single generation in "turns" mode
    engine_slots: int = 16  # requests generated side by side in one batch
    engine_max_context: int = 8192  # tokens per slot (prompt + generated); ~15 min of audio in one segment
    database_url: str | None = None  # SQLAlchemy URL; None: a SQLite file under data_dir
    redis_url: str = "redis://127.0.0.1:6379/0"  # Celery broker and job-progress pub/sub
    redis_namespace: str = "voxcast"  # prefix of every queue, key and channel voxcast uses in Redis
    api_host: str = "127.0.0.1"
    api_port: int = 8000
    single_user: bool = False  # True: no API keys; every request acts as the one local admin
    worker_model: str | None = None  # None: `model`
    worker_concurrency: int = 2  # task threads per worker process, all feeding its one model
    longest_job_seconds: float = 6 * 3600.0  # the broker's visibility timeout sits above this
    heartbeat_seconds: float = 5.0  # how often a running job proves its worker is alive
    stale_after_seconds: float = 60.0  # a running job silent this long is re-enqueued by the sweeper
    max_jobs_in_flight: int = 4  # queued or running jobs per API key
    max_upload_bytes: int = 50 * 1024 * 1024  # one voice file
    max_requests_per_minute: int = 600  # per API key, across every api process (Redis); 0 turns the limit off
    max_script_chars: int = 200_000  # one job's script; the parser never reads more than 200,000
    max_job_audio_minutes: float = 90.0  # estimated audio of one job; the planner never plans more than 90
    stream_chunk_frames: int = 8  # frames per live audio chunk a worker publishes (7.5 a second: ~1 s)
    script_model: str = "Qwen/Qwen2.5-1.5B-Instruct"  # instruct LLM of `voxcast script`: hub id, folder, "tiny-random"
    script_max_attempts: int = 3  # LLM replies per drafting job before it fails with the last validation error
    script_max_new_tokens: int = 16_384  # cap on one LLM reply (a draft asks for ~2 tokens per target word)
    webui_api_url: str | None = None  # the api the studio calls; None: the one `voxcast serve` runs here
    webui_host: str = "127.0.0.1"  # `voxcast webui` address (the studio alone; `voxcast serve` mounts it on the api)
    webui_port: int = 7860  # `voxcast webui` port

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        """Defaults overridden by `VOXCAST_<FIELD>` variables (e.g. VOXCAST_MODEL, VOXCAST_DATA_DIR)."""
        environ = dict(os.environ if environ is None else environ)
        values: dict[str, Any] = {}
        for field in fields(cls):
            name = ENV_PREFIX + field.name.upper()
            if name in environ:
                values[field.name] = _parse(name, environ[name], field.default)
        return cls(**values)


def _parse(name: str, raw: str, default: Any) -> Any:
    if isinstance(default, Path):
        return Path(raw).expanduser()
    if isinstance(default, bool):
        if raw.strip().lower() not in _BOOLEANS:
            raise SettingsError(f"{name}={raw!r} is not a boolean; use 1/0, true/false, yes/no or on/off")
        return _BOOLEANS[raw.strip().lower()]
    if isinstance(default, int):
        try:
            return int(raw)
        except ValueError:
            raise SettingsError(f"{name}={raw!r} is not a whole number") from None
    if isinstance(default, float):
        try:
            return float(raw)
        except ValueError:
            raise SettingsError(f"{name}={raw!r} is not a number") from None
    return raw or None

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
_RENAMED = {"VOXCAST_WORKER_CONCURRENCY": "VOXCAST_WORKER_MAX_JOBS"}  # old name: new name
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
    engine_slots: int = 16  # requests generated side by side in one batch (rows); at least `worker_max_jobs`
    # The engine's K/V pool: bytes (> 1), or a fraction (<= 1) of the GPU memory free once the model is loaded;
    # None: 0.8 on a GPU, 1 GiB on the CPU. A generation may reach the model's own context if the pool holds it.
    engine_kv_memory: float | None = None
    # While interactive work leads (a speech request beside jobs), a step may take this many times what the leading
    # rows alone take; other rows sit such steps out. Higher: more throughput beside speech, slower speech (CPU only:
    # on a GPU a step of every row costs about one row's). None: the engine's default, 1.5.
    engine_interactive_slowdown: float | None = None
    database_url: str | None = None  # SQLAlchemy URL; None: a SQLite file under data_dir
    redis_url: str = "redis://127.0.0.1:6379/0"  # Celery broker and job-progress pub/sub
    redis_namespace: str = "voxcast"  # prefix of every queue, key and channel voxcast uses in Redis
    api_host: str = "127.0.0.1"
    api_port: int = 8000
    single_user: bool = False  # True: no API keys; every request acts as the one local admin
    worker_model: str | None = None  # None: `model`
    # Jobs one worker process runs at once (its Celery task threads): each hands all its pending segments to the
    # worker's one engine, which batches them across jobs. Messages beyond it stay in the broker for other workers.
    worker_max_jobs: int = 16
    # A job submitted without a queue goes to `interactive` when its estimated audio is this long at most, else `batch`.
    interactive_max_seconds: float = 120.0
    # Benchmarks only (bench/service.py): a job generates its segments one after another, as workers did before
    # they handed whole jobs to the engine.
    worker_sequential_segments: bool = False
    longest_job_seconds: float = 6 * 3600.0  # the broker's visibility timeout sits above this
    heartbeat_seconds: float = 5.0  # how often a running job proves its worker is alive
    stale_after_seconds: float = 60.0  # a running job silent this long is re-enqueued by the sweeper
    max_worker_deaths: int = 2  # a job whose attempts ended with their worker dead this often is failed
    max_jobs_in_flight: int = 4  # queued or running jobs per API key
    max_upload_bytes: int = 50 * 1024 * 1024  # one voice file
    max_requests_per_minute: int = 600  # per API key, across every api process (Redis); 0 turns the limit off
    max_script_chars: int = 200_000  # one job's script; the parser never reads more than 200,000
    max_job_audio_minutes: float = 90.0  # estimated audio of one job; the planner never plans more than 90
    # Bytes of the data folder one key may use (its jobs' files, counted as expected while they run, and voices);
    # 0 turns the quota off.
    max_storage_bytes: int = 0
    stream_chunk_frames: int = 8  # frames per live audio chunk a worker publishes (7.5 a second: ~1 s)
    # Retention, in days after a job ended; None keeps for ever. Intermediates are its segments' audio and latents
    # (what regenerating a turn needs; the episode and its side files stay); a whole job is deleted with its files.
    keep_intermediates_days: float | None = None
    keep_jobs_days: float | None = None
    script_model: str = "Qwen/Qwen2.5-1.5B-Instruct"  # instruct LLM of `voxcast script`: hub id, folder, "tiny-random"
    script_max_attempts: int = 3  # LLM replies per drafting job before it fails with the last validation error
    script_max_new_tokens: int = 16_384  # cap on one LLM reply (a draft asks for ~2 tokens per target word)
    webui_api_url: str | None = None  # the api the studio calls; None: the one `voxcast serve` runs here
    webui_host: str = "127.0.0.1"  # `voxcast webui` address (the studio alone; `voxcast serve` mounts it on the api)
    webui_port: int = 7860  # `voxcast webui` port
    # Crash tests only: a worker dies of SIGSEGV at the 8th frame of a job whose script contains this text.
    crash_on_script_text: str | None = None
    # Fault tests only: the worker's engine loop fails (an exception inside its step) once it steps a generation of
    # a job whose script contains this text.
    engine_fault_on_script_text: str | None = None

    def __post_init__(self) -> None:
        for name in ("keep_intermediates_days", "keep_jobs_days"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise SettingsError(
                    f"{ENV_PREFIX}{name.upper()}={value} must be more than 0 days, or unset to keep for ever"
                )

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        """Defaults overridden by `VOXCAST_<FIELD>` variables (e.g. VOXCAST_MODEL, VOXCAST_DATA_DIR)."""
        environ = dict(os.environ if environ is None else environ)
        for old, new in _RENAMED.items():
            if old in environ:
                raise SettingsError(f"{old} was renamed {new}; set that instead")
        values: dict[str, Any] = {}
        for field in fields(cls):
            name = ENV_PREFIX + field.name.upper()
            if name in environ:
                values[field.name] = _parse(name, environ[name], field.default, str(field.type))
        return cls(**values)


def _parse(name: str, raw: str, default: Any, annotation: str) -> Any:
    if annotation == "float | None":  # a number that may be left unset (empty: the default)
        return _parse(name, raw, 0.0, "float") if raw.strip() else None
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

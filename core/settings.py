"""The one settings object: defaults for one machine, overridable by VOXCAST_* environment variables.

Everything that varies between installations lives here, so the CLI, the api and the workers read the
same values and a deployment changes them in one place (the environment, or docker-compose).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings.sources.utils import parse_env_vars

from core.engine_defaults import MAX_CUDA_GRAPHS
from core.file_store import parse_s3_url

ENV_PREFIX = "VOXCAST_"
# Bounds of the drafting stage's settings, which `script_text.drafting` also holds a request to.
MAX_ATTEMPTS_LIMIT = 10  # model replies one script job may ask for
MIN_REPLY_TOKENS = 16  # the shortest reply budget that can hold a script
_RENAMED = {"VOXCAST_WORKER_CONCURRENCY": "VOXCAST_WORKER_MAX_JOBS"}  # old name: new name


class SettingsError(ValueError):
    """An environment variable that does not parse or is out of range; the message names it and what is allowed."""


class Settings(BaseSettings):
    """Every setting, validated: a value out of its range or of the wrong kind stops the process at start."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_ignore_empty=True, frozen=True, extra="ignore")

    model: str = "vibevoice/VibeVoice-1.5B-hf"  # hub id, local folder, or "tiny-random"
    device: str | None = None  # None: a CUDA GPU when there is one, else the CPU
    dtype: str | None = None  # None: bfloat16 on a GPU, float32 on a CPU
    data_dir: Path = Path.home() / ".local" / "share" / "voxcast"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "WARNING"
    log_format: Literal["text", "json"] = "text"  # key=value lines, or one JSON object a line
    max_segment_seconds: float = Field(120.0, gt=0)  # longest single generation in "turns" mode
    # Requests generated side by side in one batch (rows); at least `worker_max_jobs`. None: 256 on a GPU, 16 on the
    # CPU (`core.engine_defaults.default_slots`)
    engine_slots: int | None = Field(None, ge=1)
    # The engine's K/V pool: bytes (> 1), or a fraction (<= 1) of the GPU memory free once the model is loaded;
    # None: 0.9 on a GPU, 1 GiB on the CPU. A generation may reach the model's own context if the pool holds it.
    engine_kv_memory: float | None = Field(None, gt=0)
    # While interactive work leads (a speech request beside jobs), a step may take this many times what the leading
    # rows alone take; other rows sit such steps out. Higher: more throughput beside speech, slower speech (CPU only:
    # on a GPU a step of every row costs about one row's). None: the engine's default, 1.5.
    engine_interactive_slowdown: float | None = Field(None, ge=1)
    # How the engine decodes: "auto" the fastest the device allows (the fixed-shape step as CUDA graphs on a GPU, the
    # eager step on a CPU); "graphs", "fixed" (the fixed-shape step without graphs) or "eager" to choose. A worker
    # checks the fast path against the eager step before serving and falls back, with a reason, where it fails.
    engine_step: Literal["auto", "graphs", "fixed", "eager"] = "auto"
    # Decode-step CUDA graphs an engine holds at once (warm-up captures at most this many; others on first use, the
    # least recently used let go)
    engine_max_graphs: int = Field(MAX_CUDA_GRAPHS, ge=1)
    database_url: str | None = None  # SQLAlchemy URL; None: a SQLite file under data_dir
    # Where job files and voices are kept for every host: None, the data folder alone (one machine, or a folder the
    # hosts share); "s3://bucket/prefix", an S3-compatible bucket, each host's data folder its scratch (credentials
    # from the usual AWS variables: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION)
    storage_url: str | None = None
    storage_endpoint_url: str | None = None  # an S3-compatible server (MinIO, Ceph, ...); None: AWS itself
    # Celery broker and job-progress pub/sub. Left unset, `voxcast serve` uses this default address when a Redis answers
    # there, else starts a private one (`redis_url_given`).
    redis_url: str = "redis://127.0.0.1:6379/0"
    # `voxcast serve` starts its private Redis (data in the data folder) even when one answers at the default address.
    private_redis: bool = False
    redis_namespace: str = "voxcast"  # prefix of every queue, key and channel voxcast uses in Redis
    # The address podcast apps reach the api at (`https://podcasts.example.com`), for the absolute URLs a feed holds;
    # None: the address each request came to (behind a proxy, run uvicorn with its proxy headers on).
    public_url: str | None = None
    api_host: str = "127.0.0.1"
    api_port: int = Field(8000, ge=1, le=65535)
    single_user: bool = False  # True: no API keys; every request acts as the one local admin
    worker_model: str | None = None  # None: `model`
    # Jobs one worker process runs at once (its Celery task threads): each hands all its pending segments to the
    # worker's one engine, which batches them across jobs. Messages beyond it stay in the broker for other workers.
    worker_max_jobs: int = Field(16, ge=1)
    # A job submitted without a queue goes to `interactive` when its estimated audio is this long at most, else `batch`.
    interactive_max_seconds: float = Field(120.0, ge=0)
    # A worker process serves its own Prometheus metrics (job timings, frames, engine steps) on this port; None: off.
    # One port per worker process: two workers on one host need two values.
    worker_metrics_port: int | None = Field(None, ge=1, le=65535)
    worker_metrics_host: str = "127.0.0.1"  # the address it listens on ("0.0.0.0" for a scraper on another host)
    longest_job_seconds: float = Field(6 * 3600.0, gt=0)  # the broker's visibility timeout sits above this
    heartbeat_seconds: float = Field(5.0, gt=0)  # how often a running job proves its worker is alive
    stale_after_seconds: float = Field(60.0, gt=0)  # a running job silent this long is re-enqueued by the sweeper
    # how long a database write that met "not now" (a restart, a failover) is tried again before the work is handed
    # back (`core.db.retry_transient`)
    database_retry_seconds: float = Field(60.0, gt=0)
    # how long a process that starts (serve, the api, a worker) waits for the database and a given Redis to answer,
    # saying so, before it exits naming what did not answer: a restart policy would start it into the same outage
    start_wait_seconds: float = Field(60.0, ge=0)
    # how long a job whose write met a full data disk waits for space (generating nothing, its lease kept) and goes on
    # from what it stored, before it fails saying so (`workers.job_execution`)
    disk_full_wait_seconds: float = Field(300.0, ge=0)
    max_worker_deaths: int = Field(2, ge=1)  # a job whose attempts ended with their worker dead this often is failed
    max_jobs_in_flight: int = Field(4, ge=1)  # queued or running jobs per API key
    max_upload_bytes: int = Field(50 * 1024 * 1024, ge=1)  # one voice file
    # Per API key, across every api process (Redis); 0 turns the limit off
    max_requests_per_minute: int = Field(600, ge=0)
    # One job's script; the parser never reads more than 200,000
    max_script_chars: int = Field(200_000, ge=1, le=200_000)
    # Estimated audio of one job; the planner never plans more than 90
    max_job_audio_minutes: float = Field(90.0, gt=0, le=90)
    # Bytes of the data folder one key may use (its jobs' files, counted as expected while they run, and voices);
    # 0 turns the quota off.
    max_storage_bytes: int = Field(0, ge=0)
    stream_chunk_frames: int = Field(8, ge=1)  # frames per live audio chunk a worker publishes (7.5 a second: ~1 s)
    # Retention, in days after a job ended; None keeps for ever. Intermediates are its segments' audio and latents
    # (what regenerating a turn needs; the episode and its side files stay); a whole job is deleted with its files.
    keep_intermediates_days: float | None = Field(None, gt=0)
    keep_jobs_days: float | None = Field(None, gt=0)
    script_model: str = "Qwen/Qwen2.5-1.5B-Instruct"  # instruct LLM of `voxcast script`: hub id, folder, "tiny-random"
    # LLM replies per drafting job before it fails with the last validation error (the drafting stage's limits, checked
    # here so that the api and the scripts workers refuse a bad value at start rather than on every script job)
    script_max_attempts: int = Field(3, ge=1, le=MAX_ATTEMPTS_LIMIT)
    # Cap on one LLM reply (a draft asks for ~2 tokens per target word)
    script_max_new_tokens: int = Field(16_384, ge=MIN_REPLY_TOKENS)
    # Script jobs one scripts worker runs at once (its Celery task threads, sharing its one script model)
    script_worker_threads: int = Field(1, ge=1, le=16)
    # A scripts worker frees its script model (and its GPU memory) after this long without a script job
    script_model_idle_seconds: float = Field(600.0, gt=0)
    webui_api_url: str | None = None  # the api the studio calls; None: the one `voxcast serve` runs here
    webui_host: str = "127.0.0.1"  # `voxcast webui` address (the studio alone; `voxcast serve` mounts it on the api)
    webui_port: int = Field(7860, ge=1, le=65535)  # `voxcast webui` port
    # "module:callable" that wraps a worker's model runner before its engine gets it (`workers.engine_host`): the fault
    # tests' way in (`tests.engine_faults:wrap_runner`); None in production.
    engine_runner_wrapper: str | None = Field(None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")

    @field_validator("data_dir")
    @classmethod
    def _expand_home(cls, value: Path) -> Path:
        return value.expanduser()

    @field_validator("storage_url")
    @classmethod
    def _s3_url(cls, value: str | None) -> str | None:
        if value is not None:
            parse_s3_url(value)
        return value

    @field_validator("storage_endpoint_url", "public_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} is not an http:// or https:// URL")
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_case_level(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @property
    def redis_url_given(self) -> bool:
        """Whether the broker was named (`VOXCAST_REDIS_URL`, or `redis_url=`), rather than left to the default."""
        return "redis_url" in self.model_fields_set

    @model_validator(mode="after")
    def _one_broker(self) -> Settings:
        if self.private_redis and self.redis_url_given:
            raise ValueError(
                f"{ENV_PREFIX}PRIVATE_REDIS asks for a private Redis and {ENV_PREFIX}REDIS_URL names one to use; "
                "set one of them"
            )
        return self

    @model_validator(mode="after")
    def _stale_after_a_heartbeat(self) -> Settings:
        if self.stale_after_seconds <= self.heartbeat_seconds:
            raise ValueError(
                f"{ENV_PREFIX}STALE_AFTER_SECONDS ({self.stale_after_seconds:g}) must be more than "
                f"{ENV_PREFIX}HEARTBEAT_SECONDS ({self.heartbeat_seconds:g}), or every running job looks abandoned"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """`Settings(...)` holds what it is given and the defaults; the environment comes in through `from_env`."""
        return (init_settings,)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Defaults overridden by `VOXCAST_<FIELD>` variables (e.g. VOXCAST_MODEL, VOXCAST_DATA_DIR); an empty one
        counts as unset. A value that does not parse or is out of range is a `SettingsError` naming it."""
        environ = dict(os.environ if environ is None else environ)
        for old, new in _RENAMED.items():
            if old in environ:
                raise SettingsError(f"{old} was renamed {new}; set that instead")
        try:
            return cls(**_MappingEnvSource(cls, environ)())
        except ValidationError as error:
            raise SettingsError(_describe(error, environ)) from None


class _MappingEnvSource(EnvSettingsSource):
    """pydantic-settings' environment source, reading the mapping `from_env` is given instead of `os.environ`."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(self._environ, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)


def _describe(error: ValidationError, environ: Mapping[str, str]) -> str:
    """One line: each bad variable with its value and what is allowed."""
    problems = []
    for problem in error.errors():
        if not problem["loc"]:  # a rule over several settings: its message names them
            problems.append(str(problem["msg"]).removeprefix("Value error, "))
            continue
        name = f"{ENV_PREFIX}{str(problem['loc'][0]).upper()}"
        value = next((raw for key, raw in environ.items() if key.upper() == name), problem["input"])
        problems.append(f"{name}={value!r}: {problem['msg'].lower()}")
    return "; ".join(problems)

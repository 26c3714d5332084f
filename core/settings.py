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
    if isinstance(default, float):
        try:
            return float(raw)
        except ValueError:
            raise SettingsError(f"{name}={raw!r} is not a number") from None
    return raw or None

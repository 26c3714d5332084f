"""Structured, quiet-by-default logging for every voxcast process.

Records go to stderr as `level=... logger=... msg=... key=value` lines (or one JSON object per line),
with the `extra={...}` fields of each call. Third-party chatter (transformers' load reports and progress
bars, diffusers) is held to errors unless voxcast itself is asked to be verbose.
"""

from __future__ import annotations

import json
import logging
import sys

_STANDARD_ATTRIBUTES = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class StructuredFormatter(logging.Formatter):
    def __init__(self, as_json: bool) -> None:
        super().__init__()
        self.as_json = as_json

    def format(self, record: logging.LogRecord) -> str:
        fields = {"level": record.levelname.lower(), "logger": record.name, "msg": record.getMessage()}
        fields |= {key: value for key, value in vars(record).items() if key not in _STANDARD_ATTRIBUTES}
        if record.exc_info:
            fields["exc"] = self.formatException(record.exc_info)
        if self.as_json:
            return json.dumps(fields, default=str)
        return " ".join(f"{key}={_quoted(value)}" for key, value in fields.items())


def _quoted(value: object) -> str:
    text = str(value)
    return json.dumps(text) if (not text or any(c.isspace() or c in '"=' for c in text)) else text


def configure_logging(level: str = "WARNING", log_format: str = "text") -> None:
    """Install the structured handler on the root logger and quiet the libraries we build on."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(StructuredFormatter(as_json=log_format == "json"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # transformers' own logger (it is a stdlib logger named so): held to errors unless we are verbose. The rest of
    # its set-up (its handler off, its records through ours, no progress bars) is `models.loading.quiet_transformers`,
    # done as the modules that load or write a model are imported, so that a process without a model (the api, or
    # one that only imports the engine's core) never imports transformers.
    logging.getLogger("transformers").setLevel(logging.DEBUG if root.level <= logging.DEBUG else logging.ERROR)

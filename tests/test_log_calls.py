"""Every structured log call can be made: no `extra` key overwrites a `LogRecord` attribute.

`logging.Logger.makeRecord` raises `KeyError("Attempt to overwrite 'thread' in LogRecord")` for such a key, so the
call that meant to report a failure raises one of its own instead; in a background loop that ends the loop (the
sweepers died so, on their first failed round, with the database away). The check reads every call's `extra` in the
project's source, and every `extra` handed on through a name bound to a dict literal in the same function.
"""

from __future__ import annotations

import ast
import logging
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("api", "assembly", "bench", "cli", "core", "diffusion", "models", "pipeline", "script_text", "tokenizer",
            "webui", "workers")  # fmt: skip
RESERVED = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


def extra_keys(source: str) -> list[tuple[int, str]]:
    """(line, key) for each constant key of an `extra=` dict in `source`: a literal there, or a name bound to one."""
    tree = ast.parse(source)
    bound: dict[str, list[ast.Dict]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    bound.setdefault(target.id, []).append(node.value)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            if keyword.arg != "extra":
                continue
            dicts = [keyword.value] if isinstance(keyword.value, ast.Dict) else []
            if isinstance(keyword.value, ast.Name):
                dicts = bound.get(keyword.value.id, [])
            for literal in dicts:
                found += [
                    (node.lineno, key.value)
                    for key in literal.keys
                    if isinstance(key, ast.Constant) and isinstance(key.value, str)
                ]
    return found


def test_no_log_call_passes_a_reserved_log_record_key() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {key}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for line, key in extra_keys(path.read_text())
        if key in RESERVED
    ]
    assert offenders == [], f"these `extra` keys overwrite LogRecord attributes: {offenders}"


def test_the_check_finds_a_reserved_key_where_the_sweeper_had_one() -> None:
    source = 'logger.warning("round failed", extra={"thread": name})\nwhere = {"process": 1}\nlog(extra=where)\n'
    assert [key for _, key in extra_keys(source)] == ["thread", "process"]
    assert {"thread", "process", "name", "msg"} <= RESERVED

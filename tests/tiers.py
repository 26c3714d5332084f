"""The test tiers: what makes a test `slow`, so that `pytest -m "not slow"` (the everyday tier) leaves it out; the
README's command runs both. A pytest plugin (tests/conftest.py names it), a module of its own so that it exists once
per process, whether pytest loads it or a test imports it (`tests.conftest` is imported twice: as pytest's `conftest`
and as `tests.conftest`).

A test is slow when it starts processes that take seconds to come up. Most do it through a fixture of
`SLOW_FIXTURES` (itself or through another fixture, such as a module's `stack`), and are marked at collection, so a
new service test cannot forget to be. One that starts the voxcast command or a service process some other way (a
helper of its module, `subprocess` in its body) and is not marked fails the moment it starts it (an audit hook), with
the way to make it slow. Long tests that start nothing (a long generation, many parity runs) say `slow` themselves.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SLOW_FIXTURES = frozenset(
    {
        "make_service_stack",  # an api and Celery workers as subprocesses (every module's `stack` builds on it)
        "shared_stack",  # the same, one per session
        "serve_process",  # `voxcast serve`: its api, workers and maybe its own Redis (tests/serve_process.py)
        "run_cli",  # a `voxcast` command in a subprocess: an interpreter start, often a model load
        "own_redis",  # a redis-server of the test's own
        "s3_server",  # moto's S3 server, a process of its own
        "browser",  # Chromium (tests/test_webui_browser.py)
    }
)
# What a test may start in a subprocess only when it is slow, however it starts it: `python -m` of these modules,
# Python code (`-c`) that imports one of the entry points, the `voxcast` console script, a script of bench/.
SLOW_MODULES = frozenset({"cli.main", "uvicorn", "celery"})
ENTRY_POINTS = ("cli.main", "workers.tasks", "workers.script_worker")  # the command, the two Celery apps


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


def slow_process(args: Any) -> str | None:
    """What a subprocess started with `args` (as `subprocess.Popen` hands them to its audit event) runs, when only a
    slow test may run it: the voxcast command or one of the service's processes, named; None for anything else."""
    words = [os.fsdecode(args)] if isinstance(args, (str, bytes, os.PathLike)) else [os.fsdecode(a) for a in args]
    for word, following in zip(words, [*words[1:], ""], strict=True):
        if word == "-m" and following in SLOW_MODULES:
            return f"python -m {following}"
        if word == "-c" and (imported := [name for name in ENTRY_POINTS if name in following]):
            return f"Python code importing {imported[0]}"
        if Path(word).name == "voxcast" or Path(word).parent.name == "bench":
            return word
    return None


_running: list[pytest.Item] = []  # the test whose setup, call or teardown runs now (a stack: pytester nests runs)


def _refuse_slow_processes_outside_slow_tests(event: str, args: tuple[Any, ...]) -> None:
    """An audit hook (PEP 578) on `subprocess.Popen`: a test not marked `slow` that starts the voxcast command or a
    service process fails at that moment, before the process starts, saying how to make it slow."""
    if event != "subprocess.Popen" or not _running or _running[-1].get_closest_marker("slow") is not None:
        return
    started = slow_process(args[1])
    if started is not None:
        pytest.fail(
            f"{_running[-1].nodeid} starts {started!r} in a subprocess but is not marked slow: take the `run_cli` or "
            "`serve_process` fixture (tests/conftest.py), or mark it `@pytest.mark.slow`",
            pytrace=False,
        )


sys.addaudithook(_refuse_slow_processes_outside_slow_tests)  # once per process, as this module is imported once


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _running.append(item)
    try:
        return (yield)
    finally:
        _running.pop()

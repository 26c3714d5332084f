"""The one way a test waits: for a condition, polled, with a bound that fails the test when it never holds.

A bound is a stall detector, never a measure of speed; a test that needs something to have happened waits for it
here instead of sleeping a guessed time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

_T = TypeVar("_T")


def wait_until(condition: Callable[[], _T], what: str, timeout: float = 90, interval: float = 0.02) -> _T:
    """`condition()`'s first truthy value, polled every `interval` seconds; AssertionError naming `what` after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)

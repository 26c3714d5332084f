"""The code keeps the types pyproject's [tool.mypy] checks: every package, with the overrides it names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(900)  # a cold cache takes minutes on two busy cores; a warm one (.mypy_cache) seconds
def test_mypy_finds_nothing() -> None:
    # The default cache (.mypy_cache, git-ignored) so that a second run reads what the first one learnt.
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=880)
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-2000:]

"""Shared fixtures: tiny checkpoints in both layouts (built once per session) and the example data."""

from __future__ import annotations

from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "shared" / "examples"


@pytest.fixture(scope="session")
def examples() -> Path:
    """../shared/examples, or a skip saying it is missing (it is not part of this repository)."""
    if not EXAMPLES.is_dir():
        pytest.skip(f"example data not found at {EXAMPLES} (shared/ beside the project)")
    return EXAMPLES


@pytest.fixture(scope="session")
def tiny_hf_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pipeline.tiny_checkpoint import write_tiny_checkpoint

    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny-hf"), layout="hf")


@pytest.fixture(scope="session")
def tiny_original_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pipeline.tiny_checkpoint import write_tiny_checkpoint

    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny-original"), layout="original")

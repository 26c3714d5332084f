"""Who may import what (docs/architecture.md, "Packages"): import-linter's contracts in pyproject.toml, and the light
packages imported in a fresh interpreter, where a lazy or dynamic import the static graph misses would show."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "celery", "sqlalchemy", "numpy")


def _lint_imports(config: Path) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        "-c",
        "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())",
    ]
    return subprocess.run(
        [*command, "--config", str(config), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_every_import_contract_is_kept() -> None:
    result = _lint_imports(ROOT / "pyproject.toml")
    assert result.returncode == 0 and "BROKEN" not in result.stdout, result.stdout + result.stderr
    assert result.stdout.count("KEPT") == 6  # every contract of pyproject.toml was checked


def test_a_broken_contract_is_reported(tmp_path: Path) -> None:
    """The check is not blind: a contract the code breaks (the engine's runner uses torch) fails the run."""
    config = tmp_path / "contracts.toml"
    config.write_text(
        '[tool.importlinter]\nroot_packages = ["pipeline"]\ninclude_external_packages = true\n\n'
        '[[tool.importlinter.contracts]]\nname = "runner without torch"\ntype = "forbidden"\n'
        'source_modules = ["pipeline.engine.runner"]\nforbidden_modules = ["torch"]\n'
    )
    result = _lint_imports(config)
    assert result.returncode != 0 and "BROKEN" in result.stdout, result.stdout + result.stderr


def _loaded_after_import(module: str) -> set[str]:
    """Which of `HEAVY` a fresh interpreter holds after importing `module`."""
    probe = f"import json, sys; import {module}; print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout))


@pytest.mark.parametrize(
    ("module", "never"),
    [
        ("webui.app", {"torch", "transformers", "celery", "sqlalchemy"}),  # the studio: an HTTP client
        ("api.app", {"torch", "transformers"}),  # the api never loads the model
        ("script_text.plan", {"torch", "transformers", "numpy", "celery", "sqlalchemy"}),
        ("script_text.drafting", {"torch", "transformers", "numpy", "celery", "sqlalchemy"}),
        ("pipeline.engine.scheduler", {"torch", "numpy"}),
        ("pipeline.engine.kv_blocks", {"torch", "numpy"}),
        # the engine's core draws from torch generators, but a type of the model loader is no reason to load it
        ("pipeline.engine.engine", {"transformers", "celery", "sqlalchemy"}),
        ("pipeline.engine.requests", {"transformers"}),
        ("pipeline.engine.step_records", {"transformers"}),
        ("cli.generate", {"torch", "transformers"}),  # a typo in a command costs a second, not a model import
    ],
)
def test_a_light_package_loads_nothing_heavy(module: str, never: set[str]) -> None:
    assert not _loaded_after_import(module) & never


def test_the_probe_sees_a_heavy_import() -> None:
    """The runtime probe is not blind: the engine's factory does load torch and transformers."""
    assert {"torch", "transformers"} <= _loaded_after_import("pipeline.engine.factory")

"""The everyday tier (`pytest -m "not slow"`) leaves out every test that starts a service or the voxcast command
(tests/tiers.py): by the fixtures it uses, which mark it `slow` whether it asks for one itself or through another
one; and a test that starts one some other way without being marked fails, saying how to make it slow."""

from __future__ import annotations

import pytest

from tests.tiers import SLOW_FIXTURES, slow_process

CONFTEST = """
import pytest

from tests.tiers import pytest_collection_modifyitems  # the hook under test

{fixtures}

@pytest.fixture
def stack(make_service_stack):
    return "a module's stack, built on make_service_stack"
"""

TESTS = """
import pytest

def test_plain():
    pass

def test_through_a_module_fixture(stack):
    pass

{direct}

@pytest.mark.slow
def test_marked_by_hand():
    pass
"""


@pytest.fixture
def sample(pytester: pytest.Pytester) -> pytest.Pytester:
    """A test file with one test per service fixture (standing in for the real ones), one through a module's
    `stack`, one marked by hand and one plain."""
    fixtures = "\n".join(f"@pytest.fixture\ndef {name}():\n    return None\n" for name in sorted(SLOW_FIXTURES))
    direct = "\n".join(f"def test_{name}({name}):\n    pass\n" for name in sorted(SLOW_FIXTURES))
    pytester.makeconftest(CONFTEST.format(fixtures=fixtures))
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n")
    pytester.makepyfile(test_sample=TESTS.format(direct=direct))
    return pytester


def test_the_everyday_tier_runs_only_what_starts_nothing(sample: pytest.Pytester) -> None:
    everyday = sample.runpytest("-p", "no:xdist", "-m", "not slow")
    everyday.assert_outcomes(passed=1, deselected=len(SLOW_FIXTURES) + 2)
    everyday.stdout.no_fnmatch_line("*test_through_a_module_fixture PASSED*")


def test_the_slow_tier_holds_every_service_test(sample: pytest.Pytester) -> None:
    slow = sample.runpytest("-p", "no:xdist", "-m", "slow", "-v")
    slow.assert_outcomes(passed=len(SLOW_FIXTURES) + 2, deselected=1)
    slow.stdout.fnmatch_lines(["*test_through_a_module_fixture PASSED*"])


# A test that starts the voxcast command or a service process itself, not through a fixture: tests/tiers.py's guard
# fails it unless it is slow. `python -c pass -m cli.main` stands in for the CLI: the guard goes by the command line
# (the words after `-c`'s code are only arguments, so it starts and ends at once).
GUARDED_CONFTEST = """
from tests.tiers import pytest_runtest_protocol  # the hook under test (with its audit hook)
"""

GUARDED_TESTS = """
import subprocess
import sys

import pytest

STANDS_IN_FOR_THE_CLI = [sys.executable, "-c", "pass", "-m", "cli.main"]


def test_starts_the_cli_unmarked():
    subprocess.run(STANDS_IN_FOR_THE_CLI, check=True)


@pytest.mark.slow
def test_starts_the_cli_marked():
    subprocess.run(STANDS_IN_FOR_THE_CLI, check=True)


def test_starts_another_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
"""


@pytest.fixture
def guarded(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(GUARDED_CONFTEST)
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n")
    pytester.makepyfile(test_guarded=GUARDED_TESTS)
    return pytester


def test_a_test_that_starts_the_cli_unmarked_fails_saying_how_to_make_it_slow(guarded: pytest.Pytester) -> None:
    everyday = guarded.runpytest("-p", "no:xdist", "-m", "not slow")
    everyday.assert_outcomes(passed=1, failed=1, deselected=1)
    everyday.stdout.fnmatch_lines(
        ["*test_starts_the_cli_unmarked starts 'python -m cli.main' in a subprocess but is not marked slow*"]
    )


def test_a_slow_test_may_start_the_cli(guarded: pytest.Pytester) -> None:
    guarded.runpytest("-p", "no:xdist", "-m", "slow").assert_outcomes(passed=1, deselected=2)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["/venv/bin/python", "-m", "cli.main", "generate", "show.txt"], "python -m cli.main"),
        (["/venv/bin/voxcast", "serve"], "/venv/bin/voxcast"),
        (
            ["/venv/bin/python", "-c", "import sys; from cli.main import main; sys.exit(main())"],
            "Python code importing cli.main",
        ),
        (
            ["unshare", "--net", "--", "sh", "-c", 'exec "$0" "$@"', "python", "-m", "cli.main", "serve"],
            "python -m cli.main",
        ),
        (["python", "-m", "uvicorn", "--factory", "api.app:app_from_env"], "python -m uvicorn"),
        (["python", "-m", "celery", "-A", "workers.tasks", "worker"], "python -m celery"),
        (["bash", "bench/gpu.sh", "/tmp/out"], "bench/gpu.sh"),
        ("python -m cli.main --help", None),  # one string without a shell is one program's name: not the CLI
        (["python", "-c", "import workers.tasks"], "Python code importing workers.tasks"),  # a Celery worker
        (["python", "-c", "from workers.lifeline import watch_lifeline"], None),
        (["redis-server", "--port", "6400"], None),
        (["python", "-c", "import json, sys; print(sorted(m for m in ('celery',) if m in sys.modules))"], None),
    ],
)
def test_the_guard_knows_the_voxcast_command_and_the_service_by_their_command_lines(
    args: list[str] | str, named: str | None
) -> None:
    assert slow_process(args) == named

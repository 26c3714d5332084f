"""A worker's lifeline to serve (`workers.lifeline`): cut, however serve's end of it closes, the worker stops."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.serve_process import wait_until_gone
from workers.lifeline import LIFELINE_FD_VARIABLE, Lifeline

# A process that watches its lifeline, says whether its own environment still names it, and would then sleep a minute.
WATCHER = f"""
import os, time
from workers.lifeline import watch_lifeline
watch_lifeline()
print("watching", "{LIFELINE_FD_VARIABLE}" in os.environ, flush=True)
time.sleep(60)
"""


def test_a_process_ends_once_its_lifeline_is_cut_and_its_children_do_not_inherit_it() -> None:
    with Lifeline() as lifeline:
        child = subprocess.Popen(
            [sys.executable, "-c", WATCHER],
            cwd=ROOT,
            env=lifeline.child_environment({"PYTHONPATH": str(ROOT)}),
            pass_fds=(lifeline.child_fd,),
            stdout=subprocess.PIPE,
            text=True,
        )
        lifeline.started()
        assert child.stdout is not None and child.stdout.readline() == "watching False\n"
        assert child.poll() is None  # alive while serve's end is open
    assert not wait_until_gone([child.pid], 5), "the process outlived its lifeline"
    assert child.wait(5) == -15  # SIGTERM: the stop a worker takes as planned


# A worker whose planned stop has begun and then hangs: its bound runs the hand-back of what is left, and ends it.
HANGING = """
import sys, time
from workers.lifeline import end_within
def hand_back():
    print("handed back", flush=True)
    if sys.argv[1] == "fails":
        raise ConnectionError("the database is gone")
end_within(0.5, hand_back)
print("stopping", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("hand_back", ["works", "fails"])
def test_a_planned_stop_that_hangs_hands_back_what_is_left_and_ends_at_its_bound(hand_back: str) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", HANGING, hand_back],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = child.communicate(timeout=30)
    assert child.returncode == 1, err
    assert out.splitlines() == ["stopping", "handed back"]
    assert "planned stop ran out of time" in err

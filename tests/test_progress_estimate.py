"""The progress rules (`core.progress_estimate`) and the bars that follow them: the studio's and the CLI's.

What a walk-through saw before these rules: "7:55 of about 3:55 of audio · 100% · about 0:00 left" for 90 s while
the audio overran the plan's estimate, a first ETA of "about 1:41:58 left" that settled a second later, and the
CLI bar at 100% while still generating.
"""

from __future__ import annotations

import io

import pytest

from cli.generate import _progress_bar
from core.progress_estimate import (
    MAX_SHARE_UNTIL_DONE,
    MIN_ETA_FRAMES,
    MIN_ETA_SECONDS,
    eta_seconds,
    past_estimate,
    shown_share,
)
from pipeline.plan import plan_script
from pipeline.podcast import Progress
from pipeline.script import parse_script
from webui.follow import ProgressFigures
from webui.render import _progress_bar as studio_bar


def test_the_share_reaches_one_only_when_done() -> None:
    assert shown_share(0, 100, done=False) == 0.0
    assert shown_share(50, 100, done=False) == 0.5
    assert shown_share(100, 100, done=False) == MAX_SHARE_UNTIL_DONE
    assert shown_share(3_000, 100, done=False) == MAX_SHARE_UNTIL_DONE  # far past the estimate: still not done
    assert shown_share(40, 100, done=True) == 1.0  # ended early: done is done
    assert shown_share(5, 0, done=False) == 0.0


def test_there_is_no_eta_before_a_steady_speed_or_past_the_estimate() -> None:
    assert eta_seconds(1_000, 2, 2, 0.3) is None  # the first frames of a warming engine
    assert eta_seconds(1_000, 100, 100, MIN_ETA_SECONDS - 0.1) is None
    assert eta_seconds(1_000, MIN_ETA_FRAMES - 1, MIN_ETA_FRAMES - 1, 60.0) is None
    assert eta_seconds(1_000, 100, 100, 10.0) == 90.0  # 900 frames left at 10 a second
    assert eta_seconds(1_000, 600, 100, 10.0) == 40.0  # 500 resumed frames count done, not towards the speed
    assert eta_seconds(1_000, 1_000, 500, 50.0) is None and past_estimate(1_000, 1_000)
    assert eta_seconds(1_000, 1_400, 900, 90.0) is None and past_estimate(1_400, 1_000)
    assert not past_estimate(999, 1_000) and not past_estimate(10, 0)


def figures(frames_done: int, frames_planned: int, eta: float | None) -> ProgressFigures:
    return ProgressFigures(frames_done, frames_planned, frames_done / 7.5, frames_planned / 7.5, 0, 1, eta)


def test_the_studio_says_finishing_past_the_estimate_and_100_only_when_done() -> None:
    overrun = studio_bar(figures(3_562, 1_762, None), "running", 0)  # 7:55 made of about 3:55 planned
    assert "7:55 of audio so far (about 3:55 was estimated)" in overrun
    assert "99%" in overrun and "100%" not in overrun
    assert "finishing" in overrun and "left" not in overrun
    counting = studio_bar(figures(300, 1_000, 95.0), "running", 0)
    assert "0:40 of about 2:13 of audio" in counting and "30%" in counting and "about 1:35 left" in counting
    warming = studio_bar(figures(3, 1_000, None), "running", 0)
    assert "left" not in warming and "finishing" not in warming
    assert 'aria-valuenow="100"' in studio_bar(figures(900, 1_000, None), "done", 1)


def test_the_cli_bar_never_shows_100_before_the_end_nor_an_eta_past_the_estimate() -> None:
    plan = plan_script(parse_script("Alice: " + "A sentence of a few words. " * 20))
    estimated = plan.estimated_frames
    bar = _progress_bar(plan, disabled=False, file=io.StringIO())
    shown = []
    with bar as report:
        for frames in (estimated // 2, estimated, estimated * 2):  # the model runs on past the estimate
            report(Progress(frames, estimated))
            shown.append(str(bar.bar))  # what the terminal line says now
    half, at_estimate, twice = shown
    assert "50%" in half and "<" not in half  # no ETA within the first seconds
    for line in (at_estimate, twice):
        assert "99%" in line and "finishing" in line and "<" not in line, line
    assert str(bar.bar).startswith("generating: 100%") and f"{estimated * 2}/{estimated * 2}" in str(bar.bar)


def test_a_failed_run_leaves_the_cli_bar_where_it_stopped() -> None:
    plan = plan_script(parse_script("Alice: Hello there, and welcome."))
    out = io.StringIO()
    with pytest.raises(RuntimeError), _progress_bar(plan, disabled=False, file=out) as report:
        report(Progress(1, plan.estimated_frames))
        raise RuntimeError("the engine died")
    assert "100%" not in out.getvalue()

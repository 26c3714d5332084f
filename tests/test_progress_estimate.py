"""The progress rules (`core.progress_estimate`) and the bars that follow them: the studio's and the CLI's.

What a walk-through saw before these rules: "7:55 of about 3:55 of audio · 100% · about 0:00 left" for 90 s while
the audio overran the plan's estimate, a first ETA of "about 1:41:58 left" that settled a second later, and the
CLI bar at 100% while still generating.
"""

from __future__ import annotations

import io
import math

import pytest

from cli.generate import _progress_bar
from core.progress_estimate import (
    ETA_WINDOW_SECONDS,
    MAX_ETA_SWING,
    MAX_SHARE_UNTIL_DONE,
    MIN_ETA_FRAMES,
    MIN_ETA_SECONDS,
    MIN_ETA_SECONDS_SHOWN,
    EtaEstimator,
    eta_from,
    past_estimate,
    shown_share,
)
from pipeline.podcast import Progress
from script_text.parser import parse_script
from script_text.plan import plan_script
from webui.follow import ProgressFigures
from webui.render import _progress_bar as studio_bar


def test_the_share_reaches_one_only_when_done() -> None:
    assert shown_share(0, 100, done=False) == 0.0
    assert shown_share(50, 100, done=False) == 0.5
    assert shown_share(100, 100, done=False) == MAX_SHARE_UNTIL_DONE
    assert shown_share(3_000, 100, done=False) == MAX_SHARE_UNTIL_DONE  # far past the estimate: still not done
    assert shown_share(40, 100, done=True) == 1.0  # ended early: done is done
    assert shown_share(5, 0, done=False) == 0.0


def run(speeds: list[float], frames_planned: int, every: float = 0.5) -> list[float | None]:
    """The ETAs an attempt reports every `every` seconds, generating `speeds[i]` frames a second in report i."""
    estimator, made, etas = EtaEstimator(), 0.0, []
    for step, speed in enumerate(speeds):
        made += speed * every
        etas.append(estimator.estimate(step * every, int(made), frames_planned - int(made)))
    return etas


def test_there_is_no_eta_before_a_steady_speed_or_past_the_estimate() -> None:
    warming = run([20.0] * int(MIN_ETA_SECONDS / 0.5), 10_000)  # fast, but not yet for long enough
    assert all(eta is None for eta in warming)
    trickle = run([0.5] * 40, 10_000)  # 20 s, but under MIN_ETA_FRAMES frames made
    assert all(eta is None for eta in trickle) and 0.5 * 20 < MIN_ETA_FRAMES
    steady = run([10.0] * 40, 1_000)
    assert steady[-1] == pytest.approx((1_000 - 195) / 10.0, abs=1.0)  # frames left at 10 a second
    estimator = EtaEstimator()
    assert estimator.estimate(0.0, 0, 1_000) is None
    assert estimator.estimate(10.0, 500, 0) is None and past_estimate(1_000, 1_000)  # at the estimate: finishing
    assert not past_estimate(999, 1_000) and not past_estimate(10, 0)


def test_an_eta_on_a_steady_run_counts_down_and_never_swings_or_says_0_00_before_the_end() -> None:
    # what a walk-through saw: 2:36 -> 0:32 -> 0:02 in 3 s. A run whose speed wobbles by a factor of 3 between reports
    speeds = [4.0 if step % 3 else 12.0 for step in range(400)]
    etas = [eta for eta in run(speeds, 2_000) if eta is not None]
    assert len(etas) > 300
    for before, after in zip(etas, etas[1:], strict=False):
        countdown = before - 0.5
        assert after <= max(countdown, MIN_ETA_SECONDS_SHOWN) * MAX_ETA_SWING + 0.1, (before, after)
        assert after >= countdown / MAX_ETA_SWING - 0.1, (before, after)
        assert after / before < 2 and before / after < 2  # no swing past a factor of 2 between two reports
    assert min(etas) >= MIN_ETA_SECONDS_SHOWN  # never 0:00 while frames are left


def test_an_eta_never_promises_less_than_the_best_speed_seen_allows() -> None:
    # fast for a minute, then a tenth of that speed: the frames left at the best speed bound the ETA from below
    speeds = [20.0] * 120 + [2.0] * 120
    etas = run(speeds, 10_000)
    made = sum(speed * 0.5 for speed in speeds)
    assert etas[-1] is not None and etas[-1] >= (10_000 - made) / 20.0
    # and once the window holds only the slow part, the ETA follows the slow speed
    assert etas[-1] == pytest.approx((10_000 - made) / 2.0, rel=0.2) and 60 > ETA_WINDOW_SECONDS


def test_the_apis_eta_counts_the_workers_down_from_when_it_was_written() -> None:
    assert eta_from(None, 3.0) is None
    assert eta_from(40.0, 0.0) == 40.0
    assert eta_from(40.0, 15.5) == 24.5
    assert eta_from(40.0, 100.0) == MIN_ETA_SECONDS_SHOWN  # late: "about 0:01", never 0:00 before done
    assert eta_from(40.0, -2.0) == 40.0  # a clock a little behind the worker's: no more than it said


def figures(frames_done: int, frames_planned: int, eta: float | None) -> ProgressFigures:
    return ProgressFigures(frames_done, frames_planned, frames_done / 7.5, frames_planned / 7.5, 0, 1, eta)


def test_the_studio_says_finishing_past_the_estimate_and_100_only_when_done() -> None:
    overrun = studio_bar(figures(3_562, 1_762, None), "running", 0)  # 7:54.9 made of about 3:54.9 planned
    assert "7:54 of audio so far (about 3:54 was estimated)" in overrun  # floored, as a player shows time
    assert "%" not in overrun.replace("width:99%", "")  # no share of a figure already passed
    assert "aria-valuenow" not in overrun  # an indeterminate bar
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
        assert "%" not in line and "finishing" in line and "<" not in line, line
    assert str(bar.bar).startswith("generating: 100%") and f"{estimated * 2}/{estimated * 2}" in str(bar.bar)


def test_the_cli_bar_shows_the_eta_the_worker_would_report() -> None:
    """The CLI's ETA is the worker's rule (`EtaEstimator`), not tqdm's remaining time: fed the same reports at the same
    times, the bar shows what the estimator gives, rounded up to the second."""
    plan = plan_script(parse_script("Alice: " + "A sentence of a few words. " * 40))
    estimated, now = plan.estimated_frames, [0.0]
    bar = _progress_bar(plan, disabled=False, file=io.StringIO(), clock=lambda: now[0])
    reference, shown = EtaEstimator(), []
    with bar as report:
        for step in range(1, 40):
            now[0] = step * 0.5
            frames = step * 4  # 8 frames a second, steadily
            report(Progress(frames, estimated))
            expected = reference.estimate(now[0], frames, estimated - frames)
            shown.append((expected, str(bar.bar)))
    assert shown[0][0] is None and "ETA" not in shown[0][1]  # warming: no ETA yet
    steady = [(eta, line) for eta, line in shown if eta is not None]
    assert steady, "the speed never became steady"
    for eta, line in steady:
        minutes, seconds = divmod(math.ceil(eta), 60)
        assert f"ETA {minutes}:{seconds:02d}" in line, (eta, line)


def test_a_failed_run_leaves_the_cli_bar_where_it_stopped() -> None:
    plan = plan_script(parse_script("Alice: Hello there, and welcome."))
    out = io.StringIO()
    with pytest.raises(RuntimeError), _progress_bar(plan, disabled=False, file=out) as report:
        report(Progress(1, plan.estimated_frames))
        raise RuntimeError("the engine died")
    assert "100%" not in out.getvalue()

"""How far a job is, told honestly: the one set of rules behind every progress bar and ETA (worker, api, studio, CLI).

A plan estimates a script's frames from its text, but the model decides when each generation ends, so the estimate
can be short. The rules:
- the share shown is 1 (100%) only once the job is done; until then at most `MAX_SHARE_UNTIL_DONE`, however far
  generation runs past the estimate;
- past the estimate there is no honest ETA: generation is "finishing", and its audio is shown as made so far, not
  as a share of a figure it has already passed;
- an ETA waits for a steady speed: `MIN_ETA_SECONDS` of generation and `MIN_ETA_FRAMES` frames made in that time
  (the first frames come at the speed of a warming engine, and a first guess from them is hours off);
- an ETA follows the speed measured over the last `ETA_WINDOW_SECONDS`, moves from the countdown of the one before
  by at most `MAX_ETA_SWING` times, never promises less than the frames left need at the best speed seen, and never
  says 0:00 before the end (`MIN_ETA_SECONDS_SHOWN`). The worker estimates it (`EtaEstimator`) and writes it with
  the job's progress; the api counts it down from there (`eta_from`), so both tell the same ETA.
"""

from __future__ import annotations

from collections import deque

MAX_SHARE_UNTIL_DONE = 0.99
MIN_ETA_SECONDS = 5.0
MIN_ETA_FRAMES = 15  # two seconds of audio
ETA_WINDOW_SECONDS = 30.0
MAX_ETA_SWING = 1.5
MIN_ETA_SECONDS_SHOWN = 1.0


def shown_share(frames_done: int, frames_planned: int, *, done: bool) -> float:
    """The share of the work to show, 0..1: 1 only when `done`."""
    if done:
        return 1.0
    if frames_planned <= 0:
        return 0.0
    return min(MAX_SHARE_UNTIL_DONE, frames_done / frames_planned)


def past_estimate(frames_done: int, frames_planned: int) -> bool:
    """Whether generation has reached the plan's estimate without being done: it is finishing, by an unknown amount."""
    return frames_planned > 0 and frames_done >= frames_planned


class EtaEstimator:
    """One attempt's ETA as it goes: fed, at each progress report, the time, the frames this attempt has generated
    and the frames left of the plan."""

    def __init__(self) -> None:
        self._samples: deque[tuple[float, int]] = deque()  # (monotonic seconds, frames generated), the window's
        self._best_speed = 0.0  # frames a second: the fastest window seen
        self._last: tuple[float, float] | None = None  # (when, ETA) of the last estimate

    def estimate(self, now: float, frames_generated: int, frames_left: int) -> float | None:
        """Seconds until the plan's frames are made; None before the speed is steady and once past the estimate."""
        samples = self._samples
        samples.append((now, frames_generated))
        while len(samples) > 2 and now - samples[1][0] >= ETA_WINDOW_SECONDS:
            samples.popleft()
        since, frames_then = samples[0]
        seconds, made = now - since, frames_generated - frames_then
        if frames_left <= 0 or seconds < MIN_ETA_SECONDS or made < MIN_ETA_FRAMES:
            self._last = None
            return None
        speed = made / seconds
        self._best_speed = max(self._best_speed, speed)
        eta = frames_left / speed
        if self._last is not None:
            then, before = self._last
            countdown = before - (now - then)
            if countdown > 0:
                eta = min(max(eta, countdown / MAX_ETA_SWING), countdown * MAX_ETA_SWING)
        eta = max(eta, frames_left / self._best_speed, MIN_ETA_SECONDS_SHOWN)
        self._last = (now, eta)
        return round(eta, 1)


def eta_from(eta_seconds: float | None, seconds_since: float) -> float | None:
    """An ETA estimated `seconds_since` ago, counted down to now; never below `MIN_ETA_SECONDS_SHOWN`."""
    if eta_seconds is None:
        return None
    return round(max(MIN_ETA_SECONDS_SHOWN, eta_seconds - max(0.0, seconds_since)), 1)

"""How far a job is, told honestly: the one set of rules behind every progress bar and ETA (worker, api, studio, CLI).

A plan estimates a script's frames from its text, but the model decides when each generation ends, so the estimate
can be short. The rules:
- the share shown is 1 (100%) only once the job is done; until then at most `MAX_SHARE_UNTIL_DONE`, however far
  generation runs past the estimate;
- past the estimate there is no honest ETA: generation is "finishing", and its audio is shown as made so far, not
  as a share of a figure it has already passed;
- an ETA waits for a steady speed: `MIN_ETA_SECONDS` of generation and `MIN_ETA_FRAMES` frames made in that time
  (the first frames come at the speed of a warming engine, and a first guess from them is hours off).
"""

from __future__ import annotations

MAX_SHARE_UNTIL_DONE = 0.99
MIN_ETA_SECONDS = 5.0
MIN_ETA_FRAMES = 15  # two seconds of audio


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


def eta_seconds(frames_planned: int, frames_done: int, frames_made: int, seconds: float) -> float | None:
    """Wall-clock seconds until a job is done: the frames left of the plan at the speed of `frames_made` frames in
    `seconds` of generation; None before that speed is steady, and None once past the estimate."""
    if seconds < MIN_ETA_SECONDS or frames_made < MIN_ETA_FRAMES or past_estimate(frames_done, frames_planned):
        return None
    return round((frames_planned - frames_done) * seconds / frames_made, 1)

"""The per-job limits an installation sets: script length and minutes of audio.

The parser and the planner carry hard ceilings (200,000 characters, 90 minutes: what VibeVoice can
generate in one episode); `max_script_chars` and `max_job_audio_minutes` let an installation hold jobs
to less, for its GPU budget. Both are checked before anything is stored, as 422s naming the field.
"""

from __future__ import annotations

from api.errors import InvalidInput, Problem
from pipeline.plan import Plan


def check_script_length(text: str, max_chars: int) -> None:
    """422 naming `script` when the text is longer than `max_chars` (checked before it is parsed)."""
    if len(text) > max_chars:
        raise InvalidInput(
            [
                Problem(
                    "script",
                    f"the script is {len(text):,} characters long; this server takes at most {max_chars:,} "
                    "(VOXCAST_MAX_SCRIPT_CHARS)",
                    kind="script_error",
                )
            ]
        )


def check_audio_minutes(plan: Plan, max_minutes: float, field: str) -> None:
    """422 naming `field` when the plan's estimated audio runs past `max_minutes`."""
    minutes = plan.estimated_seconds / 60
    if minutes > max_minutes:
        raise InvalidInput(
            [
                Problem(
                    field,
                    f"the job would make about {minutes:.1f} minutes of audio; this server generates at most "
                    f"{max_minutes:g} minutes per job (VOXCAST_MAX_JOB_AUDIO_MINUTES)",
                    kind="script_error",
                )
            ]
        )

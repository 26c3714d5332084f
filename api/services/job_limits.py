"""The per-job limits: script length and minutes of audio an installation sets, and what its workers can hold.

The parser and the planner carry hard ceilings (200,000 characters, 90 minutes: what VibeVoice can
generate in one episode); `max_script_chars` and `max_job_audio_minutes` let an installation hold jobs
to less, for its GPU budget. A generation must also fit what a worker can hold in one pass: its model's
context, within its K/V pool. The workers announce that length, their model's name and context, and their
tokenizer's rate (`GenerationLimits`), and every generation of the plan is estimated against them: its prompt
(text and voices) plus its estimated frames. A generation past the context is refused naming the model and its
limit ("VibeVoice-Large holds 32,768 tokens (about 45 minutes)"): the context is the loaded model's, never assumed.
All are checked before anything is stored, as 422s naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.errors import InvalidInput, Problem, TooManyJobs
from core.job_states import JobState
from core.models import Job, ScriptJob
from script_text.parser import Script
from script_text.plan import EpisodeTooLong, Mode, ModelContext, Plan, context_refusal, plan_script
from script_text.prompt import estimated_prompt_tokens


@dataclass(frozen=True)
class GenerationLimits:
    """The longest generation a live worker can hold (tokens: prompt and new), its tokenizer's rate, and its model's
    context (None: announced by a worker from before it said so)."""

    longest_tokens: int
    chars_per_token: float
    context: ModelContext | None


def check_in_flight(
    session: Session, kind: type[Job] | type[ScriptJob], owner_id: int, limit: int, what: str, *, single_user: bool
) -> None:
    """429 when the key already has `limit` jobs of this kind (audio jobs, or script jobs: each counted apart) queued
    or running (`VOXCAST_MAX_JOBS_IN_FLIGHT`). On a single-user install there are no keys to speak of: the refusal
    is worded for the one person using it, still naming the setting its operator can raise."""
    count = session.scalar(
        select(func.count())
        .select_from(kind)
        .where(kind.owner_id == owner_id, kind.state.in_((JobState.QUEUED, JobState.RUNNING)))
    )
    if count is None or count < limit:
        return
    jobs = f"{count} {what.removesuffix('s') if count == 1 else what}"
    if single_user:
        raise TooManyJobs(
            f"you have {jobs} queued or running, as many as this server takes at once ({limit}; whoever "
            "runs it can raise that with VOXCAST_MAX_JOBS_IN_FLIGHT). Wait for one to end or cancel one."
        )
    raise TooManyJobs(
        f"this key has {jobs} queued or running; the limit is {limit} (VOXCAST_MAX_JOBS_IN_FLIGHT). "
        "Wait for one to end or cancel one."
    )


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


def planned_within_minutes(
    script: Script, mode: Mode, max_segment_seconds: float, max_minutes: float, field: str
) -> Plan:
    """The script's plan; 422 naming `field` and `VOXCAST_MAX_JOB_AUDIO_MINUTES` when its estimated audio runs
    past `max_minutes`, also when it runs past the planner's own ceiling (which the setting never exceeds)."""
    try:
        plan = plan_script(script, mode, max_segment_seconds=max_segment_seconds)
    except EpisodeTooLong as error:
        raise _too_many_minutes(error.minutes, max_minutes, field) from error
    if (minutes := plan.estimated_seconds / 60) > max_minutes:
        raise _too_many_minutes(minutes, max_minutes, field)
    return plan


def _too_many_minutes(minutes: float, max_minutes: float, field: str) -> InvalidInput:
    return InvalidInput(
        [
            Problem(
                field,
                f"the job would make about {minutes:.1f} minutes of audio; this server generates at most "
                f"{max_minutes:g} minutes per job (VOXCAST_MAX_JOB_AUDIO_MINUTES)",
                kind="script_error",
            )
        ]
    )


def check_generation_lengths(
    plan: Plan, voice_seconds: Mapping[int, float], limits: GenerationLimits | None, field: str
) -> None:
    """422 naming `field` when a generation of `plan` could not be held by any live worker in one pass.

    Without `limits` (no worker has announced itself), nothing is checked here; the worker refuses such a
    generation when it meets it, with the same numbers.
    """
    if limits is None:
        return
    for segment in plan.segments:
        prompt = estimated_prompt_tokens(segment.text, voice_seconds, limits.chars_per_token)
        frames = segment.estimated_frames
        if limits.context and (beyond := context_refusal(limits.context, segment, len(plan.segments), prompt)):
            what = f"{beyond}; split it with pause tags or use mode `turns`"
            raise InvalidInput([Problem(field, what, kind="script_error", line=segment.turns[0].line)])
        if prompt + frames <= limits.longest_tokens:
            continue
        where = f"lines {segment.turns[0].line} to {segment.turns[-1].line}"
        what = (
            f"the job's generation {segment.index + 1} of {len(plan.segments)} ({where}, about "
            f"{segment.estimated_seconds / 60:.1f} minutes of audio) needs about {prompt + frames:,} tokens "
            f"({prompt:,} of prompt and {frames:,} of audio), and the longest generation a worker here holds is "
            f"{limits.longest_tokens:,} tokens (the model's context, within VOXCAST_ENGINE_KV_MEMORY); "
            "split it with pause tags or use mode `turns`"
        )
        raise InvalidInput([Problem(field, what, kind="script_error", line=segment.turns[0].line)])

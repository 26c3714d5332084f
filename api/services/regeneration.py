"""Regenerating one turn of a finished job: a new seed, new words, or both, and the episode assembled again.

Everything is checked before anything changes: the job is the caller's (else 404) and done (else 409), the
turn exists (404), new text is one turn's words (422 naming `text`) and leaves the plan's segments as they
were, so every other stored segment still fits. Then, in one transaction: the job goes back to queued at
the next revision (a conditional update, so two requests cannot both win), the segments holding the turn go
back to pending with new seeds, and the revision's script is written. Only after the commit is the task
sent; a send that fails still answers 202, and the sweeper sends the job later.

In `whole` mode a segment may hold several turns; the whole segment is generated again, with the edited
text. In `turns` mode exactly the turn's segments are (more than one when a long turn was cut).
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from typing import cast

import soundfile as sf
from sqlalchemy import select

from api.deps import ApiServices, Caller
from api.errors import Conflict, InvalidInput, NotFound, Problem
from api.schemas import (
    MAX_SEED,
    PlannedTurn,
    RegeneratedSegment,
    RegenerationPlan,
    RegenerationView,
    TurnRegeneration,
)
from api.services.job_limits import GenerationLimits, check_generation_lengths, planned_within_minutes
from api.services.jobs import job_view, owned_job
from api.services.revisions import removed_message, start_revision
from api.services.takes import set_aside
from core.file_store import FileStore
from core.job_scripts import read_script, script_path, write_script
from core.job_states import JobState, QueueKind
from core.models import Job, JobSegment
from core.storage import JobFolder
from script_text.drafting.replies import script_to_text
from script_text.parser import Script, ScriptError, Turn, nothing_to_say, parse_script
from script_text.plan import Mode, Plan, plan_script, segment_seed
from workers.regeneration import enqueue_regeneration

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Checked:
    """A regeneration every check has passed: the job's new script, its text, and the segments it generates again."""

    script: Script
    script_text: str
    segments: dict[int, str]  # index -> the hash of its new words


def _check(
    services: ApiServices,
    job: Job,
    turn: int,
    change: TurnRegeneration,
    limits: GenerationLimits | None,
) -> _Checked:
    """Every check of a regeneration, changing nothing: 409, 404 or 422 saying what is wrong."""
    if job.job_state is not JobState.DONE:
        raise Conflict(f"job {job.id} is {job.state}; a turn can be regenerated once the job is done")
    if job.intermediates_removed_at is not None:
        raise Conflict(removed_message(job))
    folder, files = services.data.job(job.id), services.data.files
    files.fetch(script_path(folder, job.revision))
    current_text = script_text = read_script(folder, job.revision)
    script = parse_script(script_text)
    if turn >= len(script.turns):
        raise NotFound(f"job {job.id} has no turn {turn}; its turns are numbered 0 to {len(script.turns) - 1}")
    if change.text is not None:
        script_text = script_to_text(_with_turn_text(script, turn, _one_turn_text(change.text)))
        script = parse_script(script_text)
        plan = planned_within_minutes(
            script,
            cast(Mode, job.mode),
            job.generation["max_segment_seconds"],
            services.settings.max_job_audio_minutes,
            "text",
        )
        check_generation_lengths(plan, _voice_seconds(files, folder, len(plan.speakers)), limits, "text")
    segments = _segments_holding(job, current_text, script_text, turn)
    return _Checked(script, script_text, segments)


def plan_regeneration(
    services: ApiServices,
    caller: Caller,
    job_id: str,
    turn: int,
    change: TurnRegeneration,
    limits: GenerationLimits | None = None,
) -> RegenerationPlan:
    """What regenerating `turn` would generate again and about how long it would take; nothing changes.

    The estimate is the time those segments took when they were last generated (they generated side by side, so
    the longest of them): the same worker, batch and length make about the same time again.
    """
    with services.database.reading() as session:
        job = owned_job(session, caller, job_id)
        checked = _check(services, job, turn, change, limits)
        rows = session.scalars(
            select(JobSegment).where(JobSegment.job_id == job_id, JobSegment.index.in_(checked.segments))
        ).all()
        held = sorted({turn_row[0] for row in rows for turn_row in row.turns} | {turn})
        audio_seconds = sum(row.seconds for row in rows)
        durations = [
            (row.finished_at - row.started_at).total_seconds() for row in rows if row.started_at and row.finished_at
        ]
    services.data.files.drop_local(services.data.job(job_id).root)
    script = checked.script
    return RegenerationPlan(
        turn=turn,
        segments=sorted(checked.segments),
        turns=[
            PlannedTurn(
                index=index,
                speaker=script.speakers[script.turns[index].speaker].name,
                words=_first_words(script.turns[index].text),
            )
            for index in held
        ],
        audio_seconds=round(audio_seconds, 3),
        estimated_seconds=round(max(durations), 1) if durations else None,
    )


def regenerate_turn(
    services: ApiServices,
    caller: Caller,
    job_id: str,
    turn: int,
    change: TurnRegeneration,
    limits: GenerationLimits | None = None,
) -> RegenerationView:
    with services.database.session() as session:
        job = owned_job(session, caller, job_id)
        checked = _check(services, job, turn, change, limits)
        folder, files = services.data.job(job_id), services.data.files
        first_seed = secrets.randbelow(MAX_SEED + 1) if change.seed is None else change.seed
        seeds = {index: segment_seed(first_seed, offset) for offset, index in enumerate(checked.segments)}
        revision = job.revision + 1
        set_aside(session, services.data, job, checked.segments)  # the current take, until the listener chooses
        start_revision(session, job, revision, seeds, checked.segments)
        files.publish(write_script(folder, revision, checked.script_text))  # before the row commits, as at submission
        view = job_view(session, job)
        queue, priority = cast(QueueKind, job.queue), job.priority
    files.drop_local(folder.root)
    logger.info("turn regeneration queued", extra={"job_id": job_id, "turn": turn, "revision": revision})
    try:
        enqueue_regeneration(services.celery, services.settings.redis_namespace, job_id, revision, queue, priority)
    except Exception as error:  # the broker is down: the job stays queued in the database for the sweeper
        logger.warning("could not enqueue; the sweeper will", extra={"job_id": job_id, "error": str(error)})
    script = checked.script
    edited = script.turns[turn]
    return RegenerationView(
        job=view,
        revision=revision,
        turn=turn,
        speaker=script.speakers[edited.speaker].name,
        text=edited.text,
        segments=[RegeneratedSegment(index=index, seed=seed) for index, seed in seeds.items()],
    )


def _first_words(text: str, words: int = 8) -> str:
    """A turn's opening, to name it in a notice: its first few words, and an ellipsis when there is more."""
    split = text.split()
    return " ".join(split[:words]) + (" …" if len(split) > words else "")


def _voice_seconds(files: FileStore, folder: JobFolder, speakers: int) -> dict[int, float]:
    """How long each speaker's voice prompt in the job's inputs is."""
    for speaker in range(speakers):
        files.fetch(folder.voice(speaker))
    return {speaker: sf.info(str(folder.voice(speaker))).duration for speaker in range(speakers)}


def _text_problem(message: str) -> InvalidInput:
    return InvalidInput([Problem("text", message)])


def _one_turn_text(text: str) -> str:
    """`text` cleaned as the parser cleans a turn (quotes, spaces); 422 unless it is exactly one turn's words."""
    if "\n" in text or "\r" in text:
        raise _text_problem("a turn is one line of text; remove the line breaks")
    if not text.strip():
        raise _text_problem("the text is empty; write what the speaker says")
    if _starts_with_speaker_tag(text):
        raise _text_problem(
            "the text starts with a speaker tag ('Name:' or '[Name]'); write only what the turn's speaker says"
        )
    try:
        parsed = parse_script(f"Speaker 1: {text}")
    except ScriptError as error:
        raise _text_problem(error.message) from error
    if len(parsed.items) != 1:
        raise _text_problem("a pause tag would split the turn in two; a regenerated turn keeps the script's pauses")
    if (problem := nothing_to_say(parsed.turns[0].text)) is not None:
        raise _text_problem(f"the text {problem}; write the words to speak")
    return parsed.turns[0].text


def _starts_with_speaker_tag(text: str) -> bool:
    # The parser is the one judge of what a tag is: on its own, plain text is refused for having no tag.
    try:
        parse_script(text)
    except ScriptError:
        return False
    return True


def _with_turn_text(script: Script, turn: int, text: str) -> Script:
    """The script with the `turn`-th turn (0-based, pauses not counted) saying `text`."""
    items = list(script.items)
    positions = [position for position, item in enumerate(items) if isinstance(item, Turn)]
    old = items[positions[turn]]
    assert isinstance(old, Turn)
    items[positions[turn]] = Turn(speaker=old.speaker, text=text, line=old.line)
    return Script(speakers=script.speakers, items=tuple(items))


def _segments_holding(job: Job, current_text: str, new_text: str, turn: int) -> dict[int, str]:
    """The segments that hold `turn` in the job's plan of `new_text`: index -> the hash of its words.

    422 when the new text changes how the script divides into segments (a `turns`-mode turn grown past the
    length at which it is cut): the stored segments would no longer line up with the plan. `new_text` is
    within the length limit (`_check` refused it otherwise).
    """
    mode = cast(Mode, job.mode)
    max_segment_seconds = float(job.generation["max_segment_seconds"])
    before = plan_script(parse_script(current_text), mode, max_segment_seconds=max_segment_seconds)
    after = plan_script(parse_script(new_text), mode, max_segment_seconds=max_segment_seconds)
    if _layout(after) != _layout(before):
        raise _text_problem(
            f"the new text would be generated in {_pieces(after, turn)} pieces instead of {_pieces(before, turn)} "
            f"(a turn is cut at sentence ends every {max_segment_seconds:g} s of speech), so the other segments "
            "would no longer line up; shorten it"
        )
    return {
        segment.index: segment.text_hash
        for segment in after.segments
        if any(piece.index == turn for piece in segment.turns)
    }


def _layout(plan: Plan) -> list[tuple[int, ...]]:
    """Which turns each segment holds, in order: what stored segments must agree on to be reused."""
    return [tuple(piece.index for piece in segment.turns) for segment in plan.segments]


def _pieces(plan: Plan, turn: int) -> int:
    return sum(turn in turns for turns in _layout(plan))

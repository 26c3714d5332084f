"""A job's plan, as its workers generate it: which turns each segment speaks.

The studio labels what is heard while a job generates with it ("Alice: This is turn…"), for a job submitted
from any page or opened later from History, and with the server's own segment length (a page cannot know
`VOXCAST_MAX_SEGMENT_SECONDS`, which cuts long turns in `turns` mode).
"""

from __future__ import annotations

from api.deps import ApiServices, Caller
from api.errors import NotFound
from api.schemas import JobPlanView, PlanSegmentView, PlanTurnView
from api.services.jobs import owned_job
from core.job_scripts import read_stored_script
from script_text.plan import Plan, Segment, plan_job


def job_plan(services: ApiServices, caller: Caller, job_id: str) -> JobPlanView:
    """The plan of the job's current revision: 404 for a job the key may not see."""
    with services.database.reading() as session:
        job = owned_job(session, caller, job_id)
        revision, mode, max_segment_seconds = job.revision, job.mode, job.generation["max_segment_seconds"]
    text = read_stored_script(services.data.files, services.data.job(job_id), revision)
    if text is None:  # deleted since its row was read
        raise NotFound(f"no job {job_id}")
    return plan_view(plan_job(text, mode, max_segment_seconds), revision)


def plan_view(plan: Plan, revision: int) -> JobPlanView:
    """The api's view of a plan: its segments, each turn by its speaker's name."""
    names = [speaker.name for speaker in plan.speakers]
    return JobPlanView(
        revision=revision,
        mode=plan.mode,
        segments=[
            PlanSegmentView(
                index=segment.index,
                estimated_seconds=round(segment.estimated_seconds, 3),
                turns=[
                    PlanTurnView(index=turn.index, speaker=names[turn.speaker], text=turn.text)
                    for turn in segment.turns
                ],
            )
            for segment in plan.items
            if isinstance(segment, Segment)
        ],
    )

"""Generating a job's pending segments: all at once in the worker's engine, each stored the moment it finishes.

Every pending segment goes to the engine together (`pipeline.podcast.PlanGeneration`, the one generation seam),
tagged with the job, its queue and priority, so the engine batches them beside every other job's; this task thread
handles their frames as they come. After every engine step the job's stops are checked, so a cancel, a lost lease
or a planned stop ends all its segments within about a step; on a planned stop every segment's frames are written
out first, so the next attempt replays them all. The first segment to fail fails the job with its reason; when the
engine itself died under it, the job is not at fault (`EngineDied`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from core.job_repository import ClaimedJob, SegmentRecord
from core.storage import JobFolder
from models.segment_io import GenerationSettings
from pipeline.generation import SegmentFailed, SegmentFrame
from pipeline.podcast import PendingSegment, PlacedSegment, PlanGeneration, Scheduling, SegmentFinished
from script_text.plan import Plan, Segment
from workers.job_progress import JobProgress
from workers.job_stops import EngineDied, GenerationFailed, JobStops, Stopping
from workers.segment_store import SegmentRun
from workers.worker_services import WorkerServices


def generate_pending(
    services: WorkerServices,
    job: ClaimedJob,
    folder: JobFolder,
    plan: Plan,
    pending: Sequence[tuple[Segment, SegmentRecord]],
    voices: Mapping[int, np.ndarray],
    progress: JobProgress,
    stops: JobStops,
) -> dict[int, PlacedSegment]:
    """Generate every pending segment at once, storing each the moment it finishes; the stored segments."""
    runs = {segment.index: SegmentRun(services, job, folder, segment, record.seed) for segment, record in pending}
    for index, run in runs.items():
        progress.start_segment(index, resumed=run.resumed)
    progress.report()
    engine = services.engine()
    generation = PlanGeneration.start(
        engine,
        plan,
        [PendingSegment(segment, record.seed, runs[segment.index].resume) for segment, record in pending],
        voices,
        GenerationSettings(cfg_scale=job.cfg_scale, diffusion_steps=job.diffusion_steps),
        Scheduling(job=job.id, interactive=job.queue == "interactive", priority=job.priority),
    )
    placed: dict[int, PlacedSegment] = {}
    try:
        while generation.running:
            for update in generation.updates():
                if isinstance(update, SegmentFrame):
                    runs[update.index].add(update)
                    progress.frame(update.index, update.frames)
                elif isinstance(update, SegmentFinished):
                    placed[update.index] = runs[update.index].store(update.generated, progress)
                elif isinstance(update, SegmentFailed):
                    raise EngineDied(engine.dead) if engine.dead is not None else GenerationFailed(update.message)
            stops.check()
            progress.report_if_due()
    except BaseException as error:
        generation.cancel()
        if isinstance(error, Stopping):
            for run in runs.values():
                if run.index not in placed:
                    run.keep_frames()
        raise
    return placed

"""A running job's progress over its segments generating side by side: frames done, segments done, the ETA.

What counts is what this run is for: every segment of a first render, and only the segments of the job's revision
when it regenerates turns (the kept ones are not its work: a regenerated turn's progress starts from 0, not from
the episode's 99%). `frames_done` is the frames of the counted segments stored plus, for each one generating, what
it has made (or replayed) so far: it never goes back, however the segments' frames interleave. Progress is
published at most every `PROGRESS_INTERVAL_SECONDS` and written to the job's row with its ETA, which goes by the
frames generated in this attempt (`core.progress_estimate.EtaEstimator`), so the api's view tells the same one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core import job_repository
from core.job_events import ProgressEvent
from core.job_repository import ClaimedJob
from core.job_states import JobState
from core.progress_estimate import EtaEstimator
from script_text.plan import Segment
from workers.worker_services import WorkerServices

PROGRESS_INTERVAL_SECONDS = 0.5


@dataclass
class _Generating:
    """A segment's count while it generates."""

    resumed: int  # frames replayed from an earlier attempt: done, not generated now
    frames: int = 0  # frames handed over so far (a replay counts again from 1)

    @property
    def done(self) -> int:
        return max(self.frames, self.resumed)  # a resumed segment's stored frames come back in a burst first

    @property
    def generated(self) -> int:
        return max(0, self.frames - self.resumed)


class JobProgress:
    """How far one attempt at a job is, published as it goes; the first frame of the attempt is timed."""

    def __init__(
        self, services: WorkerServices, job: ClaimedJob, counted: Sequence[Segment], claimed_at: float
    ) -> None:
        """`counted`: the segments this run is for (see the module's docstring)."""
        self.services = services
        self.job = job
        self.claimed_at = claimed_at  # monotonic: the first frame's wait is measured from it
        self.heard = False  # a frame of this attempt has come
        self.counted = {segment.index for segment in counted}
        self.frames_planned = sum(segment.estimated_frames for segment in counted)
        self.segments = len(counted)
        self.eta = EtaEstimator()
        self.frames_stored = 0  # frames of the segments done: found stored, or finished in this attempt
        self.segments_done = 0
        self.generating: dict[int, _Generating] = {}
        self.generated_stored = 0  # frames generated in this attempt by segments now stored
        self.last_report = 0.0

    @property
    def frames_done(self) -> int:
        return self.frames_stored + sum(segment.done for segment in self.generating.values())

    def skip(self, index: int, frames: int) -> None:
        """Segment `index` found stored: its frames are done (if this run counts it)."""
        if index in self.counted:
            self.frames_stored += frames
            self.segments_done += 1

    def start_segment(self, index: int, resumed: int = 0) -> None:
        """Segment `index` starts generating, `resumed` of its frames replayed from an earlier attempt."""
        self.generating[index] = _Generating(resumed)

    def frame(self, index: int, frames_in_segment: int) -> None:
        """Segment `index` has made `frames_in_segment` frames."""
        if not self.heard:
            self.heard = True
            self.services.metrics.job_first_audio(self.job.queue, self.services.clock() - self.claimed_at)
        self.generating[index].frames = frames_in_segment

    def end_segment(self, index: int, frames: int) -> tuple[int, int]:
        """Segment `index` is stored with `frames` frames; the job's (frames done, segments done) for its row."""
        self.generated_stored += max(0, frames - self.generating.pop(index).resumed)
        self.frames_stored += frames
        self.segments_done += 1
        self.report(record=False)  # the segment's row carries the progress
        return self.frames_done, self.segments_done

    def report_if_due(self) -> None:
        if self.services.clock() - self.last_report >= PROGRESS_INTERVAL_SECONDS:
            self.report()

    def report(self, *, record: bool = True) -> None:
        """Publish a progress event now (and write the job's progress, with `record`)."""
        now = self.last_report = self.services.clock()
        frames_done = self.frames_done
        generated = self.generated_stored + sum(segment.generated for segment in self.generating.values())
        eta = self.eta.estimate(now, generated, self.frames_planned - frames_done)
        if record:
            job_repository.record_progress(self.services.database, self.job, frames_done, self.segments_done, eta)
        event = ProgressEvent(
            state=JobState.RUNNING,
            frames_done=frames_done,
            frames_planned=self.frames_planned,
            segment=min(self.generating, default=self.segments - 1),
            segments=self.segments,
            eta_seconds=eta,
        )
        self.services.events.publish(self.job.id, event)

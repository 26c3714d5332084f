"""A job's segments on disk: each one's frames while it generates, then the finished segment, then its row.

A segment is the unit of durability: its audio and latents are written to the job's folder (and published to the
store), then its row is marked done, so a rerun (after a crash, a kill or a lost broker) generates only what is
missing. A segment still generating keeps its frames so far on disk (`workers.partial_frames`, published every
heartbeat), and a rerun on any host replays them. Listeners hear it meanwhile: its frames go out as `audio` events
every few frames (`workers.live_audio`).
"""

from __future__ import annotations

import logging

import numpy as np

from core import job_repository
from core.file_store import FileStore
from core.job_events import SegmentEvent
from core.job_repository import ClaimedJob, SegmentRecord
from core.storage import DataFolder, JobFolder, atomic_write, read_segment_audio, write_segment_audio
from pipeline.generation import SegmentFrame
from pipeline.podcast import GeneratedSegment, PlacedSegment
from script_text.plan import Segment
from script_text.timeline import TimedTurn
from workers.job_progress import JobProgress
from workers.live_audio import LiveAudio
from workers.partial_frames import PartialFrames
from workers.worker_services import WorkerServices

logger = logging.getLogger(__name__)


def stored_segment(data: DataFolder, record: SegmentRecord) -> PlacedSegment | None:
    """The segment an earlier attempt stored (its audio as written, its turns), or None if it must be generated."""
    if not record.done or record.audio_path is None:
        return None
    path = data.resolve(record.audio_path)
    if not data.files.fetch(path):
        return None
    return PlacedSegment(audio=read_segment_audio(path), turns=tuple(TimedTurn(*turn) for turn in record.turns))


def discard_partial(files: FileStore, partial: PartialFrames) -> None:
    """A segment's partial frames forgotten, here and in the store: it is stored whole, or must start over."""
    partial.discard()
    files.remove_file(partial.path)


class SegmentRun:
    """One segment generating: its frames so far on disk, its live audio, what an earlier attempt left."""

    def __init__(self, services: WorkerServices, job: ClaimedJob, folder: JobFolder, segment: Segment, seed: int):
        self.services = services
        self.job = job
        self.folder = folder
        self.index = segment.index
        self.seed = seed
        job_repository.record_segment_started(services.database, job, segment.index)
        self.files = services.data.files
        self.files.fetch(folder.segment_partial_frames(segment.index))  # what an attempt on any host kept
        self.partial = PartialFrames(folder.segment_partial_frames(segment.index))
        self.published_at = self.services.clock()
        self.live = LiveAudio(services.events, job.id, folder, segment.index, services.settings.stream_chunk_frames)
        self.resume = self.partial.stored()
        self.resumed = self.partial.stored_frames
        if self.resume is not None:
            job_repository.record_segment_resumed(services.database, job, segment.index, self.resumed)
            logger.info("segment resumed", extra={"job_id": job.id, "segment": segment.index, "frames": self.resumed})

    def add(self, frame: SegmentFrame) -> None:
        """One more frame: on disk (in the store every heartbeat), and to listeners."""
        self.partial.add(frame.frames, frame.tokens, frame.latent)
        self.live.add(frame.samples)
        if (
            self.services.clock() - self.published_at >= self.services.settings.heartbeat_seconds
            and self.partial.path.exists()
        ):
            self.files.publish(self.partial.path)  # another host resumes from here (a heartbeat's frames lost at most)
            self.published_at = self.services.clock()

    def keep_frames(self) -> None:
        """Write out every frame made so far and put them in the store: the job is handed back, and its next attempt
        (on any host) replays them all."""
        self.partial.flush()
        if self.partial.path.exists():
            self.files.publish(self.partial.path)

    def store(self, generated: GeneratedSegment, progress: JobProgress) -> PlacedSegment:
        """Store the finished segment: its audio and latents, then its row (done, with the job's progress), then say
        so; what a later run reads back of it, exactly."""
        self.live.flush()
        self.live.discard()  # before the segment's files: a nearly full disk has the room it had without it
        services, index, result = self.services, self.index, generated.result
        audio_path = self.folder.segment_audio(index)
        stored_audio = write_segment_audio(audio_path, result.audio)
        latents = result.latents.numpy()
        latents_path = atomic_write(self.folder.segment_latents(index), lambda handle: np.save(handle, latents))
        self.files.publish(audio_path)  # both in the store before the row points at them
        self.files.publish(latents_path)
        turns = tuple((t.index, t.speaker_name, t.text, t.start, t.end) for t in generated.turns)
        data = services.data
        record = SegmentRecord(index, True, result.frames, self.seed, data.relative(audio_path), turns)
        frames_done, segments_done = progress.end_segment(index, result.frames)
        job_repository.record_segment_done(
            services.database, self.job, record, result.seconds, data.relative(latents_path), frames_done, segments_done
        )
        discard_partial(self.files, self.partial)
        services.events.publish(self.job.id, SegmentEvent(index=index, seconds=round(result.seconds, 3)))
        logger.info("segment stored", extra={"job_id": self.job.id, "segment": index, "frames": result.frames})
        return PlacedSegment(audio=stored_audio, turns=generated.turns)

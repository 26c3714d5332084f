"""Running one job on a worker: claim it, generate every segment not yet stored at once, assemble the outputs.

All of a job's pending segments go to the worker's engine together (`job_runner.start_plan_generation`), tagged
with the job, its queue and priority, so the engine batches them beside every other job's; this task thread
then handles their frames as they come and stores each segment the moment it finishes.

A segment is the unit of durability: its audio and latents are written to the job's folder, then its row
is marked done, so a rerun (after a crash, a kill or a lost broker) generates only what is missing; a
segment still generating keeps its frames so far on disk (`workers.partial_frames`), and a rerun replays them. The
job's heartbeat is refreshed from a side thread, so a long segment never looks like a dead worker; after every
engine step the job looks whether its lease was lost or its cancel asked for (`workers.cancel_watch` reads every
job's flag ten times a second), so a cancel stops all its segments within about a step.
Listeners hear every segment while it generates: its frames go out as `audio` events every few frames
(`workers.live_audio`). When the engine itself dies, the job is left as it is (running, held by this
process) and `EngineDied` tells the task to end the process, so that its supervisor restarts it and the job
runs again.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from assembly.episode import Episode, write_episode
from assembly.loudness import normalize_loudness
from assembly.transcripts import chapters_from_turns
from core.db import Database
from core.file_store import FileStore
from core.job_events import EventPublisher, ProgressEvent, SegmentEvent, StateEvent
from core.job_scripts import read_script, script_path
from core.models import JobState
from core.progress_estimate import eta_seconds
from core.settings import Settings
from core.storage import (
    DataFolder,
    JobFolder,
    atomic_write,
    read_audio,
    read_segment_audio,
    write_segment_audio,
)
from pipeline.plan import Plan, Segment, plan_job
from pipeline.podcast import PlacedSegment
from pipeline.timeline import TimedTurn
from tokenizer.rates import SAMPLE_RATE
from workers import job_records
from workers.cancel_watch import CancelWatch
from workers.heartbeat import Heartbeat
from workers.job_records import ClaimedJob, PlannedSegment, SegmentRecord
from workers.job_runner import (
    GeneratedSegment,
    GenerationModel,
    PendingSegment,
    PlanGeneration,
    Scheduling,
    SegmentFailed,
    SegmentFinished,
    SegmentFrame,
    engine_failure,
    lay_out_episode,
    segment_seed,
    shared_model,
    start_plan_generation,
)
from workers.live_audio import LiveAudio
from workers.metrics import WorkerMetrics
from workers.partial_frames import PartialFrames
from workers.quarantine import Quarantine

logger = logging.getLogger(__name__)

PROGRESS_INTERVAL_SECONDS = 0.5
CRASH_TEST_FRAME = 8
WAIT_SECONDS = 0.1  # the longest a job waits for its segments' next events before checking cancel and lease again


class JobCancelled(Exception):
    """The job's cancel flag was set; raised by the job's check after an engine step, to stop all its segments."""


class LeaseLost(Exception):
    """Another worker holds the job now (this one was presumed dead); stop without touching the job."""


class GenerationFailed(Exception):
    """A segment failed (the engine's reason, or no audio at all): the job fails with it."""


class EngineDied(Exception):
    """The worker's engine loop died: no job of this process can run. The job is not at fault and is left as it
    is; the process must end (`workers.tasks`), so that it is restarted and its jobs run again."""


@dataclass(frozen=True)
class WorkerServices:
    """What a worker process shares among its task threads."""

    settings: Settings
    database: Database
    data: DataFolder
    events: EventPublisher
    cancels: CancelWatch  # the cancel flags of the jobs this process runs, read for all of them at once
    quarantine: Quarantine = field(default_factory=Quarantine)  # suspects of a worker's death run alone
    metrics: WorkerMetrics = field(default_factory=WorkerMetrics)

    def model(self) -> GenerationModel:
        settings = self.settings
        return shared_model(
            settings.worker_model or settings.model,
            settings.device,
            settings.dtype,
            slots=settings.engine_slots,
            kv_memory=settings.engine_kv_memory,
            interactive_slowdown=settings.engine_interactive_slowdown,
        )


def process_name() -> str:
    """This worker process: "<host>:<pid>", as the admin's worker list shows it."""
    return f"{socket.gethostname()}:{os.getpid()}"


def holder_name() -> str:
    """Who holds a job: host, process and thread, so two deliveries in one process are told apart too."""
    return f"{process_name()}:{threading.get_ident()}"


def execute_job(services: WorkerServices, job_id: str, revision: int | None = None) -> None:
    """Run the job unless it is finished, cancelled or held by a live worker (then do nothing).

    With `revision` (a regenerated turn), only while the job is at that revision. Either way the run
    generates exactly the segments not stored (a regeneration set its turn's back to pending) and assembles
    the episode again from all of them.
    """
    job = job_records.claim_job(
        services.database, job_id, holder_name(), services.settings.stale_after_seconds, revision=revision
    )
    if job is None:
        logger.info("job not claimed: finished, cancelled or held elsewhere", extra={"job_id": job_id})
        return
    logger.info("job claimed", extra={"job_id": job_id, "holder": job.holder, "revision": job.revision})
    claimed_at = time.monotonic()
    services.metrics.job_claimed(job.queue, job.waited_seconds)
    services.events.publish(job.id, StateEvent(state=JobState.RUNNING))
    suspect = job.worker_deaths > 0
    if suspect:
        logger.warning("job was running when a worker died; it runs alone", extra={"job_id": job.id})
    started = functools.partial(job_records.mark_started, services.database, job)
    with (
        Heartbeat(
            f"heartbeat-{job.id}",
            services.settings.heartbeat_seconds,
            functools.partial(job_records.beat, services.database, job),
            {"job_id": job.id},
        ) as heartbeat,
        services.cancels.watching(job.id) as cancelled,
        services.quarantine.run(suspect, started),
    ):
        try:
            audio_seconds = _run(services, job, _Stops(heartbeat.lost, cancelled), claimed_at)
        except JobCancelled:
            _finish(services, job, JobState.CANCELLED, claimed_at)
        except LeaseLost:
            logger.warning("job taken over by another worker; stopping", extra={"job_id": job.id})
        except EngineDied:
            raise  # not the job's failure: it stays running under this process, which ends
        except Exception as error:
            logger.exception("job failed", extra={"job_id": job.id})
            _finish(services, job, JobState.FAILED, claimed_at, error=error)
        else:
            _finish(services, job, JobState.DONE, claimed_at, audio_seconds=audio_seconds)
        finally:
            if not heartbeat.lost.is_set():  # (a job taken over is the new holder's to clean up)
                services.data.files.drop_local(services.data.job(job.id).root)  # the store keeps it; scratch goes


def _describe(error: Exception) -> str:
    return str(error) or type(error).__name__


def _finish(
    services: WorkerServices,
    job: ClaimedJob,
    state: JobState,
    claimed_at: float,
    *,
    error: Exception | None = None,
    audio_seconds: float | None = None,
) -> None:
    """End the job's attempt in `state`: its row, its event, and this worker's metrics (from `claimed_at`)."""
    storage_bytes = services.data.files.tree_bytes(services.data.job(job.id).root)  # its usage from now on
    message = None if error is None else _describe(error)
    ended = job_records.finish_job(
        services.database, job, state, error=message, audio_seconds=audio_seconds, storage_bytes=storage_bytes
    )
    if ended:
        elapsed = time.monotonic() - claimed_at
        services.metrics.job_ended(job.queue, state, elapsed, audio_seconds=audio_seconds, error=error)
        services.events.publish(job.id, StateEvent(state=state, error=message))
        logger.info("job ended", extra={"job_id": job.id, "state": str(state), "error": message})


@dataclass(frozen=True)
class _Stops:
    """What stops a running job: its lease lost (another worker holds it now), or its cancel asked for."""

    lease_lost: threading.Event
    cancelled: threading.Event


def _run(services: WorkerServices, job: ClaimedJob, stops: _Stops, claimed_at: float) -> float:
    folder, files = services.data.job(job.id), services.data.files
    files.drop_local(folder.root)  # with an object store, what this host holds of the job may be stale: fetch anew
    if left := folder.remove_temporaries():  # an earlier attempt killed mid-write
        logger.info("removed temporaries of an earlier attempt", extra={"job_id": job.id, "files": len(left)})
    _fetch_inputs(files, folder, job)
    script = read_script(folder, job.revision)
    plan = plan_job(script, job.mode, job.max_segment_seconds)
    planned = [
        PlannedSegment(s.index, s.estimated_frames, segment_seed(job.seed, s.index), s.text_hash) for s in plan.segments
    ]
    records = job_records.prepare_segments(services.database, job, planned, plan.estimated_frames)
    for record in records:
        if record.text_changed:
            logger.warning(
                "segment's words differ from what it stored (the script reads differently now); generating it again",
                extra={"job_id": job.id, "segment": record.index},
            )
            _discard_partial(files, PartialFrames(folder.segment_partial_frames(record.index)))
    voices = {speaker: read_audio(folder.voice(speaker)) for speaker in job.speakers}
    settings = services.settings
    crash_test = _marked(script, settings.crash_on_script_text)
    watcher = _FrameWatcher(services, job, stops, plan, claimed_at, crash_test=crash_test)
    stored: dict[int, PlacedSegment] = {}
    pending: list[tuple[Segment, SegmentRecord]] = []
    for segment, record in zip(plan.segments, records, strict=True):
        kept = _stored_segment(services.data, record)
        if kept is None:
            pending.append((segment, record))
        else:
            logger.info("segment already stored; not regenerated", extra={"job_id": job.id, "segment": segment.index})
            # frames an attempt left when it was killed between storing the segment and forgetting them
            _discard_partial(files, PartialFrames(folder.segment_partial_frames(segment.index)))
            watcher.skip(record.frames)
            stored[segment.index] = kept
    fault = _marked(script, settings.engine_fault_on_script_text)
    groups = [pending] if pending else []  # every pending segment at once
    if settings.worker_sequential_segments:  # one after another: the benchmark's comparison with the old workers
        groups = [[item] for item in pending]
    for group in groups:
        stored |= _generate(services, job, folder, plan, group, voices, watcher, engine_fault=fault)
    audio, turns = lay_out_episode(plan, stored)
    _write_outputs(folder, job, audio, turns)
    files.publish_tree(folder.outputs)  # before the row says done: every api host can serve them then
    return len(audio) / SAMPLE_RATE


def _fetch_inputs(files: FileStore, folder: JobFolder, job: ClaimedJob) -> None:
    """The job's script (at its revision) and its voices, from the store to this host."""
    for path in (script_path(folder, job.revision), *(folder.voice(speaker) for speaker in job.speakers)):
        if not files.fetch(path):
            raise FileNotFoundError(f"the job's input {path.relative_to(folder.root)} is missing from its files")


def _discard_partial(files: FileStore, partial: PartialFrames) -> None:
    """A segment's partial frames forgotten, here and in the store: it is stored whole, or must start over."""
    partial.discard()
    files.remove_file(partial.path)


def _marked(script: str, marker: str | None) -> bool:
    """Whether a test hook's marker text (`Settings.crash_on_script_text` and the like) is in the script."""
    return bool(marker) and marker in script


def _stored_segment(data: DataFolder, record: SegmentRecord) -> PlacedSegment | None:
    if not record.done or record.audio_path is None:
        return None
    path = data.resolve(record.audio_path)
    if not data.files.fetch(path):
        return None
    return PlacedSegment(audio=read_segment_audio(path), turns=tuple(TimedTurn(*turn) for turn in record.turns))


def _generate(
    services: WorkerServices,
    job: ClaimedJob,
    folder: JobFolder,
    plan: Plan,
    pending: list[tuple[Segment, SegmentRecord]],
    voices: dict[int, np.ndarray],
    watcher: _FrameWatcher,
    *,
    engine_fault: bool,
) -> dict[int, PlacedSegment]:
    """Generate every pending segment at once, storing each the moment it finishes; the stored segments.

    The first segment to fail fails the job with its reason, and the others are cancelled; so are they all
    when the job is cancelled or its lease lost.
    """
    runs = {segment.index: _SegmentRun(services, job, folder, segment, record.seed) for segment, record in pending}
    for index, run in runs.items():
        watcher.start_segment(index, resumed=run.resumed)
    watcher.report()
    model = services.model()
    generation = start_plan_generation(
        model,
        plan,
        [PendingSegment(segment, record.seed, runs[segment.index].resume) for segment, record in pending],
        voices,
        cfg_scale=job.cfg_scale,
        diffusion_steps=job.diffusion_steps,
        scheduling=Scheduling(job=job.id, interactive=job.queue == "interactive", priority=job.priority),
        engine_fault=engine_fault,
    )
    placed: dict[int, PlacedSegment] = {}
    try:
        while generation.running:
            for update in generation.updates(WAIT_SECONDS):
                if isinstance(update, SegmentFrame):
                    runs[update.index].add(update)
                    watcher.frame(update.index, update.frames)
                elif isinstance(update, SegmentFinished):
                    placed[update.index] = _store(services, job, runs[update.index], update.generated, watcher)
                elif isinstance(update, SegmentFailed):
                    _give_up(model, generation, update)
            watcher.check()
    except BaseException:
        generation.cancel()
        raise
    return placed


def _give_up(model: GenerationModel, generation: PlanGeneration, failed: SegmentFailed) -> None:
    """Raise why a segment failed: `EngineDied` when the engine's loop died under it, else `GenerationFailed`."""
    generation.cancel()
    if (why := engine_failure(model)) is not None:
        raise EngineDied(why)
    raise GenerationFailed(failed.message)


class _SegmentRun:
    """One segment generating: its frames so far on disk, its live audio, what an earlier attempt left."""

    def __init__(self, services: WorkerServices, job: ClaimedJob, folder: JobFolder, segment: Segment, seed: int):
        self.services = services
        self.folder = folder
        self.index = segment.index
        self.seed = seed
        job_records.record_segment_started(services.database, job, segment.index)
        self.files = services.data.files
        self.files.fetch(folder.segment_partial_frames(segment.index))  # what an attempt on any host kept
        self.partial = PartialFrames(folder.segment_partial_frames(segment.index))
        self.published_at = time.monotonic()
        self.live = LiveAudio(services.events, job.id, segment.index, services.settings.stream_chunk_frames)
        self.resume = self.partial.stored()
        self.resumed = self.partial.stored_frames
        if self.resume is not None:
            job_records.record_segment_resumed(services.database, job, segment.index, self.resumed)
            logger.info("segment resumed", extra={"job_id": job.id, "segment": segment.index, "frames": self.resumed})

    def add(self, frame: SegmentFrame) -> None:
        self.partial.add(frame.frames, frame.tokens, frame.latent)
        self.live.add(frame.samples)
        if (
            time.monotonic() - self.published_at >= self.services.settings.heartbeat_seconds
            and self.partial.path.exists()
        ):
            self.files.publish(self.partial.path)  # another host resumes from here (a heartbeat's frames lost at most)
            self.published_at = time.monotonic()


def _store(
    services: WorkerServices, job: ClaimedJob, run: _SegmentRun, generated: GeneratedSegment, watcher: _FrameWatcher
) -> PlacedSegment:
    """Store a finished segment: its audio and latents, then its row (done, with the job's progress), then say so."""
    run.live.flush()
    index = run.index
    audio_path = run.folder.segment_audio(index)
    stored_audio = write_segment_audio(audio_path, generated.audio)  # what a later run reads back, exactly
    latents_path = atomic_write(run.folder.segment_latents(index), lambda handle: np.save(handle, generated.latents))
    services.data.files.publish(audio_path)  # both in the store before the row points at them
    services.data.files.publish(latents_path)
    turns = tuple((t.index, t.speaker_name, t.text, t.start, t.end) for t in generated.turns)
    data = services.data
    record = SegmentRecord(index, True, generated.frames, run.seed, data.relative(audio_path), turns)
    frames_done, segments_done = watcher.end_segment(index, generated.frames)
    job_records.record_segment_done(
        services.database, job, record, generated.seconds, data.relative(latents_path), frames_done, segments_done
    )
    _discard_partial(services.data.files, run.partial)
    services.events.publish(job.id, SegmentEvent(index=index, seconds=round(generated.seconds, 3)))
    logger.info("segment stored", extra={"job_id": job.id, "segment": index, "frames": generated.frames})
    return PlacedSegment(audio=stored_audio, turns=generated.turns)


def _write_outputs(folder: JobFolder, job: ClaimedJob, audio: np.ndarray, turns: tuple[TimedTurn, ...]) -> None:
    """Every requested audio format (at the job's bitrates), each with its transcript and chapters, atomically."""
    episode = Episode(audio=normalize_loudness(audio), turns=turns, chapters=chapters_from_turns(turns))
    write_episode(episode, *(folder.output(f"episode.{name}") for name in job.formats), kbps=job.kbps)


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


class _FrameWatcher:
    """A job's progress over its segments generating side by side; stops it on cancel or a lost lease.

    `frames_done` is the frames of the stored segments plus, for each one generating, what it has made (or
    replayed) so far: it never goes back, however the segments' frames interleave. Progress is reported at
    most every `PROGRESS_INTERVAL_SECONDS`; the ETA goes by the frames generated in this attempt.
    """

    def __init__(
        self,
        services: WorkerServices,
        job: ClaimedJob,
        stops: _Stops,
        plan: Plan,
        claimed_at: float,
        *,
        crash_test: bool,
    ) -> None:
        self.services = services
        self.claimed_at = claimed_at  # monotonic: the first frame's wait is measured from it
        self.heard = False  # a frame of this attempt has come
        self.crash_test = crash_test  # see `Settings.crash_on_script_text`
        self.job = job
        self.stops = stops
        self.frames_planned = plan.estimated_frames
        self.segments = len(plan.segments)
        self.frames_stored = 0  # frames of the segments done: found stored, or finished in this attempt
        self.segments_done = 0
        self.generating: dict[int, _Generating] = {}
        self.generated_stored = 0  # frames generated in this attempt by segments now stored
        self.started = time.monotonic()
        self.last_report = 0.0

    @property
    def frames_done(self) -> int:
        return self.frames_stored + sum(segment.done for segment in self.generating.values())

    def skip(self, frames: int) -> None:
        """A segment found stored: its frames are done."""
        self.frames_stored += frames
        self.segments_done += 1

    def start_segment(self, index: int, resumed: int = 0) -> None:
        """Segment `index` starts generating, `resumed` of its frames replayed from an earlier attempt."""
        self.generating[index] = _Generating(resumed)

    def frame(self, index: int, frames_in_segment: int) -> None:
        """Segment `index` has made `frames_in_segment` frames."""
        if self.crash_test and frames_in_segment >= CRASH_TEST_FRAME:
            logger.critical("crash test: this worker dies now", extra={"job_id": self.job.id})
            os.kill(os.getpid(), signal.SIGSEGV)
        if not self.heard:
            self.heard = True
            self.services.metrics.job_first_audio(self.job.queue, time.monotonic() - self.claimed_at)
        self.generating[index].frames = frames_in_segment

    def end_segment(self, index: int, frames: int) -> tuple[int, int]:
        """Segment `index` is stored with `frames` frames; the job's (frames done, segments done) for its row."""
        self.generated_stored += max(0, frames - self.generating.pop(index).resumed)
        self.frames_stored += frames
        self.segments_done += 1
        self.report(record=False)  # the segment's row carries the progress
        return self.frames_done, self.segments_done

    def check(self) -> None:
        """Stop the job (`LeaseLost`, `JobCancelled`) if it must stop; report progress if it is time to."""
        if self.stops.lease_lost.is_set():
            raise LeaseLost(self.job.id)
        if self.stops.cancelled.is_set():
            raise JobCancelled(self.job.id)
        if time.monotonic() - self.last_report >= PROGRESS_INTERVAL_SECONDS:
            self.report()

    def report(self, *, record: bool = True) -> None:
        """Publish a progress event now (and write the job's progress, with `record`)."""
        now = self.last_report = time.monotonic()
        frames_done = self.frames_done
        if record:
            job_records.record_progress(self.services.database, self.job, frames_done, self.segments_done)
        generated = self.generated_stored + sum(segment.generated for segment in self.generating.values())
        event = ProgressEvent(
            state=JobState.RUNNING,
            frames_done=frames_done,
            frames_planned=self.frames_planned,
            segment=min(self.generating, default=self.segments - 1),
            segments=self.segments,
            eta_seconds=eta_seconds(self.frames_planned, frames_done, generated, now - self.started),
        )
        self.services.events.publish(self.job.id, event)

"""Running one job on a worker, top to bottom: claim → inputs → plan → generate → store → assemble → finish.

`execute_job` claims the job (`core.job_repository`), holds it under a heartbeat and its cancel watch, and turns how
its run ended into the job's outcome: done, failed, cancelled, handed back (a planned stop: queued again with no
worker death counted, `HandedBack`), or left as it is when the engine died (`EngineDied`: the process ends, so that
its supervisor restarts it and the job runs again). `_run` is the path itself: fetch the inputs, plan the script at
the job's revision, find the segments already stored, generate the rest (`workers.job_generation`, storing each as
it finishes: `workers.segment_store`), lay out and write the episode, publish it.
"""

from __future__ import annotations

import functools
import logging
import time

import numpy as np

from assembly.episode import Episode, write_episode
from assembly.loudness import normalize_loudness
from assembly.transcripts import chapters_from_turns
from core import job_repository
from core.audio_rates import SAMPLE_RATE
from core.db import DatabaseUnavailable
from core.file_store import FileStore
from core.job_events import StateEvent
from core.job_repository import ClaimedJob, PlannedSegment, SegmentRecord
from core.job_scripts import read_script, script_path
from core.job_states import JobState
from core.storage import JobFolder, is_disk_full, read_audio
from core.storage_usage import record_job_bytes
from pipeline.podcast import PlacedSegment, lay_out
from script_text.plan import Segment, plan_job, segment_seed
from script_text.timeline import TimedTurn
from workers.heartbeat import Heartbeat
from workers.job_generation import generate_pending
from workers.job_progress import JobProgress
from workers.job_stops import EngineDied, HandedBack, JobCancelled, JobStops, LeaseLost, Stopping
from workers.live_audio import drop_live_audio
from workers.partial_frames import PartialFrames
from workers.quarantine import QuarantineClosed
from workers.segment_store import discard_partial, stored_segment
from workers.worker_services import WorkerServices, holder_name

logger = logging.getLogger(__name__)


def execute_job(services: WorkerServices, job_id: str, revision: int | None = None) -> None:
    """Run the job unless it is finished, cancelled or held by a live worker (then do nothing).

    With `revision` (a regenerated turn), only while the job is at that revision. Either way the run
    generates exactly the segments not stored (a regeneration set its turn's back to pending) and assembles
    the episode again from all of them.
    """
    job = job_repository.claim_job(
        services.database, job_id, holder_name(), services.settings.stale_after_seconds, revision=revision
    )
    if isinstance(job, job_repository.CancelledAtClaim):
        with services.database.session() as session:
            record_job_bytes(session, services.data, job.id)
        logger.info("job cancelled before it ran again", extra={"job_id": job_id})
        return
    if job is None:
        logger.info("job not claimed: finished, cancelled or held elsewhere", extra={"job_id": job_id})
        return
    logger.info("job claimed", extra={"job_id": job_id, "holder": job.holder, "revision": job.revision})
    claimed_at = services.clock()
    services.metrics.job_claimed(job.queue, job.waited_seconds)
    services.events.publish(job.id, StateEvent(state=JobState.RUNNING))
    suspect = job.worker_deaths > 0
    if suspect:
        logger.warning("job was running when a worker died; it runs alone", extra={"job_id": job.id})
    started = functools.partial(job_repository.mark_started, services.database, job)
    taken_over = False  # another worker holds the job now: its scratch is the new holder's to clean up
    with (
        Heartbeat(
            f"heartbeat-{job.id}",
            services.settings.heartbeat_seconds,
            functools.partial(job_repository.beat, services.database, job),
            {"job_id": job.id},
        ) as heartbeat,
        services.cancels.watching(job.id) as cancelled,
    ):
        try:
            with services.quarantine.run(suspect, started):
                stops = JobStops(job.id, heartbeat.lost, cancelled, services.stopping)
                try:
                    audio_seconds = _run_through_full_disk(services, job, stops, claimed_at)
                except EngineDied:
                    # The process ends: a job waiting for its turn must not start on a dead engine and be charged
                    # the death; it is handed back instead.
                    services.quarantine.close()
                    raise
        except JobCancelled:
            taken_over = not _finish(services, job, JobState.CANCELLED, claimed_at)
        except (Stopping, QuarantineClosed):
            taken_over = not _hand_back(services, job, claimed_at)
        except LeaseLost:
            taken_over = True
        except EngineDied:
            raise  # not the job's failure: it stays running under this process, which ends
        except DatabaseUnavailable as error:
            # Not the job's failure either: the database was away past its budget. Hand it back (the database may
            # be back by now); if it still does not answer, the job stays running under this live process, and the
            # sweeper hands it back (never charged) once the database answers again.
            logger.warning(
                "the database stayed away; the job is handed back", extra={"job_id": job.id, "error": str(error)}
            )
            taken_over = not _hand_back(services, job, claimed_at)
        except Exception as error:
            logger.exception("job failed", extra={"job_id": job.id})
            taken_over = not _finish(services, job, JobState.FAILED, claimed_at, error=error)
        else:
            taken_over = not _finish(services, job, JobState.DONE, claimed_at, audio_seconds=audio_seconds)
        finally:
            # By how the run ended, not by the heartbeat, which may find the row no longer running once it ended.
            if taken_over:
                _let_go(services, job)
            else:
                services.data.files.drop_local(services.data.job(job.id).root)  # the store keeps it; scratch goes


def _let_go(services: WorkerServices, job: ClaimedJob) -> None:
    """The job was taken back while this worker was silent (paused, or cut off), found at a stop check or only when
    its end could not be written (its last step came before any check): this process lives, so a death charged to
    it for that silence is taken back. Its scratch is left while another worker may hold the job now; once the job
    has ended (cancelled at once while it was queued again), nobody does: the scratch goes, and the folder's bytes
    are counted again, since what this worker wrote or removed after the end changed them."""
    forgiven = job_repository.forgive_death(services.database, job)
    logger.warning("job taken over by another worker; stopping", extra={"job_id": job.id, "forgiven": forgiven})
    folder = services.data.job(job.id)
    if job_repository.has_ended(services.database, job.id):
        drop_live_audio(folder)
        job_repository.recount_ended(services.database, job.id, services.data.files.tree_bytes(folder.root))


def _hand_back(services: WorkerServices, job: ClaimedJob, claimed_at: float) -> bool:
    """Queue the job again (its segments and partial frames are stored) and raise `HandedBack` for the task to send
    its message again; a job whose cancel was asked for meanwhile ends cancelled instead. False when this worker no
    longer held the job (another does now)."""
    drop_live_audio(services.data.job(job.id))
    if not job_repository.hand_back_job(services.database, job):
        return _finish(services, job, JobState.CANCELLED, claimed_at)
    services.events.publish(job.id, StateEvent(state=JobState.QUEUED))
    logger.info("job handed back: its worker stops; it runs again from what it stored", extra={"job_id": job.id})
    raise HandedBack(job)


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
) -> bool:
    """End the job's attempt in `state`: its row, its event, and this worker's metrics (from `claimed_at`); False
    when this worker no longer held the job, so nothing was ended."""
    drop_live_audio(services.data.job(job.id))  # scratch of a segment cut short: never the job's to keep
    storage_bytes = services.data.files.tree_bytes(services.data.job(job.id).root)  # its usage from now on
    message = None if error is None else _describe(error)
    ended = job_repository.finish_job(
        services.database, job, state, error=message, audio_seconds=audio_seconds, storage_bytes=storage_bytes
    )
    if ended:
        elapsed = services.clock() - claimed_at
        services.metrics.job_ended(job.queue, state, elapsed, audio_seconds=audio_seconds, error=error)
        services.events.publish(job.id, StateEvent(state=state, error=message))
        logger.info("job ended", extra={"job_id": job.id, "state": str(state), "error": message})
    return ended


def _run_through_full_disk(services: WorkerServices, job: ClaimedJob, stops: JobStops, claimed_at: float) -> float:
    """`_run`; a write that meets a full data disk waits for space and runs again from what the job stored (its stored
    segments are kept, a segment cut short resumes from its frames), for up to `disk_full_wait_seconds` in all.

    A full disk is the host's condition, not the job's fault: failing the job (and every other job writing then)
    for it would end good work an operator can save by freeing space. While it waits, the job keeps its lease and
    still stops at once for a cancel, a planned stop or a lost lease.
    """
    budget = services.settings.disk_full_wait_seconds
    waited = 0.0
    while True:
        try:
            return _run(services, job, stops, claimed_at)
        except OSError as error:
            if not is_disk_full(error) or waited >= budget:
                raise
            pause = min(max(1.0, waited), _LONGEST_DISK_PAUSE, budget - waited)  # 1, 1, 2, 4, 8, 8 ... seconds
            logger.warning(
                "the data folder's disk is full; the job waits for space, then goes on from what it stored",
                extra={"job_id": job.id, "error": str(error), "waited_seconds": round(waited, 1)},
            )
            waited += _pause(stops, pause)


_LONGEST_DISK_PAUSE = 8.0  # seconds between tries on a full disk: space an operator frees is used within them


def _pause(stops: JobStops, seconds: float) -> float:
    """Sleep `seconds`, raising at once for whatever stops the job; the seconds slept."""
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < seconds:
        stops.check()
        time.sleep(min(_STOP_CHECK_SECONDS, seconds - elapsed))
    stops.check()
    return time.monotonic() - started


_STOP_CHECK_SECONDS = 0.2


def _run(services: WorkerServices, job: ClaimedJob, stops: JobStops, claimed_at: float) -> float:
    """The job's path; the episode's seconds."""
    folder, files = services.data.job(job.id), services.data.files
    files.drop_local(folder.root)  # with an object store, what this host holds of the job may be stale: fetch anew
    if left := folder.remove_temporaries():  # an earlier attempt killed mid-write
        logger.info("removed temporaries of an earlier attempt", extra={"job_id": job.id, "files": len(left)})
    # inputs
    _fetch_inputs(files, folder, job)
    script = read_script(folder, job.revision)
    voices = {speaker: read_audio(folder.voice(speaker)) for speaker in job.speakers}
    # plan: the segments and their rows (a regenerated turn's are pending again, with their new seeds)
    plan = plan_job(script, job.mode, job.max_segment_seconds)
    planned = [
        PlannedSegment(s.index, s.estimated_frames, segment_seed(job.seed, s.index), s.text_hash) for s in plan.segments
    ]
    records = job_repository.prepare_segments(services.database, job, planned)
    counted = _counted(job, plan.segments, records)
    job_repository.record_planned(services.database, job, sum(s.estimated_frames for s in counted), len(counted))
    progress = JobProgress(services, job, counted, claimed_at)
    stored, pending = _stored_and_pending(services, job, folder, plan.segments, records, progress)
    # generate and store
    if pending:
        stored |= generate_pending(services, job, folder, plan, pending, voices, progress, stops)
    stops.check()  # a stop asked for now hands back a job whose segments are all stored: the next run assembles it
    progress.report_if_due()
    # assemble
    audio, turns = lay_out(plan, stored)
    _write_outputs(folder, job, audio, turns)
    files.publish_tree(folder.outputs)  # before the row says done: every api host can serve them then
    return len(audio) / SAMPLE_RATE


def _counted(job: ClaimedJob, segments: tuple[Segment, ...], records: list[SegmentRecord]) -> list[Segment]:
    """The segments this run is for: all of a first render; a regeneration's own (its revision's, and any its words
    changed), not the ones it keeps."""
    if job.revision == 0:
        return list(segments)
    return [
        segment
        for segment, record in zip(segments, records, strict=True)
        if record.revision == job.revision or not record.done
    ]


def _fetch_inputs(files: FileStore, folder: JobFolder, job: ClaimedJob) -> None:
    """The job's script (at its revision) and its voices, from the store to this host."""
    for path in (script_path(folder, job.revision), *(folder.voice(speaker) for speaker in job.speakers)):
        if not files.fetch(path):
            raise FileNotFoundError(f"the job's input {path.relative_to(folder.root)} is missing from its files")


def _stored_and_pending(
    services: WorkerServices,
    job: ClaimedJob,
    folder: JobFolder,
    segments: tuple[Segment, ...],
    records: list[SegmentRecord],
    progress: JobProgress,
) -> tuple[dict[int, PlacedSegment], list[tuple[Segment, SegmentRecord]]]:
    """The segments an earlier attempt stored (counted done), and those to generate now."""
    files = services.data.files
    stored: dict[int, PlacedSegment] = {}
    pending: list[tuple[Segment, SegmentRecord]] = []
    for segment, record in zip(segments, records, strict=True):
        partial = PartialFrames(folder.segment_partial_frames(segment.index))
        if record.text_changed:
            logger.warning(
                "segment's words differ from what it stored (the script reads differently now); generating it again",
                extra={"job_id": job.id, "segment": record.index},
            )
            discard_partial(files, partial)
        kept = stored_segment(services.data, record)
        if kept is None:
            pending.append((segment, record))
            continue
        logger.info("segment already stored; not regenerated", extra={"job_id": job.id, "segment": segment.index})
        discard_partial(files, partial)  # frames an attempt left when killed between storing it and forgetting them
        progress.skip(segment.index, record.frames)
        stored[segment.index] = kept
    return stored, pending


def _write_outputs(folder: JobFolder, job: ClaimedJob, audio: np.ndarray, turns: tuple[TimedTurn, ...]) -> None:
    """Every requested audio format (at the job's bitrates), each with its transcript and chapters, atomically."""
    episode = Episode(audio=normalize_loudness(audio), turns=turns, chapters=chapters_from_turns(turns))
    write_episode(episode, *(folder.output(f"episode.{name}") for name in job.formats), kbps=job.kbps)

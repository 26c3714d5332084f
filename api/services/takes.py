"""The take a regeneration replaced, kept until the listener chooses: hear both, keep either.

When a regeneration starts (`api.services.regeneration`), the segments it generates again are set aside: their files
are copied beside the new ones (`JobFolder.previous_take`) and their rows' values go into `Job.previous_take`, in the
regeneration's transaction (a copy, so a transaction that fails leaves only spare files). Once the new take is done,
the job view lists the earlier one (each segment's audio at `.../segments/{n}/audio?take=previous`), and
`POST /v1/jobs/{id}/takes` ends the choice:
- keep `new`: the earlier take's files are removed;
- keep `previous`: in one transaction the job goes to a new revision whose script is the earlier take's and whose
  segment rows are the earlier take's, pointing at its files where they are; the worker generates nothing and
  assembles the episode again. (A later regeneration of such a segment keeps those same files as its earlier take.)
A later regeneration replaces an earlier take not chosen (it is removed): one earlier take at a time.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, cast

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.deps import ApiServices, Caller
from api.errors import Conflict
from api.schemas import JobView
from api.services.jobs import job_view, owned_job
from api.services.revisions import start_revision
from core import job_repository
from core.job_scripts import read_script, script_path, write_script
from core.job_states import JobState, QueueKind
from core.models import Job, JobSegment
from core.storage import DataFolder, atomic_write
from workers.regeneration import enqueue_regeneration

logger = logging.getLogger(__name__)

TakeKept = Literal["new", "previous"]
_KEPT_FIELDS = ("index", "frames", "seconds", "seed", "revision", "text_hash", "turns")


def set_aside(session: Session, data: DataFolder, job: Job, indices: Iterable[int]) -> None:
    """Keep the segments `indices` as they are now as the job's earlier take (before they go back to pending)."""
    discard(session, data, job)
    folder = data.job(job.id)
    rows = session.scalars(select(JobSegment).where(JobSegment.job_id == job.id, JobSegment.index.in_(list(indices))))
    kept = []
    for row in rows:
        if row.audio_path is None or row.latents_path is None:
            return  # a segment without its files (stored by an old version): there is no whole take to keep
        audio, latents = folder.previous_take(row.index)
        _copy(data, data.resolve(row.audio_path), audio)
        _copy(data, data.resolve(row.latents_path), latents)
        kept.append({field: getattr(row, field) for field in _KEPT_FIELDS})
    take = {"revision": job.revision, "segments": sorted(kept, key=lambda segment: segment["index"])}
    job_repository.keep_previous_take(session, job.id, take)
    session.refresh(job)


def discard(session: Session, data: DataFolder, job: Job) -> None:
    """Remove the job's earlier take, if it keeps one."""
    if job.previous_take is None:
        return
    folder = data.job(job.id)
    for segment in job.previous_take["segments"]:
        for path in folder.previous_take(segment["index"]):
            data.files.remove_file(path)
    job_repository.keep_previous_take(session, job.id, None)
    session.refresh(job)


def choose_take(services: ApiServices, caller: Caller, job_id: str, keep: TakeKept) -> JobView:
    """Keep the new take (the earlier one goes) or the earlier one (the job assembles it again); 409 unless the job
    is done and keeps an earlier take."""
    with services.database.session() as session:
        job = owned_job(session, caller, job_id)
        if job.job_state is not JobState.DONE:
            raise Conflict(f"job {job_id} is {job.state}; choose a take once it is done")
        if job.previous_take is None:
            raise Conflict(f"job {job_id} keeps no earlier take to choose from; a regeneration keeps one")
        if keep == "new":
            discard(session, services.data, job)
            logger.info("new take kept", extra={"job_id": job_id, "revision": job.revision})
            return job_view(session, job)
        revision = _restore(services, session, job)
        view = job_view(session, job)
        queue, priority = cast(QueueKind, job.queue), job.priority
    services.data.files.drop_local(services.data.job(job_id).root)
    logger.info("earlier take kept; the episode is assembled again", extra={"job_id": job_id, "revision": revision})
    try:
        enqueue_regeneration(services.celery, services.settings.redis_namespace, job_id, revision, queue, priority)
    except Exception as error:  # the broker is down: the job stays queued in the database for the sweeper
        logger.warning("could not enqueue; the sweeper will", extra={"job_id": job_id, "error": str(error)})
    return view


def _restore(services: ApiServices, session: Session, job: Job) -> int:
    """The earlier take back in place at a new revision, queued with nothing to generate; the revision."""
    take: dict[str, Any] = cast(dict[str, Any], job.previous_take)
    data, folder = services.data, services.data.job(job.id)
    revision = job.revision + 1
    data.files.fetch(script_path(folder, take["revision"]))
    script = read_script(folder, take["revision"])
    start_revision(session, job, revision, seeds={}, text_hashes={})
    for segment in take["segments"]:
        audio, latents = folder.previous_take(segment["index"])
        values = {field: segment[field] for field in _KEPT_FIELDS if field != "index"}
        values |= {"audio_path": data.relative(audio), "latents_path": data.relative(latents)}
        job_repository.restore_segment(session, job.id, segment["index"], values)
    data.files.publish(write_script(folder, revision, script))  # before the row commits, as at submission
    job_repository.keep_previous_take(session, job.id, None)
    session.refresh(job)
    return revision


def _copy(data: DataFolder, source: Path, target: Path) -> None:
    """A stored file copied under another name, here and in the store; nothing when it already has that name."""
    if source == target or not data.files.fetch(source):
        return
    with source.open("rb") as stored:
        atomic_write(target, lambda handle: shutil.copyfileobj(stored, handle))
    data.files.publish(target)
    data.files.drop_local(source)
    data.files.drop_local(target)

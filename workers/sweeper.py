"""The sweeper: puts back in the queue what a dead worker or a forgetful broker lost.

The database is the record of every job; Redis only carries messages. Two things can lose a job's message:
- a worker dies mid-job (kill -9, OOM, power). Its message stays unacknowledged in Redis until the
  visibility timeout, which is longer than the longest job; the job's heartbeat, though, stops at once.
  A running job whose heartbeat is older than `stale_after_seconds` is re-enqueued: handed back when its process
  still lives (announced in Redis, or alive on this host), else counting a worker death: at `max_worker_deaths` it
  is failed instead (a job that crashes every worker must not do so forever).
- Redis restarts without its data (or a send failed while it was down), or a worker died between taking a job's
  message and claiming the job. A queued job older than `stale_after_seconds` whose id is in no queue, and not in a
  delivery made within `stale_after_seconds`, is re-enqueued (such a delivery dropped first).
A delivery nobody will acknowledge (its worker died and its job was taken back, or its job has ended) is forgotten
at once, so Redis does not deliver it again hours later for nothing. A re-enqueue can duplicate a message that was
not lost after all; that is harmless, since the task only runs a job it can claim (see `core.job_repository`).

It also keeps house: it finishes any job delete that a crash interrupted (`core.job_deletion.empty_trash`) and
applies the retention policy (`core.retention`), every round: both are a few indexed queries when there is
nothing to do.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Literal

import redis
from celery import Celery
from sqlalchemy import select

from core.db import Database, DatabaseUnavailable, is_transient
from core.job_deletion import empty_trash
from core.job_repository import AbandonedJob, mark_resent, release_abandoned_jobs
from core.job_states import FINAL_STATES, QUEUE_KINDS, JobState, QueueKind, queue_kind
from core.models import Job, ScriptJob, utc_now
from core.retention import apply_retention
from core.settings import Settings
from core.storage import DataFolder
from core.storage_usage import record_job_bytes
from core.worker_presence import worker_key, worker_key_pattern
from workers.celery_app import broker_key_prefix, enqueue_job, priority_list_keys
from workers.periodic import Periodic

logger = logging.getLogger(__name__)


def job_ids_in_broker(
    client: redis.Redis,
    namespace: str,
    kinds: Sequence[QueueKind | Literal["scripts"]] = QUEUE_KINDS,
    delivered_since: float | None = None,
) -> set[str]:
    """Ids of the jobs whose task message Redis holds, waiting in one of the `kinds` of queue or delivered (to any
    queue's worker) but unacknowledged; with `delivered_since` (a Unix time), only deliveries made since then count.

    A worker takes no more messages than it has task threads (prefetch 1), and claims a job the moment its message
    arrives: a job still queued long after its delivery was delivered to a worker that died before claiming it, and
    that delivery would come back only after the visibility timeout, hours later (chaos soak: a job stranded so)."""
    payloads: list[bytes | str] = []  # bytes: the client does not decode
    for kind in kinds:
        for key in priority_list_keys(namespace, kind):
            payloads += client.lrange(key, 0, -1)
    found = {_task_id(json.loads(payload)) for payload in payloads}
    prefix = broker_key_prefix(namespace)
    delivered: dict[bytes, float] = {
        tag: at for tag, at in client.zscan_iter(prefix + "unacked_index")
    }  # tag: when kombu delivered it (Unix time)
    for tag, value in client.hscan_iter(prefix + "unacked"):
        if delivered_since is None or delivered.get(tag, delivered_since) >= delivered_since:
            message, *_ = json.loads(value)
            found.add(_task_id(message))
    return found


def _task_id(message: dict) -> str:
    return str(message.get("headers", {}).get("id", ""))


def unacked_deliveries(client: redis.Redis, namespace: str) -> dict[bytes, str]:
    """Every delivered, unacknowledged message Redis holds (kombu's `unacked` hash): its delivery tag and job id."""
    prefix = broker_key_prefix(namespace)
    return {tag: _task_id(json.loads(value)[0]) for tag, value in client.hscan_iter(prefix + "unacked")}


def drop_deliveries(client: redis.Redis, namespace: str, tags: Collection[bytes]) -> None:
    """Forget these unacknowledged deliveries: their worker died, or their job has ended, so nobody will acknowledge
    them, and Redis would deliver them again only after the visibility timeout (hours), for nothing."""
    if not tags:
        return
    prefix = broker_key_prefix(namespace)
    with client.pipeline() as pipeline:
        pipeline.hdel(prefix + "unacked", *tags)
        pipeline.zrem(prefix + "unacked_index", *tags)
        pipeline.execute()


def drop_deliveries_of(client: redis.Redis, namespace: str, job_ids: Collection[str]) -> None:
    """Forget the unacknowledged deliveries of these jobs: each is about to be sent again, and its old delivery must
    not come back too (a stopped worker's channel, or serve's next start, puts what it never acknowledged back in
    the queue: the job would then have two messages, and one would find it taken)."""
    if not job_ids:
        return
    wanted = set(job_ids)
    drop_deliveries(
        client, namespace, [tag for tag, job_id in unacked_deliveries(client, namespace).items() if job_id in wanted]
    )


def drop_ended_deliveries(client: redis.Redis, namespace: str, database: Database) -> list[str]:
    """Forget the unacknowledged deliveries of jobs and script jobs that have ended; their ids."""
    deliveries = unacked_deliveries(client, namespace)
    if not deliveries:
        return []
    ids = set(deliveries.values())
    with database.reading() as session:
        ended = set(session.scalars(select(Job.id).where(Job.id.in_(ids), Job.state.in_(FINAL_STATES))))
        ended |= set(
            session.scalars(select(ScriptJob.id).where(ScriptJob.id.in_(ids), ScriptJob.state.in_(FINAL_STATES)))
        )
    drop_deliveries(client, namespace, [tag for tag, job_id in deliveries.items() if job_id in ended])
    return sorted(ended)


def send_back(
    settings: Settings, database: Database, celery: Celery, abandoned: list[AbandonedJob], why: str
) -> list[str]:
    """Enqueue the abandoned jobs that were queued again, each in place of its old delivery (dropped first: a job has
    one message at a time); log the ones the guard failed, which count what their folder holds from now on (not what
    they were expected to write); returns the ids sent."""
    resent = []
    queued_again = [job.id for job in abandoned if not job.failed]
    if queued_again:
        with redis.Redis.from_url(settings.redis_url) as client:
            drop_deliveries_of(client, settings.redis_namespace, queued_again)
    for job in abandoned:
        where = {"job_id": job.id, "worker_deaths": job.worker_deaths}
        if job.failed:
            logger.error(f"{why}; job failed: its worker died too often", extra=where)
            with database.session() as session:
                record_job_bytes(session, DataFolder.from_settings(settings), job.id)
            continue
        logger.warning(f"{why}; job re-enqueued", extra=where)
        enqueue_job(celery, settings.redis_namespace, job.id, queue_kind(job.queue), job.priority)
        resent.append(job.id)
    return resent


def living_processes(client: redis.Redis, namespace: str) -> set[str]:
    """The worker processes ("<host>:<pid>") that are alive: announced in Redis within the last few heartbeats, or
    running on this host (a worker paused past its announcements, SIGSTOP, is alive too). Redis not answering
    raises: who is alive is then unknown, and no job is judged abandoned this round."""
    prefix = worker_key(namespace, "")
    return {key.decode().removeprefix(prefix) for key in client.scan_iter(match=worker_key_pattern(namespace))}


def _alive_here(process: str) -> bool:
    """Whether `process` ("<host>:<pid>") is a live process of this host (False for another host's)."""
    host, _, pid = process.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(int(pid))


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def sweep(
    settings: Settings, database: Database, celery: Celery, client: redis.Redis, *, judge_silence: bool = True
) -> list[str]:
    """Re-enqueue every job a dead worker or the broker lost; returns their ids.

    With `judge_silence` False (this sweeper itself could not reach the database a moment ago, so no worker could
    either, and their heartbeats are stale for that reason alone) no running job is judged by its heartbeat.
    """
    resent: list[str] = []
    if judge_silence:
        living = living_processes(client, settings.redis_namespace)
        living |= {process for process in _holders(database) if _alive_here(process)}
        abandoned = release_abandoned_jobs(
            database,
            stale_after=settings.stale_after_seconds,
            max_worker_deaths=settings.max_worker_deaths,
            living=living,
        )
        resent = send_back(settings, database, celery, abandoned, "worker went silent")
    drop_ended_deliveries(client, settings.redis_namespace, database)
    cutoff = utc_now() - timedelta(seconds=settings.stale_after_seconds)
    with database.session() as session:
        waiting = session.execute(
            select(Job.id, Job.queue, Job.priority).where(Job.state == JobState.QUEUED, Job.enqueued_at < cutoff)
        ).all()
    if not waiting:
        return resent
    in_broker = job_ids_in_broker(
        client, settings.redis_namespace, delivered_since=time.time() - settings.stale_after_seconds
    )
    for job_id, queue, priority in waiting:
        if job_id in in_broker or job_id in resent:
            continue
        logger.warning("broker lost a queued job; re-enqueued", extra={"job_id": job_id})
        drop_deliveries_of(client, settings.redis_namespace, [job_id])  # a dead worker's, never to be acknowledged
        mark_resent(database, job_id)
        enqueue_job(celery, settings.redis_namespace, job_id, queue_kind(queue), priority)
        resent.append(job_id)
    return resent


def _holders(database: Database) -> set[str]:
    """The processes ("<host>:<pid>") that hold a running job."""
    with database.reading() as session:
        workers = session.scalars(select(Job.worker).where(Job.state == JobState.RUNNING, Job.worker.is_not(None)))
        return {worker.rsplit(":", 1)[0] for worker in workers if worker}


class SilenceJudge:
    """Whether a sweeper may judge heartbeats now. Not until `stale_after` seconds after the database answered again
    following an outage that this sweeper saw (a round that met "not now"): the workers could not write their
    heartbeats meanwhile either, and get the same time to catch up as always."""

    def __init__(self, stale_after: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.stale_after = stale_after
        self.clock = clock
        self._away = False  # the last round met the database away
        self._back_at: float | None = None  # when a round reached it again after an outage

    def may_judge(self) -> bool:
        if self._away:
            return False
        return self._back_at is None or self.clock() - self._back_at >= self.stale_after

    def round_ended(self, error: BaseException | None) -> None:
        """Note how a round went: `error` None when it completed."""
        if error is not None:
            if isinstance(error, DatabaseUnavailable) or is_transient(error):
                self._away = True
            return
        if self._away:
            self._away, self._back_at = False, self.clock()
        elif self._back_at is not None and self.may_judge():
            self._back_at = None

    @contextlib.contextmanager
    def round(self) -> Iterator[bool]:
        """A round: yields whether it may judge heartbeats, and notes how it ended."""
        try:
            yield self.may_judge()
        except BaseException as error:
            self.round_ended(error)
            raise
        self.round_ended(None)


class Sweeper(Periodic):
    """Sweeps every `interval` seconds in a daemon thread, first right away (a restarted worker's own jobs); after a
    database outage it judges heartbeats only once the workers had time to write theirs again (`SilenceJudge`)."""

    def __init__(self, settings: Settings, database: Database, celery: Celery, interval: float) -> None:
        super().__init__("voxcast-sweeper", interval, self._round)
        self.settings = settings
        self.database = database
        self.celery = celery
        self.client = redis.Redis.from_url(settings.redis_url)
        self.silence = SilenceJudge(settings.stale_after_seconds)

    def keep_house(self) -> None:
        """Finish interrupted deletes, and remove what the retention policy no longer keeps."""
        data = DataFolder.from_settings(self.settings)
        empty_trash(self.database, data)
        apply_retention(self.settings, self.database, data, utc_now())

    def _round(self) -> None:
        try:
            with self.silence.round() as judge:
                sweep(self.settings, self.database, self.celery, self.client, judge_silence=judge)
        finally:  # a sweep that failed must not hold the housekeeping back, nor a failed housekeeping the sweeps
            self.keep_house()

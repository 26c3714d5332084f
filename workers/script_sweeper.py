"""The scripts workers' sweeper: script jobs a dead scripts worker held, or whose message the broker lost, run again.

Like the speech workers' sweeper (`workers.sweeper`), with the database as the record and Redis only carrying
messages:
- a running script job proves its worker alive with a heartbeat (`workers.heartbeat`); one silent for
  `stale_after_seconds` (its worker killed, hung, or on a host that never came back) is queued and sent again,
  or failed once its workers died `max_worker_deaths` times with it. A scripts worker that starts also takes back
  at once what a previous process of its node name held (claimed before this one started: a job it claims itself as
  it starts, such as one handed back by a planned stop, is its own), without waiting for the heartbeat to go stale.
- a queued script job older than `stale_after_seconds` whose message is in no queue and not unacknowledged
  (Redis restarted empty) is sent again.
Every scripts worker sweeps, every `heartbeat_seconds`: with none running, nothing could run the jobs anyway. A
message sent twice is harmless, since a script job is claimed only from `queued`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta

import redis
from sqlalchemy import or_, select, true

from core.db import Database
from core.job_states import JobState
from core.models import ScriptJob, utc_now
from core.settings import Settings
from workers.celery_app import SCRIPTS_QUEUE
from workers.periodic import Periodic
from workers.sweeper import SilenceJudge, drop_deliveries_of, job_ids_in_broker

logger = logging.getLogger(__name__)

SendScript = Callable[[str], None]  # sends a script job's message


def take_back_script_jobs(
    database: Database,
    send: SendScript,
    *,
    max_deaths: int,
    worker: str | None = None,
    claimed_before: datetime | None = None,
    stale_after: float | None = None,
    now: datetime | None = None,
) -> list[str]:
    """Running script jobs whose worker is gone: held under `worker` (a previous process of this node name: claimed
    before `claimed_before`, this process's start, when given), or silent for `stale_after` seconds. Each is queued
    and sent again, or failed once its workers died `max_deaths` times with it; the ids sent.

    A delivery ends the job, hands it back on a planned stop (`handbacks`), or ends with its worker dead: so a job
    running now has seen `deliveries - handbacks` deaths, this one included. Hand-backs are never counted.
    """
    now = now or utc_now()
    gone = []
    if worker is not None:
        earlier = ScriptJob.started_at < claimed_before if claimed_before is not None else true()
        gone.append((ScriptJob.worker == worker) & earlier)
    if stale_after is not None:
        silent_since = now - timedelta(seconds=stale_after)
        gone.append(ScriptJob.heartbeat_at.is_(None) | (ScriptJob.heartbeat_at < silent_since))
    if not gone:
        return []
    with database.session() as session:
        held = session.scalars(select(ScriptJob).where(ScriptJob.state == JobState.RUNNING, or_(*gone))).all()
        again = []
        for job in held:
            deaths = job.deliveries - job.handbacks
            if deaths >= max_deaths:
                job.state, job.finished_at, job.worker = JobState.FAILED, now, None
                job.error = (
                    f"its scripts worker died {deaths} times while running it (VOXCAST_MAX_WORKER_DEATHS); "
                    "it is not tried again"
                )
            else:  # it starts over: the attempts of the run that died are not this run's
                job.state, job.worker, job.attempt_log = JobState.QUEUED, None, []
                again.append(job.id)
        if held:
            logger.warning(
                "took back the script jobs of a dead scripts worker",
                extra={"worker": worker or "silent", "jobs": ",".join(job.id for job in held)},
            )
    for script_id in again:
        send(script_id)
    return again


def resend_lost_script_jobs(
    database: Database, client: redis.Redis, namespace: str, send: SendScript, stale_after: float
) -> list[str]:
    """Queued script jobs older than `stale_after` seconds that Redis holds no message for, sent again; their ids."""
    cutoff = utc_now() - timedelta(seconds=stale_after)
    with database.reading() as session:
        waiting = session.scalars(
            select(ScriptJob.id).where(ScriptJob.state == JobState.QUEUED, ScriptJob.created_at < cutoff)
        ).all()
    if not waiting:
        return []
    # a delivery older than `stale_after` went to a worker that died before claiming it (`job_ids_in_broker`)
    in_broker = job_ids_in_broker(client, namespace, kinds=(SCRIPTS_QUEUE,), delivered_since=time.time() - stale_after)
    lost = [script_id for script_id in waiting if script_id not in in_broker]
    for script_id in lost:
        logger.warning("broker lost a queued script job; sent again", extra={"script_id": script_id})
        drop_deliveries_of(client, namespace, [script_id])
        send(script_id)
    return lost


class ScriptSweeper(Periodic):
    """Every `heartbeat_seconds`: silent script jobs taken back, lost messages sent again. The first round also
    takes back what this node name held when this process started at `started_at` (a previous process of it died)."""

    def __init__(
        self, settings: Settings, database: Database, send: SendScript, node_name: str, started_at: datetime
    ) -> None:
        super().__init__("voxcast-script-sweeper", settings.heartbeat_seconds, self._round)
        self.settings = settings
        self.database = database
        self.send = send
        self.node_name: str | None = node_name  # cleared after the first round
        self.started_at = started_at
        self.client = redis.Redis.from_url(settings.redis_url)
        self.silence = SilenceJudge(settings.stale_after_seconds)  # no judging of heartbeats right after an outage

    def _round(self) -> None:
        settings = self.settings
        with self.silence.round() as judge:
            take_back_script_jobs(
                self.database,
                self.send,
                max_deaths=settings.max_worker_deaths,
                worker=self.node_name,
                claimed_before=self.started_at,
                stale_after=settings.stale_after_seconds if judge else None,
            )
        self.node_name = None
        resend_lost_script_jobs(
            self.database, self.client, settings.redis_namespace, self.send, settings.stale_after_seconds
        )

"""Deliveries nobody will acknowledge are forgotten by the sweeper: a job that has ended keeps no message in Redis,
and one taken back from a dead worker keeps only the message sent again (never the dead worker's, which Redis would
otherwise deliver again after its visibility timeout, hours later)."""

from __future__ import annotations

import json
import time
import uuid
from datetime import timedelta
from pathlib import Path

import redis
from celery import Celery
from kombu import Connection

from core import job_repository
from core.db import Database
from core.job_states import JobState
from core.models import Job, utc_now
from core.settings import Settings
from tests.test_job_repository import job_in_state
from workers.celery_app import create_celery_app, enqueue_job, priority_list_keys, queue_name
from workers.sweeper import drop_ended_deliveries, job_ids_in_broker, send_back, sweep, unacked_deliveries


def take_unacknowledged(app: Celery, connection: Connection, namespace: str, job_ids: tuple[str, ...]) -> None:
    """Send each job's message and take it as a worker takes it (acknowledged late), never acknowledging it."""
    for job_id in job_ids:
        enqueue_job(app, namespace, job_id, "batch", 5)
        message = connection.default_channel.basic_get(queue_name(namespace, "batch"), no_ack=False)
        assert message is not None and message.headers["id"] == job_id


def test_the_deliveries_of_ended_jobs_are_forgotten_and_a_running_ones_kept(
    database: Database, database_url: str, service_redis_url: str, tmp_path: Path
) -> None:
    """Two messages taken as a worker takes them (acknowledged late, so they sit in kombu's `unacked` hash) by a
    worker that never acknowledges them (its channel stays open, as a killed worker's never closes)."""
    namespace = f"deliveries-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        data_dir=tmp_path, database_url=database_url, redis_url=service_redis_url, redis_namespace=namespace
    )
    client = redis.Redis.from_url(service_redis_url)
    ended, running = job_in_state(database, JobState.DONE), job_in_state(database, JobState.RUNNING)
    app = create_celery_app(settings, include=())
    connection = app.connection_for_read()
    try:
        take_unacknowledged(app, connection, namespace, (ended, running))
        assert sorted(unacked_deliveries(client, namespace).values()) == sorted([ended, running])
        assert drop_ended_deliveries(client, namespace, database) == [ended]
        assert list(unacked_deliveries(client, namespace).values()) == [running]
        assert client.zcard(f"{namespace}:unacked_index") == 1
    finally:
        for key in client.scan_iter(match=f"{namespace}*"):
            client.delete(key)
        connection.release()


def test_a_job_sent_back_keeps_one_message_when_its_old_delivery_is_put_back(
    database: Database, database_url: str, service_redis_url: str, tmp_path: Path
) -> None:
    """A worker stopped on purpose holds a job's delivery unacknowledged; the job is handed back and sent again.
    When that worker's channel then closes (kombu puts back what it never acknowledged, as serve's next start does
    with its private Redis) the job still has exactly one message: the old delivery went before the new was sent."""
    namespace = f"deliveries-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        data_dir=tmp_path, database_url=database_url, redis_url=service_redis_url, redis_namespace=namespace
    )
    client = redis.Redis.from_url(service_redis_url)
    process = "stopped-host:4242"
    job_id = job_in_state(database, JobState.QUEUED)
    app = create_celery_app(settings, include=())
    enqueue_job(app, namespace, job_id, "batch", 5)
    connection = app.connection_for_read()
    try:
        message = connection.default_channel.basic_get(queue_name(namespace, "batch"), no_ack=False)
        assert message is not None and message.headers["id"] == job_id
        assert job_repository.claim_job(database, job_id, f"{process}:1", stale_after=60) is not None
        handed_back = job_repository.hand_back_process_jobs(database, process)
        assert [job.id for job in handed_back] == [job_id]
        assert send_back(settings, database, app, handed_back, "the worker was stopped") == [job_id]
        assert unacked_deliveries(client, namespace) == {}
        connection.default_channel.close()  # its unacknowledged deliveries go back to their queue, if any are left
        assert sorted(job_ids_in_broker(client, namespace)) == [job_id]
        waiting = sum(client.llen(key) for key in priority_list_keys(namespace, "batch"))
        assert waiting == 1, f"the job has {waiting} messages waiting"
    finally:
        for key in client.scan_iter(match=f"{namespace}*"):
            client.delete(key)
        connection.release()


def test_a_job_whose_worker_died_between_delivery_and_claim_is_sent_again(
    database: Database, database_url: str, service_redis_url: str, tmp_path: Path
) -> None:
    """A worker took a queued job's message and died before claiming the job (chaos soak: the job stayed queued to the
    end): the delivery sits unacknowledged until the visibility timeout, hours away. Once it is older than
    `stale_after_seconds` the sweeper sends the job again in its place; a younger delivery is a live worker's, about
    to claim its job (one message a task thread), and is left alone."""
    namespace = f"deliveries-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        data_dir=tmp_path,
        database_url=database_url,
        redis_url=service_redis_url,
        redis_namespace=namespace,
        stale_after_seconds=30,
    )
    client = redis.Redis.from_url(service_redis_url)
    lost, fresh = job_in_state(database, JobState.QUEUED), job_in_state(database, JobState.QUEUED)
    with database.session() as session:  # both queued long before this sweep
        for job_id in (lost, fresh):
            session.get_one(Job, job_id).enqueued_at = utc_now() - timedelta(minutes=5)
    app = create_celery_app(settings, include=())
    connection = app.connection_for_read()
    try:
        take_unacknowledged(app, connection, namespace, (lost, fresh))
        (tag,) = [tag for tag, job_id in unacked_deliveries(client, namespace).items() if job_id == lost]
        client.zadd(f"{namespace}:unacked_index", {tag: time.time() - 60})  # kombu's delivery time, a minute ago
        assert sweep(settings, database, app, client, judge_silence=False) == [lost]
        assert list(unacked_deliveries(client, namespace).values()) == [fresh]
        waiting = [item for key in priority_list_keys(namespace, "batch") for item in client.lrange(key, 0, -1)]
        assert [json.loads(item)["headers"]["id"] for item in waiting] == [lost]
        assert sweep(settings, database, app, client, judge_silence=False) == []  # its new message is in the queue
    finally:
        for key in client.scan_iter(match=f"{namespace}*"):
            client.delete(key)
        connection.release()

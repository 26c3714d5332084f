"""Deliveries nobody will acknowledge are forgotten by the sweeper: a job that has ended keeps no message in Redis,
and one taken back from a dead worker keeps only the message sent again (never the dead worker's, which Redis would
otherwise deliver again after its visibility timeout, hours later)."""

from __future__ import annotations

import uuid
from pathlib import Path

import redis

from core.db import Database
from core.job_states import JobState
from core.settings import Settings
from tests.test_job_repository import job_in_state
from workers.celery_app import create_celery_app, enqueue_job, queue_name
from workers.sweeper import drop_ended_deliveries, unacked_deliveries


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
        for job_id in (ended, running):
            enqueue_job(app, namespace, job_id, "batch", 5)
            message = connection.default_channel.basic_get(queue_name(namespace, "batch"), no_ack=False)
            assert message is not None and message.headers["id"] == job_id
        assert sorted(unacked_deliveries(client, namespace).values()) == sorted([ended, running])
        assert drop_ended_deliveries(client, namespace, database) == [ended]
        assert list(unacked_deliveries(client, namespace).values()) == [running]
        assert client.zcard(f"{namespace}:unacked_index") == 1
    finally:
        for key in client.scan_iter(match=f"{namespace}*"):
            client.delete(key)
        connection.release()

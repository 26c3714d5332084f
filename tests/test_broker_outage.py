"""A worker lives through its broker's restart: Redis killed under deliveries in flight (acknowledged late, as every
job's is) and started again. Celery closes the broken connection before reconnecting, and kombu's Redis transport
used to raise from that close (`AttributeError: 'NoneType' object has no attribute 'hostname'`), which Celery takes
for an unrecoverable error: every worker exited at every Redis restart (`bench/chaos.py` found it).
`workers.broker_transport` repairs it; here a real worker process proves it."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis

from core.settings import Settings
from tests.conftest import ROOT, RedisServer
from tests.waiting import wait_until
from workers.celery_app import broker_key_prefix, create_celery_app, queue_name

pytestmark = pytest.mark.slow  # a Celery worker process and a redis-server of its own


def test_a_worker_reconnects_after_redis_is_killed_under_deliveries_in_flight(
    own_redis: RedisServer, tmp_path: Path
) -> None:
    namespace = f"outage-{uuid.uuid4().hex[:8]}"
    notes = tmp_path / "notes"
    notes.mkdir()
    environment = os.environ | {
        "VOXCAST_REDIS_URL": own_redis.url,
        "VOXCAST_REDIS_NAMESPACE": namespace,
        "VOXCAST_DATA_DIR": str(tmp_path / "data"),
        "BROKER_TEST_NOTES": str(notes),
    }
    queue = queue_name(namespace, "batch")
    command = [sys.executable, "-m", "celery", "-A", "tests.broker_app", "worker", "--pool", "threads",
               "--concurrency", "4", "--queues", queue, "--hostname", f"voxcast@{namespace}", "--without-gossip", "--without-mingle", "--loglevel", "INFO"]  # fmt: skip
    log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen(command, cwd=ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT)
    try:
        settings = Settings(redis_url=own_redis.url, redis_namespace=namespace, data_dir=tmp_path / "data")
        app = create_celery_app(settings, include=())
        client = redis.Redis.from_url(own_redis.url)
        wait_until(lambda: b"Connected to" in (tmp_path / "worker.log").read_bytes(), "the worker connected", 60)
        for name in ("first", "second", "third"):
            app.send_task("tests.hold_then_note", args=[name, 12.0], queue=queue)
        unacked = broker_key_prefix(namespace) + "unacked"
        wait_until(lambda: client.hlen(unacked) == 3, "the deliveries in flight", 60)
        own_redis.stop()  # SIGKILL
        worker_log = tmp_path / "worker.log"
        wait_until(lambda: b"Cannot connect" in worker_log.read_bytes(), "the worker to meet the outage", 60)
        own_redis.start()
        wait_until(
            lambda: all((notes / name).exists() for name in ("first", "second", "third")), "the tasks finished", 60
        )
        app.send_task("tests.hold_then_note", args=["after", 0.0], queue=queue)
        wait_until(lambda: (notes / "after").exists(), "a task sent after the restart run", 60)
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
        assert "Unrecoverable error" not in (tmp_path / "worker.log").read_text()
    finally:
        worker.terminate()
        worker.wait(30)
        log.close()

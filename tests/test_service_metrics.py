"""Prometheus metrics and Celery events, scraped from a real api and worker while jobs wait, run, end and fail.

The api's `/metrics` (admin key) reads the installation's state from the database and Redis; each worker serves
its own events (job timings, frames, engine steps, failures) on `VOXCAST_WORKER_METRICS_PORT`; Celery task events
reach an event receiver, as they reach Flower.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from core.settings import Settings
from tests.conftest import free_port
from tests.service_client import submit_four_turns, upload_voice, wait_for
from workers.celery_app import RUN_JOB_TASK, create_celery_app
from workers.metrics import WorkerMetrics

FINAL = {"done", "failed", "cancelled"}

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    """Every sample of an exposition: (name, sorted labels) to value."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(scraped: Samples, name: str, **labels: str) -> float:
    return scraped.get((name, tuple(sorted(labels.items()))), 0.0)


def total(scraped: Samples, name: str) -> float:
    """The sum of a metric over all its label values."""
    return sum(sample for (sample_name, _), sample in scraped.items() if sample_name == name)


class TaskEvents:
    """Celery events of one installation, received in a thread as Flower receives them."""

    def __init__(self, settings: Settings) -> None:
        self.app = create_celery_app(settings)
        self.events: list[dict] = []
        self.ready = threading.Event()
        self.stopping = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)

    def __enter__(self) -> TaskEvents:
        self._thread.start()
        assert self.ready.wait(30), "the event receiver never connected"
        return self

    def __exit__(self, *_: object) -> None:
        self.stopping.set()
        self._thread.join(10)
        self.app.close()

    def _receive(self) -> None:
        with self.app.connection() as connection:
            receiver = self.app.events.Receiver(connection, handlers={"*": self.events.append})
            receiver.on_consume_ready = lambda *_, **__: self.ready.set()  # listening from now on
            receiver.should_stop = False
            for _ in receiver.consume(limit=None, timeout=None, safety_interval=0.2):
                if self.stopping.is_set():
                    return

    def types_of(self, task_id: str) -> set[str]:
        return {event["type"] for event in list(self.events) if event.get("uuid") == task_id}

    def workers_heard(self) -> set[str]:
        return {event["hostname"] for event in list(self.events) if event["type"].startswith("worker-")}


@pytest.fixture
def stack(make_service_stack):  # type: ignore[no-untyped-def]
    worker_port = free_port()
    stack = make_service_stack(worker_metrics_port=str(worker_port))
    stack.worker_metrics_url = f"http://127.0.0.1:{worker_port}/metrics"
    return stack


def scrape(client: httpx.Client) -> Samples:
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return samples(response.text)


def poll(read: Callable[[], Samples], condition: Callable[[Samples], bool], what: str, timeout: float = 60) -> Samples:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        scraped = read()
        if condition(scraped):
            return scraped
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}; last scrape: {scraped}")


def test_metrics_follow_jobs_from_the_queue_to_their_end(stack, voice_wav: Path) -> None:  # type: ignore[no-untyped-def]
    stack.start_api()
    admin = stack.client(stack.mint_key("admin", admin=True))
    voice = upload_voice(admin, voice_wav, "voice")

    with TaskEvents(stack.settings) as events:  # listening before the first job is sent
        # Queued before any worker runs: the database and the broker both show them waiting. The second job's voice is
        # taken from its inputs, so that the worker fails it.
        job_id, failing = submit_four_turns(admin, voice), submit_four_turns(admin, voice)
        for recording in (stack.root / "data" / "jobs" / failing / "inputs" / "voices").glob("*.wav"):
            recording.unlink()
        time.sleep(0.3)
        waiting = scrape(admin)
        assert value(waiting, "voxcast_jobs", queue="interactive", state="queued") == 2
        assert value(waiting, "voxcast_queue_depth", queue="interactive") == 2
        assert value(waiting, "voxcast_oldest_queued_job_seconds", queue="interactive") >= 0.3
        assert value(waiting, "voxcast_workers_up") == 0
        assert value(waiting, "voxcast_redis_up") == 1

        stack.start_worker()
        running = poll(
            lambda: scrape(admin),
            lambda scraped: (
                value(scraped, "voxcast_jobs", queue="interactive", state="running") >= 1
                and value(scraped, "voxcast_queue_depth", queue="interactive") == 0  # both taken from the broker
                and value(scraped, "voxcast_workers_up") == 1
            ),
            "the job to run on the announced worker",
        )
        (worker,) = {dict(labels)["worker"] for name, labels in running if name == "voxcast_engine_slots"}
        assert value(running, "voxcast_engine_slots", worker=worker) >= 1

        job = wait_for(admin, job_id, FINAL, timeout=120)
        assert job["state"] == "done", job
        failed = wait_for(admin, failing, FINAL, timeout=120)
        assert failed["state"] == "failed", failed

        # Celery's events, as Flower sees them: the api's send, the worker's receipt, start and success.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not {"task-sent", "task-started", "task-succeeded"} <= events.types_of(
            job_id
        ):
            time.sleep(0.1)
        assert {"task-sent", "task-received", "task-started", "task-succeeded"} <= events.types_of(job_id)
        assert any(event.get("name") == RUN_JOB_TASK for event in events.events if event["type"] == "task-received")
        assert events.workers_heard(), "no worker heartbeat event"

    after = scrape(admin)
    assert value(after, "voxcast_jobs", queue="interactive", state="done") == 1
    assert value(after, "voxcast_jobs", queue="interactive", state="failed") == 1
    assert value(after, "voxcast_jobs", queue="interactive", state="queued") == 0
    assert value(after, "voxcast_oldest_queued_job_seconds", queue="interactive") == 0

    own = samples(httpx.get(stack.worker_metrics_url, timeout=10).text)
    assert value(own, "voxcast_worker_jobs_started_total", queue="interactive") == 2
    assert value(own, "voxcast_worker_jobs_ended_total", queue="interactive", outcome="done") == 1
    assert value(own, "voxcast_worker_jobs_ended_total", queue="interactive", outcome="failed") == 1
    (reason,) = {dict(labels)["reason"] for name, labels in own if name == "voxcast_worker_job_failures_total"}
    assert reason.isidentifier(), reason  # the kind of error, never its message
    assert value(own, "voxcast_worker_job_failures_total", reason=reason) == 1
    assert value(own, "voxcast_job_wait_seconds_count", queue="interactive") == 2
    # The first job waited for the worker to start: at least the 0.3 s slept above.
    assert value(own, "voxcast_job_wait_seconds_sum", queue="interactive") >= 0.3
    assert value(own, "voxcast_time_to_first_audio_seconds_count", queue="interactive") >= 1
    assert value(own, "voxcast_audio_seconds_generated_total", queue="interactive") == pytest.approx(
        job["audio_seconds"], rel=1e-6
    )
    # The failed job made nothing: every frame the engine made is the done job's.
    assert value(own, "voxcast_frames_generated_total") == job["progress"]["frames_done"] > 0
    assert value(own, "voxcast_engine_step_seconds_count") > 0
    assert value(own, "voxcast_job_duration_seconds_count", queue="interactive", outcome="done") == 1
    assert value(own, "process_resident_memory_bytes") > 0


def test_metrics_need_an_admin_key(stack) -> None:  # type: ignore[no-untyped-def]
    stack.start_api()
    assert stack.client(None).get("/metrics").status_code == 401
    user = stack.client(stack.mint_key("user"))
    response = user.get("/metrics")
    assert response.status_code == 403
    assert "admin key" in response.json()["detail"]


def test_a_worker_whose_metrics_port_is_taken_says_so_and_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with caplog.at_level("ERROR", logger="workers.metrics"):
            assert WorkerMetrics().serve("127.0.0.1", port) is False
    (record,) = caplog.records
    assert record.getMessage() == "cannot serve the worker's metrics; it runs without them"
    assert record.address == f"127.0.0.1:{port}"
    assert record.setting == "VOXCAST_WORKER_METRICS_PORT"


def test_two_registries_never_share_counts() -> None:
    first, second = WorkerMetrics(), WorkerMetrics()
    first.job_claimed("batch", 2.0)
    started = "voxcast_worker_jobs_started_total"
    assert first.registry.get_sample_value(started, {"queue": "batch"}) == 1
    assert second.registry.get_sample_value(started, {"queue": "batch"}) is None

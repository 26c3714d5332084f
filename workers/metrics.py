"""A worker process's Prometheus metrics: what only the worker sees, as it happens.

The api's `/metrics` (`api.services.metrics`) tells the state of the whole installation, read from the database
and Redis at each scrape: jobs by state and queue, queue depth, which workers are up and how full their engines
are. This module is the rest, the events only a worker sees (a job claimed after waiting so long, its first
frame of audio, an engine step, a failure and its reason), recorded as they happen in the process's own
registry and served on `VOXCAST_WORKER_METRICS_PORT` by prometheus-client's HTTP server. A worker is one
process (its jobs are task threads), so a plain registry is exact: no multiprocess directory, and every
worker process is a scrape target of its own, wherever it runs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, start_http_server

from core.job_states import JobState
from pipeline.engine.engine import Engine, StepTiming

logger = logging.getLogger(__name__)

FPS_WINDOW_SECONDS = 10.0  # the frames-per-second gauge counts the frames of this many last seconds
_WAIT_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
_JOB_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400)
_FIRST_AUDIO_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120)
_STEP_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5)


class WorkerMetrics:
    """The worker's instruments, in a registry of its own (so tests and several engines in one process never share
    counters); `serve` puts them on a port."""

    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry()
        ProcessCollector(registry=registry)  # memory, CPU and open files of the worker process
        self.jobs_started = Counter(
            "voxcast_worker_jobs_started", "Job attempts this worker claimed, by queue", ["queue"], registry=registry
        )
        self.jobs_ended = Counter(
            "voxcast_worker_jobs_ended",
            "Job attempts this worker ended, by queue and outcome (done, failed, cancelled)",
            ["queue", "outcome"],
            registry=registry,
        )
        self.failures = Counter(
            "voxcast_worker_job_failures",
            "Jobs this worker failed, by reason (the kind of error: NoSpaceLeft, GenerationFailed, ...)",
            ["reason"],
            registry=registry,
        )
        self.wait = Histogram(
            "voxcast_job_wait_seconds",
            "From a job's submission (or requeue) to a worker claiming it",
            ["queue"],
            buckets=_WAIT_BUCKETS,
            registry=registry,
        )
        self.duration = Histogram(
            "voxcast_job_duration_seconds",
            "One attempt of a job, from its claim to its end, by queue and outcome",
            ["queue", "outcome"],
            buckets=_JOB_BUCKETS,
            registry=registry,
        )
        self.first_audio = Histogram(
            "voxcast_time_to_first_audio_seconds",
            "From a worker claiming a job to the job's first frame of audio",
            ["queue"],
            buckets=_FIRST_AUDIO_BUCKETS,
            registry=registry,
        )
        self.audio_seconds = Counter(
            "voxcast_audio_seconds_generated",
            "Seconds of finished episode audio, by queue",
            ["queue"],
            registry=registry,
        )
        self.frames = Counter(
            "voxcast_frames_generated", "Audio frames the engine made (7.5 per second of audio)", registry=registry
        )
        self.steps = Histogram(
            "voxcast_engine_step_seconds",
            "One engine step that ran the model",
            buckets=_STEP_BUCKETS,
            registry=registry,
        )
        fps = Gauge(
            "voxcast_engine_frames_per_second",
            f"Audio frames the engine made per second over the last {FPS_WINDOW_SECONDS:g} s",
            registry=registry,
        )
        fps.set_function(self.frames_per_second)
        self._recent: deque[tuple[float, int]] = deque()  # (monotonic time, frames) of the steps in the window
        self._lock = threading.Lock()

    def watch(self, engine: Engine) -> None:
        """Record every step of `engine` from now on."""
        engine.on_step(self.step)

    def step(self, timing: StepTiming) -> None:
        self.steps.observe(timing.seconds)
        if timing.frames:
            self.frames.inc(timing.frames)
            with self._lock:
                self._recent.append((time.monotonic(), timing.frames))

    def frames_per_second(self) -> float:
        cutoff = time.monotonic() - FPS_WINDOW_SECONDS
        with self._lock:
            while self._recent and self._recent[0][0] < cutoff:
                self._recent.popleft()
            return sum(frames for _, frames in self._recent) / FPS_WINDOW_SECONDS

    def job_claimed(self, queue: str, waited_seconds: float) -> None:
        self.jobs_started.labels(queue).inc()
        self.wait.labels(queue).observe(waited_seconds)

    def job_first_audio(self, queue: str, seconds: float) -> None:
        self.first_audio.labels(queue).observe(seconds)

    def job_ended(
        self,
        queue: str,
        outcome: JobState,
        seconds: float,
        *,
        audio_seconds: float | None = None,
        error: BaseException | None = None,
    ) -> None:
        self.jobs_ended.labels(queue, outcome.value).inc()
        self.duration.labels(queue, outcome.value).observe(seconds)
        if audio_seconds is not None:
            self.audio_seconds.labels(queue).inc(audio_seconds)
        if error is not None:
            self.failures.labels(type(error).__name__).inc()

    def serve(self, host: str, port: int) -> bool:
        """Serve the metrics on `host:port` from a daemon thread; False (and one error line) when the port cannot be
        had: the worker goes on without them, since jobs matter more than their metrics."""
        try:
            start_http_server(port, addr=host, registry=self.registry)
        except OSError as error:
            logger.error(
                "cannot serve the worker's metrics; it runs without them",
                extra={"address": f"{host}:{port}", "error": str(error), "setting": "VOXCAST_WORKER_METRICS_PORT"},
            )
            return False
        logger.info("worker metrics served", extra={"address": f"{host}:{port}"})
        return True

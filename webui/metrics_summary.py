"""The headline figures of the api's `/metrics` for the Admin screen: read from the Prometheus text the api serves,
so the screen shows what a scraper sees, not a second count of its own."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class MetricsSummary:
    jobs_by_state: dict[str, int] = field(default_factory=dict)  # every queue's together
    queue_depth: dict[str, int] = field(default_factory=dict)  # messages waiting in the broker, by queue
    oldest_queued_seconds: float = 0.0  # the longest any queued job has waited (0: none waits)
    frames_per_second: float = 0.0  # every live worker's engine together (7.5 are a second of audio)
    workers_up: int = 0


def summarize(text: str) -> MetricsSummary:
    """The summary of one scrape of `/metrics`."""
    jobs: dict[str, int] = {}
    depth: dict[str, int] = {}
    oldest = fps = 0.0
    workers = 0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "voxcast_jobs":
                state = sample.labels["state"]
                jobs[state] = jobs.get(state, 0) + int(sample.value)
            elif sample.name == "voxcast_queue_depth":
                depth[sample.labels["queue"]] = int(sample.value)
            elif sample.name == "voxcast_oldest_queued_job_seconds":
                oldest = max(oldest, sample.value)
            elif sample.name == "voxcast_engine_frames_per_second":
                fps += sample.value
            elif sample.name == "voxcast_workers_up":
                workers = int(sample.value)
    return MetricsSummary(jobs, depth, oldest, round(fps, 2), workers)

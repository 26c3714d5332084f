"""Load: a burst of 500 jobs and 50 live listeners on one machine, with health checks all along.

Every job must reach a final state (none lost, none stuck), the api must answer every health check, the
api's and worker's memory must stay bounded and the broker's queue must drain to nothing. The jobs are as
small as the limits allow (one short turn: the plan's minimum frame budget, one diffusion step, WAV only)
so the 500 generations fit a bounded run on two CPU cores; the worker runs 24 engine slots. What was held is
written as a table to build/hardening/load_report.md (and printed, with -s).
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest
import redis
from sqlalchemy import func, select

from core.job_states import QUEUE_KINDS
from core.models import Job
from tests.conftest import ROOT, write_voice_file
from tests.service_client import upload_voice
from workers.celery_app import broker_key_prefix, priority_list_keys

JOBS = 500
LISTENERS = 50
KEYS = 5  # the burst comes from several clients, each within its own in-flight limit
ENGINE_SLOTS = 24
TASK_THREADS = 28  # a few more than slots, so a slot is refilled while a finished job writes its episode
# Bounds a run that stalls; it is not a speed target (the report prints the throughput, bench/ measures speed). Alone on
# two cores the burst drains in under 3 minutes (2.9-3.0 jobs/s, before and after the object-store change); beside
# the other xdist worker's browser and crash tests it has taken over 5.
RUN_LIMIT_SECONDS = 600
HEALTH_INTERVAL_SECONDS = 0.5
HEALTH_LATENCY_LIMIT_SECONDS = 2.0
RSS_GROWTH_LIMIT_BYTES = 768 * 2**20  # per process, from idle to the peak of the run
RSS_LATE_GROWTH_LIMIT_BYTES = 192 * 2**20  # per process, over the last two thirds of the run (a per-job leak)
REPORT = ROOT / "build" / "hardening" / "load_report.md"
FINAL = {"done", "failed", "cancelled"}


@dataclass
class Sampler:
    """Health latency, process memory and broker depth, sampled from a thread until stopped."""

    base_url: str
    redis_url: str
    namespace: str
    processes: dict[str, psutil.Process]
    health: list[float] = field(default_factory=list)  # seconds per answered check
    health_failures: list[str] = field(default_factory=list)
    rss: dict[str, list[int]] = field(default_factory=dict)
    broker_depth: list[int] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        broker = redis.Redis.from_url(self.redis_url)
        with httpx.Client(base_url=self.base_url, timeout=10) as client:
            while not self.stop.wait(HEALTH_INTERVAL_SECONDS):
                started = time.monotonic()
                try:
                    response = client.get("/healthz")
                    if response.status_code == 200:
                        self.health.append(time.monotonic() - started)
                    else:
                        self.health_failures.append(f"status {response.status_code}")
                except httpx.HTTPError as error:
                    self.health_failures.append(f"{type(error).__name__}: {error}")
                for name, process in self.processes.items():
                    self.rss.setdefault(name, []).append(process.memory_info().rss)
                self.broker_depth.append(waiting_in_broker(broker, self.namespace))


def waiting_in_broker(broker: redis.Redis, namespace: str) -> int:
    """Messages waiting in this installation's queues (every priority) plus those delivered but unacknowledged."""
    waiting = sum(broker.llen(key) for kind in QUEUE_KINDS for key in priority_list_keys(namespace, kind))
    return waiting + broker.hlen(broker_key_prefix(namespace) + "unacked")


def listen(base_url: str, key: str, job_id: str, deadline: float) -> tuple[str | None, int]:
    """Follow a job's events to the end (or `deadline`); returns the last `state` event's state and the events."""
    last_state, events = None, 0
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=30) as client:
        with client.stream("GET", f"/v1/jobs/{job_id}/events") as response:
            response.raise_for_status()
            name = None
            for line in response.iter_lines():
                if time.monotonic() > deadline:
                    break
                if line.startswith("event: "):
                    name = line.removeprefix("event: ")
                elif line.startswith("data: "):
                    events += 1
                    if name == "state":
                        last_state = json.loads(line.removeprefix("data: "))["state"]
    return last_state, events


def states(stack) -> Counter[str]:  # type: ignore[no-untyped-def]
    with stack.database().session() as session:
        return Counter(dict(session.execute(select(Job.state, func.count()).group_by(Job.state)).all()))


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def mib(value: float) -> str:
    return f"{value / 2**20:.0f} MiB"


@pytest.mark.timeout(1800)  # RUN_LIMIT_SECONDS for the jobs, after the stack starts and the burst is sent
def test_a_burst_of_500_jobs_and_50_listeners_is_absorbed(make_service_stack, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    stack = make_service_stack(
        max_jobs_in_flight=str(JOBS // KEYS),
        engine_slots=str(ENGINE_SLOTS),
        heartbeat_seconds="2",
        stale_after_seconds="30",
    )
    stack.start_api()
    worker = stack.start_worker(max_jobs=TASK_THREADS)
    keys = [stack.mint_key(f"load-{number}") for number in range(KEYS)]
    voice_file = write_voice_file(tmp_path / "voice.wav", seconds=3.0)
    voices = {key: upload_voice(stack.client(key), voice_file, "voice") for key in keys}
    processes = {"api": psutil.Process(stack.api.pid), "worker": psutil.Process(worker.pid)}
    idle_rss = {name: process.memory_info().rss for name, process in processes.items()}
    sampler = Sampler(stack.base_url, stack.redis_url, stack.namespace, processes)
    sampling = threading.Thread(target=sampler.run, daemon=True)
    sampling.start()
    started = time.monotonic()

    def submit(number: int) -> tuple[str, str, float]:
        key = keys[number % KEYS]
        body = {
            "script": f"Alice: Job {number}.",
            "voices": {"Alice": voices[key]},
            "formats": ["wav"],
            "settings": {"diffusion_steps": 1, "seed": number},
        }
        sent = time.monotonic()
        with stack.client(key) as client:
            response = client.post("/v1/jobs", json=body)
        assert response.status_code == 202, response.text
        return key, response.json()["id"], time.monotonic() - sent

    with ThreadPoolExecutor(max_workers=8) as pool:
        submitted = list(pool.map(submit, range(JOBS)))
    burst_seconds = time.monotonic() - started
    deadline = started + RUN_LIMIT_SECONDS
    with ThreadPoolExecutor(max_workers=LISTENERS) as pool:
        # every tenth job, from the first (runs at once) to the last (waits for the whole burst)
        followed = [submitted[number] for number in range(0, JOBS, JOBS // LISTENERS)]
        heard = list(pool.map(lambda item: listen(stack.base_url, item[0], item[1], deadline), followed))
        while (counts := states(stack)) and (counts["queued"] or counts["running"]) and time.monotonic() < deadline:
            time.sleep(1)
    elapsed = time.monotonic() - started
    time.sleep(2 * HEALTH_INTERVAL_SECONDS)  # a last sample of the broker once the queue has drained
    sampler.stop.set()
    sampling.join()

    report = {
        "jobs submitted (burst)": f"{JOBS} from {KEYS} keys in {burst_seconds:.1f} s, all 202",
        "submit latency p50 / p99 / max": " / ".join(
            f"{value:.2f} s" for value in _spread([latency for _, _, latency in submitted])
        ),
        "jobs by final state": ", ".join(f"{state} {count}" for state, count in sorted(counts.items())),
        "jobs lost or stuck": str(JOBS - sum(counts[state] for state in FINAL)),
        "all final after": f"{elapsed:.0f} s ({JOBS / elapsed:.1f} jobs/s; limit {RUN_LIMIT_SECONDS} s)",
        "SSE listeners": f"{LISTENERS} at once; final state seen by {sum(state in FINAL for state, _ in heard)}, "
        f"{sum(events for _, events in heard)} events in all",
        "health checks (every 0.5 s)": f"{len(sampler.health)} answered, {len(sampler.health_failures)} failed",
        "health latency p50 / p99 / max": " / ".join(f"{value * 1000:.0f} ms" for value in _spread(sampler.health)),
        "broker depth peak / at the end": f"{max(sampler.broker_depth)} / {sampler.broker_depth[-1]} messages",
        **{
            f"{name} RSS idle / at a third / peak / end": " / ".join(
                mib(value) for value in (idle_rss[name], series[len(series) // 3], max(series), series[-1])
            )
            for name, series in sampler.rss.items()
        },
    }
    table = "\n".join(["| what | held |", "|---|---|", *(f"| {what} | {held} |" for what, held in report.items())])
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(f"# Load report\n\n{table}\n")
    print(f"\n{table}")

    assert counts == Counter({"done": JOBS}), report["jobs by final state"]
    assert [state for state, _ in heard] == ["done"] * LISTENERS
    assert sampler.health_failures == []
    assert max(sampler.health) < HEALTH_LATENCY_LIMIT_SECONDS, report["health latency p50 / p99 / max"]
    assert sampler.broker_depth[-1] == 0
    for name, series in sampler.rss.items():  # bounded: no climb with the jobs done once the pools are warm
        held = report[f"{name} RSS idle / at a third / peak / end"]
        assert max(series) - idle_rss[name] < RSS_GROWTH_LIMIT_BYTES, held
        assert series[-1] - series[len(series) // 3] < RSS_LATE_GROWTH_LIMIT_BYTES, held


def _spread(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), percentile(values, 0.99), max(values)

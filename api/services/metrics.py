"""The installation's state as Prometheus metrics, read at each scrape of the api's `/metrics`.

Everything here is read from where every process already writes it (the database, the broker's lists in Redis,
the workers' announcements in Redis), never counted in the api process: so any number of api processes, on any
hosts, give the same answer, and a restarted api loses nothing. What only a worker sees as it happens (job
timings, time to first audio, frames, engine steps, failures by reason) is each worker's own `/metrics`
(`workers.metrics`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from starlette.concurrency import run_in_threadpool

from api.deps import ApiServices
from api.services.admin import broker_depth
from api.services.worker_report import RedisUnavailable, announced_workers
from core.job_states import QUEUE_KINDS, JobState, QueueKind
from core.models import Job, ScriptJob, utc_now
from core.worker_presence import SupervisedWorker, WorkerStatus


@dataclass(frozen=True)
class InstallationState:
    """One scrape's readings; `workers` and `broker_depth` are None when Redis does not answer."""

    jobs: dict[tuple[str, str], int]  # (queue, state): jobs
    oldest_queued: dict[str, datetime]  # queue: when its longest-waiting job was sent
    script_jobs: dict[tuple[str, str], int]  # (task, state): script jobs
    broker_depth: dict[QueueKind, int] | None  # queue: messages waiting in the broker
    workers: list[WorkerStatus] | None
    supervised: SupervisedWorker | None  # `voxcast serve`'s worker; None elsewhere


async def metrics_text(services: ApiServices) -> bytes:
    """The Prometheus text exposition of the installation's state now."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(await read_state(services)))
    return generate_latest(registry)


async def read_state(services: ApiServices) -> InstallationState:
    jobs, oldest, script_jobs = await run_in_threadpool(_database_counts, services)
    try:
        workers: list[WorkerStatus] | None = await announced_workers(services)
    except RedisUnavailable:
        workers = None
    depths = {kind: await broker_depth(services, kind) for kind in QUEUE_KINDS}
    known_depths = {kind: depth for kind, depth in depths.items() if depth is not None}
    return InstallationState(
        jobs=jobs,
        oldest_queued=oldest,
        script_jobs=script_jobs,
        broker_depth=known_depths if len(known_depths) == len(depths) else None,
        workers=workers,
        supervised=services.supervisor.status() if services.supervisor is not None else None,
    )


def _database_counts(
    services: ApiServices,
) -> tuple[dict[tuple[str, str], int], dict[str, datetime], dict[tuple[str, str], int]]:
    with services.database.session() as session:
        jobs = session.execute(select(Job.queue, Job.state, func.count()).group_by(Job.queue, Job.state)).all()
        oldest = session.execute(
            select(Job.queue, func.min(func.coalesce(Job.enqueued_at, Job.created_at)))
            .where(Job.state == JobState.QUEUED)
            .group_by(Job.queue)
        ).all()
        scripts = session.execute(
            select(ScriptJob.task, ScriptJob.state, func.count()).group_by(ScriptJob.task, ScriptJob.state)
        ).all()
    return (
        {(queue, state): count for queue, state, count in jobs},
        {queue: _as_utc(since) for queue, since in oldest if since is not None},
        {(task, state): count for task, state, count in scripts},
    )


def _as_utc(moment: datetime) -> datetime:
    """An aggregate bypasses the column's UTC type: SQLite hands it back naive (and as text on some drivers)."""
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=utc_now().tzinfo)


class _Snapshot(Collector):
    """Metric families of one `InstallationState`."""

    def __init__(self, state: InstallationState) -> None:
        self.state = state

    def collect(self) -> Iterable[Metric]:
        yield from _job_metrics(self.state)
        yield from _worker_metrics(self.state)


def _job_metrics(state: InstallationState) -> Iterator[Metric]:
    jobs = GaugeMetricFamily("voxcast_jobs", "Audio jobs kept, by queue and state", labels=["queue", "state"])
    for queue in QUEUE_KINDS:
        for job_state in JobState:
            jobs.add_metric([queue, job_state.value], state.jobs.get((queue, job_state.value), 0))
    yield jobs
    oldest = GaugeMetricFamily(
        "voxcast_oldest_queued_job_seconds",
        "How long the longest-waiting queued job has waited since it was sent (0: none waits)",
        labels=["queue"],
    )
    now = utc_now()
    for queue in QUEUE_KINDS:
        since = state.oldest_queued.get(queue)
        oldest.add_metric([queue], 0.0 if since is None else max(0.0, (now - since).total_seconds()))
    yield oldest
    scripts = GaugeMetricFamily("voxcast_script_jobs", "Script jobs kept, by task and state", labels=["task", "state"])
    for (task, script_state), count in sorted(state.script_jobs.items()):
        scripts.add_metric([task, script_state], count)
    yield scripts
    yield GaugeMetricFamily("voxcast_redis_up", "Whether Redis answered this scrape", value=state.workers is not None)
    if state.broker_depth is not None:
        depth = GaugeMetricFamily(
            "voxcast_queue_depth", "Job messages waiting in the broker, by queue", labels=["queue"]
        )
        for queue, count in state.broker_depth.items():
            depth.add_metric([queue], count)
        yield depth


def _worker_metrics(state: InstallationState) -> Iterator[Metric]:
    if state.workers is not None:
        yield GaugeMetricFamily(
            "voxcast_workers_up", "Workers announced within their last heartbeats", value=len(state.workers)
        )
        yield from _engine_metrics(state.workers)
    if state.supervised is not None:
        supervised = state.supervised
        yield GaugeMetricFamily(
            "voxcast_supervised_worker_up",
            "Whether the worker `voxcast serve` supervises is running (0: starting, restarting or stopped)",
            value=supervised.state == "running",
        )
        yield CounterMetricFamily(
            "voxcast_supervised_worker_restarts",
            "Times `voxcast serve` started its worker again after it died",
            value=supervised.restarts,
        )


def _engine_metrics(workers: list[WorkerStatus]) -> Iterator[Metric]:
    """Each live worker's engine, as it announced itself; a worker that stopped drops out with its announcement."""
    info = GaugeMetricFamily(
        "voxcast_worker_info",
        "A live worker: its host, device, model and dtype (always 1)",
        labels=["worker", "hostname", "device", "model", "dtype"],
    )
    gauges = {
        "slots": GaugeMetricFamily("voxcast_engine_slots", "Rows the worker's engine batches", labels=["worker"]),
        "slots_in_use": GaugeMetricFamily("voxcast_engine_slots_in_use", "Rows generating now", labels=["worker"]),
        "waiting": GaugeMetricFamily(
            "voxcast_engine_waiting_requests", "Generations waiting for a row and K/V blocks", labels=["worker"]
        ),
        "kv_blocks": GaugeMetricFamily(
            "voxcast_engine_kv_blocks", "Blocks of the engine's K/V pool", labels=["worker"]
        ),
        "kv_blocks_in_use": GaugeMetricFamily(
            "voxcast_engine_kv_blocks_in_use", "K/V blocks held by generations", labels=["worker"]
        ),
        "frames_per_second": GaugeMetricFamily(
            "voxcast_engine_frames_per_second", "Frames the worker's engine made a second lately", labels=["worker"]
        ),
    }
    steps = GaugeMetricFamily(
        "voxcast_engine_step_info",
        "How the worker's engine decodes (graphs, fixed or eager) and why, one line (always 1)",
        labels=["worker", "step_mode", "reason"],
    )
    optional = {
        "cuda_graphs": GaugeMetricFamily(
            "voxcast_engine_cuda_graphs", "Decode-step CUDA graphs the worker's engine holds", labels=["worker"]
        ),
        "warm_up_seconds": GaugeMetricFamily(
            "voxcast_engine_warm_up_seconds",
            "Seconds the worker's engine spent capturing graphs and checking its fast path before serving",
            labels=["worker"],
        ),
        "kv_read_ratio": GaugeMetricFamily(
            "voxcast_engine_kv_read_ratio",
            "K/V entries attention read per entry its rows could see, since the worker started",
            labels=["worker"],
        ),
    }
    preemptions = CounterMetricFamily(
        "voxcast_engine_preemptions", "Generations preempted (and replayed) since the worker started", labels=["worker"]
    )
    for worker in workers:
        info.add_metric([worker.name, worker.hostname, worker.device, worker.model, worker.dtype], 1)
        for field, family in gauges.items():
            family.add_metric([worker.name], getattr(worker, field))
        preemptions.add_metric([worker.name], worker.preemptions)
        steps.add_metric([worker.name, worker.step_mode, worker.step_mode_reason], 1)
        for field, family in optional.items():
            if (value := getattr(worker, field)) is not None:
                family.add_metric([worker.name], value)
    yield info
    yield from gauges.values()
    yield steps
    yield from optional.values()
    yield preemptions

"""The job service end to end: a worker handing whole jobs to its engine, against the old one-segment-at-a-time one.

    .venv/bin/python bench/service.py                       # 10 jobs, both workers, the table
    .venv/bin/python bench/service.py --jobs 4 --json out.json

Each run starts the real stack as a user does: `voxcast serve --model tiny-random` (the api and one supervised
worker, SQLite in a fresh data folder) on a Redis of its own (a throwaway `redis-server`, or `--redis-url`).
It then sends, through HTTP only:

1. one-line `POST /v1/audio/speech` requests one after another, the service otherwise idle: the idle latency;
2. `--jobs` jobs at once, both modes and several lengths (`turns` jobs of 2, 4 and 8 turns; `whole` jobs of the
   same scripts, one generation each; no queue named, so each goes by its size), while one-line speech requests
   follow each other, `--speech-every` seconds after the previous one answered, until the last job ends: the
   latency under load.

Two workers run the same workload, one after the other, each on a fresh stack:

- `old`: as many generations at once as workers ran before they handed whole jobs to the engine (two jobs, a
  segment each): `VOXCAST_WORKER_MAX_JOBS=2` and `VOXCAST_ENGINE_SLOTS=2`;
- `new`: the defaults: up to `VOXCAST_WORKER_MAX_JOBS` jobs, each submitting all its pending segments at once.

Printed per worker, and with `--json PATH` written as `{"old": {...}, "new": {...}, "new_vs_old": {...}}`:
aggregate audio seconds per wall second (every job's audio over the time from the first submission to the last
job's end), each job's time from submission to done, speech latency p50/p95 idle and under load, and the peak of
engine slots in use (`GET /v1/admin/workers`, sampled every 0.2 s). Weights are random (speed does not depend
on their values); the tiny model never stops early, so every segment runs to its frame budget.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import soundfile as sf

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import RedisServer, free_port  # noqa: E402
from tests.synthetic_audio import voice_like  # noqa: E402
from workers.supervisor import stop_process  # noqa: E402

TURN = "{name}: Turn {n} of the show, where {name} says a sentence or two about the news of the week."
SPEECH = "Hello there, how are you today?"
FINAL = {"done", "failed", "cancelled"}
WORKERS = {
    "old": {"VOXCAST_WORKER_MAX_JOBS": "2", "VOXCAST_ENGINE_SLOTS": "2"},
    "new": {},
}


@dataclass
class Figures:
    """What one worker did with the workload."""

    worker: str
    settings: dict[str, str]
    jobs: int
    audio_s: float  # every job's audio, together
    wall_s: float  # first submission to the last job's end
    audio_per_wall_s: float
    job_s: list[float]  # each job's submission to done, in submission order
    job_modes: list[str]
    job_turns: list[int]
    speech_idle_s: list[float]
    speech_load_s: list[float]
    speech_idle_p50_s: float
    speech_idle_p95_s: float
    speech_load_p50_s: float
    speech_load_p95_s: float
    peak_slots_in_use: int
    slots: int
    failed: list[str] = field(default_factory=list)


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


class Serve:
    """`voxcast serve --model tiny-random` in single-user mode, its log in the run's folder."""

    def __init__(self, root: Path, redis_url: str, settings: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = root / "serve.log"
        environment = {
            **os.environ,
            "VOXCAST_DATA_DIR": str(root / "data"),
            "VOXCAST_REDIS_URL": redis_url,
            "VOXCAST_REDIS_NAMESPACE": f"bench-{uuid.uuid4().hex[:8]}",
            "VOXCAST_SINGLE_USER": "1",
            "VOXCAST_LOG_LEVEL": "INFO",
            "VOXCAST_MAX_JOBS_IN_FLIGHT": "1000",
            "VOXCAST_MAX_REQUESTS_PER_MINUTE": "0",
            **settings,
        }
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "cli.main", "serve", "--port", str(self.port), "--model", "tiny-random"],
                env=environment,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.client = httpx.Client(base_url=self.url, timeout=600)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"serve ended while starting; see {self.log}")
            try:
                if self.client.get("/health", timeout=2).json().get("status") == "ok":
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"serve did not start; see {self.log}")

    def stop(self) -> None:
        stop_process(self.process, 60)
        self.client.close()


def script(turns: int) -> str:
    names = ("Alice", "Bob")
    return "\n".join(TURN.format(name=names[n % 2], n=n) for n in range(turns))


def workload(jobs: int) -> list[tuple[str, int]]:
    """(mode, turns) of each job: turns jobs of 2, 4 and 8 turns, whole jobs of the same, in turn."""
    return [("turns" if n % 2 == 0 else "whole", (2, 4, 8)[n % 3]) for n in range(jobs)]


class Speech:
    """One-line speech requests, one at a time, timed from sending to the whole body."""

    def __init__(self, url: str, voice: str, diffusion_steps: int) -> None:
        self.url = url
        self.body = {
            "model": "tts-1",
            "voice": voice,
            "input": SPEECH,
            "response_format": "wav",
            "settings": {"diffusion_steps": diffusion_steps},
        }
        self.latencies: list[float] = []
        self.errors: list[str] = []

    def once(self) -> None:
        started = time.monotonic()
        try:
            response = httpx.post(f"{self.url}/v1/audio/speech", json=self.body, timeout=900)
        except httpx.HTTPError as error:
            self.errors.append(f"{type(error).__name__} after {time.monotonic() - started:.0f} s")
            return
        if response.status_code == 200:
            self.latencies.append(time.monotonic() - started)
        else:
            self.errors.append(f"{response.status_code}: {response.text[:200]}")

    def trickle(self, every: float, stop: threading.Event) -> None:
        """A request, then another `every` seconds after it answered, until `stop` (the last one is let finish)."""
        while not stop.wait(every):
            self.once()


class SlotSampler(threading.Thread):
    """The peak of engine slots in use, from the admin's worker list every 0.2 s."""

    def __init__(self, client: httpx.Client) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.peak = 0
        self.slots = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.2):
            try:
                workers = self.client.get("/v1/admin/workers", timeout=5).json()["workers"]
            except (httpx.HTTPError, KeyError, ValueError):
                continue
            for worker in workers:
                self.peak = max(self.peak, worker["slots_in_use"])
                self.slots = worker["slots"]


def run_worker(name: str, root: Path, redis_url: str, args: argparse.Namespace) -> Figures:
    settings = WORKERS[name]
    serve = Serve(root, redis_url, settings)
    try:
        voice_file = root / "voice.wav"
        sf.write(voice_file, voice_like(4.0, 24_000, seed=0), 24_000)
        with voice_file.open("rb") as handle:
            voice = serve.client.post("/v1/voices", data={"name": "host"}, files={"file": handle}).json()["id"]
        speech = Speech(serve.url, voice, args.diffusion_steps)
        speech.once()  # warm-up, not counted
        speech.latencies.clear()
        for _ in range(args.idle_speech):
            speech.once()
        idle = list(speech.latencies)
        speech.latencies.clear()

        sampler = SlotSampler(serve.client)
        sampler.start()
        mix = workload(args.jobs)
        started = time.monotonic()
        job_ids = []
        for n, (mode, turns) in enumerate(mix):
            body = {
                "script": script(turns),
                "voices": {"Alice": voice, "Bob": voice},
                "mode": mode,
                "formats": ["wav"],
                "settings": {"diffusion_steps": args.diffusion_steps, "seed": n},
            }
            response = serve.client.post("/v1/jobs", json=body)
            response.raise_for_status()
            job_ids.append(response.json()["id"])
        stop = threading.Event()
        trickler = threading.Thread(target=speech.trickle, args=(args.speech_every, stop), daemon=True)
        trickler.start()
        done_at: dict[str, float] = {}
        views: dict[str, dict] = {}
        try:
            while len(done_at) < len(job_ids):
                for job_id in job_ids:
                    if job_id in done_at:
                        continue
                    view = serve.client.get(f"/v1/jobs/{job_id}").json()
                    if view["state"] in FINAL:
                        done_at[job_id], views[job_id] = time.monotonic(), view
                time.sleep(0.2)
        finally:
            stop.set()
            sampler.stop.set()
        wall = max(done_at.values()) - started
        trickler.join()
        sampler.join()
        audio = sum(views[job_id]["audio_seconds"] or 0.0 for job_id in job_ids)
        load = list(speech.latencies)
        return Figures(
            worker=name,
            settings=settings,
            jobs=len(job_ids),
            audio_s=round(audio, 2),
            wall_s=round(wall, 2),
            audio_per_wall_s=round(audio / wall, 3),
            job_s=[round(done_at[job_id] - started, 2) for job_id in job_ids],
            job_modes=[mode for mode, _ in mix],
            job_turns=[turns for _, turns in mix],
            speech_idle_s=[round(value, 2) for value in idle],
            speech_load_s=[round(value, 2) for value in load],
            speech_idle_p50_s=round(statistics.median(idle), 2),
            speech_idle_p95_s=round(percentile(idle, 0.95), 2),
            speech_load_p50_s=round(statistics.median(load), 2) if load else 0.0,
            speech_load_p95_s=round(percentile(load, 0.95), 2),
            peak_slots_in_use=sampler.peak,
            slots=sampler.slots,
            failed=[f"{job_id}: {views[job_id]['error']}" for job_id in job_ids if views[job_id]["state"] != "done"]
            + speech.errors,
        )
    finally:
        serve.stop()


def report(figures: list[Figures]) -> str:
    lines = [
        "| worker | jobs | audio s | wall s | audio s / wall s | slowest job s | speech p50/p95 idle s "
        "| speech p50/p95 loaded s | loaded p95 / idle p50 | peak slots in use |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for f in figures:
        lines.append(
            f"| {f.worker} | {f.jobs} | {f.audio_s:.1f} | {f.wall_s:.1f} | {f.audio_per_wall_s:.2f} "
            f"| {max(f.job_s):.1f} "
            f"| {f.speech_idle_p50_s:.2f} / {f.speech_idle_p95_s:.2f} | {f.speech_load_p50_s:.2f} / "
            f"{f.speech_load_p95_s:.2f} | {f.speech_load_p95_s / f.speech_idle_p50_s:.2f} "
            f"| {f.peak_slots_in_use} of {f.slots} |"
        )
    for f in figures:
        mix = zip(f.job_modes, f.job_turns, f.job_s, strict=True)
        jobs = ", ".join(f"{mode[0]}{turns}:{seconds:.0f}" for mode, turns, seconds in mix)
        lines.append(f"\n{f.worker}: each job's seconds to done (t: turns mode, w: whole; turns): {jobs}")
        if f.failed:
            lines.append(f"{f.worker}: NOT DONE: {f.failed}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=10, help="jobs sent at once (default 10)")
    parser.add_argument("--diffusion-steps", type=int, default=10, help="of every job and speech (default 10)")
    parser.add_argument("--idle-speech", type=int, default=5, help="speech requests timed idle (default 5)")
    parser.add_argument("--speech-every", type=float, default=2.0, help="seconds between speech requests under load")
    parser.add_argument("--only", choices=sorted(WORKERS), help="run one worker only")
    parser.add_argument("--redis-url", help="a Redis to use instead of a throwaway redis-server")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--keep", action="store_true", help="keep the data folders and logs (printed)")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="voxcast-bench-service-"))
    redis = None if args.redis_url else RedisServer(folder)
    if redis is not None:
        redis.start()
    redis_url = args.redis_url or redis.url  # type: ignore[union-attr]
    figures = []
    try:
        for name in [args.only] if args.only else list(WORKERS):
            root = folder / name
            root.mkdir()
            print(f"{name}: running {args.jobs} jobs ...", file=sys.stderr, flush=True)
            figures.append(run_worker(name, root, redis_url, args))
    finally:
        if redis is not None:
            redis.stop()
        if args.keep:
            print(f"data and logs kept in {folder}", file=sys.stderr)
        else:
            shutil.rmtree(folder, ignore_errors=True)
    print(report(figures))
    result: dict[str, object] = {f.worker: asdict(f) for f in figures}
    if len(figures) == 2:
        old, new = figures
        result["new_vs_old"] = {
            "audio_per_wall_s": round(new.audio_per_wall_s / old.audio_per_wall_s, 2),
            "speech_load_p95_s": round(new.speech_load_p95_s / old.speech_load_p95_s, 2)
            if old.speech_load_p95_s
            else None,
            "slowest_job_s": round(max(new.job_s) / max(old.job_s), 2),
        }
        print(
            f"\nnew vs old: {result['new_vs_old']['audio_per_wall_s']}x the audio per wall second; "  # type: ignore[index]
            f"speech p95 under load {result['new_vs_old']['speech_load_p95_s']}x"  # type: ignore[index]
        )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

"""The service with its files in an S3-compatible bucket: hosts that share only the bucket, Redis and the database.

The api and each worker run with a data folder of their own (`api-host`, `host-1`, `host-2`: separate local disks,
as on separate machines) and `VOXCAST_STORAGE_URL` pointing at a bucket on moto's S3 server (`tests.s3_server`).
Every path a job's files take is walked: a voice uploaded and deleted; a job submitted on the api host, generated on
a worker host, downloaded with Range from the bucket; a job killed on one host and resumed on another from the frames
it published; a turn regenerated; a job purged.
"""

from __future__ import annotations

import io
import os
import signal
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf

from tests.s3_server import CREDENTIALS
from tests.service_client import FOUR_TURNS, FOUR_TURNS_SETTINGS, segment_rows, upload_voice, wait_for
from tests.test_hardening_faults import job_row, submit_whole
from tests.waiting import wait_until

FINAL = {"done", "failed", "cancelled"}
PREFIX = "install"


@pytest.fixture(scope="module")
def bucket(s3_server) -> str:  # type: ignore[no-untyped-def]
    return s3_server.new_bucket()


@pytest.fixture(scope="module")
def stack(make_service_stack, s3_server, bucket: str, postgres_or_sqlite_url: str | None, tmp_path_factory):  # type: ignore[no-untyped-def]
    database = postgres_or_sqlite_url or f"sqlite:///{tmp_path_factory.mktemp('database') / 'voxcast.db'}"
    stack = make_service_stack(
        storage_url=f"s3://{bucket}/{PREFIX}", storage_endpoint_url=s3_server.endpoint_url, database_url=database
    )
    stack.env.update(CREDENTIALS)
    stack.env["VOXCAST_DATA_DIR"] = str(stack.root / "api-host")
    stack.start_api()
    return stack


def start_worker_on(stack, host: str):  # type: ignore[no-untyped-def]
    """A worker whose data folder is `host`'s own: nothing on its disk is any other process's."""
    api_folder = stack.env["VOXCAST_DATA_DIR"]
    stack.env["VOXCAST_DATA_DIR"] = str(stack.root / host)
    try:
        return stack.start_worker()
    finally:
        stack.env["VOXCAST_DATA_DIR"] = api_folder


def kill(process) -> None:  # type: ignore[no-untyped-def]
    os.kill(process.pid, signal.SIGKILL)
    process.wait()


def local_files(folder: Path) -> list[str]:
    return (
        sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file()) if folder.exists() else []
    )


def job_keys(s3_server, bucket: str, job_id: str) -> dict[str, int]:  # type: ignore[no-untyped-def]
    prefix = f"{PREFIX}/jobs/{job_id}/"
    return {key.removeprefix(prefix): size for key, size in s3_server.keys(bucket, prefix).items()}


def stored(s3_server, bucket: str, key: str) -> bytes:  # type: ignore[no-untyped-def]
    return s3_server.client().get_object(Bucket=bucket, Key=f"{PREFIX}/{key}")["Body"].read()


def test_a_job_goes_from_the_api_host_to_a_worker_host_and_back_through_the_bucket(  # type: ignore[no-untyped-def]
    stack, s3_server, bucket: str, voice_wav: Path
) -> None:
    worker = start_worker_on(stack, "host-1")
    client = stack.client(stack.mint_key("producer"))
    voice = upload_voice(client, voice_wav, "voice")
    assert f"{PREFIX}/voices/{voice}.wav" in s3_server.keys(bucket, f"{PREFIX}/voices/")
    assert local_files(stack.root / "api-host" / "voices") == []  # the api host keeps nothing

    response = client.post(
        "/v1/jobs",
        json={
            "script": FOUR_TURNS,
            "voices": {"Alice": voice, "Bob": voice},
            "mode": "turns",
            "settings": FOUR_TURNS_SETTINGS,
            "formats": ["wav", "mp3"],
        },
    )
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    job = wait_for(client, job_id, FINAL, timeout=120)
    assert job["state"] == "done", job

    keys = job_keys(s3_server, bucket, job_id)
    segments = segment_rows(stack, job_id)
    assert {"inputs/script.txt", "inputs/voices/0.wav", "inputs/voices/1.wav"} <= keys.keys()
    assert {f"segments/{row.index:04d}.flac" for row in segments} <= keys.keys()
    assert {f"segments/{row.index:04d}.latents.npy" for row in segments} <= keys.keys()
    names = ("episode.wav", "episode.mp3", "episode.srt", "episode.vtt", "episode.chapters.json", "episode.turns.json")
    assert {f"outputs/{name}" for name in names} <= keys.keys()
    assert not [key for key in keys if key.endswith((".partial.frames", ".tmp"))]
    assert local_files(stack.root / "api-host" / "jobs") == []  # scratch only, and gone once used
    assert local_files(stack.root / "host-1" / "jobs") == []

    # Downloads stream from the bucket, with Range.
    whole = stored(s3_server, bucket, f"jobs/{job_id}/outputs/episode.wav")
    audio = client.get(f"/v1/jobs/{job_id}/audio.wav")
    assert audio.status_code == 200 and audio.content == whole
    assert audio.headers["accept-ranges"] == "bytes" and audio.headers["content-length"] == str(len(whole))
    assert audio.headers["content-disposition"] == f'attachment; filename="{job_id}.wav"'
    part = client.get(f"/v1/jobs/{job_id}/audio.wav", headers={"Range": "bytes=100-4195"})
    assert part.status_code == 206 and part.content == whole[100:4196]
    assert part.headers["content-range"] == f"bytes 100-4195/{len(whole)}"
    tail = client.get(f"/v1/jobs/{job_id}/audio.wav", headers={"Range": "bytes=-10"})
    assert tail.status_code == 206 and tail.content == whole[-10:]
    several = client.get(f"/v1/jobs/{job_id}/audio.wav", headers={"Range": "bytes=0-1,5-6"})
    assert several.status_code == 200 and several.content == whole  # several ranges: the whole file, as RFC allows
    past = client.get(f"/v1/jobs/{job_id}/audio.wav", headers={"Range": f"bytes={len(whole)}-"})
    assert past.status_code == 416 and past.headers["content-range"] == f"bytes */{len(whole)}"
    ignored = client.get(f"/v1/jobs/{job_id}/audio.wav", headers={"Range": "lines=1-2"})
    assert ignored.status_code == 200 and ignored.content == whole
    mp3 = client.get(f"/v1/jobs/{job_id}/audio.mp3")
    assert mp3.status_code == 200 and mp3.headers["content-type"] == "audio/mpeg"
    assert mp3.content == stored(s3_server, bucket, f"jobs/{job_id}/outputs/episode.mp3")
    vtt = client.get(f"/v1/jobs/{job_id}/transcript.vtt")
    assert vtt.status_code == 200 and vtt.text.startswith("WEBVTT")
    timed = client.get(f"/v1/jobs/{job_id}/turns.json").json()["turns"]
    plan = client.get(f"/v1/jobs/{job_id}/plan").json()  # read from the bucket, no copy left on the api host
    assert [turn["index"] for segment in plan["segments"] for turn in segment["turns"]] == [t["index"] for t in timed]
    segment = client.get(f"/v1/jobs/{job_id}/segments/0/audio")
    assert segment.status_code == 200 and segment.content == stored(
        s3_server, bucket, f"jobs/{job_id}/segments/0000.flac"
    )
    assert local_files(stack.root / "api-host" / "jobs") == []

    # A regenerated turn: the new revision's script goes through the bucket to the worker, its segment comes back.
    before = stored(s3_server, bucket, f"jobs/{job_id}/segments/0001.flac")
    regenerated = client.post(f"/v1/jobs/{job_id}/turns/1/regenerate", json={"seed": 4321, "text": "Something new."})
    assert regenerated.status_code == 202, regenerated.text
    assert "inputs/script.r1.txt" in job_keys(s3_server, bucket, job_id)
    job = wait_for(client, job_id, FINAL, timeout=120)
    assert job["state"] == "done" and job["revision"] == 1, job
    after = stored(s3_server, bucket, f"jobs/{job_id}/segments/0001.flac")
    assert after != before
    assert stored(s3_server, bucket, f"jobs/{job_id}/segments/0000.flac") == segment.content  # the rest untouched
    episode = client.get(f"/v1/jobs/{job_id}/audio.wav").content
    assert episode == stored(s3_server, bucket, f"jobs/{job_id}/outputs/episode.wav") != whole
    assert local_files(stack.root / "host-1" / "jobs") == []

    # A deleted voice: its object goes, its preview is a 404; the job keeps its own copy.
    assert client.get(f"/v1/voices/{voice}/preview.wav").content == stored(s3_server, bucket, f"voices/{voice}.wav")
    assert client.delete(f"/v1/voices/{voice}").status_code == 204
    assert s3_server.keys(bucket, f"{PREFIX}/voices/{voice}") == {}
    assert client.get(f"/v1/voices/{voice}/preview.wav").status_code == 404
    assert "inputs/voices/0.wav" in job_keys(s3_server, bucket, job_id)

    # A purged job: every object of it goes.
    assert client.delete(f"/v1/jobs/{job_id}?purge=true").status_code == 204
    assert job_keys(s3_server, bucket, job_id) == {}
    assert client.get(f"/v1/jobs/{job_id}/audio.wav").status_code == 404
    kill(worker)


def test_a_job_killed_on_one_host_resumes_on_another_from_the_frames_it_published(  # type: ignore[no-untyped-def]
    stack, s3_server, bucket: str, voice_wav: Path
) -> None:
    """One long generation (`whole` mode), its worker killed half way: a worker on another host, with nothing of the
    job on its disk, replays the frames the first one published and ends with the uninterrupted episode."""
    first = start_worker_on(stack, "host-1")
    client = stack.client(stack.mint_key("resume"))
    voice = upload_voice(client, voice_wav, "voice")
    reference_id = submit_whole(client, voice)
    assert wait_for(client, reference_id, FINAL, timeout=180)["state"] == "done"
    (reference_row,) = segment_rows(stack, reference_id)

    job_id = submit_whole(client, voice)
    wait_until(lambda: job_row(stack, job_id).frames_done >= reference_row.frames // 2, "the job to pass half way")
    # its frames so far published to the bucket (at its next heartbeat), then its worker killed
    wait_until(lambda: "segments/0000.partial.frames" in job_keys(s3_server, bucket, job_id), "frames in the bucket")
    kill(first)

    second = start_worker_on(stack, "host-2")  # takes the job once its heartbeat is stale
    job = wait_for(client, job_id, FINAL, timeout=180)
    assert job["state"] == "done", job
    (row,) = segment_rows(stack, job_id)
    assert row.attempts == 2 and row.resumed_from_frame >= 8 and row.frames == reference_row.frames
    killed = sf.read(io.BytesIO(client.get(f"/v1/jobs/{job_id}/audio.wav").content))[0]
    reference = sf.read(io.BytesIO(client.get(f"/v1/jobs/{reference_id}/audio.wav").content))[0]
    assert len(killed) == len(reference)
    np.testing.assert_allclose(killed, reference, atol=1e-3)
    assert "segments/0000.partial.frames" not in job_keys(s3_server, bucket, job_id)
    assert local_files(stack.root / "host-2" / "jobs") == []
    kill(second)


def test_a_process_refuses_to_start_when_its_bucket_does_not_exist(stack, s3_server) -> None:  # type: ignore[no-untyped-def]
    env = {**stack.env, "VOXCAST_STORAGE_URL": "s3://no-such-bucket/x", "VOXCAST_DATA_DIR": str(stack.root / "host-x")}
    import subprocess

    from cli.serve import worker_command

    result = subprocess.run(
        worker_command(stack.settings), env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode != 0
    assert "cannot reach the job files' store" in result.stdout + result.stderr
    assert "s3://no-such-bucket/" in result.stdout + result.stderr


def test_two_workers_with_separate_disks_share_the_jobs_and_the_metrics_show_both(  # type: ignore[no-untyped-def]
    stack, voice_wav: Path
) -> None:
    """The issue's bar: two workers sharing only Redis, the database and the bucket finish the jobs the api serves;
    the api's /metrics sees both, and each worker's own metrics count the jobs it ran."""
    from prometheus_client.parser import text_string_to_metric_families

    from tests.conftest import free_port
    from tests.service_client import submit_four_turns

    ports = {}
    started = []
    for host in ("host-3", "host-4"):
        ports[host] = free_port()
        stack.env |= {"VOXCAST_WORKER_MAX_JOBS": "1", "VOXCAST_WORKER_METRICS_PORT": str(ports[host])}
        started.append(start_worker_on(stack, host))
    for name in ("VOXCAST_WORKER_MAX_JOBS", "VOXCAST_WORKER_METRICS_PORT"):
        del stack.env[name]
    admin = stack.client(stack.mint_key("operator", admin=True))
    voice = upload_voice(admin, voice_wav, "voice")
    job_ids = [submit_four_turns(admin, voice) for _ in range(4)]
    for job_id in job_ids:
        assert wait_for(admin, job_id, FINAL, timeout=180)["state"] == "done"
        assert admin.get(f"/v1/jobs/{job_id}/audio.wav").status_code == 200

    def samples(text: str) -> dict[tuple[str, tuple], float]:
        families = text_string_to_metric_families(text)
        return {(s.name, tuple(sorted(s.labels.items()))): s.value for family in families for s in family.samples}

    scraped = samples(admin.get("/metrics").text)
    assert scraped[("voxcast_workers_up", ())] == 2
    ran = {}
    for host, port in ports.items():
        own = samples(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text)
        ran[host] = sum(value for (name, _), value in own.items() if name == "voxcast_worker_jobs_ended_total")
    assert sum(ran.values()) == 4 and all(ran.values()), ran  # one job at a time each: both took some
    for worker in started:
        kill(worker)


def test_a_shows_feed_and_its_files_come_from_the_bucket_through_the_api(  # type: ignore[no-untyped-def]
    stack, s3_server, bucket: str, voice_wav: Path
) -> None:
    """Publishing with object storage: the artwork and the episode live in the bucket, the api host keeps nothing, and
    the feed's files answer HEAD, Range and conditional requests as they do from a folder."""
    import feedparser

    from tests.test_service_feeds import SHOW, artwork, path_of

    worker = start_worker_on(stack, "host-1")
    client = stack.client(stack.mint_key("podcaster"))
    app = httpx.Client(base_url=stack.base_url, timeout=60)
    voice = upload_voice(client, voice_wav, "voice")
    show = client.post("/v1/shows", json=SHOW).json()
    cover = artwork()
    assert (
        client.put(f"/v1/shows/{show['id']}/artwork", files={"file": ("c.jpg", cover, "image/jpeg")}).status_code == 200
    )
    assert f"{PREFIX}/shows/{show['id']}/artwork.jpg" in s3_server.keys(bucket, f"{PREFIX}/shows/")
    response = client.post(
        "/v1/jobs",
        json={
            "script": FOUR_TURNS,
            "voices": {"Alice": voice, "Bob": voice},
            "settings": FOUR_TURNS_SETTINGS,
            "formats": ["mp3"],
            "episode": {"show_id": show["id"], "title": "From the bucket", "number": 3},
        },
    )
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    assert wait_for(client, job_id, FINAL, timeout=180)["state"] == "done"

    parsed = feedparser.parse(app.get(path_of(show["feed_url"])).content)
    assert not parsed.bozo and [entry.title for entry in parsed.entries] == ["From the bucket"]
    (enclosure,) = parsed.entries[0].enclosures
    mp3 = app.get(path_of(enclosure.href))
    assert mp3.status_code == 200 and len(mp3.content) == int(enclosure.length)
    assert mp3.content.endswith(stored(s3_server, bucket, f"jobs/{job_id}/outputs/episode.mp3"))
    head = app.head(path_of(enclosure.href))
    assert head.status_code == 200 and head.content == b"" and head.headers["etag"] == mp3.headers["etag"]
    part = app.get(path_of(enclosure.href), headers={"Range": "bytes=100-4195"})
    assert part.status_code == 206 and part.content == mp3.content[100:4196]
    assert app.get(path_of(enclosure.href), headers={"If-None-Match": mp3.headers["etag"]}).status_code == 304
    assert app.get(path_of(parsed.feed.image.href)).content == cover
    assert local_files(stack.root / "api-host") == []  # read from the bucket, no copy kept

    assert client.delete(f"/v1/jobs/{job_id}?purge=true").status_code == 204
    assert feedparser.parse(app.get(path_of(show["feed_url"])).content).entries == []
    assert client.delete(f"/v1/shows/{show['id']}").status_code == 204
    assert s3_server.keys(bucket, f"{PREFIX}/shows/{show['id']}") == {}
    kill(worker)

"""Audio heard while a job generates, through the real stack (uvicorn api, Celery worker process, Redis,
SQLite, the tiny checkpoint): `audio` chunks in a job's server-sent events, and `POST /v1/audio/speech`
streaming `pcm` and `wav` as the worker generates them, driven by the official `openai` client."""

from __future__ import annotations

import base64
import io
import json
import struct
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
from openai import OpenAI
from sqlalchemy import select

from core.models import JobSegment, utc_now
from core.storage import read_segment_audio
from tests.service_client import upload_voice, wait_for

SCRIPT = (
    "Alice: Welcome to the show, everyone.\nBob: Thanks, Alice. Happy to be here.\n[pause: 0.5s]\nAlice: Let's go.\n"
)
FAST = {"diffusion_steps": 2, "seed": 5}
# About seven seconds by the plan's estimate: the tiny model, which never stops early, runs ~140 frames.
SPEECH = "A streamed reading, long enough that its first second is heard well before the last one is made."
QUANTUM = 1 / 32767  # one step of 16-bit PCM


@pytest.fixture(scope="module")
def stack(make_service_stack):  # type: ignore[no-untyped-def]
    """The api alone: the first test starts the worker once its listener is connected."""
    stack = make_service_stack()
    stack.start_api()
    return stack


@pytest.fixture(scope="module")
def key(stack) -> str:  # type: ignore[no-untyped-def]
    return stack.mint_key("listener")


@pytest.fixture(scope="module")
def http(stack, key: str) -> httpx.Client:  # type: ignore[no-untyped-def]
    return stack.client(key)


@pytest.fixture(scope="module")
def voice(http: httpx.Client, voice_wav: Path) -> str:
    return upload_voice(http, voice_wav, "Narrator")


@pytest.fixture
def worker(stack) -> None:  # type: ignore[no-untyped-def]
    if not stack.workers:
        stack.start_worker()


def stored_segment(http: httpx.Client, job_id: str, index: int) -> np.ndarray:
    """A finished segment as the worker stored it: the raw audio, before loudness normalisation (24-bit FLAC, read
    back at its level: the power of two its comment names undone)."""
    response = http.get(f"/v1/jobs/{job_id}/segments/{index}/audio")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "audio/flac"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "segment.flac"
        path.write_bytes(response.content)
        return read_segment_audio(path)


def pcm_samples(pcm: bytes) -> np.ndarray:
    return np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32767


class EventReader(threading.Thread):
    """Reads a job's server-sent events to their end; `connected` is set once the first one (the job's
    state, sent after the stream has subscribed to the job's channel) has arrived."""

    def __init__(self, http: httpx.Client, job_id: str, query: str = "") -> None:
        super().__init__(daemon=True)
        self.http = http
        self.job_id = job_id
        self.query = query
        self.connected = threading.Event()
        self.events: list[tuple[str, dict]] = []

    def run(self) -> None:
        with self.http.stream("GET", f"/v1/jobs/{self.job_id}/events{self.query}", timeout=120) as response:
            name = None
            for line in response.iter_lines():
                if line.startswith("event: "):
                    name = line.removeprefix("event: ")
                elif line.startswith("data: "):
                    self.events.append((name, json.loads(line.removeprefix("data: "))))
                    self.connected.set()


def test_a_whole_mode_job_streams_its_audio_in_frame_chunks_before_it_ends(
    stack, http: httpx.Client, voice: str
) -> None:  # type: ignore[no-untyped-def]
    body = {"script": SCRIPT, "voices": {"Alice": voice, "Bob": voice}, "mode": "whole", "settings": FAST}
    response = http.post("/v1/jobs", json=body)
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    reader, quiet = EventReader(http, job_id), EventReader(http, job_id, "?audio=false")
    for listener in (reader, quiet):
        listener.start()
        assert listener.connected.wait(30), "no first event"
    stack.start_worker()  # only now: the listener hears every chunk from the first frame on
    for listener in (reader, quiet):
        listener.join(120)
        assert not listener.is_alive(), "the event stream did not end"
    quiet_names = {name for name, _ in quiet.events}
    assert "audio" not in quiet_names and {"state", "progress", "segment"} <= quiet_names

    names = [name for name, _ in reader.events]
    final_name, final = reader.events[-1]
    assert (final_name, final["state"]) == ("state", "done"), final
    assert names.count("segment") == 2  # the pause splits the whole-mode script in two generations
    for index in (0, 1):
        chunks = [data for name, data in reader.events if name == "audio" and data["segment"] == index]
        assert chunks, f"no audio chunks for segment {index}"
        # live: a segment's chunks come before the event saying it is stored
        assert reader.events.index(("audio", chunks[-1])) < reader.events.index(
            next(event for event in reader.events if event[0] == "segment" and event[1]["index"] == index)
        )
        assert {chunk["sample_rate"] for chunk in chunks} == {24_000}
        assert [chunk["first_frame"] for chunk in chunks] == [
            sum(c["frames"] for c in chunks[:n]) for n in range(len(chunks))
        ]
        assert all(chunk["frames"] == 8 for chunk in chunks[:-1]) and 1 <= chunks[-1]["frames"] <= 8
        live = pcm_samples(b"".join(base64.b64decode(chunk["pcm"]) for chunk in chunks))
        stored = stored_segment(http, job_id, index)
        assert len(live) == len(stored) == sum(chunk["frames"] for chunk in chunks) * 3200
        np.testing.assert_allclose(live, np.clip(stored, -1, 1), atol=QUANTUM)


def test_openai_streaming_pcm_arrives_while_the_job_generates(
    stack, worker, key: str, http: httpx.Client, voice: str
) -> None:  # type: ignore[no-untyped-def]
    client = OpenAI(base_url=f"{stack.base_url}/v1", api_key=key, max_retries=0, timeout=120)
    with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice=voice, input=SPEECH, response_format="pcm", extra_body={"settings": FAST, "stream": True}
    ) as streamed:
        assert streamed.headers["content-type"] == "audio/pcm"
        job_id = streamed.headers["x-voxcast-job"]
        pieces = streamed.iter_bytes()
        first = next(pieces)
        first_at = utc_now()
        pcm = first + b"".join(pieces)

    job = wait_for(http, job_id, {"done"})
    # the first audio came while the job's one segment was still generating, not from its stored file: before the
    # segment's row was marked stored (its `segment` event, which a stream waits for to read the file, comes after)
    with stack.database().session() as session:
        stored_at = session.scalars(select(JobSegment.finished_at).where(JobSegment.job_id == job_id)).one()
    assert first_at < stored_at, (first_at, stored_at)
    stored = stored_segment(http, job_id, 0)
    finished, _ = sf.read(io.BytesIO(http.get(job["outputs"]["audio"]["wav"]).content), dtype="float32")
    assert len(pcm) == 2 * len(stored) == 2 * len(finished)  # the whole track, nothing lost or repeated
    # raw, as generated: the finished file is the same audio loudness-normalised
    np.testing.assert_allclose(pcm_samples(pcm), np.clip(stored, -1, 1), atol=QUANTUM)


def test_streamed_wav_has_an_open_ended_header_and_the_raw_track(worker, http: httpx.Client, voice: str) -> None:  # type: ignore[no-untyped-def]
    body = {"model": "tts-1", "voice": voice, "input": "Hello. [pause: 0.5s] Bye.", "response_format": "wav"}
    with http.stream("POST", "/v1/audio/speech", json={**body, "settings": FAST, "stream": True}) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"] == "audio/wav"
        job_id = response.headers["x-voxcast-job"]
        wav = response.read()
    riff, riff_size, wave, fmt, channels, rate, bits, data, data_size = struct.unpack("<4sI4s4s6xHI6xH4sI", wav[:44])
    assert (riff, wave, fmt, data) == (b"RIFF", b"WAVE", b"fmt ", b"data")
    assert riff_size == data_size == 0xFFFFFFFF and (channels, rate, bits) == (1, 24_000, 16)
    # the two segments with the pause between them, as the worker lays out the episode
    track = np.concatenate([stored_segment(http, job_id, 0), np.zeros(12_000), stored_segment(http, job_id, 1)])
    np.testing.assert_allclose(pcm_samples(wav[44:]), np.clip(track, -1, 1), atol=QUANTUM)


def test_a_stream_cut_by_a_cancel_ends_incomplete_and_a_client_that_leaves_cancels(
    worker, http: httpx.Client, voice: str
) -> None:
    body = {
        "model": "tts-1",
        "voice": voice,
        "input": SPEECH,
        "response_format": "pcm",
        "settings": FAST,
        "stream": True,
    }
    with http.stream("POST", "/v1/audio/speech", json=body) as response:
        pieces = response.iter_bytes()
        next(pieces)
        assert http.delete(f"/v1/jobs/{response.headers['x-voxcast-job']}").status_code == 200
        with pytest.raises(httpx.RemoteProtocolError):  # no clean end: the body is visibly incomplete
            for _ in pieces:
                pass

    with http.stream("POST", "/v1/audio/speech", json=body) as response:
        next(response.iter_bytes())
        job_id = response.headers["x-voxcast-job"]
    deadline = time.monotonic() + 20
    while (job := http.get(f"/v1/jobs/{job_id}").json())["state"] != "cancelled":
        assert time.monotonic() < deadline and job["state"] == "running", job
        time.sleep(0.2)
    assert job["cancel_requested"]


def test_a_listener_that_connects_late_hears_the_segment_from_its_start(
    stack, worker, http: httpx.Client, voice: str
) -> None:  # type: ignore[no-untyped-def]
    """A page that follows the job it just sent, or one opened from History, subscribes after the worker has made
    frames: it first gets what the segment made so far (from frame 0), then the live chunks, and together they are
    the stored segment; nothing of the live audio is left behind once the job ends."""
    script = "".join(
        f"{'Alice' if i % 2 == 0 else 'Bob'}: Line {i} of a long conversation, said slowly.\n" for i in range(12)
    )
    body = {"script": script, "voices": {"Alice": voice, "Bob": voice}, "mode": "whole", "settings": FAST}
    response = http.post("/v1/jobs", json=body)
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    deadline = time.monotonic() + 120
    while (job := http.get(f"/v1/jobs/{job_id}").json())["progress"]["frames_done"] < 24:
        assert job["state"] in {"queued", "running"} and time.monotonic() < deadline, job
        time.sleep(0.05)
    reader = EventReader(http, job_id)
    reader.start()
    reader.join(120)
    assert not reader.is_alive(), "the event stream did not end"
    assert reader.events[-1][1]["state"] == "done", reader.events[-1]
    chunks = [data for name, data in reader.events if name == "audio"]
    assert chunks[0]["first_frame"] == 0 and chunks[0]["frames"] >= 24, chunks[0]["frames"]  # made before it listened
    audio = bytearray()
    for chunk in chunks:  # kept by frame index, as a listener keeps them: the live ones may overlap the first
        assert chunk["first_frame"] * 6400 <= len(audio), "a gap between what was made and what came live"
        audio[chunk["first_frame"] * 6400 :] = base64.b64decode(chunk["pcm"])
    np.testing.assert_allclose(pcm_samples(bytes(audio)), np.clip(stored_segment(http, job_id, 0), -1, 1), atol=QUANTUM)
    assert not list((stack.root / "data" / "jobs" / job_id).rglob("*.live.pcm"))

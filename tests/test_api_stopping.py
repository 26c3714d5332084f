"""The api told to stop (a SIGTERM to serve: `cli.serve` sets the app's `stopping`) while a speech request waits for
its job: the request answers 503 with `Retry-After` and the job is cancelled (nobody waits for it now), before the
server's graceful stop would cut the wait off with a 500 (found by the chaos run, issue 37)."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
from fastapi.testclient import TestClient

from api.app import create_app
from tests.service_client import in_process_settings, upload_voice
from tests.waiting import wait_until


def test_a_speech_request_waiting_when_the_api_stops_answers_503_and_its_job_is_cancelled(
    tmp_path: Path, service_redis_url: str, voice_wav: Path
) -> None:
    stopping = threading.Event()
    settings = in_process_settings(tmp_path / "data", service_redis_url)
    with TestClient(create_app(settings, stopping=stopping)) as api:
        voice = upload_voice(api, voice_wav, "Host")
        answers: list[httpx.Response] = []
        body = {"model": "tts-1", "input": "Hello there.", "voice": voice, "response_format": "wav"}
        waiting = threading.Thread(target=lambda: answers.append(api.post("/v1/audio/speech", json=body)))
        waiting.start()  # no worker here: the request waits for its job
        wait_until(lambda: api.get("/v1/jobs").json()["jobs"] != [], "the speech job queued")
        stopping.set()
        waiting.join(30)
        assert not waiting.is_alive()
        (answer,) = answers
        assert answer.status_code == 503, answer.text
        assert answer.headers["Retry-After"] == "5"
        assert "the api is restarting" in answer.json()["detail"]
        (job,) = api.get("/v1/jobs").json()["jobs"]
        assert job["state"] == "cancelled"

"""OpenAI-compatible speech through the real stack (uvicorn api, Celery worker process, Redis, SQLite, the
tiny checkpoint), driven by the official `openai` client as a user's code would drive it."""

from __future__ import annotations

import io
import time
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
from openai import OpenAI

FAST = {"settings": {"diffusion_steps": 2, "seed": 11}}  # voxcast's extension of the body, via extra_body


@pytest.fixture(scope="module")
def stack(shared_stack):  # type: ignore[no-untyped-def]
    """The session's stack: this file only submits jobs and reads them back, under keys of its own."""
    return shared_stack


@pytest.fixture(scope="module")
def key(stack) -> str:  # type: ignore[no-untyped-def]
    return stack.mint_key("speaker")


@pytest.fixture(scope="module")
def voice(stack, key: str, voice_wav: Path) -> str:  # type: ignore[no-untyped-def]
    with voice_wav.open("rb") as handle:
        response = stack.client(key).post(
            "/v1/voices", data={"name": "Narrator"}, files={"file": ("voice.wav", handle, "audio/wav")}
        )
    assert response.status_code == 201, response.text
    return response.json()["id"]


@pytest.fixture(scope="module")
def client(stack, key: str) -> OpenAI:  # type: ignore[no-untyped-def]
    return OpenAI(base_url=f"{stack.base_url}/v1", api_key=key, max_retries=0, timeout=120)


def test_speech_comes_back_as_audio_in_the_format_asked(stack, key: str, client: OpenAI, voice: str) -> None:  # type: ignore[no-untyped-def]
    wav = client.audio.speech.create(
        model="tts-1", voice=voice, input="Hello there.", response_format="wav", extra_body=FAST
    )
    assert wav.response.headers["content-type"] == "audio/wav"
    assert wav.response.headers["x-voxcast-model"] == "tts-1"
    samples, rate = sf.read(io.BytesIO(wav.content), dtype="int16")
    assert rate == 24_000 and samples.ndim == 1 and len(samples) > 0

    jobs = stack.client(key).get("/v1/jobs").json()["jobs"]
    job = next(job for job in jobs if job["id"] == wav.response.headers["x-voxcast-job"])
    assert (job["state"], job["queue"], job["priority"], job["mode"]) == ("done", "interactive", 9, "whole")
    assert job["title"] == "speech (tts-1)" and job["formats"] == ["wav"]

    mp3 = client.audio.speech.create(model="vibevoice", voice="narrator", input="Hello there.", extra_body=FAST)
    assert mp3.response.headers["content-type"] == "audio/mpeg"  # mp3 is the default, as with OpenAI
    decoded, rate = sf.read(io.BytesIO(mp3.content))
    assert rate == 24_000 and len(decoded) / rate == pytest.approx(len(samples) / rate, abs=0.1)

    # The same seed gives the same speech; pcm is the WAV's samples without the header (streaming, which
    # sends the raw audio as it is generated, is tested in test_service_streaming.py).
    pcm = client.audio.speech.create(
        model="tts-1", voice={"id": voice}, input="Hello there.", response_format="pcm", extra_body=FAST
    )
    assert pcm.response.headers["content-type"] == "audio/pcm"
    np.testing.assert_array_equal(np.frombuffer(pcm.content, dtype="<i2"), samples)


def test_requests_it_cannot_serve_are_refused_naming_the_field(stack, client: OpenAI, voice: str) -> None:  # type: ignore[no-untyped-def]
    for arguments, field, expected in [
        ({"response_format": "aac"}, "response_format", "'mp3', 'opus', 'flac', 'wav' or 'pcm'"),
        ({"speed": 1.5}, "speed", "only 1.0 is supported"),
        ({"speed": 9.0}, "speed", "less than or equal to 4"),
        ({"voice": "alloy"}, "voice", "this key's voices include Narrator"),
        ({"input": "x" * 4097}, "input", "at most 4096"),
        ({"input": "\U0001f389\U0001f389"}, "input", "input has nothing to say aloud: '\U0001f389\U0001f389'"),
        ({"input": "\x00\x1b"}, "input", "only spaces or control characters; write the words to speak"),
        ({"instructions": "Speak like a pirate."}, "instructions", "not supported"),
    ]:
        with pytest.raises(openai.UnprocessableEntityError) as refused:
            client.audio.speech.create(**{"model": "tts-1", "voice": voice, "input": "Hello.", **arguments})
        (detail,) = refused.value.body["detail"]  # type: ignore[index]
        assert detail["field"] == field and expected in detail["msg"], detail

    with pytest.raises(openai.AuthenticationError):
        OpenAI(base_url=f"{stack.base_url}/v1", api_key="vxc_wrong", max_retries=0).audio.speech.create(
            model="tts-1", voice=voice, input="Hello."
        )
    stranger = OpenAI(base_url=f"{stack.base_url}/v1", api_key=stack.mint_key("stranger"), max_retries=0)
    with pytest.raises(openai.UnprocessableEntityError) as not_theirs:
        stranger.audio.speech.create(model="tts-1", voice=voice, input="Hello.")
    assert "this key has no voices yet" in not_theirs.value.body["detail"][0]["msg"]  # type: ignore[index]


def test_a_client_that_hangs_up_cancels_its_speech(stack, key: str, voice: str) -> None:  # type: ignore[no-untyped-def]
    http = stack.client(key)
    text = " ".join(f"Sentence number {n} of a long reading that nobody will stay to hear." for n in range(20))
    body = {"model": "tts-1", "voice": voice, "input": text, **FAST}
    with pytest.raises(httpx.ReadTimeout):
        http.post("/v1/audio/speech", json=body, timeout=1.5)
    deadline = time.monotonic() + 20
    while (job := http.get("/v1/jobs", params={"limit": 1}).json()["jobs"][0])["state"] != "cancelled":
        assert time.monotonic() < deadline and job["state"] in ("queued", "running"), job
        time.sleep(0.2)
    assert job["title"] == "speech (tts-1)" and job["cancel_requested"]

"""Storage usage and the per-key quota through the real stack: a uvicorn api, a Celery worker, Redis, SQLite and
the tiny checkpoint. A key's usage is what its files take; what would take it past its quota is refused (507) with
the quota and the usage, and nothing of it is kept."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.service_client import upload_voice, wait_for
from tokenizer.voice_prompt import load_voice_prompt

SCRIPT = "Alice: Welcome to the show, everyone.\nBob: Thanks, Alice. Happy to be here.\n"
FAST = {"diffusion_steps": 2, "seed": 3}


def voice_bytes(voice_wav: Path) -> int:
    """What a library voice made from `voice_wav` takes: 16-bit PCM WAV of its prepared prompt."""
    return 44 + 2 * len(load_voice_prompt(voice_wav).samples)


def files_under(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


@pytest.fixture(scope="module")
def quota(voice_wav: Path) -> int:
    return 2 * voice_bytes(voice_wav)  # room for two library voices and nothing else


@pytest.fixture(scope="module")
def stack(make_service_stack, quota: int):  # type: ignore[no-untyped-def]
    return make_service_stack(max_storage_bytes=str(quota)).start()


def test_usage_counts_a_keys_files_and_the_quota_refuses_at_its_boundary(stack, quota: int, voice_wav: Path) -> None:  # type: ignore[no-untyped-def]
    client = stack.client(stack.mint_key("quota"))
    assert client.get("/v1/usage").json() | {"key_id": 0} == {
        "key_id": 0, "key_name": "quota", "bytes": 0, "jobs": 0, "voices": 0, "audio_minutes": 0.0, "quota_bytes": quota,
    }  # fmt: skip
    first = upload_voice(client, voice_wav, "first")
    second = upload_voice(client, voice_wav, "second")  # exactly at the quota: still allowed
    usage = client.get("/v1/usage").json()
    assert usage["bytes"] == quota == files_under(stack.root / "data" / "voices") and usage["voices"] == 2

    with voice_wav.open("rb") as handle:
        refused = client.post("/v1/voices", data={"name": "third"}, files={"file": ("v.wav", handle, "audio/wav")})
    assert refused.status_code == 507, refused.text
    message = refused.json()["detail"]
    assert "storage quota (VOXCAST_MAX_STORAGE_BYTES)" in message and f"{quota / 1e6:,.1f} MB" in message
    assert "DELETE /v1/jobs/{id}?purge=true" in message
    assert [voice["name"] for voice in client.get("/v1/voices").json()["voices"]] == ["first", "second"]

    body = {"script": SCRIPT, "voices": {"Alice": first, "Bob": second}, "settings": FAST, "formats": ["wav"]}
    refused_job = client.post("/v1/jobs", json=body)
    assert refused_job.status_code == 507 and "this job needs about" in refused_job.json()["detail"]
    assert client.get("/v1/jobs").json()["jobs"] == []
    assert not any((stack.root / "data" / "jobs").glob("*"))  # nothing of the refused job was kept

    assert client.delete(f"/v1/voices/{second}").status_code == 204
    assert client.get("/v1/usage").json()["bytes"] == quota // 2  # deleting frees its share


def test_a_finished_jobs_usage_is_what_its_folder_holds_and_admins_see_every_key(
    make_service_stack, voice_wav: Path
) -> None:  # type: ignore[no-untyped-def]
    stack = make_service_stack().start()  # no quota
    client = stack.client(stack.mint_key("producer"))
    voice = upload_voice(client, voice_wav, "host")
    body = {"script": SCRIPT, "voices": {"Alice": voice, "Bob": voice}, "settings": FAST, "formats": ["wav", "mp3"]}
    job_id = client.post("/v1/jobs", json=body).json()["id"]
    job = wait_for(client, job_id, {"done", "failed"})
    assert job["state"] == "done"

    usage = client.get("/v1/usage").json()
    data = stack.root / "data"
    assert usage["bytes"] == files_under(data / "jobs" / job_id) + files_under(data / "voices")
    assert usage["jobs"] == 1 and usage["quota_bytes"] is None
    assert usage["audio_minutes"] == pytest.approx(job["audio_seconds"] / 60, abs=0.01)

    admin = stack.client(stack.mint_key("ops", admin=True))
    assert client.get("/v1/admin/usage").status_code == 403
    keys = {entry["key_name"]: entry for entry in admin.get("/v1/admin/usage").json()["keys"]}
    assert keys["producer"]["bytes"] == usage["bytes"] and keys["ops"]["bytes"] == 0

    assert client.delete(f"/v1/jobs/{job_id}", params={"purge": "true"}).status_code == 204
    assert client.get("/v1/usage").json()["bytes"] == files_under(data / "voices")


def test_usage_needs_a_key(stack) -> None:  # type: ignore[no-untyped-def]
    assert stack.client(None).get("/v1/usage").status_code == 401
    assert httpx.get(f"{stack.base_url}/v1/admin/usage").status_code == 401


def test_a_job_cancelled_while_queued_counts_what_its_folder_holds(make_service_stack, voice_wav: Path) -> None:  # type: ignore[no-untyped-def]
    """Queued, a job counts what it is expected to write; cancelled before any worker took it (there is none here), it
    counts its inputs alone, as they are on disk."""
    stack = make_service_stack()
    stack.start_api()
    client = stack.client(stack.mint_key("canceller"))
    voice = upload_voice(client, voice_wav, "host")
    body = {"script": SCRIPT, "voices": {"Alice": voice, "Bob": voice}, "settings": FAST, "formats": ["wav", "mp3"]}
    job_id = client.post("/v1/jobs", json=body).json()["id"]
    data = stack.root / "data"
    held = files_under(data / "jobs" / job_id) + files_under(data / "voices")
    assert client.get("/v1/usage").json()["bytes"] > held  # the estimate of what it will write
    cancelled = client.delete(f"/v1/jobs/{job_id}")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert client.get("/v1/usage").json()["bytes"] == held


"""The job service over HTTP, as a client sees it: a real uvicorn api, a real Celery worker process, Redis,
SQLite, and the tiny checkpoint generating real (noise) audio."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import httpx
import pytest
import soundfile as sf

from script_text.parser import parse_script
from script_text.plan import plan_script
from tests.service_client import read_events, upload_voice, wait_for
from tests.synthetic_audio import voice_like

SCRIPT = "Alice: Welcome to the show, everyone.\nBob: Thanks, Alice. Happy to be here.\n[pause: 1s]\nAlice: Let's go.\n"
LONG_SCRIPT = "".join(
    f"{'Alice' if turn % 2 == 0 else 'Bob'}: This is turn number {turn}, and it goes on for a little while.\n"
    for turn in range(8)
)
ALL_FORMATS = ["wav", "flac", "mp3", "ogg", "opus"]
FAST = {"diffusion_steps": 2, "seed": 3}


@pytest.fixture(scope="module")
def stack(make_service_stack):  # type: ignore[no-untyped-def]
    return make_service_stack(max_upload_bytes=str(2 * 1024 * 1024), max_jobs_in_flight="3").start()


@pytest.fixture(scope="module")
def alice_voice(alice: httpx.Client, voice_wav: Path) -> str:
    return upload_voice(alice, voice_wav, "studio voice")


def submit(client: httpx.Client, script: str, voice: str, **options: object) -> httpx.Response:
    body = {"script": script, "voices": {"Alice": voice, "Bob": voice}, "settings": FAST, **options}
    return client.post("/v1/jobs", json=body)


def test_submit_follow_progress_and_download_every_format(alice: httpx.Client, alice_voice: str) -> None:
    response = submit(alice, SCRIPT, alice_voice, formats=ALL_FORMATS, mode="turns", title="pilot", kbps={"mp3": 64})
    assert response.status_code == 202, response.text
    job = response.json()
    assert job["kbps"] == {"mp3": 64, "opus": 64}  # as asked, and the format's default
    assert response.headers["location"] == f"/v1/jobs/{job['id']}"
    assert job["state"] == "queued" and job["position"] >= 1 and job["title"] == "pilot"
    planned = plan_script(parse_script(SCRIPT), "turns")  # a queued job says how long it will be, as planned
    assert job["progress"]["frames_planned"] == planned.estimated_frames and job["progress"]["segments_total"] == 3

    events = read_events(alice, job["id"])
    assert events[0][0] == "state"
    progress = [data for name, data in events if name == "progress"]
    assert progress and progress[-1]["frames_done"] >= progress[0]["frames_done"]
    assert all(data["audio_seconds_done"] == pytest.approx(data["frames_done"] / 7.5, abs=0.01) for data in progress)
    segments = [data for name, data in events if name == "segment"]
    # three turns in "turns" mode, generated side by side: each is announced as it is stored, in any order
    assert sorted(data["index"] for data in segments) == [0, 1, 2]
    assert alice.get(segments[0]["audio"]).status_code == 200
    final_name, final = events[-1]
    assert final_name == "state" and final["state"] == "done", final
    assert final["progress"]["segments_done"] == final["progress"]["segments_total"] == 3

    for audio_format in ALL_FORMATS:
        download = alice.get(final["outputs"]["audio"][audio_format])
        assert download.status_code == 200, (audio_format, download.text)
        samples, rate = sf.read(io.BytesIO(download.content))
        assert rate == 24_000
        assert len(samples) / rate == pytest.approx(final["audio_seconds"], abs=0.15), audio_format
        if audio_format == "mp3":  # constant bitrate: its size says it
            assert len(download.content) * 8 / final["audio_seconds"] == pytest.approx(64_000, rel=0.1)

    srt = alice.get(final["outputs"]["srt"]).text
    vtt = alice.get(final["outputs"]["vtt"]).text
    timeline = alice.get(final["outputs"]["turns"]).json()
    assert "Alice: Welcome to the show" in srt and srt.count("-->") == 3
    assert vtt.startswith("WEBVTT") and vtt.count("<v Alice>") == 2
    assert [turn["speaker"] for turn in timeline["turns"]] == ["Alice", "Bob", "Alice"]
    assert timeline["turns"][2]["start"] - timeline["turns"][1]["end"] == pytest.approx(1.0, abs=0.01)
    chapters = alice.get(final["outputs"]["chapters"]).json()
    assert chapters["version"] == "1.2.0" and chapters["chapters"][0]["startTime"] == 0

    wav_url = final["outputs"]["audio"]["wav"]
    whole = alice.get(wav_url).content
    partial = alice.get(wav_url, headers={"Range": "bytes=100-199"})
    assert partial.status_code == 206
    assert partial.headers["content-range"] == f"bytes 100-199/{len(whole)}"
    assert partial.content == whole[100:200]
    tail = alice.get(wav_url, headers={"Range": f"bytes={len(whole) - 10}-"})
    assert tail.status_code == 206 and tail.content == whole[-10:]


def test_multipart_with_a_script_file_and_voices_uploaded_inline(alice: httpx.Client, voice_wav: Path) -> None:
    options = {"mode": "whole", "formats": ["mp3"], "settings": FAST, "queue": "batch", "priority": 7}
    stereo = io.BytesIO()
    sf.write(stereo, voice_like(5.0, 44_100, channels=2, seed=1), 44_100, format="FLAC")
    files = [
        ("script", ("show.txt", SCRIPT.encode(), "text/plain")),
        ("voice.Alice", ("alice.wav", voice_wav.read_bytes(), "audio/wav")),
        ("voice.2", ("bob.flac", stereo.getvalue(), "audio/flac")),
    ]
    response = alice.post("/v1/jobs", data={"options": json.dumps(options)}, files=files)
    assert response.status_code == 202, response.text
    job = wait_for(alice, response.json()["id"], {"done", "failed"})
    assert job["state"] == "done", job["error"]
    assert job["queue"] == "batch" and job["priority"] == 7 and list(job["outputs"]["audio"]) == ["mp3"]
    assert alice.get(job["outputs"]["audio"]["mp3"]).status_code == 200
    assert alice.get(f"/v1/jobs/{job['id']}/audio.wav").status_code == 404  # not a requested format


def test_a_job_says_what_in_its_script_is_likely_a_typo(alice: httpx.Client, alice_voice: str) -> None:
    script = "Alice: Hello there.\nBob: Hi.\nNote: this line was meant for the editor.\n"
    response = alice.post(
        "/v1/jobs",
        json={
            "script": script,
            "voices": {"Alice": alice_voice, "Bob": alice_voice, "Note": alice_voice},
            "settings": FAST,
        },
    )
    assert response.status_code == 202, response.text
    (warning,) = response.json()["warnings"]
    assert warning["line"] == 3 and warning["message"].startswith("'Note:' is read as a speaker named Note")
    job_id = response.json()["id"]
    assert alice.get(f"/v1/jobs/{job_id}").json()["warnings"] == [warning]
    assert alice.delete(f"/v1/jobs/{job_id}").status_code == 200
    clean = submit(alice, SCRIPT, alice_voice).json()
    assert clean["warnings"] == []
    alice.delete(f"/v1/jobs/{clean['id']}")


def test_a_bitrate_not_offered_is_422_naming_it(alice: httpx.Client, alice_voice: str) -> None:
    refused = submit(alice, SCRIPT, alice_voice, formats=["mp3"], kbps={"mp3": 100})
    assert refused.status_code == 422, refused.text
    (problem,) = refused.json()["detail"]
    assert problem["field"] == "kbps" and "mp3 is written at 48, 64, 96, 128, 160 kbit/s, not 100" in problem["msg"]
    assert submit(alice, SCRIPT, alice_voice, kbps={"wav": 128}).status_code == 422  # lossless: no bitrate


def test_bad_input_is_422_naming_the_line_and_field(alice: httpx.Client, alice_voice: str) -> None:
    bad_pause = submit(alice, "Alice: Hi.\nBob: Hello.\n[pause: 99s]\n", alice_voice)
    assert bad_pause.status_code == 422
    (detail,) = bad_pause.json()["detail"]
    assert detail["field"] == "script" and detail["line"] == 3 and "at most 30 s" in detail["msg"]

    five_speakers = "".join(f"P{n}: hello.\n" for n in range(5))
    (detail,) = alice.post("/v1/jobs", json={"script": five_speakers}).json()["detail"]
    assert detail["field"] == "script" and detail["line"] == 5

    unknown_speaker = alice.post("/v1/jobs", json={"script": SCRIPT, "voices": {"Carol": alice_voice}})
    assert unknown_speaker.status_code == 422
    assert unknown_speaker.json()["detail"][0]["field"] == "voices.Carol"

    missing_voice = alice.post("/v1/jobs", json={"script": SCRIPT, "voices": {"Alice": alice_voice}})
    assert missing_voice.status_code == 422 and "no voice for Bob" in missing_voice.json()["detail"][0]["msg"]

    bad_settings = submit(alice, SCRIPT, alice_voice, mode="chapters", settings={"cfg_scale": 0.5})
    assert bad_settings.status_code == 422
    assert {detail["field"] for detail in bad_settings.json()["detail"]} == {"mode", "settings.cfg_scale"}

    not_utf8 = alice.post("/v1/jobs", files={"script": ("show.txt", b"Alice: caf\xe9\n", "text/plain")})
    assert not_utf8.status_code == 422 and "UTF-8" in not_utf8.json()["detail"][0]["msg"]


def test_voice_uploads_are_checked(alice: httpx.Client, alice_voice: str, tmp_path: Path) -> None:
    not_audio = alice.post(
        "/v1/voices", data={"name": "x"}, files={"file": ("notes.wav", b"hello " * 100, "audio/wav")}
    )
    assert not_audio.status_code == 422 and not_audio.json()["detail"][0]["field"] == "file"

    too_big = tmp_path / "long.wav"
    sf.write(too_big, voice_like(70.0, 16_000), 16_000)  # 2.2 MB against the stack's 2 MiB limit
    with too_big.open("rb") as handle:
        refused = alice.post("/v1/voices", data={"name": "long"}, files={"file": ("long.wav", handle, "audio/wav")})
    assert refused.status_code == 413 and "at most 2 MiB (VOXCAST_MAX_UPLOAD_BYTES)" in refused.json()["detail"]

    listed = alice.get("/v1/voices").json()["voices"]
    assert alice_voice in [voice["id"] for voice in listed]
    preview = alice.get(f"/v1/voices/{alice_voice}/preview.wav")
    samples, rate = sf.read(io.BytesIO(preview.content))
    assert rate == 24_000 and len(samples) / rate == pytest.approx(4.0, abs=0.01)


BAD_VOICE_NAMES = [
    ("", "at least 1 character"),
    ("x" * 101, "at most 100 characters"),
    ("line\nbreak", "only printable text is allowed"),
]


def test_a_voice_is_renamed_by_its_owner_under_the_uploads_name_rules(
    stack, alice: httpx.Client, voice_wav: Path
) -> None:  # type: ignore[no-untyped-def]
    voice = upload_voice(alice, voice_wav, "first take")
    renamed = alice.patch(f"/v1/voices/{voice}", json={"name": "Narrator – warm"})
    assert renamed.status_code == 200, renamed.text
    assert renamed.json()["name"] == "Narrator – warm" and renamed.json()["id"] == voice
    assert alice.get(f"/v1/voices/{voice}").json()["name"] == "Narrator – warm"

    for name, rule in BAD_VOICE_NAMES:
        refused = alice.patch(f"/v1/voices/{voice}", json={"name": name})
        assert refused.status_code == 422, (name, refused.text)
        [problem] = refused.json()["detail"]
        assert problem["field"] == "name" and rule in problem["msg"], problem
        if not name:
            continue  # a form sends an empty field as no field: the upload says "Field required"
        with voice_wav.open("rb") as handle:  # an upload's name is held to the very same rule
            upload = alice.post("/v1/voices", data={"name": name}, files={"file": ("v.wav", handle, "audio/wav")})
        assert upload.status_code == 422 and upload.json()["detail"][0]["msg"] == problem["msg"], upload.text
    for body, field in [({}, "name"), ({"name": "ok", "colour": "red"}, "colour")]:
        refused = alice.patch(f"/v1/voices/{voice}", json=body)
        assert refused.status_code == 422 and [p["field"] for p in refused.json()["detail"]] == [field], refused.text
    assert alice.get(f"/v1/voices/{voice}").json()["name"] == "Narrator – warm"  # nothing refused changed it

    bob = stack.client(stack.mint_key("bob the renamer"))
    absent = "0" * 32
    for client, voice_id in [(bob, voice), (alice, absent)]:
        missing = client.patch(f"/v1/voices/{voice_id}", json={"name": "mine now"})
        assert missing.status_code == 404 and missing.json()["detail"] == f"no voice {voice_id}", missing.text
    not_an_id = alice.patch("/v1/voices/not-an-id", json={"name": "x"})
    assert not_an_id.status_code == 422 and not_an_id.json()["detail"][0]["field"] == "voice_id"
    assert alice.get(f"/v1/voices/{voice}").json()["name"] == "Narrator – warm"
    assert alice.delete(f"/v1/voices/{voice}").status_code == 204


def test_cancel_stops_a_running_job(alice: httpx.Client, alice_voice: str) -> None:
    job_id = submit(alice, LONG_SCRIPT, alice_voice, mode="turns").json()["id"]
    deadline = time.monotonic() + 60
    while (job := alice.get(f"/v1/jobs/{job_id}").json())["progress"]["frames_done"] == 0:
        assert time.monotonic() < deadline, job
        time.sleep(0.05)
    cancelled = alice.delete(f"/v1/jobs/{job_id}")
    assert cancelled.status_code == 200 and cancelled.json()["cancel_requested"]
    job = wait_for(alice, job_id, {"cancelled", "done", "failed"}, timeout=10)
    assert job["state"] == "cancelled"
    assert job["progress"]["segments_done"] < job["progress"]["segments_total"] == 8
    assert alice.get(f"/v1/jobs/{job_id}/audio.wav").status_code == 409
    assert alice.delete(f"/v1/jobs/{job_id}").status_code == 200  # cancelling again changes nothing


def test_a_key_sees_only_its_own_jobs_and_voices_and_admins_see_all(
    stack, alice: httpx.Client, alice_voice: str
) -> None:  # type: ignore[no-untyped-def]
    job_id = submit(alice, SCRIPT, alice_voice, formats=["wav"]).json()["id"]
    job = wait_for(alice, job_id, {"done", "failed"})
    assert job["state"] == "done"
    assert alice.delete(f"/v1/jobs/{job_id}").status_code == 409  # nothing left to cancel
    # its plan: the segments its events number, each with the turns it speaks, as the transcript has them
    plan = alice.get(f"/v1/jobs/{job_id}/plan").json()
    assert plan["revision"] == 0 and [segment["index"] for segment in plan["segments"]] == list(
        range(job["progress"]["segments_total"])
    )
    timed = alice.get(f"/v1/jobs/{job_id}/turns.json").json()["turns"]
    planned = [turn for segment in plan["segments"] for turn in segment["turns"]]
    assert [(turn["index"], turn["speaker"], turn["text"]) for turn in planned] == [
        (turn["index"], turn["speaker"], turn["text"]) for turn in timed
    ]

    bob = stack.client(stack.mint_key("bob"))
    for method, path in [
        ("GET", f"/v1/jobs/{job_id}"),
        ("GET", f"/v1/jobs/{job_id}/plan"),
        ("GET", f"/v1/jobs/{job_id}/events"),
        ("GET", f"/v1/jobs/{job_id}/audio.wav"),
        ("GET", f"/v1/jobs/{job_id}/transcript.srt"),
        ("GET", f"/v1/jobs/{job_id}/chapters.json"),
        ("GET", f"/v1/jobs/{job_id}/segments/0/audio"),
        ("DELETE", f"/v1/jobs/{job_id}"),
        ("GET", f"/v1/voices/{alice_voice}"),
        ("GET", f"/v1/voices/{alice_voice}/preview.wav"),
        ("DELETE", f"/v1/voices/{alice_voice}"),
    ]:
        response = bob.request(method, path)
        assert response.status_code == 404, (method, path, response.text)
    assert job_id not in [job["id"] for job in bob.get("/v1/jobs").json()["jobs"]]
    assert bob.get("/v1/voices").json()["voices"] == []
    using_alices_voice = submit(bob, SCRIPT, alice_voice)
    assert using_alices_voice.status_code == 422 and "no voice" in using_alices_voice.json()["detail"][0]["msg"]
    assert bob.get("/v1/admin/jobs").status_code == 403
    assert stack.client(None).get("/v1/jobs").status_code == 401
    assert stack.client("vxc_not-a-key").get("/v1/jobs").status_code == 401

    admin = stack.client(stack.mint_key("ops", admin=True))
    assert admin.get(f"/v1/jobs/{job_id}").status_code == 200
    everything = admin.get("/v1/admin/jobs", params={"state": "done"}).json()["jobs"]
    assert job_id in [job["id"] for job in everything]
    owner = alice.get(f"/v1/jobs/{job_id}").json()["owner_id"]
    assert {job["owner_id"] for job in admin.get("/v1/admin/jobs", params={"owner_id": owner}).json()["jobs"]} == {
        owner
    }
    queues = admin.get("/v1/admin/queues").json()["queues"]
    assert [queue["queue"] for queue in queues] == ["interactive", "batch"]
    assert all(queue["waiting_in_broker"] is not None for queue in queues)


def test_jobs_in_flight_are_limited_per_key_and_admins_can_retry(stack, voice_wav: Path) -> None:  # type: ignore[no-untyped-def]
    carol = stack.client(stack.mint_key("carol"))
    voice = upload_voice(carol, voice_wav, "carol")
    accepted = [submit(carol, LONG_SCRIPT, voice, mode="turns", queue="batch", priority=0) for _ in range(3)]
    assert [response.status_code for response in accepted] == [202, 202, 202]
    refused = submit(carol, SCRIPT, voice)
    assert refused.status_code == 429 and "limit is 3" in refused.json()["detail"]
    for response in accepted:
        assert carol.delete(f"/v1/jobs/{response.json()['id']}").status_code == 200
    for response in accepted:
        wait_for(carol, response.json()["id"], {"cancelled"}, timeout=15)

    admin = stack.client(stack.mint_key("ops", admin=True))
    retried = admin.post(f"/v1/admin/jobs/{accepted[0].json()['id']}/retry")
    assert retried.status_code == 200 and retried.json()["state"] == "queued"
    assert (
        admin.post(f"/v1/admin/jobs/{accepted[1].json()['id']}/priority", json={"priority": 9}).json()["priority"] == 9
    )
    job = wait_for(carol, accepted[0].json()["id"], {"done", "failed"})
    assert job["state"] == "done", job["error"]


# --- deleting a job that has ended: every file and row, by its owner or an admin, finished after a crash ----------


def job_traces(stack, job_id: str) -> dict[str, bool]:  # type: ignore[no-untyped-def]
    """Where a job leaves traces: its folder, a trash copy, its row, its segment rows."""
    from sqlalchemy import select

    from core.models import Job, JobSegment

    data = stack.root / "data"
    with stack.database().session() as session:
        row = session.get(Job, job_id) is not None
        segments = session.scalars(select(JobSegment).where(JobSegment.job_id == job_id)).first() is not None
    return {
        "folder": (data / "jobs" / job_id).exists(),
        "trash": (data / "trash" / job_id).exists(),
        "row": row,
        "segments": segments,
    }


GONE = {"folder": False, "trash": False, "row": False, "segments": False}
KEPT = {"folder": True, "trash": False, "row": True, "segments": True}


def test_an_owner_deletes_an_ended_job_with_all_its_files(stack, alice: httpx.Client, alice_voice: str) -> None:  # type: ignore[no-untyped-def]
    job_id = submit(alice, SCRIPT, alice_voice, formats=["wav", "mp3"]).json()["id"]
    assert wait_for(alice, job_id, {"done", "failed"})["state"] == "done"
    assert job_traces(stack, job_id) == KEPT

    running_id = submit(alice, LONG_SCRIPT, alice_voice, mode="turns").json()["id"]
    refused = alice.delete(f"/v1/jobs/{running_id}", params={"purge": "true"})
    assert refused.status_code == 409, refused.text
    assert f"cancel it first (DELETE /v1/jobs/{running_id})" in refused.json()["detail"]
    assert alice.delete(f"/v1/jobs/{running_id}").status_code == 200  # cancelled, and then it may go
    assert wait_for(alice, running_id, {"cancelled", "done", "failed"})["state"] in {"cancelled", "done"}
    assert alice.delete(f"/v1/jobs/{running_id}", params={"purge": "true"}).status_code == 204

    bob = stack.client(stack.mint_key("bob-deletes"))
    assert bob.delete(f"/v1/jobs/{job_id}", params={"purge": "true"}).status_code == 404
    assert job_traces(stack, job_id) == KEPT

    deleted = alice.delete(f"/v1/jobs/{job_id}", params={"purge": "true"})
    assert deleted.status_code == 204 and deleted.content == b""
    assert job_traces(stack, job_id) == GONE
    for path in ("", "/plan", "/audio.wav", "/audio.mp3", "/transcript.srt", "/chapters.json", "/segments/0/audio"):
        assert alice.get(f"/v1/jobs/{job_id}{path}").status_code == 404, path
    assert job_id not in [job["id"] for job in alice.get("/v1/jobs").json()["jobs"]]
    assert alice.delete(f"/v1/jobs/{job_id}", params={"purge": "true"}).status_code == 404
    assert alice.get(f"/v1/voices/{alice_voice}").status_code == 200  # the library voice it used stays


def test_an_admin_deletes_any_ended_job(stack, alice: httpx.Client, alice_voice: str) -> None:  # type: ignore[no-untyped-def]
    job_id = submit(alice, SCRIPT, alice_voice, formats=["wav"]).json()["id"]
    assert wait_for(alice, job_id, {"done", "failed"})["state"] == "done"
    admin = stack.client(stack.mint_key("ops-deletes", admin=True))
    assert admin.delete(f"/v1/jobs/{job_id}", params={"purge": "true"}).status_code == 204
    assert job_traces(stack, job_id) == GONE


def test_a_delete_cut_short_by_a_crash_is_finished_by_deleting_again_or_by_the_sweeper(
    stack, alice: httpx.Client, alice_voice: str
) -> None:  # type: ignore[no-untyped-def]
    """What a crash leaves after each step of `core.job_deletion`, made by hand: the folder in the trash with the
    rows still there, or only the trash copy. The first is finished by a second delete, the second by the worker's
    sweeper (it also finishes the first kind by itself)."""
    from sqlalchemy import delete

    from core.models import Job, JobSegment

    data = stack.root / "data"
    first, second = (submit(alice, SCRIPT, alice_voice, formats=["wav"]).json()["id"] for _ in range(2))
    for job_id in (first, second):
        assert wait_for(alice, job_id, {"done", "failed"})["state"] == "done"
        (data / "trash").mkdir(exist_ok=True)
        (data / "jobs" / job_id).rename(data / "trash" / job_id)  # crashed after step 1
    with stack.database().session() as session:  # `second` also crashed after step 2
        session.execute(delete(JobSegment).where(JobSegment.job_id == second))
        session.execute(delete(Job).where(Job.id == second))

    assert alice.get(f"/v1/jobs/{first}/audio.wav").status_code == 404  # its files are already out of reach
    again = alice.delete(f"/v1/jobs/{first}", params={"purge": "true"})
    if again.status_code == 404:  # the sweeper (every half second here) finished it first: the other path, logged
        worker_logs = "".join(path.read_text(errors="replace") for path in stack.root.glob("worker-*.log"))
        assert f'msg="interrupted delete finished" job_id={first}' in worker_logs, again.text
    else:
        assert again.status_code == 204, again.text
    assert job_traces(stack, first) == GONE
    deadline = time.monotonic() + 30
    while job_traces(stack, second) != GONE:
        assert time.monotonic() < deadline, job_traces(stack, second)
        time.sleep(0.1)

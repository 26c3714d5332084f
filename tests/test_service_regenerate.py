"""Regenerating one turn of a finished job, through the real stack: a uvicorn api, a Celery worker process,
Redis, SQLite and the tiny checkpoint. Only the turn's segments are generated again; the episode, its
transcript and chapters are rebuilt from the stored segments."""

from __future__ import annotations

import io
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
from sqlalchemy import select

from core.models import Job, JobSegment
from tests.service_client import read_events, upload_voice, wait_for
from tests.waiting import wait_until

FAST = {"diffusion_steps": 2, "seed": 3}
# turns mode: three segments (one per turn) and a 1 s pause between the second and the third.
TURNS_SCRIPT = "Alice: Welcome to the show.\nBob: Thanks, Alice.\n[pause: 1s]\nAlice: Let's go.\n"
# whole mode: segment 0 holds turns 0 and 1; the pause closes it; segment 1 holds turn 2.
WHOLE_SCRIPT = "Alice: Hello and welcome.\nBob: Good to be here.\n[pause: 0.5s]\nAlice: Now, the news.\n"
LONG_SCRIPT = "".join(
    f"{'Alice' if turn % 2 == 0 else 'Bob'}: This is turn number {turn}, and it goes on for a little while.\n"
    for turn in range(8)
)


@pytest.fixture(scope="module")
def stack(shared_stack):  # type: ignore[no-untyped-def]
    """The session's stack: this file only submits jobs and reads them back, under keys of its own."""
    return shared_stack


@pytest.fixture(scope="module")
def voice(alice: httpx.Client, voice_wav: Path) -> str:
    return upload_voice(alice, voice_wav, "host")


def finished_job(client: httpx.Client, script: str, voice: str, **options: object) -> dict:
    body = {"script": script, "voices": {"Alice": voice, "Bob": voice}, "settings": FAST, **options}
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 202, response.text
    job = wait_for(client, response.json()["id"], {"done", "failed"})
    assert job["state"] == "done", job["error"]
    return job


def segment_files(stack, job_id: str) -> dict[int, tuple[bytes, int]]:  # type: ignore[no-untyped-def]
    """Each stored segment's audio bytes and modification time (ns), by index."""
    folder = stack.root / "data" / "jobs" / job_id / "segments"
    takes = folder.glob("[0-9][0-9][0-9][0-9].flac")  # the current takes, not an earlier one kept beside them
    return {int(path.name[:4]): (path.read_bytes(), path.stat().st_mtime_ns) for path in takes}


def segment_rows(stack, job_id: str) -> dict[int, tuple[int, int, str]]:  # type: ignore[no-untyped-def]
    """index -> (seed, revision, state) as the database records them."""
    with stack.database().session() as session:
        rows = session.scalars(select(JobSegment).where(JobSegment.job_id == job_id))
        return {row.index: (row.seed, row.revision, row.state) for row in rows}


def regenerate(client: httpx.Client, job_id: str, turn: int, **body: object) -> httpx.Response:
    return client.post(f"/v1/jobs/{job_id}/turns/{turn}/regenerate", json=body)


def samples_of(client: httpx.Client, url: str) -> int:
    info = sf.info(io.BytesIO(client.get(url).content))
    assert info.samplerate == 24_000
    return info.frames


def test_a_new_seed_regenerates_only_that_turns_segment(stack, alice: httpx.Client, voice: str) -> None:  # type: ignore[no-untyped-def]
    job = finished_job(alice, TURNS_SCRIPT, voice, mode="turns", formats=["wav", "mp3"])
    job_id = job["id"]
    before = segment_files(stack, job_id)
    outputs = stack.root / "data" / "jobs" / job_id / "outputs"
    mp3_before = (outputs / "episode.mp3").stat().st_mtime_ns
    assert sorted(before) == [0, 1, 2]

    response = regenerate(alice, job_id, 1, seed=1234)
    assert response.status_code == 202, response.text
    assert response.headers["location"] == f"/v1/jobs/{job_id}"
    queued = response.json()
    assert queued["revision"] == 1 and queued["turn"] == 1 and queued["speaker"] == "Bob"
    assert queued["segments"] == [{"index": 1, "seed": 1234}]
    assert queued["job"]["state"] in ("queued", "running") and queued["job"]["outputs"] is None

    events = read_events(alice, job_id)
    assert events[-1][0] == "state" and events[-1][1]["state"] == "done", events[-1]
    assert [data["index"] for name, data in events if name == "segment"] == [1]
    # its progress is the regenerated segment's alone: frames of one segment, not the episode's 99% from the start
    # (the client connects while the worker runs, so the first figure it reads may already be past 0: the clean run
    # of 2026-12-05 read 25; what the figures count is the point)
    progress = [data for name, data in events if name == "progress"]
    assert progress and all(data["segments"] == 1 for data in progress), progress
    episode_frames = job["progress"]["frames_planned"]
    assert all(data["frames_planned"] < episode_frames / 2 for data in progress), progress  # the plan: an estimate
    done = [data["frames_done"] for data in progress]
    assert done == sorted(done), progress

    after = segment_files(stack, job_id)
    assert after[0] == before[0] and after[2] == before[2]  # same bytes, never rewritten
    assert after[1][0] != before[1][0]
    assert segment_rows(stack, job_id) == {0: (3, 0, "done"), 1: (1234, 1, "done"), 2: (5, 0, "done")}
    with stack.database().session() as session:
        assert session.get_one(Job, job_id).revision == 1
    assert (outputs / "episode.mp3").stat().st_mtime_ns != mp3_before  # every requested format is rebuilt

    done = alice.get(f"/v1/jobs/{job_id}").json()
    segment_samples = sum(sf.info(io.BytesIO(data)).frames for data, _ in after.values())
    episode_samples = samples_of(alice, done["outputs"]["audio"]["wav"])
    assert episode_samples == segment_samples + 24_000  # the segments plus the 1 s pause, nothing else
    assert done["audio_seconds"] == pytest.approx(episode_samples / 24_000, abs=1e-3)
    timeline = alice.get(done["outputs"]["turns"]).json()
    assert [turn["text"] for turn in timeline["turns"]] == ["Welcome to the show.", "Thanks, Alice.", "Let's go."]
    bob = timeline["turns"][1]
    assert bob["end"] - bob["start"] == pytest.approx(sf.info(io.BytesIO(after[1][0])).duration, abs=1e-3)

    drawn = regenerate(alice, job_id, 0).json()  # no seed given: a fresh one is drawn and recorded
    wait_for(alice, job_id, {"done"})
    (segment,) = drawn["segments"]
    assert drawn["revision"] == 2 and segment["index"] == 0
    assert segment_rows(stack, job_id)[0] == (segment["seed"], 2, "done")


def test_edited_text_regenerates_the_whole_segment_and_sticks(stack, alice: httpx.Client, voice: str) -> None:  # type: ignore[no-untyped-def]
    job = finished_job(alice, WHOLE_SCRIPT, voice, mode="whole", formats=["wav"])
    job_id = job["id"]
    before = segment_files(stack, job_id)

    edited = regenerate(alice, job_id, 1, text="  I brought \u201cfresh\u201d   coffee. ", seed=77)
    assert edited.status_code == 202, edited.text
    assert edited.json()["text"] == 'I brought "fresh" coffee.'  # normalised as the parser does
    assert edited.json()["segments"] == [{"index": 0, "seed": 77}]  # the segment holding turns 0 and 1
    wait_for(alice, job_id, {"done"})

    after = segment_files(stack, job_id)
    assert after[1] == before[1] and after[0][0] != before[0][0]
    srt = alice.get(f"/v1/jobs/{job_id}/transcript.srt").text
    assert 'Bob: I brought "fresh" coffee.' in srt and "Good to be here" not in srt
    folder = stack.root / "data" / "jobs" / job_id / "inputs"
    assert (folder / "script.txt").read_text() == WHOLE_SCRIPT  # the submitted script is kept
    assert 'Bob: I brought "fresh" coffee.' in (folder / "script.r1.txt").read_text()

    later = regenerate(alice, job_id, 2, seed=5)  # a later regeneration starts from the edited script
    assert later.status_code == 202 and later.json()["segments"] == [{"index": 1, "seed": 5}]
    wait_for(alice, job_id, {"done"})
    timeline = alice.get(f"/v1/jobs/{job_id}/turns.json").json()
    assert [turn["text"] for turn in timeline["turns"]] == [
        "Hello and welcome.",
        'I brought "fresh" coffee.',
        "Now, the news.",
    ]
    assert segment_files(stack, job_id)[0] == after[0]


def test_a_plan_says_what_whole_mode_would_generate_again_and_about_how_long(  # type: ignore[no-untyped-def]
    stack, alice: httpx.Client, voice: str
) -> None:
    job = finished_job(alice, WHOLE_SCRIPT, voice, mode="whole", formats=["wav"])
    job_id = job["id"]
    with stack.database().session() as session:
        first = session.scalars(select(JobSegment).where(JobSegment.job_id == job_id, JobSegment.index == 0)).one()
        took = (first.finished_at - first.started_at).total_seconds()
        seconds = first.seconds

    planned = alice.post(f"/v1/jobs/{job_id}/turns/1/regeneration-plan", json={"text": "A new line for Bob here."})
    assert planned.status_code == 200, planned.text
    plan = planned.json()
    assert plan["segments"] == [0]  # the segment holding turns 0 and 1: Alice's turn is spoken anew too
    assert plan["turns"] == [
        {"index": 0, "speaker": "Alice", "words": "Hello and welcome."},
        {"index": 1, "speaker": "Bob", "words": "A new line for Bob here."},
    ]
    assert plan["audio_seconds"] == pytest.approx(seconds, abs=1e-3)
    assert plan["estimated_seconds"] == pytest.approx(took, abs=0.1)
    assert alice.get(f"/v1/jobs/{job_id}").json()["revision"] == 0  # asking changed nothing
    assert segment_rows(stack, job_id) == {0: (3, 0, "done"), 1: (4, 0, "done")}

    refused = alice.post(f"/v1/jobs/{job_id}/turns/1/regeneration-plan", json={"text": "Carol: hi."})
    assert refused.status_code == 422 and refused.json()["detail"][0]["field"] == "text"  # the same checks
    assert alice.post(f"/v1/jobs/{job_id}/turns/9/regeneration-plan").status_code == 404
    bob = stack.client(stack.mint_key("bob-plans"))
    assert bob.post(f"/v1/jobs/{job_id}/turns/0/regeneration-plan").status_code == 404


def test_the_take_a_regeneration_replaced_is_kept_until_the_listener_keeps_one(  # type: ignore[no-untyped-def]
    stack, alice: httpx.Client, voice: str
) -> None:
    job = finished_job(alice, WHOLE_SCRIPT, voice, mode="whole", formats=["wav"])
    job_id = job["id"]
    assert job["previous_take"] is None
    original = segment_files(stack, job_id)[0][0]  # segment 0 holds turns 0 and 1
    original_srt = alice.get(f"/v1/jobs/{job_id}/transcript.srt").text
    original_episode = sf.read(io.BytesIO(alice.get(f"/v1/jobs/{job_id}/audio.wav").content))[0]
    no_take = alice.post(f"/v1/jobs/{job_id}/takes", json={"keep": "previous"})
    assert no_take.status_code == 409 and "keeps no earlier take" in no_take.json()["detail"]

    assert regenerate(alice, job_id, 1, text="Something else entirely.", seed=8).status_code == 202
    done = wait_for(alice, job_id, {"done"})
    previous_url = f"/v1/jobs/{job_id}/segments/0/audio?take=previous"
    assert done["previous_take"] == {"revision": 0, "segments": [{"index": 0, "audio": previous_url}]}
    assert alice.get(previous_url).content == original  # the earlier take, to compare
    assert alice.get(f"/v1/jobs/{job_id}/segments/0/audio").content != original  # beside the new one
    assert alice.get(f"/v1/jobs/{job_id}/segments/1/audio?take=previous").status_code == 404  # not regenerated

    bob = stack.client(stack.mint_key("bob-takes"))
    assert bob.post(f"/v1/jobs/{job_id}/takes", json={"keep": "new"}).status_code == 404
    bad = alice.post(f"/v1/jobs/{job_id}/takes", json={"keep": "both"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "keep"

    kept = alice.post(f"/v1/jobs/{job_id}/takes", json={"keep": "previous"})
    assert kept.status_code == 200, kept.text
    assert kept.json()["revision"] == 2 and kept.json()["previous_take"] is None
    restored = wait_for(alice, job_id, {"done", "failed"})
    assert restored["state"] == "done" and restored["revision"] == 2, restored
    assert alice.get(f"/v1/jobs/{job_id}/segments/0/audio").content == original
    assert alice.get(f"/v1/jobs/{job_id}/transcript.srt").text == original_srt
    episode = sf.read(io.BytesIO(alice.get(f"/v1/jobs/{job_id}/audio.wav").content))[0]
    np.testing.assert_array_equal(episode, original_episode)  # the same segments: the same episode
    assert segment_rows(stack, job_id)[0] == (3, 0, "done")  # its row as it was: seed 3, made at revision 0

    # The restored take is the earlier take of the next regeneration; keeping the new one removes it.
    assert regenerate(alice, job_id, 0, seed=9).status_code == 202
    again = wait_for(alice, job_id, {"done"})
    assert again["previous_take"]["revision"] == 2 and alice.get(previous_url).content == original
    chose_new = alice.post(f"/v1/jobs/{job_id}/takes", json={"keep": "new"})
    assert chose_new.status_code == 200 and chose_new.json()["previous_take"] is None
    assert alice.get(previous_url).status_code == 404
    segments = stack.root / "data" / "jobs" / job_id / "segments"
    assert sorted(path.name for path in segments.iterdir()) == [
        "0000.flac",
        "0000.latents.npy",
        "0001.flac",
        "0001.latents.npy",
    ]
    assert alice.get(f"/v1/jobs/{job_id}/segments/0/audio").content != original


def test_bad_regenerations_are_refused_with_the_reason(stack, alice: httpx.Client, voice: str) -> None:  # type: ignore[no-untyped-def]
    job_id = finished_job(alice, TURNS_SCRIPT, voice, mode="turns", formats=["wav"])["id"]
    for text, expected in [
        ("Two\nlines.", "line breaks"),
        ("Carol: hello.", "speaker tag"),
        ("Wait [pause: 1s] for it.", "pause tag"),
        ("Wait [pause: 99s] for it.", "at most 30 s"),
        ("   ", "empty"),
        ("🎉🎉 !!", "the text has nothing to say aloud: '🎉🎉 !!' is only emoji, symbols or punctuation"),
    ]:
        response = regenerate(alice, job_id, 0, text=text)
        assert response.status_code == 422, (text, response.text)
        (detail,) = response.json()["detail"]
        assert detail["field"] == "text" and expected in detail["msg"], (text, detail)
    too_long = regenerate(alice, job_id, 0, text="A sentence that runs on. " * 80)  # cut in two at 120 s
    assert too_long.status_code == 422 and "2 pieces instead of 1" in too_long.json()["detail"][0]["msg"]
    assert regenerate(alice, job_id, 0, seed=-1).json()["detail"][0]["field"] == "seed"
    missing = regenerate(alice, job_id, 3)
    assert missing.status_code == 404 and "numbered 0 to 2" in missing.json()["detail"]
    assert regenerate(alice, job_id, -1).json()["detail"][0]["field"] == "turn"

    bob = stack.client(stack.mint_key("bob"))
    assert regenerate(bob, job_id, 0).status_code == 404  # someone else's job is as good as absent
    assert alice.get(f"/v1/jobs/{job_id}").json()["state"] == "done"  # nothing refused changed the job
    assert segment_rows(stack, job_id) == {0: (3, 0, "done"), 1: (4, 0, "done"), 2: (5, 0, "done")}

    running = alice.post(
        "/v1/jobs",
        json={"script": LONG_SCRIPT, "voices": {"Alice": voice, "Bob": voice}, "settings": FAST, "mode": "turns"},
    ).json()["id"]
    wait_for(alice, running, {"running"})
    refused = regenerate(alice, running, 0)
    assert refused.status_code == 409 and "once the job is done" in refused.json()["detail"]
    assert alice.delete(f"/v1/jobs/{running}").status_code == 200
    wait_for(alice, running, {"cancelled"})
    assert regenerate(alice, running, 0).status_code == 409  # cancelled is not done either


def test_a_regeneration_message_claims_the_job_only_at_its_revision(tmp_path: Path) -> None:
    from core.api_keys import create_api_key
    from core.db import Database, upgrade_database
    from core.job_repository import claim_job

    url = f"sqlite:///{tmp_path / 'voxcast.db'}"
    upgrade_database(url)
    database = Database.connect(url)
    with database.session() as session:
        job = Job(
            id="ab" * 16,
            owner_id=create_api_key(session, "owner").id,
            mode="turns",
            queue="interactive",
            generation={"cfg_scale": 1.3, "diffusion_steps": 2, "seed": 5, "max_segment_seconds": 120.0},
            formats=["wav"],
            voices={"0": "voice"},
            revision=2,
        )
        session.add(job)
    try:
        assert claim_job(database, job.id, "worker", stale_after=60, revision=1) is None  # superseded message
        claimed = claim_job(database, job.id, "worker", stale_after=60, revision=2)
        assert claimed is not None and claimed.revision == 2
    finally:
        database.dispose()


def test_a_job_whose_segments_the_retention_policy_removed_says_so_and_refuses_regeneration(
    make_service_stack, voice_wav: Path
) -> None:  # type: ignore[no-untyped-def]
    """The worker's sweeper applies VOXCAST_KEEP_INTERMEDIATES_DAYS (here about 2 s): the segments go, the episode
    stays, the job says it is no longer regenerable and a regeneration is refused with the reason."""
    import time

    stack = make_service_stack(keep_intermediates_days=str(2 / 86_400)).start()
    client = stack.client(stack.mint_key("retention"))
    job = finished_job(client, TURNS_SCRIPT, upload_voice(client, voice_wav, "host"), mode="turns")
    job_id = job["id"]
    assert job["regenerable"] and job["intermediates_removed_at"] is None
    deadline = time.monotonic() + 30

    def claimed() -> dict | None:
        job = client.get(f"/v1/jobs/{job_id}").json()
        return None if job["regenerable"] else job

    job = wait_until(claimed, "the sweeper's claim on the job's segments", timeout=30, interval=0.2)
    assert job["state"] == "done" and job["intermediates_removed_at"] is not None
    # The sweeper claims the job first (no regeneration may start on files being removed), then removes them.
    segments = stack.root / "data" / "jobs" / job_id / "segments"
    wait_until(lambda: not segments.exists(), f"{segments} removed after the claim", deadline - time.monotonic(), 0.2)
    assert client.get(f"/v1/jobs/{job_id}/audio.wav").status_code == 200
    assert client.get(f"/v1/jobs/{job_id}/segments/0/audio").status_code == 404
    refused = client.post(f"/v1/jobs/{job_id}/turns/1/regenerate", json={})
    assert refused.status_code == 409
    assert "retention policy (VOXCAST_KEEP_INTERMEDIATES_DAYS) removed its segments" in refused.json()["detail"]


def test_a_stored_segment_whose_words_no_longer_hash_the_same_is_generated_again(
    stack, alice: httpx.Client, voice: str
) -> None:  # type: ignore[no-untyped-def]
    """As after an upgrade that reads the script differently: segment 2's stored hash is not its plan's any more.
    Regenerating turn 0 then generates segment 2 as well (and says so), and leaves segment 1 as it was."""
    from sqlalchemy import update

    job_id = finished_job(alice, TURNS_SCRIPT, voice, mode="turns", formats=["wav"])["id"]
    before = segment_files(stack, job_id)
    with stack.database().session() as session:
        session.execute(
            update(JobSegment).where(JobSegment.job_id == job_id, JobSegment.index == 2).values(text_hash="0" * 64)
        )
    assert regenerate(alice, job_id, 0, seed=77).status_code == 202
    assert wait_for(alice, job_id, {"done", "failed"})["state"] == "done"

    after = segment_files(stack, job_id)
    assert after[1] == before[1]  # its words are the same: never rewritten
    assert after[0][1] != before[0][1] and after[2][1] != before[2][1]
    with stack.database().session() as session:
        rows = session.scalars(select(JobSegment).where(JobSegment.job_id == job_id).order_by(JobSegment.index))
        hashes = [row.text_hash for row in rows]
    assert "0" * 64 not in hashes and len(set(hashes)) == 3
    log = "".join(path.read_text(errors="replace") for path in stack.root.glob("worker-*.log"))
    assert f"job_id={job_id} segment=2" in log.split("segment's words differ from what it stored")[-1]

"""The script stage through the service: `POST /v1/scripts` to draft from notes or clean up a transcript.

Real parts: the api (uvicorn), a scripts worker (`workers.script_worker`, its own Celery process on the
`scripts` queue), Redis, and PostgreSQL when it answers (else SQLite). The script model is `tiny-random`,
whose replies never pass validation: every model path runs to its end (each attempt recorded, its reason
shown, the job failed with the last one), which is what a real model's worst day looks like.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from api.app import create_app
from core.models import ScriptJob
from script_text.drafting.jobs import MAX_SOURCE_CHARS
from tests.hardening import assert_healthy, assert_refused
from tests.service_client import in_process_settings, read_event_stream
from tests.test_hardening_inputs import SCRIPTS as HOSTILE_SCRIPTS

EXAMPLES = Path(__file__).resolve().parents[2] / "shared" / "examples" / "scripts"
NOTES = "Notes for the episode: why tea cools faster in a wide cup; surface area; evaporation; a kitchen test."
SUBTITLES = """WEBVTT

1
00:00:01.000 --> 00:00:03.000
Alice: Welcome back to the show. [laughs]

2
00:00:03.500 --> 00:00:06.000
Bob: Thanks, it's good to be here. (long pause)
"""


@pytest.fixture(scope="module")
def stack(postgres_or_sqlite_url: str | None, make_service_stack):  # type: ignore[no-untyped-def]
    """The api and a scripts worker on `tiny-random`, two replies a job."""
    settings = {"script_model": "tiny-random", "script_max_attempts": "2", "max_jobs_in_flight": "3"}
    if postgres_or_sqlite_url is not None:
        settings["database_url"] = postgres_or_sqlite_url
    stack = make_service_stack(**settings)
    stack.start_api()
    stack.start_scripts_worker()
    return stack


@pytest.fixture
def client(stack) -> Iterator[httpx.Client]:  # type: ignore[no-untyped-def]
    """A client with a fresh key of its own, so the in-flight limit of one test never meets another's."""
    with stack.client(stack.mint_key("producer")) as client:
        yield client


def script_rows(stack) -> int:  # type: ignore[no-untyped-def]
    with stack.database().session() as session:
        return session.scalar(select(func.count()).select_from(ScriptJob)) or 0


def wait_for_script(client: httpx.Client, script_id: str, states: set[str], timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while (view := client.get(f"/v1/scripts/{script_id}").json())["state"] not in states:
        assert time.monotonic() < deadline, view
        time.sleep(0.1)
    return view


def long_draft_under_way(client: httpx.Client) -> str:
    """A 90-minute draft (a reply of up to 16,384 tokens: many seconds even for the tiny model), once its first
    attempt has started; its id."""
    response = client.post("/v1/scripts", json={"task": "draft", "material": NOTES, "minutes": 90})
    assert response.status_code == 202, response.text
    script_id = response.json()["id"]
    deadline = time.monotonic() + 60
    while not client.get(f"/v1/scripts/{script_id}").json()["attempts"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return script_id


# --- answered at once ----------------------------------------------------------------------------------


def test_a_transcript_the_clean_up_reads_is_a_script_at_once_without_a_worker(make_service_stack) -> None:  # type: ignore[no-untyped-def]
    stack = make_service_stack()
    stack.start_api()  # no worker of any kind
    client = stack.client(stack.mint_key("solo"))
    response = client.post("/v1/scripts", json={"task": "normalise", "transcript": SUBTITLES})
    assert response.status_code == 201, response.text
    view = response.json()
    assert response.headers["location"] == f"/v1/scripts/{view['id']}"
    assert (view["state"], view["via"], view["attempts"]) == ("done", "cleanup", [])
    assert view["script"] == "Alice: Welcome back to the show.\nBob: Thanks, it's good to be here.\n[pause: 2s]\n"
    assert (view["speakers"], view["words"]) == (["Alice", "Bob"], 11)
    assert client.get(f"/v1/scripts/{view['id']}").json() == view
    assert [item["id"] for item in client.get("/v1/scripts").json()["scripts"]] == [view["id"]]


@pytest.mark.skipif(not EXAMPLES.is_dir(), reason="needs ../shared/examples (the shared example scripts)")
def test_every_example_script_as_a_transcript_is_read_by_the_parser(client: httpx.Client) -> None:
    for path in sorted(EXAMPLES.glob("*.txt")):
        upload = {"transcript": (path.name, path.read_bytes(), "text/plain")}
        response = client.post("/v1/scripts", data={"options": '{"task": "normalise"}'}, files=upload)
        assert response.status_code == 201, (path.name, response.text)
        assert response.json()["via"] == "parser", path.name


# --- through the scripts worker ------------------------------------------------------------------------


def test_a_draft_runs_on_the_scripts_worker_and_fails_with_each_attempts_reason(stack, client: httpx.Client) -> None:  # type: ignore[no-untyped-def]
    body = {"task": "draft", "material": NOTES, "names": ["Ann", "Ben"], "minutes": 1, "tone": "playful"}
    response = client.post("/v1/scripts", json=body)
    assert response.status_code == 202, response.text
    queued = response.json()
    assert (queued["state"], queued["names"], queued["minutes"], queued["tone"]) == (
        "queued",
        ["Ann", "Ben"],
        1,
        "playful",
    )
    assert queued["max_attempts"] == 2

    heard = read_event_stream(client, f"/v1/scripts/{queued['id']}/events")
    attempts = [data for kind, data in heard if kind == "attempt"]
    states = [data["state"] for kind, data in heard if kind == "state"]
    assert states[0] in ("queued", "running") and states[-1] == "failed"
    assert [(item["attempt"], item["rejected"] is None) for item in attempts] == [
        (1, True), (1, False), (2, True), (2, False)
    ]  # fmt: skip
    failed = client.get(f"/v1/scripts/{queued['id']}").json()
    assert [item["attempt"] for item in failed["attempts"]] == [1, 2]
    assert all(item["rejected"] for item in failed["attempts"])
    assert failed["error"].startswith("the script model (tiny-random) gave no valid script in 2 attempts;")
    assert failed["error"].endswith(failed["attempts"][-1]["rejected"])
    assert failed["script"] is None


def test_a_transcript_the_parser_cannot_read_goes_to_the_model(stack, client: httpx.Client) -> None:  # type: ignore[no-untyped-def]
    transcript = "so um we were saying the tea was cold\nand then it was not, which was odd\n"
    form = {"options": (None, '{"task": "normalise"}'), "transcript": (None, transcript)}  # multipart text fields
    response = client.post("/v1/scripts", files=form)
    assert response.status_code == 202, response.text
    failed = wait_for_script(client, response.json()["id"], {"done", "failed", "cancelled"})
    assert failed["state"] == "failed" and len(failed["attempts"]) == 2
    assert "gave no valid script in 2 attempts" in failed["error"]


def test_force_model_sends_even_a_clean_script_to_the_model(stack, client: httpx.Client) -> None:  # type: ignore[no-untyped-def]
    response = client.post("/v1/scripts", json={"task": "normalise", "transcript": "Alice: Hi.\n", "force_model": True})
    assert response.status_code == 202, response.text
    assert wait_for_script(client, response.json()["id"], {"failed"})["force_model"] is True


def test_a_running_draft_is_cancelled_within_a_second(stack, client: httpx.Client) -> None:  # type: ignore[no-untyped-def]
    script_id = long_draft_under_way(client)
    asked = time.monotonic()
    cancelled = client.delete(f"/v1/scripts/{script_id}")
    assert cancelled.status_code == 200 and cancelled.json()["cancel_requested"] is True
    view = wait_for_script(client, script_id, {"cancelled", "failed", "done"}, timeout=10)
    assert view["state"] == "cancelled", view
    assert time.monotonic() - asked < 3
    assert len(view["attempts"]) == 1 and view["error"] is None
    refused = client.delete(f"/v1/scripts/{script_id}?purge=true")
    assert refused.status_code == 204
    assert client.get(f"/v1/scripts/{script_id}").status_code == 404


def test_a_killed_scripts_worker_runs_its_draft_again_when_it_starts(stack, client: httpx.Client) -> None:  # type: ignore[no-untyped-def]
    script_id = long_draft_under_way(client)
    worker = stack.workers[-1]
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait()
    assert client.get(f"/v1/scripts/{script_id}").json()["state"] == "running"

    stack.start_scripts_worker()  # same host, same node name: it takes back what the dead one held
    deadline = time.monotonic() + 60
    with stack.database().session() as session:
        while (row := session.get_one(ScriptJob, script_id)).deliveries < 2:
            assert time.monotonic() < deadline, row.state
            time.sleep(0.1)
            session.expire_all()
    assert client.delete(f"/v1/scripts/{script_id}").status_code == 200
    assert wait_for_script(client, script_id, {"cancelled"}, timeout=15)["state"] == "cancelled"


def test_a_stopped_scripts_worker_hands_its_draft_back_and_only_a_death_counts(stack, client: httpx.Client) -> None:  # type: ignore[no-untyped-def]
    """SIGTERM: the scripts worker hands its running draft back (queued to start over, `handbacks` 1) and ends within
    seconds. The next worker takes it; killed (a death), the draft is taken back once more: one death is below the
    limit of two, whatever the hand-back added to its deliveries."""
    script_id = long_draft_under_way(client)
    worker = stack.workers[-1]
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(10) == 0
    with stack.database().session() as session:
        row = session.get_one(ScriptJob, script_id)
        assert (row.state, row.worker, row.deliveries, row.handbacks) == ("queued", None, 1, 1)
    assert client.get(f"/v1/scripts/{script_id}").json()["handbacks"] == 1

    killed = stack.start_scripts_worker()  # takes it (its message was sent again)
    wait_for_deliveries(stack, script_id, 2)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    stack.start_scripts_worker()  # same node name: it takes back what the dead one held
    row = wait_for_deliveries(stack, script_id, 3)
    assert (row.state, row.handbacks) == ("running", 1)  # not failed: one death, not two
    assert client.delete(f"/v1/scripts/{script_id}").status_code == 200
    assert wait_for_script(client, script_id, {"cancelled"}, timeout=15)["state"] == "cancelled"


def wait_for_deliveries(stack, script_id: str, deliveries: int) -> ScriptJob:  # type: ignore[no-untyped-def]
    """The script job's row once a worker has taken it `deliveries` times and runs it."""
    deadline = time.monotonic() + 60
    with stack.database().session() as session:
        while (row := session.get_one(ScriptJob, script_id)).deliveries < deliveries or row.state != "running":
            assert time.monotonic() < deadline, (row.state, row.deliveries, row.worker)
            time.sleep(0.1)
            session.expire_all()
        session.expunge(row)
    return row


def test_a_draft_whose_scripts_worker_hangs_runs_again_on_another_and_the_hung_one_writes_nothing(  # type: ignore[no-untyped-def]
    stack, client: httpx.Client
) -> None:
    """A scripts worker on a host that stops answering (SIGSTOP: alive, silent) under a node name no other worker
    has: once its job's heartbeat is stale, the other scripts worker takes the job back; when the hung one wakes, its
    heartbeat finds the job gone, it stops and drops its outcome."""
    from cli.serve import scripts_worker_command

    regular = stack.workers[-1]
    os.kill(regular.pid, signal.SIGKILL)  # idle: the hung worker must be the one to take the draft
    regular.wait()
    command = scripts_worker_command(stack.settings)
    command[command.index("--hostname") + 1] = "voxcast-scripts@a-host-that-hangs"
    hung = stack._start(command, "scripts", "scripts worker ready")
    script_id = long_draft_under_way(client)
    with stack.database().session() as session:
        assert session.get_one(ScriptJob, script_id).worker == "voxcast-scripts@a-host-that-hangs"
    os.kill(hung.pid, signal.SIGSTOP)
    try:
        stack.start_scripts_worker()  # another node name: only the stale heartbeat gives it the job
        deadline = time.monotonic() + 60
        with stack.database().session() as session:
            while (row := session.get_one(ScriptJob, script_id)).deliveries < 2 or row.state != "running":
                assert time.monotonic() < deadline, (row.state, row.deliveries, row.worker)
                time.sleep(0.1)
                session.expire_all()
            assert row.worker != "voxcast-scripts@a-host-that-hangs"
    finally:
        os.kill(hung.pid, signal.SIGCONT)
    hung_log = stack.root / f"scripts-{stack.workers.index(hung)}.log"
    deadline = time.monotonic() + 30
    while "taken back while it ran" not in hung_log.read_text(errors="replace"):
        assert time.monotonic() < deadline, hung_log.read_text(errors="replace")[-2000:]
        time.sleep(0.1)
    assert client.get(f"/v1/scripts/{script_id}").json()["state"] == "running"  # the new run's, untouched
    assert client.delete(f"/v1/scripts/{script_id}").status_code == 200
    assert wait_for_script(client, script_id, {"cancelled"}, timeout=15)["state"] == "cancelled"
    os.kill(hung.pid, signal.SIGKILL)
    hung.wait()


# --- cancel, ownership and limits ----------------------------------------------------------------------


def test_the_in_flight_limit_holds_and_a_queued_script_job_is_cancelled_at_once(stack, client: httpx.Client) -> None:  # type: ignore[no-untyped-def]
    # Three long drafts on a worker that runs one at a time: the first runs, two wait.
    ids = []
    for _ in range(3):  # the stack's limit
        response = client.post("/v1/scripts", json={"task": "draft", "material": NOTES, "minutes": 90})
        assert response.status_code == 202, response.text
        ids.append(response.json()["id"])
    refused = client.post("/v1/scripts", json={"task": "draft", "material": NOTES})
    assert_refused(refused, 429, "this key has 3 script jobs queued or running; the limit is 3")
    assert client.get(f"/v1/scripts/{ids[2]}").json()["state"] == "queued"
    cancelled = client.delete(f"/v1/scripts/{ids[2]}").json()
    assert (cancelled["state"], cancelled["attempts"]) == ("cancelled", [])
    assert client.post("/v1/scripts", json={"task": "normalise", "transcript": "Alice: hi"}).status_code == 201
    for script_id in ids[:2]:
        client.delete(f"/v1/scripts/{script_id}")
    for script_id in ids:
        assert wait_for_script(client, script_id, {"cancelled", "failed", "done"})["state"] == "cancelled"


def test_another_key_sees_no_script_job_and_an_admin_sees_every_one(stack, client: httpx.Client) -> None:  # type: ignore[no-untyped-def]
    mine = client.post("/v1/scripts", json={"task": "normalise", "transcript": "Alice: Hi.\nBob: Hello.\n"}).json()
    with stack.client(stack.mint_key("stranger")) as stranger:
        for method, path in (
            ("GET", f"/v1/scripts/{mine['id']}"),
            ("GET", f"/v1/scripts/{mine['id']}/events"),
            ("DELETE", f"/v1/scripts/{mine['id']}"),
            ("DELETE", f"/v1/scripts/{mine['id']}?purge=true"),
        ):
            assert_refused(stranger.request(method, path), 404, f"no script job {mine['id']}")
        assert stranger.get("/v1/scripts").json()["scripts"] == []
    with stack.client(stack.mint_key("ops", admin=True)) as admin:
        assert admin.get(f"/v1/scripts/{mine['id']}").json()["script"] == "Alice: Hi.\nBob: Hello.\n"
    assert_refused(client.delete(f"/v1/scripts/{mine['id']}"), 409, "already done; there is nothing to cancel")
    assert client.delete(f"/v1/scripts/{mine['id']}?purge=true").status_code == 204


REFUSED = [
    ({"task": "draft", "material": "x" * (MAX_SOURCE_CHARS + 1)}, "material", "at most 30,000 fit the prompt"),
    ({"task": "draft", "material": "  \n "}, "material", "the source material is empty"),
    ({"task": "draft", "material": NOTES, "hosts": 5}, "hosts", "a script has 1 to 4 hosts, not 5"),
    ({"task": "draft", "material": NOTES, "names": ["A", "B", "C", "D", "E"]}, "names", "1 to 4 hosts, not 5"),
    ({"task": "draft", "material": NOTES, "names": ["Ann", "ann"]}, "names", "the hosts' names must differ"),
    ({"task": "draft", "material": NOTES, "names": ["Ann"], "hosts": 2}, "names", "1 names were given for 2 hosts"),
    ({"task": "draft", "material": NOTES, "names": ["[pause: 1s]"]}, "names", "is not a usable name"),
    ({"task": "draft", "material": NOTES, "minutes": 0}, "minutes", "1 to 90 minutes, not 0"),
    ({"task": "draft", "material": NOTES, "minutes": 91}, "minutes", "1 to 90 minutes, not 91"),
    ({"task": "draft", "material": NOTES, "tone": "a\nb"}, "tone", "one line of 1 to 120 characters"),
    ({"task": "draft", "material": "notes\n\x00 more"}, "material", "control character (U+0000) on line 2"),
    ({"task": "draft", "material": NOTES, "tone": "calm\x00"}, "tone", "control character (U+0000)"),
    ({"task": "draft", "material": NOTES, "names": ["Ann\x00", "Ben"]}, "names", "is not a usable name"),
    ({"task": "normalise", "transcript": ""}, "transcript", "the transcript is empty"),
    ({"task": "normalise", "transcript": "Alice: hi\x1b[31m"}, "transcript", "control character (U+001B)"),
    ({"task": "normalise", "transcript": "a" * 200_001}, "transcript", "at most 200,000 are allowed"),
    (
        {"task": "normalise", "transcript": "word " * 6_000},
        "transcript",
        "the script model rewrites at most 24,000 at a time",
    ),
    ({"task": "summarise", "material": NOTES}, "task", ""),
    ({"task": "draft"}, "draft.material", ""),
    ({"task": "draft", "material": NOTES, "voices": {}}, "draft.voices", ""),
]


@pytest.mark.parametrize(("body", "field", "words"), REFUSED, ids=[f"{case[1]}-{n}" for n, case in enumerate(REFUSED)])
def test_bad_requests_are_422_naming_the_field_and_store_nothing(
    stack, client: httpx.Client, body, field, words
) -> None:  # type: ignore[no-untyped-def]
    before = script_rows(stack)
    assert_refused(client.post("/v1/scripts", json=body), 422, words, field=field)
    assert script_rows(stack) == before


def test_malformed_forms_and_media_types_are_refused_with_a_reason(stack, client: httpx.Client) -> None:  # type: ignore[no-untyped-def]
    before = script_rows(stack)
    no_options = client.post("/v1/scripts", files={"transcript": (None, "Alice: hi")})
    assert_refused(no_options, 422, '"options" field', field="options")
    no_text = client.post("/v1/scripts", files={"options": (None, '{"task": "draft"}')})
    assert_refused(no_text, 422, "the material is missing", field="material")
    latin1 = {"transcript": ("t.txt", "Alice: caf\xe9".encode("latin-1"), "text/plain")}
    options = {"options": '{"task": "normalise"}'}
    assert_refused(client.post("/v1/scripts", data=options, files=latin1), 422, "not UTF-8 text (byte 10)")
    assert_refused(client.post("/v1/scripts", files={"options": (None, "{")}), 422, field="options")
    assert_refused(client.post("/v1/scripts", content=b"Alice: hi", headers={"content-type": "text/plain"}), 415)
    assert script_rows(stack) == before


@pytest.mark.parametrize("task", ["draft", "normalise"])
def test_hostile_material_never_fails_the_service(stack, task: str) -> None:  # type: ignore[no-untyped-def]
    """The hostile scripts of the job suite, as notes and as transcripts: never a 5xx, every refusal explained."""
    field = "material" if task == "draft" else "transcript"
    with stack.client(stack.mint_key(f"hostile-{task}")) as client:
        answered: dict[int, int] = {}
        for _, text, _, _ in HOSTILE_SCRIPTS:
            response = client.post("/v1/scripts", json={"task": task, field: text})
            answered[response.status_code] = answered.get(response.status_code, 0) + 1
            assert response.status_code < 500, (response.status_code, response.text[:300])
            if response.status_code == 202:
                client.delete(response.headers["location"])  # room for the next one
            elif response.status_code >= 400:
                assert_refused(response, response.status_code)
    assert set(answered) <= {201, 202, 422, 429}, answered
    assert_healthy(stack)


def test_the_routes_are_in_the_openapi_document(stack) -> None:  # type: ignore[no-untyped-def]
    paths = httpx.get(f"{stack.base_url}/openapi.json").json()["paths"]
    assert set(paths["/v1/scripts"]) == {"get", "post"}
    assert set(paths["/v1/scripts/{script_id}"]) == {"get", "delete"}
    assert set(paths["/v1/scripts/{script_id}/events"]) == {"get"}
    body = paths["/v1/scripts"]["post"]["requestBody"]["content"]
    assert {"application/json", "multipart/form-data"} <= set(body)


def test_a_single_user_install_is_refused_past_the_in_flight_limit_in_words_for_one_person(
    tmp_path: Path, service_redis_url: str
) -> None:
    """No keys on a single-user install: the refusal speaks to the one person (no "this key") and still names the
    setting whoever runs the server can raise."""
    settings = in_process_settings(tmp_path / "data", service_redis_url, max_jobs_in_flight=1)
    with TestClient(create_app(settings)) as api:
        first = api.post("/v1/scripts", json={"task": "draft", "material": NOTES})
        assert first.status_code == 202, first.text  # no scripts worker here: it stays queued
        refused = api.post("/v1/scripts", json={"task": "draft", "material": NOTES})
        message = assert_refused(refused, 429, "you have 1 script job queued or running", "VOXCAST_MAX_JOBS_IN_FLIGHT")
        assert "key" not in message, message
        assert api.delete(f"/v1/scripts/{first.json()['id']}").status_code == 200

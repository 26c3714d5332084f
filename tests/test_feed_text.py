"""Published text through the api in this process, on SQLite and PostgreSQL: every character a feed, an MP3's tags or
a web page cannot carry is refused at its field with its position (never a 201 that takes the feed down, never
PostgreSQL's 500); bidirectional controls are dropped; rows stored before the rule still give a feed that parses, a
page and tags; and what the rest of publishing promises a podcast app and a listener: the show's page, the 422s that
name their field, artwork bombs refused in words, and a Last-Modified never later than the Date."""

from __future__ import annotations

import io
import json
import socket
import struct
import threading
import uuid
import zlib
from collections.abc import Iterator
from email.utils import parsedate_to_datetime
from pathlib import Path

import feedparser
import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient
from lxml import etree
from mutagen.id3 import ID3

from api.app import create_app
from api.deps import ApiServices
from api.http_protocol import BoundedHttpToolsProtocol
from api.services.podcast_feed import ITUNES_NAMESPACE, PODCAST_NAMESPACE
from core.api_keys import create_api_key, find_api_key
from core.job_states import JobState
from core.models import Episode, Job, Show, utc_now
from core.settings import Settings
from core.text_rules import BIDI_CONTROLS, publishable
from tests.test_publishing import png, write_outputs

BASE_URL = "https://podcasts.example.com"
# Every character the rule refuses: the C0 controls but tab, line feed and carriage return, DEL and the C1 controls,
# both ends of the surrogates, and the two noncharacters XML 1.0 leaves out.
FORBIDDEN = [
    *(chr(code) for code in range(0x20) if chr(code) not in "\t\n\r"),
    *(chr(code) for code in range(0x7F, 0xA0)),
    "\ud800",
    "\udfff",
    "\ufffe",
    "\uffff",
]
LINE_BREAKS = ["\t", "\n", "\r"]  # fine in a description, not in a one-line field
SHOW = {"title": "The Show", "description": "Two hosts.", "author": "Ann", "language": "en", "category": "Technology"}
ONE_LINE_FIELDS = ("title", "author")
MULTI_LINE_FIELDS = ("description",)


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[TestClient]:
    """The api in this process with a key of its own (its bearer header set) on a fresh database."""
    settings = Settings(database_url=database_url, data_dir=tmp_path / "data", redis_namespace=uuid.uuid4().hex)
    with TestClient(create_app(settings), base_url=BASE_URL) as client:
        with services_of(client).database.session() as session:
            key = create_api_key(session, "publisher")
        client.headers["Authorization"] = f"Bearer {key.secret}"
        yield client


def services_of(client: TestClient) -> ApiServices:
    return client.app.state.services  # type: ignore[attr-defined]


def send(client: TestClient, method: str, path: str, body: dict[str, object]) -> httpx.Response:
    """A JSON body with every character escaped, as a browser's JSON.stringify sends a lone surrogate."""
    content = json.dumps(body, ensure_ascii=True).encode()
    return client.request(method, path, content=content, headers={"Content-Type": "application/json"})


def refused_field(answer: httpx.Response) -> tuple[str, str]:
    assert answer.status_code == 422, answer.text
    (problem,) = answer.json()["detail"]
    return problem["field"], problem["msg"]


def new_show(client: TestClient, **fields: object) -> dict[str, object]:
    answer = send(client, "POST", "/v1/shows", {**SHOW, **fields})
    assert answer.status_code == 201, answer.text
    return answer.json()


def test_every_forbidden_character_in_every_show_field_is_refused_with_its_position(api: TestClient) -> None:
    show_id = new_show(api)["id"]
    for field in (*ONE_LINE_FIELDS, *MULTI_LINE_FIELDS):
        refused = FORBIDDEN + (LINE_BREAKS if field in ONE_LINE_FIELDS else [])
        for character in refused:
            named, message = refused_field(send(api, "POST", "/v1/shows", {**SHOW, field: f"Page one.{character}x"}))
            assert named == field, (field, hex(ord(character)))
            assert message.startswith(f"character 10 is U+{ord(character):04X} "), message
            assert ("this field is one line" if character in LINE_BREAKS else "remove it") in message
        # a change is held to the same rule (the schemas share one type: tests/test_schema_columns.py checks each)
        named, message = refused_field(send(api, "PATCH", f"/v1/shows/{show_id}", {field: f"Page{refused[0]}"}))
        assert named == field and message.startswith("character 5 is U+0000 (NUL)")
    # an owner's address is one line too
    named, message = refused_field(send(api, "POST", "/v1/shows", {**SHOW, "owner_email": "ann\x00@example.com"}))
    assert named == "owner_email" and message.startswith("character 4 is U+0000 (NUL)")
    for character in LINE_BREAKS:  # a description keeps its lines
        assert new_show(api, description=f"One.{character}Two.")["description"] == f"One.{character}Two."


def test_a_form_feed_pasted_from_a_pdf_is_refused_at_the_field_and_the_feed_stays_up(api: TestClient) -> None:
    show = new_show(api)
    named, message = refused_field(send(api, "POST", "/v1/shows", {**SHOW, "description": "Page 1\x0cPage 2"}))
    assert (named, message.split(":")[0]) == ("description", "character 7 is U+000C (form feed)")
    job_id = finished_job(api, show_id=str(show["id"]))
    for field in ("title", "description"):
        episode = {"show_id": show["id"], "title": "Pilot", field: "Pilot\x0c"}
        named, message = refused_field(send(api, "PUT", f"/v1/jobs/{job_id}/episode", episode))
        assert (named, message.split(":")[0]) == (field, "character 6 is U+000C (form feed)")
    feed = api.get(httpx.URL(str(show["feed_url"])).path)
    assert feed.status_code == 200 and not feedparser.parse(feed.content).bozo


def test_bidirectional_controls_are_dropped_as_a_speaker_name_drops_them(api: TestClient) -> None:
    controls = "".join(sorted(BIDI_CONTROLS))
    show = new_show(api, title=f"The \u202eShow{controls}", description="Two\u2067 hosts.\u2069")
    assert (show["title"], show["description"]) == ("The Show", "Two hosts.")
    named, _ = refused_field(send(api, "POST", "/v1/shows", {**SHOW, "title": "\u202e\u202c"}))
    assert named == "title"  # nothing left: as empty as ""


def test_a_language_tag_or_category_longer_than_its_column_is_a_422_not_a_500(api: TestClient) -> None:
    long_tag = "en" + "-abcdefgh" * 1000  # 9,002 characters, each part of a well-formed tag
    named, message = refused_field(send(api, "POST", "/v1/shows", {**SHOW, "language": long_tag}))
    assert named == "language" and "at most 35 characters" in message
    named, _ = refused_field(send(api, "POST", "/v1/shows", {**SHOW, "category": "T" * 101}))
    assert named == "category"
    assert new_show(api, language="en-" + "abcdefgh-" * 3 + "abcde")["language"]  # 35 characters fit


def finished_job(client: TestClient, show_id: str | None = None, title: str = "Pilot", **episode: object) -> str:
    """A done job of the client's key with its files (and, with `show_id`, its episode), written as a worker and
    `add_episode` write them; its id."""
    services = services_of(client)
    job_id = uuid.uuid4().hex
    write_outputs(services, job_id, pitch=0.05)
    secret = client.headers["Authorization"].removeprefix("Bearer ")
    with services.database.session() as session:
        key = find_api_key(session, secret)
        assert key is not None
        session.add(
            Job(
                id=job_id, owner_id=key.id, mode="turns", queue="batch", state=JobState.DONE, finished_at=utc_now(),
                audio_seconds=6.0, generation={"cfg_scale": 1.3, "diffusion_steps": 2, "seed": 5}, formats=["mp3"],
                voices={},
            )
        )  # fmt: skip
        if show_id is not None:
            session.flush()
            session.add(Episode(job_id=job_id, show_id=show_id, title=title, **episode))
    return job_id


def test_put_episode_names_the_body_s_show_id(api: TestClient) -> None:
    job_id = finished_job(api)
    missing = uuid.uuid4().hex
    named, message = refused_field(send(api, "PUT", f"/v1/jobs/{job_id}/episode", {"show_id": missing, "title": "X"}))
    assert named == "show_id" and missing in message


def test_rows_stored_before_the_rule_never_break_the_feed_page_or_tags(api: TestClient, database_url: str) -> None:
    """What older versions stored unchecked (PostgreSQL never kept a NUL, so the stored text differs by backend)."""
    show = new_show(api)
    nul = "" if database_url.startswith("postgresql") else "\x00"
    dirty = f"Page\x0c one\x1b[1m{nul}\ufffe\u202e done."
    with services_of(api).database.session() as session:
        row = session.get(Show, show["id"])
        assert row is not None
        row.title, row.description, row.author = f"The{nul} \u202eShow", dirty, f"Ann\x0b{nul}"
    job_id = finished_job(api, show_id=str(show["id"]), title=f"Pilot\x07{nul}", description=dirty)
    feed = api.get(httpx.URL(str(show["feed_url"])).path)
    assert feed.status_code == 200
    parsed = feedparser.parse(feed.content)
    assert not parsed.bozo, parsed.get("bozo_exception")
    assert (parsed.feed.title, parsed.feed.author) == ("The Show", "Ann")
    assert parsed.feed.summary == "Page one[1m done." == publishable(dirty)
    (entry,) = parsed.entries
    assert (entry.title, entry.summary) == ("Pilot", "Page one[1m done.")
    page = api.get(str(show["page_url"]))
    assert page.status_code == 200 and "Page one[1m done." in page.text and "\x0c" not in page.text
    mp3 = api.get(entry.enclosures[0].href)
    tags = ID3(io.BytesIO(mp3.content))
    assert (str(tags["TIT2"]), str(tags["TALB"]), str(tags["TPE1"])) == ("Pilot", "The Show", "Ann")
    assert str(tags["COMM::eng"]) == "Page one[1m done."
    chapters = api.get(f"{httpx.URL(str(show['feed_url'])).path.removesuffix('.xml')}/episodes/{job_id}.json").json()
    assert (chapters["title"], chapters["podcastName"]) == ("Pilot", "The Show")


def test_the_feed_links_to_the_show_s_page_with_its_episodes_players_and_feed(api: TestClient) -> None:
    show = new_show(
        api, title="Tom & <Jerry>", description="Line one.\nLine two.", owner_email="ann@example.com", locked=True
    )
    artwork = api.put(f"/v1/shows/{show['id']}/artwork", files={"file": ("art.png", png(1400), "image/png")})
    assert artwork.status_code == 200, artwork.text
    job_id = finished_job(api, show_id=str(show["id"]), title="Pilot <1>", description="Notes.", number=3, season=2)
    feed_path = httpx.URL(str(show["feed_url"])).path
    feed = api.get(feed_path, headers={"Authorization": ""})
    tree = etree.fromstring(feed.content)
    assert tree.findtext("channel/link") == show["page_url"] == f"{BASE_URL}{feed_path.removesuffix('.xml')}.html"
    assert tree.findtext(f"channel/{{{ITUNES_NAMESPACE}}}owner/{{{ITUNES_NAMESPACE}}}email") == "ann@example.com"
    assert tree.find(f"channel/{{{PODCAST_NAMESPACE}}}locked").get("owner") == "ann@example.com"  # type: ignore[union-attr]
    assert tree.findtext(f"channel/item/{{{ITUNES_NAMESPACE}}}season") == "2"
    page = api.get(str(show["page_url"]), headers={"Authorization": ""})  # no key, as the feed
    assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    assert "script-src" not in page.headers["content-security-policy"]  # no script runs: default-src 'none'
    html = page.text
    assert "<title>Tom &amp; &lt;Jerry&gt;</title>" in html and "<Jerry>" not in html
    assert (
        f'<audio controls preload="none" src="{BASE_URL}{feed_path.removesuffix(".xml")}/episodes/{job_id}.mp3">'
        in html
    )
    assert f'value="{show["feed_url"]}"' in html and "Season 2 · Episode 3" in html and "Pilot &lt;1&gt;" in html
    assert f'<img src="{tree.findtext("channel/image/url")}"' in html
    assert api.get(str(show["page_url"]), headers={"If-None-Match": page.headers["etag"]}).status_code == 304
    rotated = api.post(f"/v1/shows/{show['id']}/feed-token").json()
    assert api.get(str(show["page_url"])).status_code == 404 and api.get(str(rotated["page_url"])).status_code == 200


def with_chunk(image: bytes, kind: bytes, data: bytes) -> bytes:
    """A PNG with one more chunk right after its header (IHDR): length, type, data and CRC, as the format lays it."""
    chunk = struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header_end = 8 + 8 + 13 + 4  # the signature, then IHDR's length and type, its 13 bytes, its CRC
    return image[:header_end] + chunk + image[header_end:]


def test_artwork_bombs_and_broken_files_are_422s_in_words(api: TestClient) -> None:
    show = new_show(api)
    square = png(1400)
    pixels = square.index(b"IDAT")
    uploads = {
        # 17 KB: a zTXt comment that inflates to 8 MiB
        "zTXt bomb": with_chunk(square, b"zTXt", b"Comment\0\0" + zlib.compress(bytes(8 << 20), 9)),
        # 74 KB: a colour profile that inflates to 64 MiB
        "iCCP bomb": with_chunk(square, b"iCCP", b"ICC\0\0" + zlib.compress(bytes(64 << 20), 9)),
        "not an image": b"GIF89a but not really",
        "cut short": square[:2000],
        "a bad header checksum": square[:29] + b"\0\0\0\0" + square[33:],
        "scrambled pixels": square[: pixels + 20]
        + bytes(byte ^ 0x5A for byte in square[pixels + 20 : pixels + 200])
        + square[pixels + 200 :],
    }
    for case, data in uploads.items():
        answer = api.put(f"/v1/shows/{show['id']}/artwork", files={"file": ("art.png", data, "image/png")})
        named, message = refused_field(answer)
        assert named == "file" and message.startswith("the artwork is not an image Pillow can read: "), case
        assert " at 0x" not in message and "<" not in message, (case, message)
        assert message.endswith("send a square JPEG or PNG of 1400 to 3000 pixels a side, in RGB"), case
    for case in ("zTXt bomb", "iCCP bomb"):
        assert len(uploads[case]) < 80_000
        answer = api.put(f"/v1/shows/{show['id']}/artwork", files={"file": ("art.png", uploads[case], "image/png")})
        assert "inflates past the 1 MiB Pillow allows" in refused_field(answer)[1], case
    assert api.get(f"/v1/shows/{show['id']}").json()["artwork"] is None


def dates(answer: httpx.Response) -> tuple[str, str]:
    """The answer's one Date and its Last-Modified."""
    (date,) = answer.headers.get_list("date")
    return date, answer.headers["last-modified"]


def test_the_feed_s_last_modified_is_never_later_than_its_date_across_changes(api: TestClient) -> None:
    show = new_show(api)
    feed = httpx.URL(str(show["feed_url"])).path
    for round_number in range(20):
        before = api.get(feed)
        changed = send(api, "PATCH", f"/v1/shows/{show['id']}", {"description": f"Change {round_number}."})
        assert changed.status_code == 200
        for answer in (before, api.get(feed), api.get(str(show["page_url"]))):
            date, last_modified = dates(answer)
            assert parsedate_to_datetime(last_modified) <= parsedate_to_datetime(date), (round_number, date)


@pytest.mark.slow
def test_served_by_uvicorn_the_answer_s_own_date_is_the_only_one(tmp_path: Path) -> None:
    """uvicorn's Date lags the clock by up to a second; `api.http_protocol` sends the answer's own instead of it."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'voxcast.db'}", data_dir=tmp_path / "data")
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()  # connections wait in its backlog until the server accepts them: no polling for readiness
    config = uvicorn.Config(create_app(settings), http=BoundedHttpToolsProtocol, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listening]}, daemon=True)
    thread.start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{listening.getsockname()[1]}", timeout=30) as client:
            assert client.get("/healthz").status_code == 200  # served once the app has started (and migrated)
            with services_of_server(server).database.session() as session:
                key = create_api_key(session, "publisher")
            client.headers["Authorization"] = f"Bearer {key.secret}"
            created = client.post("/v1/shows", json=SHOW)
            assert created.status_code == 201, created.text
            feed = httpx.URL(created.json()["feed_url"]).path
            for round_number in range(20):
                assert client.patch(created.headers["location"], json={"title": f"Show {round_number}"}).is_success
                answer = client.get(feed)
                date, last_modified = dates(answer)
                assert parsedate_to_datetime(last_modified) <= parsedate_to_datetime(date), (round_number, date)
                assert len(client.get("/healthz").headers.get_list("date")) == 1  # uvicorn's, where the app sets none
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        listening.close()


def services_of_server(server: uvicorn.Server) -> ApiServices:
    return server.config.loaded_app.app.state.services  # type: ignore[attr-defined]

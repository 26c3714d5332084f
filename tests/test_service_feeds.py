"""A show's feed over HTTP, as a podcast app and its owner see it: a real api and worker on the tiny checkpoint.

The owner creates a show, uploads its artwork and publishes jobs in it (on submission, and later); a podcast app,
with no key, reads the feed with feedparser, fetches the enclosure with HEAD, Range and conditional GETs, reads its
ID3 tags and chapters with mutagen, and its chapters JSON and transcripts; a rotated token, a purged job, an episode
taken out and a deleted show leave the feed (an app holding the feed from before gets it anew, asking by date or by
ETag); another key's show is never reachable."""

from __future__ import annotations

import io
import secrets
import time
from email.utils import parsedate_to_datetime
from pathlib import Path

import feedparser
import httpx
import pytest
from lxml import etree
from mutagen.id3 import ID3
from PIL import Image

from api.services.podcast_feed import PODCAST_NAMESPACE
from tests.hardening import assert_refused
from tests.service_client import upload_voice, wait_for
from tests.test_publishing import podcast_chapters_problems

SCRIPT = "Alice: Welcome to the show, everyone.\nBob: Thanks, Alice. Happy to be here.\n"
SHOW = {
    "title": "The Tiny Show",
    "description": "Two hosts and a microphone.",
    "author": "Ann Author",
    "language": "en",
    "category": "Technology",
}


@pytest.fixture(scope="module")
def owner(shared_stack) -> httpx.Client:  # type: ignore[no-untyped-def]
    return shared_stack.client(shared_stack.mint_key("publisher"))


@pytest.fixture(scope="module")
def stranger(shared_stack) -> httpx.Client:  # type: ignore[no-untyped-def]
    return shared_stack.client(shared_stack.mint_key("stranger"))


@pytest.fixture(scope="module")
def app(shared_stack) -> httpx.Client:  # type: ignore[no-untyped-def]
    """A podcast app: no key."""
    return httpx.Client(base_url=shared_stack.base_url, timeout=60)


@pytest.fixture(scope="module")
def voice(owner: httpx.Client, voice_wav: Path) -> str:
    return upload_voice(owner, voice_wav, "host")


def artwork(pixels: int = 1400) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (pixels, pixels), "teal").save(buffer, "JPEG")
    return buffer.getvalue()


def create_show(client: httpx.Client) -> dict:
    response = client.post("/v1/shows", json=SHOW)
    assert response.status_code == 201, response.text
    return response.json()


def submit(client: httpx.Client, voice: str, **options: object) -> dict:
    body = {
        "script": SCRIPT,
        "voices": {"Alice": voice, "Bob": voice},
        "settings": {"diffusion_steps": 2, "seed": 5},
        "formats": ["mp3"],
        **options,
    }
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 202, response.text
    return response.json()


def path_of(url: str) -> str:
    return httpx.URL(url).raw_path.decode()


def read_feed(app: httpx.Client, url: str) -> feedparser.FeedParserDict:
    response = app.get(path_of(url))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/rss+xml")
    parsed = feedparser.parse(response.content)
    assert not parsed.bozo, parsed.get("bozo_exception")
    return parsed


def read_changed_feed(
    app: httpx.Client, url: str, held: httpx.Response
) -> tuple[httpx.Response, feedparser.FeedParserDict]:
    """The feed after a change, asked as podcast apps ask with the copy they hold, by each validator alone
    (`If-Modified-Since`, `If-None-Match`): both answer 200 with the same new feed, which is returned."""
    by_date = app.get(path_of(url), headers={"If-Modified-Since": held.headers["last-modified"]})
    by_tag = app.get(path_of(url), headers={"If-None-Match": held.headers["etag"]})
    assert (by_date.status_code, by_tag.status_code) == (200, 200)
    assert by_date.content == by_tag.content and by_tag.headers["etag"] != held.headers["etag"]
    parsed = feedparser.parse(by_tag.content)
    assert not parsed.bozo, parsed.get("bozo_exception")
    return by_tag, parsed


def settled_copy(app: httpx.Client, url: str) -> httpx.Response:
    """A HEAD of `url` answered after the second in which its file last changed. HTTP dates have whole seconds: a
    copy sent within that second is dated by the answer's own time, earlier than the change, and is sent again once
    (`api.downloads.Validators`); a copy dated before its `Date` is dated by the change and holds."""
    deadline = time.monotonic() + 10
    while True:
        head = app.head(path_of(url))
        if parsedate_to_datetime(head.headers["date"]) > parsedate_to_datetime(head.headers["last-modified"]):
            return head
        assert time.monotonic() < deadline, head.headers
        time.sleep(0.1)


def test_a_show_is_created_checked_and_owned(owner: httpx.Client, stranger: httpx.Client) -> None:
    refused = owner.post("/v1/shows", json={**SHOW, "category": "Cooking", "language": "english!"})
    assert refused.status_code == 422
    fields = {problem["field"]: problem["msg"] for problem in refused.json()["detail"]}
    assert "not an Apple Podcasts category" in fields["category"] and "language" in fields
    show = create_show(owner)
    assert show["feed_url"].endswith(".xml") and show["artwork"] is None and show["episodes"] == []
    assert stranger.get(f"/v1/shows/{show['id']}").status_code == 404
    assert stranger.patch(f"/v1/shows/{show['id']}", json={"title": "Mine"}).status_code == 404
    assert [s["id"] for s in stranger.get("/v1/shows").json()["shows"]] == []
    small = owner.put(f"/v1/shows/{show['id']}/artwork", files={"file": ("a.jpg", artwork(1000), "image/jpeg")})
    assert small.status_code == 422
    (problem,) = small.json()["detail"]
    assert problem["field"] == "file" and "1000×1000 pixels" in problem["msg"]
    changed = owner.patch(f"/v1/shows/{show['id']}", json={"title": "The Tiny Show, renamed"})
    assert changed.status_code == 200 and changed.json()["title"] == "The Tiny Show, renamed"
    assert changed.json()["description"] == SHOW["description"]
    assert "Technology" in owner.get("/v1/shows/categories").json()["categories"]


def test_a_podcast_app_subscribes_and_plays_episodes_with_tags_chapters_and_transcripts(  # noqa: PLR0915
    owner: httpx.Client, app: httpx.Client, voice: str
) -> None:
    show = create_show(owner)
    stored = owner.put(f"/v1/shows/{show['id']}/artwork", files={"file": ("cover.jpg", artwork(), "image/jpeg")})
    assert stored.status_code == 200, stored.text
    published = submit(owner, voice, episode={"show_id": show["id"], "title": "Pilot", "number": 1})
    assert published["episode"]["title"] == "Pilot" and published["episode"]["published_at"] is None
    later = submit(owner, voice, title="Made first, published later")
    for job in (published, later):
        assert wait_for(owner, job["id"], {"done", "failed"})["state"] == "done"
    added = owner.put(
        f"/v1/jobs/{later['id']}/episode",
        json={"show_id": show["id"], "title": "Second", "number": 2, "description": "More talk."},
    )
    assert added.status_code == 200, added.text
    assert added.json()["episode"]["published_at"] is not None

    parsed = read_feed(app, show["feed_url"])
    assert parsed.feed.title == SHOW["title"] and parsed.feed.podcast_guid == show["podcast_guid"]
    assert parsed.feed.image.href.endswith(".jpg")
    assert sorted(entry.title for entry in parsed.entries) == ["Pilot", "Second"]
    image = app.get(path_of(parsed.feed.image.href))
    assert image.status_code == 200 and image.content == artwork() and image.headers["content-type"] == "image/jpeg"

    entry = next(entry for entry in parsed.entries if entry.title == "Pilot")
    job = owner.get(f"/v1/jobs/{published['id']}").json()
    (enclosure,) = entry.enclosures
    assert enclosure.type == "audio/mpeg"
    mp3 = app.get(path_of(enclosure.href))
    assert mp3.status_code == 200 and mp3.headers["content-type"] == "audio/mpeg"
    assert len(mp3.content) == int(enclosure.length) == int(mp3.headers["content-length"])
    hours, minutes, seconds = map(int, entry.itunes_duration.split(":"))
    assert hours * 3600 + minutes * 60 + seconds == round(job["audio_seconds"])
    original = owner.get(job["outputs"]["audio"]["mp3"]).content
    assert mp3.content.endswith(original)  # the tag in front of the audio the worker wrote

    tags = ID3(io.BytesIO(mp3.content))
    assert str(tags["TIT2"]) == "Pilot" and str(tags["TALB"]) == SHOW["title"] and str(tags["TRCK"]) == "1"
    assert tags.getall("APIC")[0].data == artwork()
    chapters = owner.get(job["outputs"]["chapters"]).json()
    assert podcast_chapters_problems(chapters) == []
    marks = sorted(tags.getall("CHAP"), key=lambda frame: frame.start_time)
    assert [(frame.start_time, frame.end_time) for frame in marks] == [
        (round(c["startTime"] * 1000), round(c["endTime"] * 1000)) for c in chapters["chapters"]
    ]
    assert [str(frame.sub_frames["TIT2"]) for frame in marks] == [c["title"] for c in chapters["chapters"]]

    # every item's Podcasting 2.0 links, and what each answers. feedparser keeps one podcast:transcript per item (the
    # last of them), so the pair is read from the same feed's XML, item by item (its guid)
    items = {
        item.findtext("guid"): item
        for item in etree.fromstring(app.get(path_of(show["feed_url"])).content).iter("item")
    }
    for item_entry in parsed.entries:
        files = item_entry.enclosures[0].href.removesuffix(".mp3")
        transcripts = {
            link.get("type"): link.get("url")
            for link in items[item_entry.id].findall(f"{{{PODCAST_NAMESPACE}}}transcript")
        }
        assert transcripts == {"text/vtt": f"{files}.vtt", "application/x-subrip": f"{files}.srt"}, item_entry.title
        assert item_entry.podcast_transcript["url"] == transcripts[item_entry.podcast_transcript["type"]]
        assert item_entry.podcast_chapters == {"url": f"{files}.json", "type": "application/json+chapters"}
        for media_type, url in [*transcripts.items(), ("application/json+chapters", f"{files}.json")]:
            answer = app.get(path_of(url))
            assert answer.status_code == 200, (url, answer.text)
            assert answer.headers["content-type"].partition(";")[0] == media_type, url
        assert app.get(path_of(f"{files}.vtt")).text.startswith("WEBVTT\n")
        srt = app.get(path_of(f"{files}.srt")).text
        assert srt.startswith("1\n") and " --> " in srt and "Welcome to the show" in srt
        published_chapters = app.get(path_of(f"{files}.json")).json()
        assert podcast_chapters_problems(published_chapters) == []
        assert published_chapters["title"] == item_entry.title and published_chapters["podcastName"] == SHOW["title"]

    # HEAD, Range and conditional requests, as podcast apps send them
    head = app.head(path_of(enclosure.href))
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == str(len(mp3.content)) and head.headers["accept-ranges"] == "bytes"
    assert head.headers["etag"] == mp3.headers["etag"] and head.headers["last-modified"]
    part = app.get(path_of(enclosure.href), headers={"Range": "bytes=5-20999"})
    assert part.status_code == 206 and part.content == mp3.content[5:21000]
    assert part.headers["content-range"] == f"bytes 5-20999/{len(mp3.content)}"
    tail = app.get(path_of(enclosure.href), headers={"Range": "bytes=-100"})
    assert tail.status_code == 206 and tail.content == mp3.content[-100:]
    unchanged = app.get(path_of(enclosure.href), headers={"If-None-Match": mp3.headers["etag"]})
    assert unchanged.status_code == 304 and unchanged.content == b""
    dated = settled_copy(app, enclosure.href)
    since = app.get(path_of(enclosure.href), headers={"If-Modified-Since": dated.headers["last-modified"]})
    assert since.status_code == 304 and dated.headers["etag"] == mp3.headers["etag"]
    stale = app.get(path_of(enclosure.href), headers={"Range": "bytes=0-9", "If-Range": '"older"'})
    assert stale.status_code == 200 and stale.content == mp3.content
    feed = app.get(path_of(show["feed_url"]))
    assert app.get(path_of(show["feed_url"]), headers={"If-None-Match": feed.headers["etag"]}).status_code == 304
    assert (
        app.get(path_of(show["feed_url"]), headers={"If-Modified-Since": feed.headers["last-modified"]}).status_code
        == 304
    )

    # a renamed show: the feed and the tags say so at once, and the validators change with them
    owner.patch(f"/v1/shows/{show['id']}", json={"title": "Renamed"})
    renamed = app.get(path_of(enclosure.href), headers={"If-None-Match": mp3.headers["etag"]})
    assert renamed.status_code == 200 and str(ID3(io.BytesIO(renamed.content))["TALB"]) == "Renamed"
    assert app.get(path_of(show["feed_url"]), headers={"If-None-Match": feed.headers["etag"]}).status_code == 200

    # taken out, purged: gone from the feed, which an app holding the copy before each change gets anew
    held = app.get(path_of(show["feed_url"]))
    assert owner.delete(f"/v1/jobs/{later['id']}/episode").status_code == 200
    held, listed = read_changed_feed(app, show["feed_url"], held)
    assert [entry.title for entry in listed.entries] == ["Pilot"]
    assert owner.delete(f"/v1/jobs/{published['id']}?purge=true").status_code == 204
    assert read_changed_feed(app, show["feed_url"], held)[1].entries == []
    assert app.get(path_of(enclosure.href)).status_code == 404

    # a rotated token: the old URLs are gone, the new one serves the same show
    rotated = owner.post(f"/v1/shows/{show['id']}/feed-token").json()
    assert rotated["feed_url"] != show["feed_url"] and rotated["podcast_guid"] == show["podcast_guid"]
    assert app.get(path_of(show["feed_url"])).status_code == 404
    assert app.get(path_of(parsed.feed.image.href)).status_code == 404
    assert read_feed(app, rotated["feed_url"]).feed.title == "Renamed"
    assert owner.delete(f"/v1/shows/{show['id']}").status_code == 204
    assert app.get(path_of(rotated["feed_url"])).status_code == 404


def test_a_job_without_an_mp3_cannot_be_an_episode(owner: httpx.Client, voice: str) -> None:
    show = create_show(owner)
    body = {
        "script": SCRIPT,
        "voices": {"Alice": voice, "Bob": voice},
        "formats": ["wav"],
        "episode": {"show_id": show["id"], "title": "No MP3"},
    }
    refused = owner.post("/v1/jobs", json=body)
    assert refused.status_code == 422
    (problem,) = refused.json()["detail"]
    assert problem["field"] == "formats" and "add 'mp3' to formats" in problem["msg"]
    wav_only = submit(owner, voice, formats=["wav"])
    later = owner.put(f"/v1/jobs/{wav_only['id']}/episode", json={"show_id": show["id"], "title": "No MP3"})
    assert later.status_code == 422 and later.json()["detail"][0]["field"] == "formats"
    owner.delete(f"/v1/jobs/{wav_only['id']}")


def test_another_keys_show_is_never_reachable(
    owner: httpx.Client, stranger: httpx.Client, app: httpx.Client, voice: str
) -> None:
    show = create_show(owner)
    taken = stranger.post(
        "/v1/jobs",
        json={
            "script": SCRIPT,
            "voices": {"Alice": "0" * 32},
            "formats": ["mp3"],
            "episode": {"show_id": show["id"], "title": "Hijack"},
        },
    )
    assert taken.status_code == 422
    assert any(p["field"] == "episode.show_id" for p in taken.json()["detail"])
    job = submit(owner, voice)
    assert stranger.put(f"/v1/jobs/{job['id']}/episode", json={"show_id": show["id"], "title": "x"}).status_code == 404
    for _ in range(20):  # guessed tokens: all 404, none tells anything
        assert app.get(f"/feeds/{secrets.token_urlsafe(32)}.xml").status_code == 404
    token = path_of(show["feed_url"]).removeprefix("/feeds/").removesuffix(".xml")
    assert_refused(app.get(f"/feeds/{token[:-1]}.xml"), 422, "a feed token is the 43 URL-safe characters")
    assert app.get(f"/feeds/{token}/episodes/{job['id']}.mp3").status_code == 404  # not an episode of it
    assert app.get(f"/v1/shows/{show['id']}").status_code == 401  # everything else keeps key auth
    owner.delete(f"/v1/jobs/{job['id']}")

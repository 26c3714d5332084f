"""Publishing without a service: an episode's ID3 tag and chapters as mutagen reads them, the chapters JSON held to the
Podcasting 2.0 format's rules, the feed as feedparser reads it, artwork checked as directories check it, and the
HTTP validators a feed and its files answer conditional requests with; then the feed routes in this process (a real
database and data folder): every change of what a feed lists or points at moves its validators, an artwork URL names
one image, and any origin may read the feed routes (and no other)."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import feedparser
import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from lxml import etree
from mutagen.id3 import ID3
from mutagen.mp3 import MP3
from PIL import Image
from starlette.datastructures import Headers

from api.app import create_app
from api.deps import ApiServices, Caller
from api.downloads import Validators
from api.errors import InvalidInput
from api.schemas import EpisodeOptions, ShowFields
from api.services.artwork import checked_artwork
from api.services.episodes import add_episode, unpublish_job
from api.services.podcast_feed import ITUNES_NAMESPACE, PODCAST_NAMESPACE, FeedChannel, FeedItem, render_feed
from api.services.shows import create_show, store_artwork
from assembly.episode import Episode, write_episode
from assembly.id3_tags import EpisodeTags, id3_tag, id3_tag_size
from assembly.transcripts import Chapter, chapters_document, chapters_from_document, chapters_from_turns
from core.api_keys import create_api_key
from core.audio_rates import SAMPLE_RATE
from core.job_deletion import delete_job
from core.job_states import JobState
from core.models import Job, Show, utc_now
from core.retention import apply_retention
from core.settings import Settings
from script_text.timeline import TimedTurn

DAY = timedelta(days=1)
TURNS = (
    TimedTurn(0, "Alice", "Welcome to the show, everyone.", 0.0, 40.0),
    TimedTurn(1, "Bob", "Thanks for having me here today.", 40.5, 75.25),
    TimedTurn(2, "Alice", "Let us begin with the news.", 75.5, 130.0),
)


def podcast_chapters_problems(document: Any) -> list[str]:
    """What in `document` breaks the Podcasting 2.0 JSON chapters format (podcast namespace, jsonChapters.md,
    version 1.2), written from its description: an object with a string `version` and an array `chapters`; optional
    strings `author`, `title`, `podcastName`, `description`, `fileName` and boolean `waypoints`; each chapter an
    object with a number `startTime` (required), optional string `title`, `img`, `url`, boolean `toc`, number
    `endTime`, object `location` (strings `name` and `geo` required, `osm` optional); chapters in ascending order of
    `startTime`."""
    problems: list[str] = []

    def number(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    if not isinstance(document, dict):
        return ["the document is not an object"]
    if not isinstance(document.get("version"), str):
        problems.append("version: a string is required")
    if not isinstance(document.get("chapters"), list):
        return [*problems, "chapters: an array is required"]
    for name in ("author", "title", "podcastName", "description", "fileName"):
        if name in document and not isinstance(document[name], str):
            problems.append(f"{name}: must be a string")
    if "waypoints" in document and not isinstance(document["waypoints"], bool):
        problems.append("waypoints: must be a boolean")
    starts = []
    for index, chapter in enumerate(document["chapters"]):
        where = f"chapters[{index}]"
        if not isinstance(chapter, dict):
            problems.append(f"{where}: not an object")
            continue
        if not number(chapter.get("startTime")):
            problems.append(f"{where}.startTime: a number is required")
        else:
            starts.append(chapter["startTime"])
        for name in ("title", "img", "url"):
            if name in chapter and not isinstance(chapter[name], str):
                problems.append(f"{where}.{name}: must be a string")
        if "toc" in chapter and not isinstance(chapter["toc"], bool):
            problems.append(f"{where}.toc: must be a boolean")
        if "endTime" in chapter and not number(chapter["endTime"]):
            problems.append(f"{where}.endTime: must be a number")
        location = chapter.get("location")
        if location is not None and not (
            isinstance(location, dict)
            and isinstance(location.get("name"), str)
            and isinstance(location.get("geo"), str)
        ):
            problems.append(f"{where}.location: an object with string name and geo")
    if starts != sorted(starts):
        problems.append("chapters: not in ascending order of startTime")
    return problems


def test_the_chapters_rules_catch_what_breaks_the_format() -> None:
    good = {"version": "1.2.0", "chapters": [{"startTime": 0, "title": "Intro"}, {"startTime": 94.5}]}
    assert podcast_chapters_problems(good) == []
    assert podcast_chapters_problems({"version": 1, "chapters": []}) == ["version: a string is required"]
    assert podcast_chapters_problems({"version": "1.2.0", "chapters": [{"start": 0, "title": "x"}]}) == [
        "chapters[0].startTime: a number is required"
    ]
    out_of_order = {"version": "1.2.0", "chapters": [{"startTime": 5}, {"startTime": 1}]}
    assert podcast_chapters_problems(out_of_order) == ["chapters: not in ascending order of startTime"]


def test_an_episodes_chapters_file_is_podcasting_2_json_chapters(tmp_path: Path) -> None:
    chapters = chapters_from_turns(TURNS)
    audio = np.zeros(int(130.5 * SAMPLE_RATE), dtype=np.float32)
    files = write_episode(Episode(audio=audio, turns=TURNS, chapters=chapters), tmp_path / "episode.wav")
    document = json.loads(files.chapters.read_text(encoding="utf-8"))
    assert podcast_chapters_problems(document) == []
    assert [(c["startTime"], c["endTime"]) for c in document["chapters"]] == [(0.0, 75.5), (75.5, 130.0)]
    assert chapters_from_document(document) == chapters
    named = chapters_document(chapters, title="Pilot", podcastName="The Show", author="Ann", fileName="x.mp3")
    assert podcast_chapters_problems(named) == []
    # the shape older jobs keep (`start`/`end` beside the turns) still reads
    older = {"version": 1, "chapters": [{"title": c.title, "start": c.start, "end": c.end} for c in chapters]}
    assert chapters_from_document(older) == chapters


def test_the_id3_tag_says_title_show_number_artwork_and_chapters_as_mutagen_reads_them(tmp_path: Path) -> None:
    chapters = chapters_from_turns(TURNS)
    audio = (0.1 * np.sin(np.arange(int(131 * SAMPLE_RATE)) / 20)).astype(np.float32)
    files = write_episode(Episode(audio=audio, turns=TURNS, chapters=chapters), tmp_path / "episode.mp3")
    stored = files.audio.read_bytes()
    skip = id3_tag_size(stored[:10])
    artwork = png(1400)
    tags = EpisodeTags(
        title="Pilot: the first one",
        seconds=131.0,
        chapters=chapters,
        show="The Ünïcode Show",
        author="Ann Author",
        number=7,
        description="What we talk about.",
        artwork=artwork,
        artwork_type="image/png",
    )
    tag = id3_tag(tags)
    assert id3_tag(tags) == tag  # the same contents give the same bytes: a stable length and ETag
    assert id3_tag_size(tag) == len(tag)
    tagged = tmp_path / "tagged.mp3"
    tagged.write_bytes(tag + stored[skip:])

    read = ID3(tagged)
    assert read.version == (2, 3, 0)
    assert str(read["TIT2"]) == "Pilot: the first one"
    assert str(read["TALB"]) == "The Ünïcode Show" and str(read["TPE1"]) == "Ann Author"
    assert str(read["TRCK"]) == "7"
    (picture,) = read.getall("APIC")
    assert picture.data == artwork and picture.mime == "image/png" and picture.type == 3
    (toc,) = read.getall("CTOC")
    marks = {frame.element_id: frame for frame in read.getall("CHAP")}
    assert list(toc.child_element_ids) == sorted(marks, key=lambda element: marks[element].start_time)
    assert [(marks[e].start_time, marks[e].end_time) for e in toc.child_element_ids] == [
        (round(c.start * 1000), round(c.end * 1000)) for c in chapters
    ]
    assert [str(marks[e].sub_frames["TIT2"]) for e in toc.child_element_ids] == [c.title for c in chapters]
    assert MP3(tagged).info.length == pytest.approx(131.0, abs=0.2)  # still an MP3 players read to the end


def test_an_episode_without_a_show_is_tagged_with_its_title_and_chapters_alone() -> None:
    tag = ID3(io.BytesIO(id3_tag(EpisodeTags(title="Alone", seconds=3.0, chapters=(Chapter("Intro", 0.0, 3.0),)))))
    assert str(tag["TIT2"]) == "Alone" and "TALB" not in tag and not tag.getall("APIC")
    assert len(tag.getall("CHAP")) == 1


def test_id3_tag_size_reads_the_header_of_a_tagged_file_and_nothing_else() -> None:
    assert id3_tag_size(b"\xff\xfb\x90\x00" + bytes(20)) == 0  # an MPEG frame: no tag
    assert id3_tag_size(b"ID3\x03\x00\x00\x00\x00\x02\x01") == 10 + 257
    assert id3_tag_size(b"ID3\x04\x00\x10\x00\x00\x00\x05") == 10 + 5 + 10  # a footer


def feed_fixture(**changes: Any) -> tuple[FeedChannel, list[FeedItem]]:
    now = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
    base = "https://podcasts.example.com/feeds/TOKEN"
    channel = FeedChannel(
        title="The Show",
        description="Two hosts & a microphone.",
        author="Ann Author",
        language="en-GB",
        category="Arts/Books",
        explicit=False,
        feed_url=f"{base}.xml",
        page_url=f"{base}.html",
        podcast_guid="917393e3-1b1e-5cef-ace4-edaa54e1f810",
        last_modified=now,
        artwork_url=f"{base}/artwork/abc.png",
        owner_email="ann@example.com",
        show_type="serial",
        locked=True,
    )
    items = [
        FeedItem(
            guid=f"guid-{n}",
            title=f"Episode {n} <and more>",
            description=f"Notes for {n}.",
            number=n,
            season=2,
            published=now - timedelta(days=10 - n),
            seconds=3725.4 + n,
            enclosure_url=f"{base}/episodes/{n}.mp3",
            enclosure_bytes=1_000_000 + n,
            chapters_url=f"{base}/episodes/{n}.json",
            transcript_urls={"vtt": f"{base}/episodes/{n}.vtt", "srt": f"{base}/episodes/{n}.srt"},
        )
        for n in (1, 2, 3)
    ]
    return (channel, items) if not changes else (FeedChannel(**{**channel.__dict__, **changes}), items)


def test_the_feed_reads_in_feedparser_with_every_item_and_what_directories_require() -> None:
    channel, items = feed_fixture()
    body = render_feed(channel, items)
    assert render_feed(channel, items) == body  # the same show gives the same bytes: a stable ETag
    parsed = feedparser.parse(body)
    assert not parsed.bozo, parsed.get("bozo_exception")
    assert parsed.version == "rss20"
    feed = parsed.feed
    # What Apple's and the other directories require of a channel: title, description, language, artwork (square,
    # .jpg/.png), category, explicit; and of an item: title, an enclosure with its length and type, a guid.
    assert feed.title == "The Show" and feed.summary == "Two hosts & a microphone." and feed.language == "en-GB"
    assert feed.image.href == channel.artwork_url and feed.image.href.endswith((".jpg", ".png"))
    assert feed.author == "Ann Author" and feed.link == channel.page_url  # the channel's link: the show's page
    assert feed.publisher_detail == {"name": "Ann Author", "email": "ann@example.com"}  # its itunes:owner
    assert [tag.term for tag in feed.tags] == ["Arts", "Books"]
    assert feed.podcast_guid == channel.podcast_guid
    # What feedparser does not read, as Apple's and the Podcast Index's specs write it.
    tree = etree.fromstring(body)
    assert tree.findtext(f"channel/{{{ITUNES_NAMESPACE}}}explicit") == "false"
    assert tree.findtext(f"channel/{{{ITUNES_NAMESPACE}}}type") == "serial"
    (locked,) = tree.findall(f"channel/{{{PODCAST_NAMESPACE}}}locked")
    assert (locked.text, locked.get("owner")) == ("yes", "ann@example.com")
    assert [item.findtext(f"{{{PODCAST_NAMESPACE}}}season") for item in tree.iter("item")] == ["2", "2", "2"]
    assert [entry.title for entry in parsed.entries] == [
        "Episode 3 <and more>",
        "Episode 2 <and more>",
        "Episode 1 <and more>",
    ]
    for entry, item in zip(parsed.entries, reversed(items), strict=True):
        assert entry.id == item.guid and entry.guidislink is False
        (enclosure,) = entry.enclosures
        assert (enclosure.href, int(enclosure.length), enclosure.type) == (
            item.enclosure_url,
            item.enclosure_bytes,
            "audio/mpeg",
        )
        hours, minutes, seconds = map(int, entry.itunes_duration.split(":"))
        assert hours * 3600 + minutes * 60 + seconds == round(item.seconds)
        assert int(entry.itunes_episode) == item.number and int(entry.itunes_season) == item.season
        assert entry.published_parsed[:6] == item.published.timetuple()[:6]
    links = etree.fromstring(body).findall(f"channel/item/{{{PODCAST_NAMESPACE}}}*")
    found = {(link.tag.split("}")[1], link.get("type"), link.get("url")) for link in links if link.get("url")}
    for item in items:
        assert ("chapters", "application/json+chapters", item.chapters_url) in found
        assert ("transcript", "text/vtt", item.transcript_urls["vtt"]) in found
        assert ("transcript", "application/x-subrip", item.transcript_urls["srt"]) in found


def test_a_feed_without_artwork_or_episodes_still_parses() -> None:
    channel, _ = feed_fixture(artwork_url=None, category="Technology", explicit=True, owner_email=None)
    body = render_feed(channel, [])
    parsed = feedparser.parse(body)
    assert not parsed.bozo and parsed.entries == []
    assert "image" not in parsed.feed and "publisher_detail" not in parsed.feed
    tree = etree.fromstring(body)
    assert tree.findtext(f"channel/{{{ITUNES_NAMESPACE}}}explicit") == "true"
    assert tree.find(f"channel/{{{PODCAST_NAMESPACE}}}locked") is None  # a lock names its owner


def test_a_show_stored_with_nothing_but_unpublishable_text_still_gives_a_feed() -> None:
    """Rows stored before the published-text rule may hold only what it drops: RSS still gets the title, description
    and owner name it requires."""
    channel, items = feed_fixture(title="\u202e", description="\x00\x0c", author="\x1b")
    items = [replace(items[0], title="\u202e\ud800", description="\x0b")]
    parsed = feedparser.parse(render_feed(channel, items))
    assert not parsed.bozo, parsed.get("bozo_exception")
    assert (parsed.feed.title, parsed.feed.summary, parsed.feed.author) == ("Untitled", "Untitled", "Untitled")
    assert parsed.feed.publisher_detail == {"name": "Untitled", "email": "ann@example.com"}
    (entry,) = parsed.entries
    assert entry.title == "Untitled" and "summary" not in entry


def png(pixels: int, height: int | None = None, mode: str = "RGB", kind: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, (pixels, height or pixels), "navy" if mode == "RGB" else 0).save(buffer, kind)
    return buffer.getvalue()


def test_artwork_is_checked_as_podcast_directories_check_it() -> None:
    assert checked_artwork(png(1400)).extension == "png"
    assert checked_artwork(png(3000, kind="JPEG")).media_type == "image/jpeg"
    assert checked_artwork(png(1400, mode="RGBA")).extension == "png"  # RGB with an alpha channel is RGB
    refusals = {
        "too small": (png(1399), "1399×1399 pixels"),
        "too large": (png(3001), "3001×3001 pixels"),
        "not square": (png(1600, 1400), "1600×1400 pixels"),
        "a GIF": (png(1400, kind="GIF"), "GIF image"),
        "CMYK": (png(1400, mode="CMYK", kind="JPEG"), "colours are CMYK"),
        "grey": (png(1400, mode="L"), "colours are L, not RGB"),
        "not an image": (b"GIF89a but not really", "not an image"),
        "cut short": (png(1400)[:2000], "not an image"),
    }
    for case, (data, said) in refusals.items():
        with pytest.raises(InvalidInput) as refused:
            checked_artwork(data)
        (problem,) = refused.value.problems
        assert problem.field == "file" and said in problem.message, case
        assert "square JPEG or PNG of 1400 to 3000 pixels" in problem.message, case


def test_validators_answer_conditional_requests_as_rfc_9110_says() -> None:
    changed = datetime(2026, 12, 1, 9, 30, 15, tzinfo=UTC)
    validators = Validators.of(b"content", changed)
    now = changed + timedelta(minutes=5)
    headers = validators.headers(now)
    assert headers["last-modified"] == "Tue, 01 Dec 2026 09:30:15 GMT"
    assert headers["date"] == "Tue, 01 Dec 2026 09:35:15 GMT"

    def asks(**sent: str) -> Headers:
        return Headers({name.replace("_", "-"): value for name, value in sent.items()})

    assert validators.not_modified(asks(if_none_match=headers["etag"]))
    assert validators.not_modified(asks(if_none_match=f'"other", W/{headers["etag"]}'))
    assert not validators.not_modified(asks(if_none_match='"other"'))
    assert validators.not_modified(asks(if_modified_since=headers["last-modified"]))
    assert not validators.not_modified(asks(if_modified_since="Tue, 01 Dec 2026 09:30:14 GMT"))
    # If-None-Match wins over If-Modified-Since
    assert not validators.not_modified(asks(if_none_match='"other"', if_modified_since=headers["last-modified"]))
    assert not validators.not_modified(asks(if_modified_since="not a date"))
    assert validators.range_applies(asks(), now)
    assert validators.range_applies(asks(if_range=headers["etag"]), now)
    assert not validators.range_applies(asks(if_range='"older"'), now)
    # a date must match Last-Modified exactly (RFC 9110, 13.1.5): an earlier one and a later one both fail
    assert validators.range_applies(asks(if_range=headers["last-modified"]), now)
    assert not validators.range_applies(asks(if_range="Tue, 01 Dec 2026 09:00:00 GMT"), now)
    assert not validators.range_applies(asks(if_range="Tue, 01 Dec 2026 09:30:16 GMT"), now)
    assert not validators.range_applies(asks(if_range="not a date"), now)


def test_a_change_later_in_the_same_second_is_never_taken_for_a_copy_dated_that_second() -> None:
    changed = datetime(2026, 12, 1, 9, 30, 15, 400_000, tzinfo=UTC)
    validators = Validators.of(b"content", changed)

    def since(date: str) -> Headers:
        return Headers({"if-modified-since": date})

    # within the change's second the date sent is the answer's own (never later than it, RFC 9110 8.8.2.1) ...
    within_second = changed.replace(microsecond=0)  # an answer sent at 09:30:15.7: its Date says 09:30:15
    within = validators.headers(within_second)["last-modified"]
    assert within == "Tue, 01 Dec 2026 09:30:15 GMT"
    # ... which is earlier than the change: a copy dated 09:30:15, made before the change in that same second, is
    # sent again, and so is the one sent within the second, once
    assert not validators.not_modified(since(within))
    # a date equal to the answer's Date is weak (RFC 9110, 8.8.2.2): no range on it, even within that second
    assert not validators.range_applies(Headers({"if-range": within, "range": "bytes=0-1"}), within_second)
    # from the next second on, the change's second rounded up, which holds
    now = changed + timedelta(minutes=5)
    later = validators.headers(now.replace(microsecond=0))["last-modified"]
    assert later == "Tue, 01 Dec 2026 09:30:16 GMT"
    assert validators.not_modified(since(later))
    assert validators.range_applies(Headers({"if-range": later, "range": "bytes=0-1"}), now.replace(microsecond=0))
    assert not validators.range_applies(Headers({"if-range": within, "range": "bytes=0-1"}), now.replace(microsecond=0))


# --- the feed routes in this process: a real database (SQLite and PostgreSQL) and data folder, no key, no Redis ---

SHOW_FIELDS = ShowFields(
    title="The Show", description="Two hosts.", author="Ann Author", language="en", category="Technology"
)


@contextmanager
def feed_routes(database_url: str, data_dir: Path) -> Iterator[TestClient]:
    """The api in this process, as a podcast app reaches its feed routes (which need neither a key nor Redis)."""
    settings = Settings(database_url=database_url, data_dir=data_dir)
    with TestClient(create_app(settings), base_url="https://podcasts.example.com") as client:
        yield client


@pytest.fixture
def feeds(database_url: str, tmp_path: Path) -> Iterator[TestClient]:
    with feed_routes(database_url, tmp_path / "data") as client:
        yield client


@pytest.fixture
def sqlite_feeds(tmp_path: Path) -> Iterator[TestClient]:
    with feed_routes(f"sqlite:///{tmp_path / 'voxcast.db'}", tmp_path / "data") as client:
        yield client


def services_of(client: TestClient) -> ApiServices:
    return client.app.state.services  # type: ignore[attr-defined]


def new_show(services: ApiServices, caller: Caller | None = None) -> tuple[Caller, str, str]:
    """A show of `caller` (a new key's by default): the caller, the show's id and its feed's path."""
    with services.database.session() as session:
        caller = caller or Caller(key_id=create_api_key(session, "publisher").id, is_admin=False)
        show = create_show(session, caller, SHOW_FIELDS, "https://podcasts.example.com")
        return caller, show.id, f"/feeds/{show.feed_token}.xml"


def write_outputs(services: ApiServices, job_id: str, pitch: float) -> None:
    """The job's episode files as the worker writes them (`workers.job_execution`): MP3, transcripts, chapters."""
    audio = (0.1 * np.sin(np.arange(6 * SAMPLE_RATE) * pitch)).astype(np.float32)
    turns = (TimedTurn(0, "Alice", "Hello there.", 0.0, 2.5), TimedTurn(1, "Bob", "Hi, Alice.", 3.0, 6.0))
    episode = Episode(audio=audio, turns=turns, chapters=chapters_from_turns(turns))
    write_episode(episode, services.data.job(job_id).output("episode.mp3"))


def new_episode(services: ApiServices, caller: Caller, show_id: str, title: str) -> str:
    """A finished job with its files, published as `title` in the show; its id."""
    job_id = uuid.uuid4().hex
    write_outputs(services, job_id, pitch=0.05)
    with services.database.session() as session:
        job = Job(
            id=job_id, owner_id=caller.key_id, mode="turns", queue="batch", state=JobState.DONE,
            finished_at=utc_now(), audio_seconds=6.0, generation={"cfg_scale": 1.3, "diffusion_steps": 2, "seed": 5},
            formats=["mp3"], voices={},
        )  # fmt: skip
        session.add(job)
        show = session.get(Show, show_id)
        assert show is not None
        add_episode(session, job, show, EpisodeOptions(show_id=show_id, title=title))
    return job_id


def titles(answer: httpx.Response) -> list[str]:
    parsed = feedparser.parse(answer.content)
    assert not parsed.bozo, parsed.get("bozo_exception")
    return sorted(entry.title for entry in parsed.entries)


def test_every_change_of_what_a_feed_lists_or_points_at_moves_its_validators_forward(feeds: TestClient) -> None:
    services = services_of(feeds)
    caller, show_id, feed = new_show(services)
    _, other_show, _ = new_show(services, caller)
    jobs = {title: new_episode(services, caller, show_id, title) for title in ("One", "Two", "Three", "Four")}
    held = feeds.get(feed)
    assert held.status_code == 200 and titles(held) == ["Four", "One", "Three", "Two"]
    assert feeds.get(feed, headers={"If-None-Match": held.headers["etag"]}).status_code == 304
    assert feeds.get(feed, headers={"If-Modified-Since": held.headers["last-modified"]}).status_code == 304

    def changed(listed: list[str]) -> httpx.Response:
        """The feed after a change, asked as apps ask (each validator alone, as the copy `held` has them): a 200
        with what it lists now, new validators, and no date earlier than the held copy's."""
        nonlocal held
        by_date = feeds.get(feed, headers={"If-Modified-Since": held.headers["last-modified"]})
        by_tag = feeds.get(feed, headers={"If-None-Match": held.headers["etag"]})
        for answer in (by_date, by_tag):
            assert answer.status_code == 200 and titles(answer) == listed
            assert answer.headers["etag"] != held.headers["etag"]
            assert parsedate_to_datetime(answer.headers["last-modified"]) >= parsedate_to_datetime(
                held.headers["last-modified"]
            )
        assert feeds.get(feed, headers={"If-None-Match": by_tag.headers["etag"]}).status_code == 304  # it holds
        held = by_tag
        return by_tag

    with services.database.session() as session:  # taken out
        unpublish_job(session, session.get(Job, jobs["Four"]))
    changed(["One", "Three", "Two"])
    with services.database.session() as session:  # moved to another show
        job = session.get(Job, jobs["Three"])
        add_episode(session, job, session.get(Show, other_show), EpisodeOptions(show_id=other_show, title="Three"))
    before = changed(["One", "Two"])
    write_outputs(services, jobs["Two"], pitch=0.07)  # a turn made again: a new MP3, the same length and words
    after = changed(["One", "Two"])
    enclosures = [
        {e.title: e.enclosures[0].length for e in feedparser.parse(a.content).entries} for a in (before, after)
    ]
    assert enclosures[0] == enclosures[1]  # nothing the feed says changed but the file it points at
    with services.database.session() as session:  # purged (DELETE /v1/jobs/{id}?purge=true)
        delete_job(session, services.data, session.get(Job, jobs["Two"]))
    changed(["One"])
    retention = Settings(keep_jobs_days=1)  # the sweeper's retention pass, two days on
    assert jobs["One"] in apply_retention(retention, services.database, services.data, utc_now() + 2 * DAY).jobs_deleted
    changed([])


def test_the_artwork_url_names_one_image_and_a_stale_version_or_extension_is_a_404(sqlite_feeds: TestClient) -> None:
    services = services_of(sqlite_feeds)
    caller, show_id, feed = new_show(services)

    def artwork_url() -> str:
        parsed = feedparser.parse(sqlite_feeds.get(feed).content)
        return httpx.URL(parsed.feed.image.href).path

    with services.database.session() as session:
        store_artwork(services, session, caller, show_id, png(1400))
    first = artwork_url()
    version, extension = first.rsplit("/", 1)[1].split(".")
    served = sqlite_feeds.get(first)
    assert served.status_code == 200 and served.content == png(1400) and served.headers["content-type"] == "image/png"
    assert sqlite_feeds.get(first.replace(".png", ".jpg")).status_code == 404
    assert sqlite_feeds.get(first.replace(version, "0" * 16)).status_code == 404
    with services.database.session() as session:  # replaced: a new URL, and the old one is gone
        store_artwork(services, session, caller, show_id, png(1500, kind="JPEG"))
    second = artwork_url()
    assert second != first and second.endswith(".jpg")
    assert sqlite_feeds.get(second).content == png(1500, kind="JPEG")
    assert sqlite_feeds.get(first).status_code == 404
    assert sqlite_feeds.get(first.replace(".png", ".jpg")).status_code == 404  # the old version, the new extension


def test_any_origin_may_read_the_feed_routes_and_no_other(sqlite_feeds: TestClient) -> None:
    services = services_of(sqlite_feeds)
    caller, show_id, feed = new_show(services)
    job_id = new_episode(services, caller, show_id, "One")
    page = {"Origin": "https://player.example.org"}
    files = feed.removesuffix(".xml") + f"/episodes/{job_id}"
    for path in (feed, f"{files}.vtt", f"{files}.srt", f"{files}.json", f"{files}.mp3", "/feeds/" + "x" * 43 + ".xml"):
        answer = sqlite_feeds.get(path, headers=page)
        assert answer.headers["access-control-allow-origin"] == "*", path
        assert "access-control-allow-credentials" not in answer.headers
    ranged = sqlite_feeds.get(f"{files}.mp3", headers={**page, "Range": "bytes=0-9"})
    assert ranged.status_code == 206 and {"etag", "content-range"} <= set(
        ranged.headers["access-control-expose-headers"].lower().replace(" ", "").split(",")
    )
    preflight = sqlite_feeds.options(
        f"{files}.mp3",
        headers={
            **page,
            "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "range,if-none-match",
        },
    )
    assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == "*"
    assert {"range", "if-none-match"} <= set(preflight.headers["access-control-allow-headers"].lower().split(", "))
    # the key-authenticated routes: no CORS header, and no preflight a page could use to send a key
    keyed = sqlite_feeds.get(f"/v1/shows/{show_id}", headers=page)
    assert keyed.status_code == 401 and "access-control-allow-origin" not in keyed.headers
    asked = sqlite_feeds.options(
        "/v1/shows",
        headers={**page, "Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "authorization"},
    )
    assert "access-control-allow-origin" not in asked.headers and asked.status_code != 200

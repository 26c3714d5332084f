"""A show's feed as podcast apps and directories read it: RSS 2.0 with Apple's iTunes tags and the Podcasting 2.0
namespace, built with feedgen (its podcast extension for the iTunes tags, and `PodcastIndexExtension` below for the
Podcasting 2.0 ones: `podcast:guid`, `podcast:transcript`, `podcast:chapters`, `podcast:episode`).

Rendering is a pure function of `FeedChannel` and `FeedItem`s: the same show and episodes give the same bytes (its
`lastBuildDate` is the newest change, not the time of the request), so a feed's ETag changes only when it does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from feedgen.ext.base import BaseEntryExtension, BaseExtension
from feedgen.feed import FeedGenerator
from lxml import etree

from api.podcast_categories import split_category
from assembly.transcripts import CHAPTERS_MEDIA_TYPE

PODCAST_NAMESPACE = "https://podcastindex.org/namespace/1.0"
MP3_MEDIA_TYPE = "audio/mpeg"
TRANSCRIPT_MEDIA_TYPES = {"vtt": "text/vtt", "srt": "application/x-subrip"}
_EXTENSION = "podcastindex"


@dataclass(frozen=True)
class FeedChannel:
    """What the feed says of the show."""

    title: str
    description: str
    author: str
    language: str
    category: str  # "Technology" or "Arts/Books"
    explicit: bool
    feed_url: str
    podcast_guid: str
    last_modified: datetime
    artwork_url: str | None = None  # ends in .jpg or .png, as Apple asks


@dataclass(frozen=True)
class FeedItem:
    """One episode: its identity, words, date, length and where its files are (absolute URLs)."""

    guid: str
    title: str
    published: datetime
    seconds: float
    enclosure_url: str
    enclosure_bytes: int
    chapters_url: str
    transcript_urls: dict[str, str] = field(default_factory=dict)  # "vtt" / "srt": URL
    description: str | None = None
    number: int | None = None


def render_feed(channel: FeedChannel, items: Sequence[FeedItem]) -> bytes:
    """The feed's XML (UTF-8), items newest first."""
    feed = FeedGenerator()
    feed.load_extension("podcast")
    feed.register_extension(_EXTENSION, PodcastIndexExtension, PodcastIndexEntryExtension, atom=False, rss=True)
    feed.title(channel.title)
    feed.description(channel.description)
    feed.link(href=channel.feed_url, rel="self")
    feed.link(href=channel.feed_url, rel="alternate")
    feed.language(channel.language)
    feed.lastBuildDate(channel.last_modified)
    feed.generator("voxcast")
    category, subcategory = split_category(channel.category)
    feed.podcast.itunes_category({"cat": category, "sub": subcategory} if subcategory else {"cat": category})
    feed.podcast.itunes_author(channel.author)
    feed.podcast.itunes_summary(channel.description)
    feed.podcast.itunes_explicit("yes" if channel.explicit else "no")
    feed.podcast.itunes_type("episodic")
    if channel.artwork_url is not None:
        feed.podcast.itunes_image(channel.artwork_url)
        feed.image(url=channel.artwork_url, title=channel.title, link=channel.feed_url)
    getattr(feed, _EXTENSION).guid = channel.podcast_guid
    for item in sorted(items, key=lambda item: item.published):  # feedgen puts the last added first
        _add_item(feed, item)
    return feed.rss_str(pretty=True, encoding="UTF-8", xml_declaration=True)


def _add_item(feed: FeedGenerator, item: FeedItem) -> None:
    entry = feed.add_entry()
    entry.guid(item.guid, permalink=False)
    entry.title(item.title)
    entry.published(item.published)
    if item.description:
        entry.description(item.description)
        entry.podcast.itunes_summary(item.description)
    entry.enclosure(item.enclosure_url, str(item.enclosure_bytes), MP3_MEDIA_TYPE)
    entry.podcast.itunes_duration(_clock(item.seconds))
    entry.podcast.itunes_episode_type("full")
    if item.number is not None:
        entry.podcast.itunes_episode(item.number)
    extension = getattr(entry, _EXTENSION)
    extension.transcripts = dict(item.transcript_urls)
    extension.chapters_url = item.chapters_url
    extension.number = item.number


def _clock(seconds: float) -> str:
    """HH:MM:SS, as Apple shows a duration (whole seconds, rounded)."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}"


def _podcast_element(parent: etree._Element, name: str, text: str | None = None, **attributes: str) -> None:
    element = etree.SubElement(parent, f"{{{PODCAST_NAMESPACE}}}{name}", attributes)
    if text is not None:
        element.text = text


class PodcastIndexExtension(BaseExtension):
    """The feed's Podcasting 2.0 tags: `podcast:guid` (the show's identity, whatever its URL)."""

    def __init__(self) -> None:
        self.guid: str | None = None

    def extend_ns(self) -> dict[str, str]:
        return {"podcast": PODCAST_NAMESPACE}

    def extend_rss(self, rss_feed: etree._Element) -> etree._Element:
        if self.guid is not None:
            _podcast_element(rss_feed[0], "guid", self.guid)
        return rss_feed


class PodcastIndexEntryExtension(BaseEntryExtension):
    """An item's Podcasting 2.0 tags: `podcast:transcript` per transcript, `podcast:chapters` (JSON chapters),
    `podcast:episode` (its number)."""

    def __init__(self) -> None:
        self.transcripts: dict[str, str] = {}
        self.chapters_url: str | None = None
        self.number: int | None = None

    def extend_rss(self, item: etree._Element) -> etree._Element:
        for kind, url in self.transcripts.items():
            rel = {"rel": "captions"} if kind == "vtt" else {}  # timed cues: players may show them as captions
            _podcast_element(item, "transcript", url=url, type=TRANSCRIPT_MEDIA_TYPES[kind], **rel)
        if self.chapters_url is not None:
            _podcast_element(item, "chapters", url=self.chapters_url, type=CHAPTERS_MEDIA_TYPE)
        if self.number is not None:
            _podcast_element(item, "episode", str(self.number))
        return item

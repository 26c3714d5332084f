"""A show's feed as podcast apps and directories read it: RSS 2.0 with Apple's iTunes tags and the Podcasting 2.0
namespace, built with feedgen (its podcast extension for most iTunes tags, `AppleExtension` below for
`itunes:explicit` as Apple now spells it, and `PodcastIndexExtension` for the Podcasting 2.0 ones: `podcast:guid`,
`podcast:locked`, `podcast:transcript`, `podcast:chapters`, `podcast:episode`, `podcast:season`).

Rendering is a pure function of `FeedChannel` and `FeedItem`s: the same show and episodes give the same bytes (its
`lastBuildDate` is the newest change, not the time of the request), so a feed's ETag changes only when it does.
Every text is written as `core.text_rules.publishable` leaves it: the api refuses what XML cannot carry, and a row
stored before that rule cannot take the feed down.
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
from core.text_rules import publishable

PODCAST_NAMESPACE = "https://podcastindex.org/namespace/1.0"
ITUNES_NAMESPACE = "http://www.itunes.com/dtds/podcast-1.0.dtd"
MP3_MEDIA_TYPE = "audio/mpeg"
TRANSCRIPT_MEDIA_TYPES = {"vtt": "text/vtt", "srt": "application/x-subrip"}
UNTITLED = "Untitled"
_EXTENSION = "podcastindex"
_APPLE_EXTENSION = "apple"


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
    page_url: str  # the show's web page: the channel's <link>
    podcast_guid: str
    last_modified: datetime
    artwork_url: str | None = None  # ends in .jpg or .png, as Apple asks
    owner_email: str | None = None  # itunes:owner (with the author as its name) and podcast:locked's owner
    show_type: str = "episodic"  # or "serial"
    locked: bool = False


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
    season: int | None = None


def render_feed(channel: FeedChannel, items: Sequence[FeedItem]) -> bytes:
    """The feed's XML (UTF-8), items newest first."""
    feed = FeedGenerator()
    feed.load_extension("podcast")
    feed.register_extension(_APPLE_EXTENSION, AppleExtension, atom=False, rss=True)
    feed.register_extension(_EXTENSION, PodcastIndexExtension, PodcastIndexEntryExtension, atom=False, rss=True)
    # RSS requires a title and a description: a row stored before the rule may hold nothing else but what it drops.
    title = publishable(channel.title) or UNTITLED
    description, author = publishable(channel.description) or title, publishable(channel.author) or title
    feed.title(title)
    feed.description(description)
    feed.link(href=channel.feed_url, rel="self")
    feed.link(href=channel.page_url, rel="alternate")
    feed.language(channel.language)
    feed.lastBuildDate(channel.last_modified)
    feed.generator("voxcast")
    category, subcategory = split_category(channel.category)
    feed.podcast.itunes_category({"cat": category, "sub": subcategory} if subcategory else {"cat": category})
    feed.podcast.itunes_author(author)
    feed.podcast.itunes_summary(description)
    feed.podcast.itunes_type(channel.show_type)
    getattr(feed, _APPLE_EXTENSION).explicit = channel.explicit
    owner_email = publishable(channel.owner_email or "")
    if owner_email:
        feed.podcast.itunes_owner(name=author, email=owner_email)
    if channel.artwork_url is not None:
        feed.podcast.itunes_image(channel.artwork_url)
        feed.image(url=channel.artwork_url, title=title, link=channel.page_url)
    podcast = getattr(feed, _EXTENSION)
    podcast.guid = channel.podcast_guid
    podcast.locked_by = (owner_email, channel.locked) if owner_email else None
    for item in sorted(items, key=lambda item: item.published):  # feedgen puts the last added first
        _add_item(feed, item)
    return feed.rss_str(pretty=True, encoding="UTF-8", xml_declaration=True)


def _add_item(feed: FeedGenerator, item: FeedItem) -> None:
    entry = feed.add_entry()
    entry.guid(item.guid, permalink=False)
    entry.title(publishable(item.title) or UNTITLED)
    entry.published(item.published)
    if description := publishable(item.description or ""):
        entry.description(description)
        entry.podcast.itunes_summary(description)
    entry.enclosure(item.enclosure_url, str(item.enclosure_bytes), MP3_MEDIA_TYPE)
    entry.podcast.itunes_duration(_clock(item.seconds))
    entry.podcast.itunes_episode_type("full")
    if item.number is not None:
        entry.podcast.itunes_episode(item.number)
    if item.season is not None:
        entry.podcast.itunes_season(item.season)
    extension = getattr(entry, _EXTENSION)
    extension.transcripts = dict(item.transcript_urls)
    extension.chapters_url = item.chapters_url
    extension.number = item.number
    extension.season = item.season


def _clock(seconds: float) -> str:
    """HH:MM:SS, as Apple shows a duration (whole seconds, rounded)."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}"


def _podcast_element(parent: etree._Element, name: str, text: str | None = None, **attributes: str) -> None:
    element = etree.SubElement(parent, f"{{{PODCAST_NAMESPACE}}}{name}", attributes)
    if text is not None:
        element.text = text


class AppleExtension(BaseExtension):
    """`itunes:explicit` as Apple's current spec writes it, `true` or `false` (feedgen writes the older yes/no)."""

    def __init__(self) -> None:
        self.explicit = False

    def extend_ns(self) -> dict[str, str]:
        return {"itunes": ITUNES_NAMESPACE}

    def extend_rss(self, rss_feed: etree._Element) -> etree._Element:
        element = etree.SubElement(rss_feed[0], f"{{{ITUNES_NAMESPACE}}}explicit")
        element.text = "true" if self.explicit else "false"
        return rss_feed


class PodcastIndexExtension(BaseExtension):
    """The feed's Podcasting 2.0 tags: `podcast:guid` (the show's identity, whatever its URL) and `podcast:locked`
    (whether other platforms may import the feed, and the owner's address that can unlock it)."""

    def __init__(self) -> None:
        self.guid: str | None = None
        self.locked_by: tuple[str, bool] | None = None  # the owner's address, and whether the feed is locked

    def extend_ns(self) -> dict[str, str]:
        return {"podcast": PODCAST_NAMESPACE}

    def extend_rss(self, rss_feed: etree._Element) -> etree._Element:
        if self.guid is not None:
            _podcast_element(rss_feed[0], "guid", self.guid)
        if self.locked_by is not None:
            owner, locked = self.locked_by
            _podcast_element(rss_feed[0], "locked", "yes" if locked else "no", owner=owner)
        return rss_feed


class PodcastIndexEntryExtension(BaseEntryExtension):
    """An item's Podcasting 2.0 tags: `podcast:transcript` per transcript, `podcast:chapters` (JSON chapters),
    `podcast:season` and `podcast:episode` (its numbers)."""

    def __init__(self) -> None:
        self.transcripts: dict[str, str] = {}
        self.chapters_url: str | None = None
        self.number: int | None = None
        self.season: int | None = None

    def extend_rss(self, item: etree._Element) -> etree._Element:
        for kind, url in self.transcripts.items():
            rel = {"rel": "captions"} if kind == "vtt" else {}  # timed cues: players may show them as captions
            _podcast_element(item, "transcript", url=url, type=TRANSCRIPT_MEDIA_TYPES[kind], **rel)
        if self.chapters_url is not None:
            _podcast_element(item, "chapters", url=self.chapters_url, type=CHAPTERS_MEDIA_TYPE)
        if self.season is not None:
            _podcast_element(item, "season", str(self.season))
        if self.number is not None:
            _podcast_element(item, "episode", str(self.number))
        return item

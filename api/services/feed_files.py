"""The public side of a show: its feed and its files, reached by the feed's token alone (podcast apps send no key).

    /feeds/<token>.xml                         the feed
    /feeds/<token>.html                        the show's web page, the feed's channel link (`api.services.show_page`)
    /feeds/<token>/artwork/<version>.<jpg|png> the show's artwork (a new file name when it changes, as Apple asks)
    /feeds/<token>/episodes/<job id>.mp3       an episode, ID3-tagged (`api.services.tagged_audio`)
    /feeds/<token>/episodes/<job id>.<vtt|srt> its transcripts
    /feeds/<token>/episodes/<job id>.json      its chapters, in the Podcasting 2.0 JSON chapters format

A token of a token's shape (`api.params.FEED_TOKEN_PATTERN`) that no show holds, an episode not in the token's show,
or one not yet published, is a 404 like any unknown path: nothing tells a guessed token or id from a wrong one (a
token of another shape is refused by its route, 422, before any lookup); so is an artwork URL whose version or
extension is not the current artwork's (the feed names the artwork by its version, and a new file gets a new URL).
Every answer carries an ETag and Last-Modified and takes conditional and Range requests
(`api.downloads.ValidatedResponse`).

The feed's Last-Modified is when what it says or points at last changed, as the api first served it changed: each
answer's digest (`_content_digest`) is compared with the one the show keeps, and a different one moves the show's
`feed_changed_at` on to now (`_feed_changed_at`). So every change moves the feed's validators forward, whatever made
it: an episode added, edited, moved to another show or taken out, its job deleted or purged (by its owner or by the
retention policy), a turn regenerated (a new MP3, and so a new enclosure ETag, even at the same length), the show
edited or given new artwork; no code path that changes an episode has to remember to mark its show.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.deps import ApiServices
from api.downloads import StoredTail, ValidatedResponse, Validators
from api.errors import NotFound
from api.services.artwork import ARTWORK_MEDIA_TYPES
from api.services.episodes import episode_guid, stamp_published
from api.services.podcast_feed import TRANSCRIPT_MEDIA_TYPES, FeedChannel, FeedItem, render_feed
from api.services.show_page import SHOW_PAGE_HEADERS, render_show_page
from api.services.shows import feed_url, page_url
from api.services.tagged_audio import episode_chapters, tagged_mp3
from assembly.transcripts import CHAPTERS_MEDIA_TYPE, chapters_document
from core.file_store import StoredFile
from core.models import Episode, Job, Show, utc_now
from core.text_rules import publishable

_NOT_FOUND = "no such feed or file"


def show_by_token(session: Session, token: str) -> Show:
    """The show whose feed token this is; NotFound otherwise (the same answer for every unknown token)."""
    show = session.scalar(select(Show).where(Show.feed_token == token))
    if show is None:
        raise NotFound(_NOT_FOUND)
    return show


def listed_episodes(session: Session, show: Show) -> list[tuple[Episode, Job]]:
    """The show's episodes its feed lists: each once its job was first seen done (its pubDate), newest first."""
    stamp_published(session, show.id)
    rows = session.execute(
        select(Episode, Job)
        .join(Job, Job.id == Episode.job_id)
        .where(Episode.show_id == show.id, Episode.published_at.is_not(None))
        .order_by(Episode.published_at.desc())
    )
    return [(episode, job) for episode, job in rows]


def listed_episode(session: Session, show: Show, job_id: str) -> tuple[Episode, Job]:
    for episode, job in listed_episodes(session, show):
        if job.id == job_id:
            return episode, job
    raise NotFound(_NOT_FOUND)


def feed_response(services: ApiServices, session: Session, token: str, base_url: str) -> ValidatedResponse:
    """The show's feed: every listed episode whose MP3 is stored (one removed meanwhile is left out)."""
    channel, items, digest = _published(services, session, token, base_url)
    body = render_feed(channel, items)
    validators = Validators.of(body + digest.encode(), channel.last_modified)
    return ValidatedResponse(body, None, "application/rss+xml; charset=utf-8", validators)


def page_response(services: ApiServices, session: Session, token: str, base_url: str) -> ValidatedResponse:
    """The show's web page: what its feed says, for a person (its artwork, words, episodes with players)."""
    channel, items, digest = _published(services, session, token, base_url)
    body = render_show_page(channel, items)
    validators = Validators.of(body + digest.encode(), channel.last_modified)
    return ValidatedResponse(body, None, "text/html; charset=utf-8", validators, SHOW_PAGE_HEADERS)


def _published(
    services: ApiServices, session: Session, token: str, base_url: str
) -> tuple[FeedChannel, list[FeedItem], str]:
    """What the show publishes now, as its feed and its page say it (the channel's `last_modified`: when that last
    changed), and a digest of it and of the files it points at (`_content_digest`)."""
    show = show_by_token(session, token)
    root = f"{base_url}/feeds/{show.feed_token}"
    items, enclosure_etags = [], []
    for episode, job in listed_episodes(session, show):
        try:
            mp3 = tagged_mp3(services.data, job, episode)
        except FileNotFoundError:
            continue
        files = f"{root}/episodes/{job.id}"
        items.append(
            FeedItem(
                guid=episode_guid(job.id),
                title=episode.title,
                description=episode.description,
                number=episode.number,
                season=episode.season,
                published=_published_at(episode),
                seconds=job.audio_seconds or 0.0,
                enclosure_url=f"{files}.mp3",
                enclosure_bytes=mp3.size,
                chapters_url=f"{files}.json",
                transcript_urls={kind: f"{files}.{kind}" for kind in TRANSCRIPT_MEDIA_TYPES},
            )
        )
        enclosure_etags.append(mp3.validators.etag)
    channel = FeedChannel(
        title=show.title,
        description=show.description,
        author=show.author,
        language=show.language,
        category=show.category,
        explicit=show.explicit,
        feed_url=feed_url(base_url, show.feed_token),
        page_url=page_url(base_url, show.feed_token),
        podcast_guid=show.podcast_guid,
        last_modified=show.feed_changed_at or show.updated_at,  # replaced below by the change this answer finds
        artwork_url=_artwork_url(services, show, root),
        owner_email=show.owner_email,
        show_type=show.show_type,
        locked=show.locked,
    )
    digest = _content_digest(channel, items, enclosure_etags, base_url)
    return replace(channel, last_modified=_feed_changed_at(show, digest)), items, digest


def _content_digest(channel: FeedChannel, items: list[FeedItem], enclosure_etags: list[str], base_url: str) -> str:
    """A digest of what the feed says (its channel, but for its date, and its items) and of the files it points at
    (each enclosure's ETag: a turn made again can leave an MP3's length, and so every word of the feed, as it was).
    Its URLs count without `base_url`: without `VOXCAST_PUBLIC_URL`, the same feed reached at two addresses is one
    version, not a change at every other request."""
    said = {
        "channel": asdict(channel) | {"last_modified": None},
        "items": [asdict(item) for item in items],
        "enclosures": enclosure_etags,
    }
    return hashlib.sha256(json.dumps(said, sort_keys=True, default=str).replace(base_url, "").encode()).hexdigest()


def _feed_changed_at(show: Show, digest: str) -> datetime:
    """When the feed last changed: the time this answer found `digest` differ from the one last served (kept with the
    show, in this request's transaction), else that of the last change.

    A whole second, at least one after the previous change, as an HTTP date can say it: a copy's Last-Modified is
    earlier than any later change's, and the copy served now holds (`304`) from now on. Changes within one second
    put it ahead of the clock; it is sent no later than the answer (`api.downloads.Validators`), a date a later
    request finds earlier than the change, so that copy is sent once more. Two hosts whose clocks disagree still
    move it forward."""
    previous = show.feed_changed_at
    if previous is not None and show.feed_digest == digest:
        return previous
    now = utc_now().replace(microsecond=0)
    changed = now if previous is None else max(now, previous + timedelta(seconds=1))
    show.feed_digest, show.feed_changed_at = digest, changed
    return changed


def enclosure_response(services: ApiServices, session: Session, token: str, job_id: str) -> ValidatedResponse:
    episode, job = listed_episode(session, show_by_token(session, token), job_id)
    try:
        mp3 = tagged_mp3(services.data, job, episode)
    except FileNotFoundError:
        raise NotFound(_NOT_FOUND) from None
    return ValidatedResponse(mp3.tag, mp3.tail, "audio/mpeg", mp3.validators)


def transcript_response(
    services: ApiServices, session: Session, token: str, job_id: str, kind: str
) -> ValidatedResponse:
    _, job = listed_episode(session, show_by_token(session, token), job_id)
    path = services.data.job(job.id).output(f"episode.{kind}")
    return _stored(services, path, TRANSCRIPT_MEDIA_TYPES[kind] + "; charset=utf-8")


def chapters_response(services: ApiServices, session: Session, token: str, job_id: str) -> ValidatedResponse:
    """The episode's chapters with the episode's and show's names, as the JSON chapters format allows."""
    episode, job = listed_episode(session, show_by_token(session, token), job_id)
    try:
        chapters, stored = episode_chapters(services.data, job)
    except FileNotFoundError:
        raise NotFound(_NOT_FOUND) from None
    show = episode.show
    document = chapters_document(
        chapters,
        title=publishable(episode.title),
        podcastName=publishable(show.title),
        author=publishable(show.author),
        fileName=f"{job.id}.mp3",
    )
    body = (json.dumps(document, ensure_ascii=False, indent=2) + "\n").encode("utf-8")
    changed = max(stored.modified, episode.updated_at, show.updated_at)
    return ValidatedResponse(body, None, CHAPTERS_MEDIA_TYPE, Validators.of(body, changed))


def artwork_response(
    services: ApiServices, session: Session, token: str, version: str, extension: str
) -> ValidatedResponse:
    """The show's artwork at the URL its feed names: another version or extension (artwork since replaced) is a 404,
    so a URL always means one image, as Apple expects of an artwork URL."""
    show = show_by_token(session, token)
    current = _current_artwork(services, show)
    if current is None or (version, extension) != (current.version, show.artwork_format):
        raise NotFound(_NOT_FOUND)
    return _served(services, current.path, current.stored, ARTWORK_MEDIA_TYPES[extension])


def _stored(services: ApiServices, path: Path, media_type: str) -> ValidatedResponse:
    """A stored file as it is, validated by the store's version of it."""
    stored = services.data.files.stat(path)
    if stored is None:
        raise NotFound(_NOT_FOUND)
    return _served(services, path, stored, media_type)


def _served(services: ApiServices, path: Path, stored: StoredFile, media_type: str) -> ValidatedResponse:
    validators = Validators.of(stored.version.encode(), stored.modified)
    return ValidatedResponse(b"", StoredTail(services.data.files, path, stored.size), media_type, validators)


@dataclass(frozen=True)
class _Artwork:
    path: Path
    stored: StoredFile
    version: str  # in its URL: the first 16 hex digits of its ETag


def _current_artwork(services: ApiServices, show: Show) -> _Artwork | None:
    """The show's artwork as it is stored now; None when it has none."""
    if show.artwork_format is None:
        return None
    path = services.data.show_artwork(show.id, show.artwork_format)
    stored = services.data.files.stat(path)
    if stored is None:
        return None
    version = Validators.of(stored.version.encode(), stored.modified).etag.strip('"')[:16]
    return _Artwork(path, stored, version)


def _artwork_url(services: ApiServices, show: Show, root: str) -> str | None:
    """The artwork's URL, named after its version: Apple refetches artwork only when its URL changes."""
    artwork = _current_artwork(services, show)
    return None if artwork is None else f"{root}/artwork/{artwork.version}.{show.artwork_format}"


def _published_at(episode: Episode) -> datetime:
    assert episode.published_at is not None  # listed episodes have one
    return episode.published_at

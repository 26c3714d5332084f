"""Shows: a key's podcasts. Create, read, change, delete; their artwork; the token their feed is reached by.

A show is its owner's alone: another key's show is a 404, as if absent (an admin sees every one). Its feed is
public to whoever holds its URL, which carries `feed_token`: 256 random bits, never derived from an id. Rotating it
makes a new one, and every URL with the old one answers 404 from then on (`api.services.feed_files`).
"""

from __future__ import annotations

import logging
import secrets
import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.deps import ApiServices, Caller
from api.schemas import ShowChange, ShowEpisodeView, ShowFields, ShowView
from api.services.artwork import checked_artwork
from api.services.episodes import stamp_published
from api.services.ownership import owned_row, visible_rows
from core.models import Episode, Job, Show, utc_now
from core.storage import atomic_write, new_id

logger = logging.getLogger(__name__)

# Podcasting 2.0's namespace for a show's `podcast:guid`: a UUIDv5 of its feed's URL (scheme and trailing slashes
# left out) under this UUID, made once when the show is created (the namespace's `guid` tag).
PODCAST_GUID_NAMESPACE = uuid.UUID("ead4c236-bf58-58c6-a2c6-a6b28d128cb6")


def new_feed_token() -> str:
    """A feed's token: 256 random bits, URL-safe (43 characters)."""
    return secrets.token_urlsafe(32)


def feed_url(base_url: str, token: str) -> str:
    return f"{base_url}/feeds/{token}.xml"


def page_url(base_url: str, token: str) -> str:
    """The show's public web page, the feed's channel link (`api.services.show_page`)."""
    return f"{base_url}/feeds/{token}.html"


def create_show(session: Session, caller: Caller, fields: ShowFields, base_url: str) -> Show:
    token = new_feed_token()
    address = feed_url(base_url, token).split("://", 1)[-1].rstrip("/")
    show = Show(
        id=new_id(),
        owner_id=caller.key_id,
        **fields.model_dump(),
        feed_token=token,
        podcast_guid=str(uuid.uuid5(PODCAST_GUID_NAMESPACE, address)),
    )
    session.add(show)
    session.flush()
    logger.info("show created", extra={"show_id": show.id, "owner": caller.key_id})
    return show


def owned_show(session: Session, caller: Caller, show_id: str) -> Show:
    """The show if this key may see it (its own, or any for an admin); otherwise NotFound, as if absent."""
    return owned_row(session, caller, Show, show_id, f"no show {show_id}; create one with POST /v1/shows")


def list_shows(session: Session, caller: Caller) -> list[Show]:
    return visible_rows(session, caller, Show, Show.created_at)


_CLEARABLE = {"owner_email"}  # a null in a change removes these; the other fields always have a value


def change_show(session: Session, caller: Caller, show_id: str, change: ShowChange) -> Show:
    show = owned_show(session, caller, show_id)
    for name, value in change.model_dump(exclude_unset=True).items():
        if value is not None or name in _CLEARABLE:
            setattr(show, name, value)
    show.updated_at = utc_now()
    session.flush()
    return show


def rotate_feed_token(session: Session, caller: Caller, show_id: str) -> Show:
    """A new token for the show's feed: the old feed URL and its files' URLs answer 404 from now on."""
    show = owned_show(session, caller, show_id)
    show.feed_token = new_feed_token()
    show.updated_at = utc_now()
    session.flush()
    logger.info("feed token rotated", extra={"show_id": show.id})
    return show


def delete_show(services: ApiServices, session: Session, caller: Caller, show_id: str) -> None:
    """The show, its feed and its artwork go; its episodes' jobs stay (only their place in the show goes)."""
    show = owned_show(session, caller, show_id)
    session.delete(show)
    session.flush()
    services.data.files.remove(services.data.show(show_id))
    logger.info("show deleted", extra={"show_id": show_id})


def store_artwork(services: ApiServices, session: Session, caller: Caller, show_id: str, data: bytes) -> Show:
    """Check the image as directories do, then keep it (in the store before the row says so) as the show's artwork."""
    show = owned_show(session, caller, show_id)
    artwork = checked_artwork(data)
    path = atomic_write(services.data.show_artwork(show.id, artwork.extension), lambda handle: handle.write(data))
    try:
        services.data.files.publish(path)
    finally:
        services.data.files.drop_local(path)
    if show.artwork_format not in (None, artwork.extension):  # a PNG replacing a JPEG: the JPEG goes
        services.data.files.remove_file(services.data.show_artwork(show.id, show.artwork_format))
    show.artwork_format = artwork.extension
    show.updated_at = utc_now()
    session.flush()
    logger.info("show artwork stored", extra={"show_id": show.id, "pixels": artwork.pixels})
    return show


def show_view(session: Session, show: Show, base_url: str) -> ShowView:
    stamp_published(session, show.id)
    rows = session.execute(
        select(Episode, Job.state)
        .join(Job, Job.id == Episode.job_id)
        .where(Episode.show_id == show.id)
        .order_by(Job.created_at.desc())
    )
    episodes = [
        ShowEpisodeView(
            job_id=episode.job_id,
            title=episode.title,
            number=episode.number,
            season=episode.season,
            state=state,
            published_at=episode.published_at,
        )
        for episode, state in rows
    ]
    return ShowView(
        id=show.id,
        title=show.title,
        description=show.description,
        author=show.author,
        language=show.language,
        category=show.category,
        explicit=show.explicit,
        owner_email=show.owner_email,
        show_type=show.show_type,
        locked=show.locked,
        artwork=f"/v1/shows/{show.id}/artwork" if show.artwork_format else None,
        feed_url=feed_url(base_url, show.feed_token),
        page_url=page_url(base_url, show.feed_token),
        podcast_guid=show.podcast_guid,
        episodes=episodes,
        created_at=show.created_at,
        updated_at=show.updated_at,
    )

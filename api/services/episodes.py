"""Jobs as episodes of a show: named when a job is submitted, or later (a finished episode added, or taken out).

A show's feed lists an episode once its job is done; its enclosure is the job's MP3, so a job that does not write
one cannot be an episode (422 naming `formats`: submit it again with `mp3`). A failed or cancelled job cannot be
added either (409): it has no episode to publish until an admin retries it. An episode's `published_at` (its
pubDate) is stamped the first time its job is seen done (`stamp_published`), and stays when a turn is regenerated.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from api.deps import Caller
from api.errors import Conflict, InvalidInput, NotFound, Problem
from api.schemas import EpisodeOptions, EpisodeView
from core.job_states import JobState
from core.models import Episode, Job, Show, utc_now

logger = logging.getLogger(__name__)

EPISODE_FORMAT = "mp3"  # an episode's enclosure: the format every podcast app plays
_EPISODE_GUID_NAMESPACE = uuid.UUID("1b0e3d7c-3f5c-5a55-9d8e-7c0a4e6f2b91")  # voxcast's own, for item guids


def episode_guid(job_id: str) -> str:
    """The feed item's guid: a UUID of the job's id, so it stays whatever the episode's title, number or show."""
    return str(uuid.uuid5(_EPISODE_GUID_NAMESPACE, job_id))


def check_episode(
    session: Session, caller: Caller, options: EpisodeOptions, formats: Sequence[str], at: str = "episode."
) -> Show:
    """The show a submission names, once it is the caller's and the job writes an MP3; else 422 naming the field
    (`at` is where the options are in the body: `episode.` in a job's submission, nothing in `PUT .../episode`)."""
    show = session.get(Show, options.show_id)
    if show is None or not (caller.is_admin or show.owner_id == caller.key_id):
        raise InvalidInput([Problem(f"{at}show_id", f"no show {options.show_id}; create one with POST /v1/shows")])
    if EPISODE_FORMAT not in formats:
        raise InvalidInput([Problem("formats", _needs_mp3(", ".join(formats)))])
    return show


def add_episode(session: Session, job: Job, show: Show, options: EpisodeOptions) -> Episode:
    """The job as an episode of `show` (its episode replaced, if it was one): listed once done."""
    episode = session.get(Episode, job.id) or Episode(job_id=job.id)
    episode.show_id = show.id
    episode.title = options.title
    episode.description = options.description
    episode.number = options.number
    episode.season = options.season
    episode.updated_at = utc_now()
    if episode.published_at is None and job.job_state is JobState.DONE:
        episode.published_at = utc_now()
    session.add(episode)
    session.flush()
    logger.info("episode set", extra={"job_id": job.id, "show_id": show.id})
    return episode


def publish_job(session: Session, caller: Caller, job: Job, options: EpisodeOptions) -> Episode:
    """`PUT /v1/jobs/{id}/episode`: a job, done or still in flight, as an episode of one of the caller's shows."""
    show = check_episode(session, caller, options, job.formats, at="")
    if job.job_state in (JobState.FAILED, JobState.CANCELLED):
        raise Conflict(f"job {job.id} is {job.state}: it has no episode to publish (an admin may retry it)")
    return add_episode(session, job, show, options)


def unpublish_job(session: Session, job: Job) -> None:
    """Take the job out of its show: its feed no longer lists it; the job and its files stay."""
    episode = session.get(Episode, job.id)
    if episode is None:
        raise NotFound(f"job {job.id} is not an episode of any show")
    session.delete(episode)
    session.flush()
    logger.info("episode taken out", extra={"job_id": job.id, "show_id": episode.show_id})


def stamp_published(session: Session, show_id: str) -> None:
    """Give the show's episodes whose job is done, and that have no pubDate yet, the time their job finished."""
    finished = select(Job.finished_at).where(Job.id == Episode.job_id, Job.state == JobState.DONE).scalar_subquery()
    session.execute(
        update(Episode)
        .where(Episode.show_id == show_id, Episode.published_at.is_(None), finished.is_not(None))
        .values(published_at=finished)
        .execution_options(synchronize_session=False)
    )


def episode_view(session: Session, job: Job) -> EpisodeView | None:
    episode = session.get(Episode, job.id)
    if episode is None:
        return None
    return EpisodeView(
        show_id=episode.show_id,
        show_title=episode.show.title,
        title=episode.title,
        description=episode.description,
        number=episode.number,
        season=episode.season,
        published_at=episode.published_at,
        guid=episode_guid(job.id),
    )


def _needs_mp3(formats: str) -> str:
    return (
        f"a show's episode is published as MP3 (its feed's enclosure), and this job writes {formats}: add "
        f"'{EPISODE_FORMAT}' to formats (a finished job without it cannot be added: submit it again)"
    )

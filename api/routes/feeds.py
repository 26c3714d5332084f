"""A show's feed, its files and its web page, for podcast apps and listeners: reached by the feed's token, with no key
(`api.services.feed_files`).

Every route answers GET and HEAD, with `ETag`, `Last-Modified`, conditional requests (`304`) and `Range`, and any
origin may read them (`api.feed_cors`)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Response

from api.deps import BaseUrl, ServicesDep, SessionDep
from api.feed_cors import FEED_METHODS, FEEDS_PREFIX
from api.params import ARTWORK_VERSION_PATTERN, FEED_TOKEN_PATTERN, ID_PATTERN
from api.services import feed_files

router = APIRouter(prefix=FEEDS_PREFIX, tags=["feeds"])

FeedToken = Annotated[str, Path(pattern=FEED_TOKEN_PATTERN, description="the show's feed token (in its feed_url)")]
EpisodeId = Annotated[str, Path(pattern=ID_PATTERN, description="the episode's job id")]
ArtworkVersion = Annotated[str, Path(pattern=ARTWORK_VERSION_PATTERN, description="the artwork's version (its URL)")]
_READ = list(FEED_METHODS)


@router.api_route("/{token}.xml", methods=_READ, summary="A show's feed: RSS 2.0, iTunes and Podcasting 2.0 tags")
def feed(token: FeedToken, session: SessionDep, services: ServicesDep, base_url: BaseUrl) -> Response:
    return feed_files.feed_response(services, session, token, base_url)


@router.api_route("/{token}.html", methods=_READ, summary="A show's web page: its episodes, with players")
def page(token: FeedToken, session: SessionDep, services: ServicesDep, base_url: BaseUrl) -> Response:
    return feed_files.page_response(services, session, token, base_url)


@router.api_route("/{token}/artwork/{version}.{extension}", methods=_READ, summary="The show's artwork")
def artwork(
    token: FeedToken,
    version: ArtworkVersion,
    extension: Literal["jpg", "png"],
    session: SessionDep,
    services: ServicesDep,
) -> Response:
    return feed_files.artwork_response(services, session, token, version, extension)


@router.api_route("/{token}/episodes/{job_id}.mp3", methods=_READ, summary="An episode: its MP3, ID3-tagged")
def enclosure(token: FeedToken, job_id: EpisodeId, session: SessionDep, services: ServicesDep) -> Response:
    return feed_files.enclosure_response(services, session, token, job_id)


@router.api_route("/{token}/episodes/{job_id}.json", methods=_READ, summary="An episode's chapters (JSON chapters)")
def chapters(token: FeedToken, job_id: EpisodeId, session: SessionDep, services: ServicesDep) -> Response:
    return feed_files.chapters_response(services, session, token, job_id)


@router.api_route("/{token}/episodes/{job_id}.{kind}", methods=_READ, summary="An episode's transcript")
def transcript(
    token: FeedToken, job_id: EpisodeId, kind: Literal["vtt", "srt"], session: SessionDep, services: ServicesDep
) -> Response:
    return feed_files.transcript_response(services, session, token, job_id, kind)

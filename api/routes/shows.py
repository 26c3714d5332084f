"""Show routes: create, list, read, change and delete a show; its artwork; its feed's token; and a job's place in a
show as an episode. The logic is in `api.services.shows` and `api.services.episodes`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response, UploadFile

from api.deps import BaseUrl, CurrentKey, ServicesDep, SessionDep
from api.downloads import stored_file
from api.errors import NotFound
from api.params import ID_PATTERN, JobId
from api.podcast_categories import category_names
from api.schemas import CategoryList, EpisodeOptions, JobView, ShowChange, ShowFields, ShowList, ShowView
from api.services import episodes, jobs, shows
from api.services.artwork import ARTWORK_MEDIA_TYPES, MAX_ARTWORK_BYTES

router = APIRouter(tags=["shows"])

ShowId = Annotated[str, Path(pattern=ID_PATTERN, description="a show id: 32 lowercase hex digits")]


@router.post("/v1/shows", status_code=201, response_model=ShowView, summary="Create a show (a podcast with a feed)")
def create_show(
    fields: ShowFields, response: Response, session: SessionDep, caller: CurrentKey, base_url: BaseUrl
) -> ShowView:
    show = shows.create_show(session, caller, fields, base_url)
    response.headers["Location"] = f"/v1/shows/{show.id}"
    return shows.show_view(session, show, base_url)


@router.get("/v1/shows", response_model=ShowList, summary="This key's shows")
def list_shows(session: SessionDep, caller: CurrentKey, base_url: BaseUrl) -> ShowList:
    return ShowList(shows=[shows.show_view(session, show, base_url) for show in shows.list_shows(session, caller)])


@router.get("/v1/shows/categories", response_model=CategoryList, summary="The categories a show may name")
def list_categories(caller: CurrentKey) -> CategoryList:
    return CategoryList(categories=category_names())


@router.get("/v1/shows/{show_id}", response_model=ShowView)
def get_show(show_id: ShowId, session: SessionDep, caller: CurrentKey, base_url: BaseUrl) -> ShowView:
    return shows.show_view(session, shows.owned_show(session, caller, show_id), base_url)


@router.patch("/v1/shows/{show_id}", response_model=ShowView, summary="Change a show's fields (the rest stay)")
def change_show(
    show_id: ShowId, change: ShowChange, session: SessionDep, caller: CurrentKey, base_url: BaseUrl
) -> ShowView:
    return shows.show_view(session, shows.change_show(session, caller, show_id, change), base_url)


@router.delete("/v1/shows/{show_id}", status_code=204, summary="Delete a show and its feed (its episodes' jobs stay)")
def delete_show(show_id: ShowId, session: SessionDep, caller: CurrentKey, services: ServicesDep) -> None:
    shows.delete_show(services, session, caller, show_id)


@router.put(
    "/v1/shows/{show_id}/artwork",
    response_model=ShowView,
    summary=f"Upload the show's artwork: a square JPEG or PNG, 1400-3000 px, at most {MAX_ARTWORK_BYTES >> 20} MiB",
)
def put_artwork(
    show_id: ShowId,
    file: UploadFile,
    session: SessionDep,
    caller: CurrentKey,
    services: ServicesDep,
    base_url: BaseUrl,
) -> ShowView:
    data = file.file.read(MAX_ARTWORK_BYTES + 1)  # one byte past the limit: refused with the rule
    return shows.show_view(session, shows.store_artwork(services, session, caller, show_id, data), base_url)


@router.get("/v1/shows/{show_id}/artwork", summary="The show's artwork, as uploaded")
def get_artwork(show_id: ShowId, session: SessionDep, caller: CurrentKey, services: ServicesDep) -> Response:
    show = shows.owned_show(session, caller, show_id)
    if show.artwork_format is None:
        raise NotFound(f"show {show_id} has no artwork; upload one with PUT /v1/shows/{show_id}/artwork")
    path = services.data.show_artwork(show.id, show.artwork_format)
    try:
        return stored_file(services.data.files, path, ARTWORK_MEDIA_TYPES[show.artwork_format])
    except FileNotFoundError:
        raise NotFound(f"show {show_id} has no artwork any more; upload it again") from None


@router.post(
    "/v1/shows/{show_id}/feed-token",
    response_model=ShowView,
    summary="A new feed URL: the old one and its files' URLs answer 404 from now on",
)
def rotate_feed_token(show_id: ShowId, session: SessionDep, caller: CurrentKey, base_url: BaseUrl) -> ShowView:
    return shows.show_view(session, shows.rotate_feed_token(session, caller, show_id), base_url)


@router.put(
    "/v1/jobs/{job_id}/episode",
    response_model=JobView,
    tags=["jobs"],
    summary="Make a job an episode of one of this key's shows (or change its episode's title, notes or number)",
)
def put_episode(job_id: JobId, options: EpisodeOptions, session: SessionDep, caller: CurrentKey) -> JobView:
    job = jobs.owned_job(session, caller, job_id)
    episodes.publish_job(session, caller, job, options)
    return jobs.job_view(session, job)


@router.delete(
    "/v1/jobs/{job_id}/episode",
    response_model=JobView,
    tags=["jobs"],
    summary="Take a job out of its show: its feed no longer lists it (the job and its files stay)",
)
def delete_episode(job_id: JobId, session: SessionDep, caller: CurrentKey) -> JobView:
    job = jobs.owned_job(session, caller, job_id)
    episodes.unpublish_job(session, job)
    return jobs.job_view(session, job)

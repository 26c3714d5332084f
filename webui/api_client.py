"""The studio's only way to the service: a small typed client of the voxcast api over HTTP.

Every call takes the caller's API key (or none, for a single-user api) and answers with the api's own
response models (`api.schemas`). Whatever goes wrong, from a refused connection to a 422, ends as one
`StudioApiError` whose message a person can read, and whose `problems` name the field (and script line)
the api complained about, so the studio can show each next to the input it concerns.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Literal, TypeVar

import httpx
from httpx_sse import aconnect_sse
from pydantic import BaseModel

from api.schemas import (
    JOB_STREAM_EVENTS,
    SCRIPT_STREAM_EVENTS,
    EpisodeOptions,
    HealthView,
    JobList,
    JobOptions,
    JobPlanView,
    JobStreamEvent,
    JobView,
    QueueDepth,
    QueueReport,
    RegenerationPlan,
    RegenerationView,
    ScriptStreamEvent,
    ScriptView,
    ShowChange,
    ShowFields,
    ShowList,
    ShowView,
    UsageList,
    UsageView,
    VoiceList,
    VoiceView,
    WorkerList,
)

# The api closes an event stream only when the job ends and sends a keep-alive every 15 s: a read that
# waits much longer than that means the connection is gone.
_EVENT_READ_TIMEOUT_SECONDS = 60.0
_Event = TypeVar("_Event", bound=BaseModel)
_DOWNLOAD_CHUNK_BYTES = 1 << 16


@dataclass(frozen=True)
class FieldProblem:
    """One thing the api rejected: the dotted field ("script", "voices.Alice", "settings.seed"), why, where."""

    field: str
    message: str
    line: int | None = None


class StudioApiError(Exception):
    """A call that did not succeed, with a message fit to show as is."""

    def __init__(self, message: str, status: int | None = None, problems: tuple[FieldProblem, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.problems = problems


class Access(Enum):
    """What the key in use may do."""

    USER = "user"
    ADMIN = "admin"


class StudioApi:
    """The api at `base_url`, called with `key` (None: no Authorization header, for a single-user api)."""

    def __init__(self, base_url: str, key: str | None, timeout: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.key = key.strip() if key and key.strip() else None
        self.timeout = timeout

    @asynccontextmanager
    async def _client(self, read_timeout: float | None = None) -> AsyncIterator[httpx.AsyncClient]:
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        timeout = httpx.Timeout(self.timeout, read=read_timeout or self.timeout)
        async with httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=timeout) as client:
            try:
                yield client
            except httpx.TimeoutException as error:
                raise StudioApiError(f"the api at {self.base_url} did not answer in time ({error})") from error
            except httpx.HTTPError as error:
                raise StudioApiError(f"the api at {self.base_url} cannot be reached ({error})") from error

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        async with self._client() as client:
            response = await client.request(method, path, **kwargs)
        _raise_for_problem(response)
        return response

    # --- who is calling -----------------------------------------------------------------------------------

    async def access(self) -> Access:
        """USER or ADMIN for a key the api accepts; StudioApiError (status 401) for one it does not."""
        await self._request("GET", "/v1/voices")
        try:
            await self._request("GET", "/v1/admin/queues")
        except StudioApiError as error:
            if error.status == 403:
                return Access.USER
            raise
        return Access.ADMIN

    # --- voices -----------------------------------------------------------------------------------------

    async def voices(self) -> list[VoiceView]:
        response = await self._request("GET", "/v1/voices")
        return VoiceList.model_validate_json(response.content).voices

    async def upload_voice(self, name: str, recording: Path) -> VoiceView:
        with recording.open("rb") as handle:
            response = await self._request(
                "POST", "/v1/voices", data={"name": name}, files={"file": (recording.name, handle)}
            )
        return VoiceView.model_validate_json(response.content)

    async def rename_voice(self, voice_id: str, name: str) -> VoiceView:
        response = await self._request("PATCH", f"/v1/voices/{voice_id}", json={"name": name})
        return VoiceView.model_validate_json(response.content)

    async def delete_voice(self, voice_id: str) -> None:
        """Remove a voice from the library; jobs that used it keep their own copy."""
        await self._request("DELETE", f"/v1/voices/{voice_id}")

    # --- jobs -------------------------------------------------------------------------------------------

    async def submit_job(self, script: str, options: JobOptions, uploads: Mapping[str, Path]) -> JobView:
        """POST /v1/jobs: JSON when every voice is a library voice, multipart when recordings go with it."""
        if not uploads:
            body = {"script": script, **options.model_dump(mode="json")}
            response = await self._request("POST", "/v1/jobs", json=body)
            return JobView.model_validate_json(response.content)
        handles = {speaker: path.open("rb") for speaker, path in uploads.items()}
        try:
            files: list[tuple[str, Any]] = [("script", ("script.txt", script.encode("utf-8"), "text/plain"))]
            files += [(f"voice.{speaker}", (uploads[speaker].name, handle)) for speaker, handle in handles.items()]
            response = await self._request("POST", "/v1/jobs", data={"options": options.model_dump_json()}, files=files)
        finally:
            for handle in handles.values():
                handle.close()
        return JobView.model_validate_json(response.content)

    async def job(self, job_id: str) -> JobView:
        response = await self._request("GET", f"/v1/jobs/{job_id}")
        return JobView.model_validate_json(response.content)

    async def health(self) -> HealthView:
        """What `/health` says (a `503`, the database down, is a report too, not an error)."""
        async with self._client() as client:
            response = await client.get("/health")
        if response.status_code not in (200, 503):
            _raise_for_problem(response)
        return HealthView.model_validate_json(response.content)

    async def job_plan(self, job_id: str) -> JobPlanView:
        response = await self._request("GET", f"/v1/jobs/{job_id}/plan")
        return JobPlanView.model_validate_json(response.content)

    async def jobs(self, limit: int = 50) -> list[JobView]:
        response = await self._request("GET", "/v1/jobs", params={"limit": limit})
        return JobList.model_validate_json(response.content).jobs

    async def cancel_job(self, job_id: str) -> JobView:
        response = await self._request("DELETE", f"/v1/jobs/{job_id}")
        return JobView.model_validate_json(response.content)

    async def delete_job(self, job_id: str) -> None:
        """Delete a job that has ended, with all its files (the api refuses one still queued or running)."""
        await self._request("DELETE", f"/v1/jobs/{job_id}", params={"purge": "true"})

    async def regenerate_turn(self, job_id: str, turn: int, text: str | None = None) -> RegenerationView:
        """Generate turn `turn` (0-based) of a done job again, with a fresh seed and, if given, new words."""
        response = await self._request("POST", f"/v1/jobs/{job_id}/turns/{turn}/regenerate", json=_change(text))
        return RegenerationView.model_validate_json(response.content)

    async def regeneration_plan(self, job_id: str, turn: int, text: str | None = None) -> RegenerationPlan:
        """What regenerating turn `turn` would speak anew and about how long it would take; nothing changes."""
        path = f"/v1/jobs/{job_id}/turns/{turn}/regeneration-plan"
        response = await self._request("POST", path, json=_change(text))
        return RegenerationPlan.model_validate_json(response.content)

    async def keep_take(self, job_id: str, keep: Literal["new", "previous"]) -> JobView:
        """After a regeneration, keep its take (the earlier one goes) or the earlier one (assembled again)."""
        response = await self._request("POST", f"/v1/jobs/{job_id}/takes", json={"keep": keep})
        return JobView.model_validate_json(response.content)

    async def job_events(self, job_id: str, *, audio: bool = True) -> AsyncIterator[JobStreamEvent]:
        """The job's server-sent events, as the api's models, until the stream ends (after a final `state`);
        without the live `audio` chunks unless `audio`."""
        path = f"/v1/jobs/{job_id}/events" + ("" if audio else "?audio=false")
        async for event in self._events(path, JOB_STREAM_EVENTS):
            yield event

    async def _events(self, path: str, models: Mapping[str, type[_Event]]) -> AsyncIterator[_Event]:
        """The stream at `path`, each event read as its name's model (events of other names are skipped)."""
        async with self._client(read_timeout=_EVENT_READ_TIMEOUT_SECONDS) as client:
            async with aconnect_sse(client, "GET", path) as source:
                if source.response.is_error:
                    await source.response.aread()
                    _raise_for_problem(source.response)
                async for event in source.aiter_sse():
                    if event.event in models:
                        yield models[event.event].model_validate_json(event.data)

    # --- script jobs ------------------------------------------------------------------------------------

    async def submit_script(self, body: Mapping[str, Any]) -> ScriptView:
        """POST /v1/scripts: a draft or a clean-up; done at once when no model is needed, else queued."""
        response = await self._request("POST", "/v1/scripts", json=dict(body))
        return ScriptView.model_validate_json(response.content)

    async def script(self, script_id: str) -> ScriptView:
        response = await self._request("GET", f"/v1/scripts/{script_id}")
        return ScriptView.model_validate_json(response.content)

    async def cancel_script(self, script_id: str) -> ScriptView:
        response = await self._request("DELETE", f"/v1/scripts/{script_id}")
        return ScriptView.model_validate_json(response.content)

    async def script_events(self, script_id: str) -> AsyncIterator[ScriptStreamEvent]:
        """The script job's server-sent events (its whole view, each attempt) until it ends."""
        async for event in self._events(f"/v1/scripts/{script_id}/events", SCRIPT_STREAM_EVENTS):
            yield event

    async def download(self, path: str, destination: Path) -> Path:
        """Stream an api file (an episode, a transcript, a segment, a voice preview) to `destination`."""
        destination.parent.mkdir(parents=True, exist_ok=True)
        partial = destination.with_name(f".{destination.name}.{secrets.token_hex(4)}.part")
        async with self._client() as client:
            async with client.stream("GET", path) as response:
                if response.is_error:
                    await response.aread()
                    _raise_for_problem(response)
                try:
                    with partial.open("wb") as handle:
                        async for chunk in response.aiter_bytes(_DOWNLOAD_CHUNK_BYTES):
                            handle.write(chunk)
                    partial.replace(destination)
                finally:
                    partial.unlink(missing_ok=True)
        return destination

    # --- shows ------------------------------------------------------------------------------------------

    async def shows(self) -> list[ShowView]:
        response = await self._request("GET", "/v1/shows")
        return ShowList.model_validate_json(response.content).shows

    async def show(self, show_id: str) -> ShowView:
        response = await self._request("GET", f"/v1/shows/{show_id}")
        return ShowView.model_validate_json(response.content)

    async def create_show(self, fields: ShowFields) -> ShowView:
        response = await self._request("POST", "/v1/shows", json=fields.model_dump(mode="json"))
        return ShowView.model_validate_json(response.content)

    async def change_show(self, show_id: str, change: ShowChange) -> ShowView:
        body = change.model_dump(mode="json", exclude_none=True)
        response = await self._request("PATCH", f"/v1/shows/{show_id}", json=body)
        return ShowView.model_validate_json(response.content)

    async def remove_owner_email(self, show_id: str) -> ShowView:
        """The show without an owner's address (and so without `podcast:locked` in its feed)."""
        response = await self._request("PATCH", f"/v1/shows/{show_id}", json={"owner_email": None})
        return ShowView.model_validate_json(response.content)

    async def upload_artwork(self, show_id: str, image: str) -> ShowView:
        path = Path(image)
        with path.open("rb") as handle:
            response = await self._request("PUT", f"/v1/shows/{show_id}/artwork", files={"file": (path.name, handle)})
        return ShowView.model_validate_json(response.content)

    async def rotate_feed(self, show_id: str) -> ShowView:
        """A new feed URL for the show; the old one answers 404 from now on."""
        response = await self._request("POST", f"/v1/shows/{show_id}/feed-token")
        return ShowView.model_validate_json(response.content)

    async def delete_show(self, show_id: str) -> None:
        await self._request("DELETE", f"/v1/shows/{show_id}")

    async def publish_job(self, job_id: str, episode: EpisodeOptions) -> JobView:
        """The job as an episode of one of the key's shows (or its episode's fields changed)."""
        response = await self._request("PUT", f"/v1/jobs/{job_id}/episode", json=episode.model_dump(mode="json"))
        return JobView.model_validate_json(response.content)

    async def unpublish_job(self, job_id: str) -> JobView:
        response = await self._request("DELETE", f"/v1/jobs/{job_id}/episode")
        return JobView.model_validate_json(response.content)

    # --- admin ------------------------------------------------------------------------------------------

    async def admin_jobs(self, state: str | None = None, limit: int = 100) -> list[JobView]:
        params: dict[str, str | int] = {"limit": limit}
        if state:
            params["state"] = state
        response = await self._request("GET", "/v1/admin/jobs", params=params)
        return JobList.model_validate_json(response.content).jobs

    async def admin_workers(self) -> WorkerList:
        response = await self._request("GET", "/v1/admin/workers")
        return WorkerList.model_validate_json(response.content)

    async def metrics(self) -> str:
        """The api's Prometheus text (`/metrics`, admin keys only)."""
        return (await self._request("GET", "/metrics")).text

    async def admin_queues(self) -> list[QueueDepth]:
        response = await self._request("GET", "/v1/admin/queues")
        return QueueReport.model_validate_json(response.content).queues

    async def admin_usage(self) -> list[UsageView]:
        response = await self._request("GET", "/v1/admin/usage")
        return UsageList.model_validate_json(response.content).keys

    async def admin_cancel(self, job_id: str) -> JobView:
        response = await self._request("POST", f"/v1/admin/jobs/{job_id}/cancel")
        return JobView.model_validate_json(response.content)

    async def admin_retry(self, job_id: str) -> JobView:
        response = await self._request("POST", f"/v1/admin/jobs/{job_id}/retry")
        return JobView.model_validate_json(response.content)

    async def admin_set_priority(self, job_id: str, priority: int) -> JobView:
        response = await self._request("POST", f"/v1/admin/jobs/{job_id}/priority", json={"priority": priority})
        return JobView.model_validate_json(response.content)


def _change(text: str | None) -> dict[str, str]:
    """A regeneration's body: new words when given, else none (a new take of the same words)."""
    return {"text": text} if text is not None else {}


def _raise_for_problem(response: httpx.Response) -> None:
    """Turn an error response into a StudioApiError: the api's `detail`, with its fields and lines if any."""
    if not response.is_error:
        return
    try:
        detail = response.json().get("detail")
    except (json.JSONDecodeError, AttributeError, UnicodeDecodeError):
        detail = None
    if isinstance(detail, list):
        problems = tuple(_problem(item) for item in detail if isinstance(item, dict))
        message = "; ".join(problem.message for problem in problems) or response.reason_phrase
        raise StudioApiError(message, response.status_code, problems)
    if isinstance(detail, str) and detail:
        raise StudioApiError(detail, response.status_code)
    raise StudioApiError(f"the api answered {response.status_code} {response.reason_phrase}", response.status_code)


def _problem(item: dict[str, Any]) -> FieldProblem:
    line = item.get("line")
    return FieldProblem(
        field=str(item.get("field") or ""),
        message=str(item.get("msg") or "invalid value"),
        line=line if isinstance(line, int) else None,
    )

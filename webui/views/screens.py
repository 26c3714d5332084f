"""What several screens share: the components a job touches across the studio, and following a job.

Generate follows the job it submitted, History follows one it reopens, Listen follows a turn being
regenerated; each ends on the Listen screen showing the finished episode.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gradio as gr

from api.schemas import JobView
from core.job_states import JobState
from webui.api_client import StudioApiError
from webui.buttons import button_hidden, button_shown
from webui.context import StudioContext
from webui.episodes import fetch_episode, fetch_takes
from webui.follow import JobSnapshot, ProgressFigures, follow_job
from webui.render import (
    EMPTY_EPISODE_HTML,
    downloads_html,
    episode_html,
    field_error,
    job_progress_html,
    live_parts_html,
    notice,
    takes_html,
)
from webui.waveform import read_waveform, waveform_source

if TYPE_CHECKING:
    from webui.views.cast import CastView
    from webui.views.finish import FinishView
    from webui.views.generate import GenerateView
    from webui.views.write import WriteView


IN_FLIGHT = frozenset({JobState.QUEUED, JobState.RUNNING})


def in_flight_ids(jobs: Sequence[JobView]) -> list[str]:
    """The ids of the jobs that can still be cancelled."""
    return [job.id for job in jobs if job.state in IN_FLIGHT]


def cancel_button(button: gr.Button, job_id: str | None, cancellable: Sequence[str]) -> gr.Button:
    """Cancel (`button`) is offered only for a job in flight: on a finished one it would have nothing to stop."""
    return button_shown(button, job_id in cancellable)


def as_listed(job: JobView, jobs: Sequence[JobView]) -> JobView:
    """`job` as the listing fetched after acting on it shows it, so the notice and the table agree on its state."""
    return next((listed for listed in jobs if listed.id == job.id), job)


@dataclass(frozen=True)
class Screens:
    tabs: gr.Tabs
    key: gr.Textbox
    write: WriteView
    cast: CastView
    generate: GenerateView
    finish: FinishView


def listen_components(finish: FinishView) -> list[Any]:
    """What showing an episode (`show_episode`, `forget_jobs`) may change on Listen: the outputs of every event
    that ends there."""
    return [
        finish.episode, finish.downloads, finish.turn, finish.problem, finish.plan, finish.confirm, finish.cancel,
        finish.status, finish.takes, finish.keep_new, finish.keep_previous, finish.job, finish.pending,
    ]  # fmt: skip


def forget_jobs(screens: Screens) -> dict[Any, Any]:
    """Generate and Listen as before any job: what a key was shown is not left for the next key to see."""
    generate = screens.generate
    return {
        generate.progress: "", generate.segments: "", generate.job: None, generate.problem: "",
        generate.cancel: button_hidden(generate.cancel), screens.finish.new_text: "",
    } | forget_episode(screens)  # fmt: skip


def forget_episode(screens: Screens) -> dict[Any, Any]:
    """Listen as before any job (`listen_components`: its player, files, turns, takes and what it said)."""
    finish = screens.finish
    return {
        finish.episode: EMPTY_EPISODE_HTML, finish.downloads: "", finish.turn: gr.update(choices=[], value=None),
        finish.problem: "", finish.plan: "", finish.status: "", finish.takes: "", finish.job: None,
        finish.pending: None,
    } | {button: button_hidden(button) for button in (finish.confirm, finish.cancel, finish.keep_new,
                                                        finish.keep_previous)}  # fmt: skip


def ended_job_shown(screens: Screens, job: JobView) -> dict[Any, Any]:
    """Generate showing how `job` ended, as the job the page follows: kept with the drafts (`wire_kept_work`), so a
    reload brings it back, whichever screen it was opened from."""
    generate = screens.generate
    return {
        generate.job: job.id, generate.progress: job_progress_html(JobSnapshot(job, ProgressFigures.of_job(job))),
        generate.segments: "", generate.cancel: button_hidden(generate.cancel),
    }  # fmt: skip


async def show_episode(
    screens: Screens, context: StudioContext, key: str | None, job: JobView, focus_turn: int | None = None
) -> dict[Any, Any]:
    """The Listen screen for a done job (playing from `focus_turn` when given); for any other, where it stands."""
    finish = screens.finish
    if job.state != JobState.DONE or job.outputs is None:
        return {finish.problem: field_error(f"this job is {job.state}; its episode appears here when it is done")}
    try:
        episode = await fetch_episode(context.api(key), context.files, job)
        takes = await fetch_takes(context.api(key), context.files, job)
    except StudioApiError as error:
        return {finish.problem: field_error(error.message)}
    waveform = await asyncio.to_thread(read_waveform, waveform_source(episode.audio))  # a long one: ~1 s of CPU
    # A long turn cut into pieces is one turn to regenerate: listed once, by its first piece.
    turns = {int(turn["index"]): turn for turn in reversed(episode.chapters_data.get("turns", []))}
    removed = job.intermediates_removed_at
    url = context.files.url
    return {
        finish.problem: "",
        finish.status: ""
        if removed is None
        else notice(f"Its segments were removed on {removed:%Y-%m-%d}: its turns can no longer be regenerated."),
        finish.job: job.id,
        finish.plan: "",
        finish.confirm: button_hidden(finish.confirm),
        finish.cancel: button_hidden(finish.cancel),
        finish.pending: None,
        finish.takes: takes_html([(pair.segment, url(pair.previous), url(pair.new)) for pair in takes]),
        finish.keep_new: button_shown(finish.keep_new, bool(takes)),
        finish.keep_previous: button_shown(finish.keep_previous, bool(takes)),
        finish.episode: episode_html(job, url(episode.playable), episode.chapters_data, waveform, focus_turn),
        finish.downloads: downloads_html([(path.name, url(path), path.stat().st_size) for path in episode.all]),
        finish.turn: gr.update(
            choices=[(f"{n + 1} · {turn['speaker']}: {turn['text'][:60]}", n) for n, turn in sorted(turns.items())],
            value=focus_turn,
        ),
    }


async def follow_updates(
    screens: Screens,
    context: StudioContext,
    key: str | None,
    job_id: str,
    *,
    page: str | None = None,
    regenerating_turn: int | None = None,
) -> AsyncIterator[dict[Any, Any]]:
    """Progress (with the audio made so far to listen to, each part labelled with who speaks and what) on
    Generate, or, for a regenerated turn, on Listen; then the Listen screen showing the episode.

    `page` (the Gradio session) owns the live parts' folder: the one of a job it followed before goes now, and
    that follow, on Generate or on History's behalf, stops at its next event, so a page shows one job's progress.
    """
    generate, finish = screens.generate, screens.finish
    regenerating = regenerating_turn is not None
    folders = context.live_folders
    live_folder = None if regenerating or page is None else folders.claim(page, context.files.job_folder(job_id))
    try:
        async for snapshot in follow_job(context.api(key), context.files, job_id, live_folder=live_folder):
            if live_folder is not None and not live_folder.is_dir():  # the page follows another job, or closed
                # Gradio hands the page a generator's last output again when it ends: one that skips changes nothing,
                # where the last snapshot would cover what the page shows now.
                yield {generate.progress: gr.skip()}
                return
            if regenerating:
                yield {finish.status: job_progress_html(snapshot)}
            else:
                yield {
                    generate.progress: job_progress_html(snapshot),
                    generate.segments: live_parts_html(snapshot.parts, final=snapshot.is_final),
                    generate.job: job_id,
                    # only while there is one to cancel
                    generate.cancel: button_shown(generate.cancel, not snapshot.is_final),
                }
            if snapshot.job.state == JobState.DONE:
                shown = await show_episode(screens, context, key, snapshot.job, regenerating_turn)
                yield shown | {screens.tabs: gr.Tabs(selected="finish")}
    except StudioApiError as error:
        yield {(finish.problem if regenerating else generate.problem): field_error(error.message)}

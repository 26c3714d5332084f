"""What several screens share: the components a job touches across the studio, and following a job.

Generate follows the job it submitted, History follows one it reopens, Listen follows a turn being
regenerated; each ends on the Listen screen showing the finished episode.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gradio as gr

from api.schemas import JobView
from webui.api_client import StudioApiError
from webui.context import StudioContext
from webui.episodes import fetch_episode
from webui.follow import follow_job
from webui.render import episode_html, field_error, job_progress_html, notice, segments_html

if TYPE_CHECKING:
    from webui.views.cast import CastView
    from webui.views.finish import FinishView
    from webui.views.generate import GenerateView
    from webui.views.write import WriteView


@dataclass(frozen=True)
class Screens:
    tabs: gr.Tabs
    key: gr.Textbox
    write: WriteView
    cast: CastView
    generate: GenerateView
    finish: FinishView


async def show_episode(
    screens: Screens, context: StudioContext, key: str | None, job: JobView, focus_turn: int | None = None
) -> dict[Any, Any]:
    """The Listen screen for a done job (playing from `focus_turn` when given); for any other, where it stands."""
    finish = screens.finish
    if job.state != "done" or job.outputs is None:
        return {finish.problem: field_error(f"this job is {job.state}; its episode appears here when it is done")}
    try:
        episode = await fetch_episode(context.api(key), context.files, job)
    except StudioApiError as error:
        return {finish.problem: field_error(error.message)}
    # A long turn cut into pieces is one turn to regenerate: listed once, by its first piece.
    turns = {int(turn["index"]): turn for turn in reversed(episode.chapters_data.get("turns", []))}
    removed = job.intermediates_removed_at
    return {
        finish.problem: "",
        finish.status: ""
        if removed is None
        else notice(f"Its segments were removed on {removed:%Y-%m-%d}: its turns can no longer be regenerated."),
        finish.job: job.id,
        finish.episode: episode_html(job, context.files.url(episode.playable), episode.chapters_data, focus_turn),
        finish.downloads: [str(path) for path in episode.all],
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
    regenerating_turn: int | None = None,
) -> AsyncIterator[dict[Any, Any]]:
    """Progress (with finished segments to listen to) on Generate, or, for a regenerated turn, on Listen;
    then the Listen screen showing the episode."""
    generate, finish = screens.generate, screens.finish
    regenerating = regenerating_turn is not None
    try:
        async for snapshot in follow_job(context.api(key), context.files, job_id, fetch_segments=not regenerating):
            if regenerating:
                yield {finish.status: job_progress_html(snapshot)}
            else:
                yield {
                    generate.progress: job_progress_html(snapshot),
                    generate.segments: segments_html(snapshot.segments),
                    generate.job: job_id,
                    generate.cancel: gr.Button(visible=not snapshot.is_final),  # only while there is one to cancel
                }
            if snapshot.job.state == "done":
                shown = await show_episode(screens, context, key, snapshot.job, regenerating_turn)
                yield shown | {screens.tabs: gr.Tabs(selected="finish")}
    except StudioApiError as error:
        yield {(finish.problem if regenerating else generate.problem): field_error(error.message)}

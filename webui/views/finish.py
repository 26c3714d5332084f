"""Listen: play the episode with its transcript following along; regenerate one turn and hear the change;
compare the new take with the earlier one and keep either; download the audio, the transcripts and the chapters.

Before a regeneration starts the api is asked what it would do: in `whole` mode a segment holds several turns,
all spoken anew, so the listener sees them and about how long it takes, and confirms.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

import gradio as gr

from api.schemas import RegenerationPlan
from core.job_states import JobState
from webui.api_client import StudioApiError
from webui.assets import EPISODE_PLAYER_JS
from webui.buttons import button_hidden, button_shown
from webui.context import StudioContext
from webui.render import EMPTY_EPISODE_HTML, field_error, notice, regeneration_plan_html
from webui.views.screens import Screens, follow_updates, forget_episode, listen_components, show_episode


@dataclass(frozen=True)
class FinishView:
    episode: gr.HTML
    turn: gr.Dropdown
    new_text: gr.Textbox
    regenerate: gr.Button
    problem: gr.HTML
    plan: gr.HTML  # what a regeneration will speak anew, to confirm
    confirm: gr.Button
    cancel: gr.Button
    status: gr.HTML  # a regeneration's progress
    takes: gr.HTML  # after a regeneration: each segment's earlier and new take
    keep_new: gr.Button
    keep_previous: gr.Button
    downloads: gr.HTML  # links to the episode's files (`downloads_html`)
    job: gr.State  # id of the job shown
    pending: gr.State  # the regeneration waiting for Confirm: {"turn": int, "text": str | None}
    redraw: gr.Button  # hidden: pressed by the page when Gradio left the episode's box blank (PAGE_HEAD)


def build_finish() -> FinishView:
    episode = gr.HTML(
        EMPTY_EPISODE_HTML,
        js_on_load=EPISODE_PLAYER_JS,
        elem_id="episode",
    )
    with gr.Row(equal_height=False):
        turn = gr.Dropdown(choices=[], value=None, label="Turn", scale=2, min_width=220, elem_id="regenerate-turn")
        new_text = gr.Textbox(
            label="New words (optional: empty keeps the text, with a new take)",
            scale=3,
            min_width=220,
            elem_id="regenerate-text",
        )
    regenerate = gr.Button("Regenerate this turn", size="sm", elem_id="regenerate")
    # What a regeneration says and asks: empty until one is asked for, and then taking no room (`STUDIO_CSS`)
    with gr.Column(elem_id="regeneration-talk"):
        problem = gr.HTML(elem_id="finish-problem")
        plan = gr.HTML(elem_id="regenerate-plan")
        with gr.Row():
            confirm = gr.Button("Confirm", variant="primary", size="sm", visible=False, elem_id="regenerate-confirm")
            cancel = gr.Button("Cancel", size="sm", visible=False, elem_id="regenerate-cancel")
        status = gr.HTML(elem_id="regenerate-status")
        takes = gr.HTML(elem_id="takes")
        with gr.Row():
            keep_new = gr.Button("Keep the new take", size="sm", visible=False, elem_id="keep-new")
            keep_previous = gr.Button("Keep the earlier take", size="sm", visible=False, elem_id="keep-previous")
    downloads = gr.HTML(elem_id="downloads")
    redraw = gr.Button("Draw the episode again", elem_id="episode-redraw")
    return FinishView(
        episode, turn, new_text, regenerate, problem, plan, confirm, cancel, status, takes, keep_new, keep_previous,
        downloads, gr.State(None), gr.State(None), redraw,
    )  # fmt: skip


def needs_confirmation(plan: RegenerationPlan, mode: str) -> bool:
    """Whether the listener confirms first: in `whole` mode, or when more than the picked turn is spoken anew."""
    return mode == "whole" or [turn.index for turn in plan.turns] != [plan.turn]


def plan_closed(finish: FinishView) -> dict[Any, Any]:
    """No regeneration waits for Confirm."""
    return {finish.plan: "", finish.confirm: button_hidden(finish.confirm), finish.cancel: button_hidden(finish.cancel),
            finish.pending: None}  # fmt: skip


def wire_finish(screens: Screens, context: StudioContext) -> None:
    finish = screens.finish

    async def redraw(key: str | None, job_id: str | None) -> dict[Any, Any]:
        """Listen drawn again as it should be: the episode of the job shown, or the empty box."""
        if job_id is None:
            return forget_episode(screens)
        try:
            job = await context.api(key).job(job_id)
        except StudioApiError as error:
            return {finish.problem: field_error(error.message)}
        return await show_episode(screens, context, key, job)

    finish.redraw.click(
        redraw, inputs=[screens.key, finish.job], outputs=listen_components(finish), show_progress="hidden"
    )

    async def start(key: str, job_id: str, turn: int, text: str | None) -> AsyncIterator[dict[Any, Any]]:
        """Regenerate, then follow the job until the episode is assembled again and show it."""
        try:
            regeneration = await context.api(key).regenerate_turn(job_id, turn, text)
        except StudioApiError as error:
            yield {finish.problem: field_error(error.message)}
            return
        yield {
            finish.problem: notice(f"Regenerating turn {turn + 1} ({regeneration.speaker}): {regeneration.text}"),
            finish.new_text: "",
        }
        async for update in follow_updates(screens, context, key, job_id, regenerating_turn=turn):
            yield update

    async def ask(key: str, job_id: str | None, turn: int | None, text: str) -> AsyncIterator[dict[Any, Any]]:
        """Ask the api what the regeneration would do; start it at once unless the listener should confirm."""
        if job_id is None or turn is None:
            yield {finish.problem: field_error("pick a turn of a finished episode first")}
            return
        api, words = context.api(key), (text or "").strip() or None
        try:
            plan = await api.regeneration_plan(job_id, int(turn), words)
            job = await api.job(job_id)
        except StudioApiError as error:
            yield plan_closed(finish) | {finish.problem: field_error(error.message)}
            return
        if not needs_confirmation(plan, job.mode):
            async for update in start(key, job_id, int(turn), words):
                yield update
            return
        yield {
            finish.problem: "", finish.plan: regeneration_plan_html(plan), finish.confirm: button_shown(finish.confirm),
            finish.cancel: button_shown(finish.cancel), finish.pending: {"turn": int(turn), "text": words},
        }  # fmt: skip

    async def confirm(key: str, job_id: str | None, pending: dict[str, Any] | None) -> AsyncIterator[dict[Any, Any]]:
        """Start the regeneration the plan shown was for (not what the boxes hold now)."""
        yield plan_closed(finish)
        if job_id is not None and pending is not None:
            async for update in start(key, job_id, pending["turn"], pending["text"]):
                yield update

    outputs = [screens.tabs, finish.new_text, *listen_components(finish)]
    finish.regenerate.click(
        ask,
        inputs=[screens.key, finish.job, finish.turn, finish.new_text],
        outputs=outputs,
        show_progress="hidden",
    )
    finish.confirm.click(
        confirm, inputs=[screens.key, finish.job, finish.pending], outputs=outputs, show_progress="hidden"
    )
    finish.cancel.click(lambda: plan_closed(finish), outputs=outputs, show_progress="hidden")
    _wire_takes(screens, context, outputs)


def _wire_takes(screens: Screens, context: StudioContext, outputs: list[Any]) -> None:
    """Keep the new take (the earlier one goes) or the earlier one (the episode is assembled again: followed)."""
    finish = screens.finish

    async def keep(
        choice: Literal["new", "previous"], key: str, job_id: str | None, turn: int | None
    ) -> AsyncIterator[dict[Any, Any]]:
        if job_id is None:
            return
        try:
            job = await context.api(key).keep_take(job_id, choice)
        except StudioApiError as error:
            yield {finish.problem: field_error(error.message)}
            return
        if job.state == JobState.DONE:
            yield await show_episode(screens, context, key, job, turn) | {finish.problem: notice("Kept the new take.")}
            return
        yield {finish.takes: "", finish.keep_new: button_hidden(finish.keep_new),
               finish.keep_previous: button_hidden(finish.keep_previous),
               finish.problem: notice("Putting the earlier take back: the episode is assembled again.")}  # fmt: skip
        # followed as a regeneration is, playing from the turn picked
        async for update in follow_updates(screens, context, key, job_id, regenerating_turn=turn or 0):
            yield update

    async def keep_new(key: str, job_id: str | None, turn: int | None) -> AsyncIterator[dict[Any, Any]]:
        async for update in keep("new", key, job_id, turn):
            yield update

    async def keep_previous(key: str, job_id: str | None, turn: int | None) -> AsyncIterator[dict[Any, Any]]:
        async for update in keep("previous", key, job_id, turn):
            yield update

    inputs = [screens.key, finish.job, finish.turn]
    finish.keep_new.click(keep_new, inputs=inputs, outputs=outputs, show_progress="hidden")
    finish.keep_previous.click(keep_previous, inputs=inputs, outputs=outputs, show_progress="hidden")

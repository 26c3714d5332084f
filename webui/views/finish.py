"""Listen: play the episode with its transcript following along; regenerate one turn and hear the change;
download the audio, the transcripts and the chapters."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import gradio as gr

from webui.api_client import StudioApiError
from webui.assets import EPISODE_PLAYER_JS
from webui.context import StudioContext
from webui.render import EMPTY_EPISODE_HTML, field_error, notice
from webui.views.screens import Screens, follow_updates


@dataclass(frozen=True)
class FinishView:
    episode: gr.HTML
    turn: gr.Dropdown
    new_text: gr.Textbox
    regenerate: gr.Button
    problem: gr.HTML
    status: gr.HTML  # a regeneration's progress
    downloads: gr.File
    job: gr.State  # id of the job shown


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
    problem = gr.HTML(elem_id="finish-problem")
    status = gr.HTML(elem_id="regenerate-status")
    downloads = gr.File(label="Downloads", file_count="multiple", interactive=False, elem_id="downloads")
    return FinishView(episode, turn, new_text, regenerate, problem, status, downloads, gr.State(None))


def wire_finish(screens: Screens, context: StudioContext) -> None:
    finish = screens.finish

    async def regenerate(key: str, job_id: str | None, turn: int | None, text: str) -> AsyncIterator[dict[Any, Any]]:
        if job_id is None or turn is None:
            yield {finish.problem: field_error("pick a turn of a finished episode first")}
            return
        try:
            regeneration = await context.api(key).regenerate_turn(job_id, int(turn), (text or "").strip() or None)
        except StudioApiError as error:
            yield {finish.problem: field_error(error.message)}
            return
        yield {
            finish.problem: notice(f"Regenerating turn {turn + 1} ({regeneration.speaker}): {regeneration.text}"),
            finish.new_text: "",
        }
        async for update in follow_updates(screens, context, key, job_id, regenerating_turn=int(turn)):
            yield update

    outputs = [screens.tabs, finish.episode, finish.turn, finish.new_text, finish.problem, finish.status,
               finish.downloads, finish.job]  # fmt: skip
    finish.regenerate.click(
        regenerate,
        inputs=[screens.key, finish.job, finish.turn, finish.new_text],
        outputs=outputs,
        show_progress="hidden",
    )

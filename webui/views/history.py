"""History: the caller's jobs with their state; a click on a row opens that job (its episode, or its progress);
cancel one, or delete one that has ended."""

from __future__ import annotations

import functools
import secrets
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import gradio as gr
from gradio.events import Dependency

from api.schemas import JobView
from core.job_states import JobState
from webui.api_client import StudioApiError
from webui.buttons import button_hidden
from webui.context import StudioContext
from webui.render import (
    HISTORY_COLUMNS,
    cancel_notice,
    confirmed,
    deleted_job_html,
    field_error,
    history_rows,
    job_choice_label,
    question,
)
from webui.views.screens import (
    IN_FLIGHT,
    Screens,
    as_listed,
    cancel_button,
    ended_job_shown,
    follow_updates,
    forget_episode,
    in_flight_ids,
    listen_components,
    show_episode,
)


@dataclass(frozen=True)
class HistoryView:
    tab: gr.Tab
    refresh: gr.Button
    empty: gr.HTML  # shown instead of the table while there are no jobs
    table: gr.Dataframe  # a click on a row opens its job
    job_ids: gr.State  # the table's job ids, row by row
    in_flight: gr.State  # the ids of its jobs still queued or running: those Cancel is offered for
    opened: gr.State  # the job of the row clicked last, and that click's token
    job: gr.Dropdown  # the job to cancel or delete (a row's click picks its job here too)
    cancel: gr.Button
    delete: gr.Button
    confirm: gr.Group  # shown by Delete: what goes, and the buttons that delete or keep it
    asked: gr.State  # the job the shown question is about (None: no question shown)
    confirm_text: gr.HTML
    confirm_delete: gr.Button
    keep: gr.Button
    problem: gr.HTML

    @property
    def listing(self) -> list[Any]:
        """What `history_updates` changes."""
        return [self.empty, self.table, self.job_ids, self.in_flight, self.job]


def build_history(tab: gr.Tab) -> HistoryView:
    refresh = gr.Button("Refresh", size="sm", elem_id="history-refresh")
    empty = gr.HTML('<p class="vx-empty">No jobs yet.</p>', elem_id="history-empty")
    table = gr.Dataframe(
        headers=HISTORY_COLUMNS,
        interactive=False,
        visible=False,
        label="Your jobs: click one to open it",
        wrap=True,
        elem_id="history-table",
    )
    with gr.Row(equal_height=False):
        job = gr.Dropdown(choices=[], value=None, label="Job", scale=3, min_width=220, elem_id="history-job")
        cancel = gr.Button(
            "Cancel job", size="sm", variant="stop", scale=1, min_width=80, visible=False, elem_id="history-cancel"
        )
        delete = gr.Button("Delete…", size="sm", scale=1, min_width=80, elem_id="history-delete")
    with gr.Group(visible=False, elem_id="history-confirm") as confirm:
        confirm_text = gr.HTML(elem_id="history-confirm-text")
        with gr.Row():
            confirm_delete = gr.Button("Delete for good", size="sm", variant="stop", elem_id="history-confirm-delete")
            keep = gr.Button("Keep it", size="sm", elem_id="history-keep")
    problem = gr.HTML(elem_id="history-problem")
    return HistoryView(
        tab, refresh, empty, table, gr.State([]), gr.State([]), gr.State(None), job, cancel, delete, confirm,
        gr.State(None), confirm_text, confirm_delete, keep, problem,
    )  # fmt: skip


def history_updates(view: HistoryView, jobs: list[JobView], *, unpick: bool = False) -> dict[Any, Any]:
    """The table and the job picker for `jobs`; `unpick` also clears the picked job (it was just deleted)."""
    choices = [(job_choice_label(job), job.id) for job in jobs]
    return {
        view.empty: gr.update(visible=not jobs),
        view.table: gr.update(value=history_rows(jobs), visible=bool(jobs)),
        view.job_ids: [job.id for job in jobs],
        view.in_flight: in_flight_ids(jobs),
        view.job: gr.update(choices=choices, value=None) if unpick else gr.update(choices=choices),
    }


def clicked_job(job_ids: Sequence[str], event: gr.SelectData) -> str | None:
    """The id of the job on the clicked row (Gradio gives the row in the data's own order, sorted or not)."""
    row = event.index[0] if isinstance(event.index, (list, tuple)) else None
    return job_ids[row] if isinstance(row, int) and 0 <= row < len(job_ids) else None


def wire_history(view: HistoryView, screens: Screens, context: StudioContext) -> Dependency:
    """Refresh, cancel, delete and open; returns the event that follows an opened job (a new key stops it)."""

    generate, finish = screens.generate, screens.finish

    async def refresh(key: str) -> dict[Any, Any]:
        try:
            jobs = await context.api(key).jobs()
        except StudioApiError as error:
            return {view.problem: field_error(error.message)}
        return history_updates(view, jobs) | {view.problem: ""}

    for trigger in (view.refresh.click, view.tab.select):
        trigger(refresh, inputs=screens.key, outputs=[*view.listing, view.problem])

    async def cancel(key: str, job_id: str | None) -> dict[Any, Any]:
        if not job_id:
            return {view.problem: field_error("pick a job to cancel")}
        api = context.api(key)
        try:
            job = await api.cancel_job(job_id)
            jobs = await api.jobs()
        except StudioApiError as error:
            return {view.problem: field_error(error.message)}
        return history_updates(view, jobs) | {view.problem: confirmed(cancel_notice(as_listed(job, jobs)))}

    view.cancel.click(cancel, inputs=[screens.key, view.job], outputs=[*view.listing, view.problem])
    for change in (view.job.change, view.in_flight.change):
        change(functools.partial(cancel_button, view.cancel), inputs=[view.job, view.in_flight], outputs=view.cancel)

    async def ask_delete(key: str, job_id: str | None) -> dict[Any, Any]:
        """Say what a delete removes before doing it; a job still in flight is refused here, as the api would."""
        unasked = {view.confirm: gr.Group(visible=False), view.asked: None}
        if not job_id:
            return unasked | {view.problem: field_error("pick a job to delete")}
        try:
            job = await context.api(key).job(job_id)
        except StudioApiError as error:
            return unasked | {view.problem: field_error(error.message)}
        if job.state in IN_FLIGHT:
            message = f"“{job.title or 'Untitled'}” is {job.state}; cancel it first, then delete it."
            return unasked | {view.problem: field_error(message)}
        title = job.title or "Untitled"
        asked = (
            f"Delete “{title}” ({job.state}) with its episode, transcripts, segments and inputs? It cannot be undone."
        )
        shown = {view.confirm: gr.Group(visible=True), view.asked: job_id}
        return shown | {view.confirm_text: question(asked), view.problem: ""}

    async def delete(
        key: str, job_id: str | None, on_generate: str | None, on_listen: str | None, request: gr.Request
    ) -> dict[Any, Any]:
        """Delete the job; where Generate or Listen showed it, they say it was deleted instead of how it ended."""
        hidden = {view.confirm: gr.Group(visible=False), view.asked: None}
        if not job_id:
            return hidden | {view.problem: field_error("pick a job to delete")}
        api = context.api(key)
        try:
            title = (await api.job(job_id)).title
            await api.delete_job(job_id)
            jobs = await api.jobs()
        except StudioApiError as error:
            return hidden | {view.problem: field_error(error.message)}
        updates = hidden | history_updates(view, jobs, unpick=True) | {view.problem: confirmed("Deleted.")}
        if job_id == on_generate:
            context.live_folders.release(request.session_hash)  # its live parts go with it
            updates |= {
                generate.progress: deleted_job_html(title, job_id), generate.segments: "", generate.job: None,
                generate.cancel: button_hidden(generate.cancel),
            }  # fmt: skip
        if job_id == on_listen:
            updates |= forget_episode(screens) | {finish.episode: deleted_job_html(title, job_id)}
        return updates

    confirm_outputs = [view.confirm, view.asked, view.confirm_text, view.problem]
    view.delete.click(ask_delete, inputs=[screens.key, view.job], outputs=confirm_outputs)
    # Another job picked: the question, about the one before, goes. A change event of the same pick arriving late (a
    # busy server) leaves it.
    view.job.change(
        lambda picked, asked: gr.Group(visible=asked is not None and picked == asked),
        inputs=[view.job, view.asked],
        outputs=view.confirm,
    )
    view.keep.click(lambda: (gr.Group(visible=False), None, ""), outputs=[view.confirm, view.asked, view.problem])
    view.confirm_delete.click(
        delete,
        inputs=[screens.key, view.job, generate.job, finish.job],
        outputs=[
            view.confirm, view.asked, *view.listing, view.problem, generate.progress, generate.segments, generate.job,
            generate.cancel, *listen_components(finish),
        ],
    )  # fmt: skip

    open_outputs = [
        screens.tabs, view.problem, view.job, generate.progress, generate.segments, generate.job, generate.cancel,
        generate.problem, *listen_components(finish),
    ]  # fmt: skip

    async def open_job(key: str, opened: dict[str, str] | None, request: gr.Request) -> AsyncIterator[dict[Any, Any]]:
        """The clicked row's job: a done one on Listen; one in flight on Generate, followed; a failed or cancelled
        one's state on Generate. The row's job is also picked for Cancel and Delete."""
        if not opened:
            return
        job_id = opened["job"]
        try:
            job = await context.api(key).job(job_id)
        except StudioApiError as error:
            yield {view.problem: field_error(error.message)}
            return
        picked = {view.job: gr.update(value=job_id), view.problem: ""}
        if job.state == JobState.DONE:
            shown = await show_episode(screens, context, key, job) | ended_job_shown(screens, job)
            yield shown | picked | {screens.tabs: gr.Tabs(selected="finish")}
            return
        yield picked | {screens.tabs: gr.Tabs(selected="generate"), generate.problem: ""}
        async for update in follow_updates(screens, context, key, job_id, page=request.session_hash):
            yield update

    # "multiple": each click's job is opened even while the one before is still followed (it is cancelled below)
    following = view.opened.change(
        open_job,
        inputs=[screens.key, view.opened],
        outputs=open_outputs,
        show_progress="hidden",
        trigger_mode="multiple",
    )

    def pick_row(job_ids: list[str], event: gr.SelectData) -> dict[Any, Any]:
        """Stop following the job opened before (`cancels`), then open the clicked one: a new value every
        click, so clicking the same row again opens it again."""
        job_id = clicked_job(job_ids, event)
        if job_id is None:
            return {view.problem: field_error("that row is no longer in the list: refresh and click again")}
        return {view.opened: {"job": job_id, "click": secrets.token_hex(4)}}

    view.table.select(pick_row, inputs=view.job_ids, outputs=[view.opened, view.problem], cancels=[following])
    return following

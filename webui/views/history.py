"""History: the caller's jobs with their state; open one (its episode, or its progress), cancel it, or delete it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import gradio as gr

from api.schemas import JobView
from webui.api_client import StudioApiError
from webui.context import StudioContext
from webui.render import cancel_notice, field_error, job_choice_label, jobs_table_html, notice
from webui.views.screens import Screens, follow_updates, show_episode


@dataclass(frozen=True)
class HistoryView:
    tab: gr.Tab
    refresh: gr.Button
    table: gr.HTML
    job: gr.Dropdown
    open: gr.Button
    cancel: gr.Button
    delete: gr.Button
    confirm: gr.Group  # shown by Delete: what goes, and the buttons that delete or keep it
    confirm_text: gr.HTML
    confirm_delete: gr.Button
    keep: gr.Button
    problem: gr.HTML


def build_history(tab: gr.Tab) -> HistoryView:
    refresh = gr.Button("Refresh", size="sm", elem_id="history-refresh")
    table = gr.HTML(jobs_table_html([], admin=False), elem_id="history-table")
    with gr.Row(equal_height=False):
        job = gr.Dropdown(choices=[], value=None, label="Job", scale=3, min_width=220, elem_id="history-job")
        open_job = gr.Button("Open", size="sm", scale=1, min_width=80, elem_id="history-open")
        cancel = gr.Button("Cancel job", size="sm", variant="stop", scale=1, min_width=80, elem_id="history-cancel")
        delete = gr.Button("Delete…", size="sm", scale=1, min_width=80, elem_id="history-delete")
    with gr.Group(visible=False, elem_id="history-confirm") as confirm:
        confirm_text = gr.HTML(elem_id="history-confirm-text")
        with gr.Row():
            confirm_delete = gr.Button("Delete for good", size="sm", variant="stop", elem_id="history-confirm-delete")
            keep = gr.Button("Keep it", size="sm", elem_id="history-keep")
    problem = gr.HTML(elem_id="history-problem")
    return HistoryView(
        tab, refresh, table, job, open_job, cancel, delete, confirm, confirm_text, confirm_delete, keep, problem
    )


def history_updates(view: HistoryView, jobs: list[JobView], *, unpick: bool = False) -> dict[Any, Any]:
    """The table and the job picker for `jobs`; `unpick` also clears the picked job (it was just deleted)."""
    choices = [(job_choice_label(job), job.id) for job in jobs]
    return {
        view.table: jobs_table_html(jobs, admin=False),
        view.job: gr.update(choices=choices, value=None) if unpick else gr.update(choices=choices),
    }


def wire_history(view: HistoryView, screens: Screens, context: StudioContext) -> None:
    async def refresh(key: str) -> dict[Any, Any]:
        try:
            jobs = await context.api(key).jobs()
        except StudioApiError as error:
            return {view.problem: field_error(error.message)}
        return history_updates(view, jobs) | {view.problem: ""}

    for trigger in (view.refresh.click, view.tab.select):
        trigger(refresh, inputs=screens.key, outputs=[view.table, view.job, view.problem])

    async def cancel(key: str, job_id: str | None) -> dict[Any, Any]:
        if not job_id:
            return {view.problem: field_error("pick a job to cancel")}
        api = context.api(key)
        try:
            job = await api.cancel_job(job_id)
            jobs = await api.jobs()
        except StudioApiError as error:
            return {view.problem: field_error(error.message)}
        return history_updates(view, jobs) | {view.problem: notice(cancel_notice(job))}

    view.cancel.click(cancel, inputs=[screens.key, view.job], outputs=[view.table, view.job, view.problem])

    async def ask_delete(key: str, job_id: str | None) -> dict[Any, Any]:
        """Say what a delete removes before doing it; a job still in flight is refused here, as the api would."""
        if not job_id:
            return {view.problem: field_error("pick a job to delete"), view.confirm: gr.Group(visible=False)}
        try:
            job = await context.api(key).job(job_id)
        except StudioApiError as error:
            return {view.problem: field_error(error.message), view.confirm: gr.Group(visible=False)}
        if job.state in ("queued", "running"):
            message = f"“{job.title or 'Untitled'}” is {job.state}; cancel it first, then delete it."
            return {view.problem: field_error(message), view.confirm: gr.Group(visible=False)}
        title = job.title or "Untitled"
        question = (
            f"Delete “{title}” ({job.state}) with its episode, transcripts, segments and inputs? It cannot be undone."
        )
        return {view.confirm_text: notice(question), view.confirm: gr.Group(visible=True), view.problem: ""}

    async def delete(key: str, job_id: str | None) -> dict[Any, Any]:
        hidden = {view.confirm: gr.Group(visible=False)}
        if not job_id:
            return hidden | {view.problem: field_error("pick a job to delete")}
        api = context.api(key)
        try:
            await api.delete_job(job_id)
            jobs = await api.jobs()
        except StudioApiError as error:
            return hidden | {view.problem: field_error(error.message)}
        return hidden | history_updates(view, jobs, unpick=True) | {view.problem: notice("Deleted.")}

    confirm_outputs = [view.confirm, view.confirm_text, view.problem]
    view.delete.click(ask_delete, inputs=[screens.key, view.job], outputs=confirm_outputs)
    view.job.change(lambda: gr.Group(visible=False), outputs=view.confirm)  # a question about another job
    view.keep.click(lambda: (gr.Group(visible=False), ""), outputs=[view.confirm, view.problem])
    view.confirm_delete.click(
        delete, inputs=[screens.key, view.job], outputs=[view.confirm, view.table, view.job, view.problem]
    )

    generate, finish = screens.generate, screens.finish
    open_outputs = [
        screens.tabs, view.problem, generate.progress, generate.segments, generate.job, generate.cancel,
        generate.problem, finish.episode, finish.downloads, finish.problem, finish.status, finish.turn, finish.job,
    ]  # fmt: skip

    async def open_job(key: str, job_id: str | None) -> AsyncIterator[dict[Any, Any]]:
        """A done job on Finish; one in flight on Generate, followed; a failed or cancelled one's state."""
        if not job_id:
            yield {view.problem: field_error("pick a job to open")}
            return
        try:
            job = await context.api(key).job(job_id)
        except StudioApiError as error:
            yield {view.problem: field_error(error.message)}
            return
        if job.state == "done":
            yield await show_episode(screens, context, key, job) | {
                screens.tabs: gr.Tabs(selected="finish"),
                view.problem: "",
            }
            return
        yield {screens.tabs: gr.Tabs(selected="generate"), view.problem: "", generate.problem: ""}
        async for update in follow_updates(screens, context, key, job_id):
            yield update

    view.open.click(open_job, inputs=[screens.key, view.job], outputs=open_outputs, show_progress="hidden")

"""History: the caller's jobs with their state; open one (its episode, or its progress) or cancel it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import gradio as gr

from api.schemas import JobView
from webui.api_client import StudioApiError
from webui.context import StudioContext
from webui.render import field_error, job_choice_label, jobs_table_html, notice
from webui.views.screens import Screens, follow_updates, show_episode


@dataclass(frozen=True)
class HistoryView:
    tab: gr.Tab
    refresh: gr.Button
    table: gr.HTML
    job: gr.Dropdown
    open: gr.Button
    cancel: gr.Button
    problem: gr.HTML


def build_history(tab: gr.Tab) -> HistoryView:
    refresh = gr.Button("Refresh", size="sm", elem_id="history-refresh")
    table = gr.HTML(jobs_table_html([], admin=False), elem_id="history-table")
    with gr.Row(equal_height=False):
        job = gr.Dropdown(choices=[], value=None, label="Job", scale=3, min_width=220, elem_id="history-job")
        open_job = gr.Button("Open", size="sm", scale=1, min_width=80, elem_id="history-open")
        cancel = gr.Button("Cancel job", size="sm", variant="stop", scale=1, min_width=80, elem_id="history-cancel")
    problem = gr.HTML(elem_id="history-problem")
    return HistoryView(tab, refresh, table, job, open_job, cancel, problem)


def history_updates(view: HistoryView, jobs: list[JobView]) -> dict[Any, Any]:
    return {
        view.table: jobs_table_html(jobs, admin=False),
        view.job: gr.update(choices=[(job_choice_label(job), job.id) for job in jobs]),
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
        message = "Cancelled." if job.state == "cancelled" else "Cancelling: the job stops within a step."
        return history_updates(view, jobs) | {view.problem: notice(message)}

    view.cancel.click(cancel, inputs=[screens.key, view.job], outputs=[view.table, view.job, view.problem])

    generate, finish = screens.generate, screens.finish
    open_outputs = [
        screens.tabs, view.problem, generate.progress, generate.segments, generate.job, generate.problem,
        finish.episode, finish.downloads, finish.problem, finish.status, finish.turn, finish.job,
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

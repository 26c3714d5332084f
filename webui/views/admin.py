"""Admin (admin keys only): the job controls first (pick a job; cancel, retry, re-prioritise), then the headline figures
of `/metrics`, the live workers, queue depth, each key's storage, and every job across users with state, owner and
progress; refreshed every few seconds while the page is open. The tab shows only for a key the api accepts on its
admin routes, and every action goes to those routes, so the api, not the page, decides who is an admin."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import gradio as gr

from api.schemas import JobView
from core.job_states import JobState
from webui.api_client import StudioApi, StudioApiError
from webui.buttons import button_shown
from webui.context import StudioContext
from webui.metrics_summary import summarize
from webui.render import (
    admin_jobs_table_html,
    cancel_notice,
    confirmed,
    field_error,
    job_choice_label,
    metrics_html,
    queues_html,
    usage_html,
    workers_html,
)
from webui.views.screens import as_listed, cancel_button, in_flight_ids

REFRESH_SECONDS = 5.0
RETRYABLE = (JobState.FAILED, JobState.CANCELLED)  # what the api's retry takes

STATE_FILTERS = [("All states", ""), ("Queued", "queued"), ("Running", "running"), ("Done", "done"),
                 ("Failed", "failed"), ("Cancelled", "cancelled")]  # fmt: skip


@dataclass(frozen=True)
class AdminView:
    tab: gr.Tab
    refresh: gr.Button
    timer: gr.Timer  # refreshes the screen every REFRESH_SECONDS once it was opened
    state: gr.Dropdown
    metrics: gr.HTML
    workers: gr.HTML
    queues: gr.HTML
    storage: gr.HTML
    table: gr.HTML
    job: gr.Dropdown
    in_flight: gr.State  # the ids of the listed jobs still queued or running: those Cancel is offered for
    listed: gr.State  # job id -> [state, priority] of the listed jobs: what Retry and the slider show for the pick
    cancel: gr.Button
    retry: gr.Button
    priority: gr.Slider
    set_priority: gr.Button
    problem: gr.HTML

    @property
    def listing(self) -> list[Any]:
        return [
            self.metrics, self.workers, self.queues, self.storage, self.table, self.job, self.in_flight, self.listed,
            self.problem,
        ]  # fmt: skip


def build_admin(tab: gr.Tab) -> AdminView:
    with gr.Row(equal_height=False):
        state = gr.Dropdown(
            STATE_FILTERS, value="", label="Filter by state", scale=2, min_width=160, elem_id="admin-state"
        )
        refresh = gr.Button("Refresh", size="sm", scale=1, min_width=80, elem_id="admin-refresh")
    with gr.Row(equal_height=False):
        job = gr.Dropdown(choices=[], value=None, label="Job", scale=3, min_width=220, elem_id="admin-job")
        cancel = gr.Button(
            "Cancel", size="sm", variant="stop", scale=1, min_width=80, visible=False, elem_id="admin-cancel"
        )
        retry = gr.Button("Retry", size="sm", scale=1, min_width=80, visible=False, elem_id="admin-retry")
    with gr.Row(equal_height=False):
        priority = gr.Slider(0, 9, value=5, step=1, label="Priority (9 runs first)", scale=3, elem_id="admin-priority")
        set_priority = gr.Button("Set priority", size="sm", scale=1, min_width=80, elem_id="admin-set-priority")
    problem = gr.HTML(elem_id="admin-problem")
    metrics = gr.HTML(elem_id="admin-metrics")
    workers = gr.HTML(elem_id="admin-workers")
    queues = gr.HTML(elem_id="admin-queues")
    storage = gr.HTML(elem_id="admin-storage")
    table = gr.HTML(elem_id="admin-table")
    timer = gr.Timer(REFRESH_SECONDS, active=False)
    return AdminView(
        tab, refresh, timer, state, metrics, workers, queues, storage, table, job, gr.State([]), gr.State({}), cancel,
        retry, priority, set_priority, problem,
    )  # fmt: skip


async def admin_listing(
    view: AdminView, api: StudioApi, state: str | None, said: Callable[[list[JobView]], str] | None = None
) -> dict[Any, Any]:
    """Queue depth and the jobs (newest first, of one state or all), or why they cannot be shown; `said` gives the
    notice of an action from the jobs as listed, so the notice and the table agree."""
    try:
        queues = await api.admin_queues()
        usage = await api.admin_usage()
        jobs = await api.admin_jobs(state or None)
    except StudioApiError as error:
        return {view.problem: field_error(error.message)}
    return {
        view.metrics: await _or_why(lambda: api.metrics(), lambda text: metrics_html(summarize(text))),
        view.workers: await _or_why(lambda: api.admin_workers(), workers_html),
        view.queues: queues_html(queues),
        view.storage: usage_html(usage),
        view.table: admin_jobs_table_html(jobs),
        view.job: gr.update(choices=[(job_choice_label(job, admin=True), job.id) for job in jobs]),
        view.in_flight: in_flight_ids(jobs),
        view.listed: {job.id: [job.state, job.priority] for job in jobs},
        view.problem: confirmed(said(jobs)) if said else "",
    }


async def _or_why(fetch: Callable[[], Awaitable[Any]], shown: Callable[[Any], str]) -> str:
    """A part of the screen, or why the api cannot give it now (Redis down for the workers, say): the rest stays."""
    try:
        return shown(await fetch())
    except StudioApiError as error:
        return field_error(error.message)


def wire_admin(view: AdminView, context: StudioContext, key: gr.Textbox) -> None:
    async def refresh(api_key: str, state: str) -> dict[Any, Any]:
        return await admin_listing(view, context.api(api_key), state)

    async def tick(api_key: str, state: str) -> dict[Any, Any]:
        """The timer's refresh: what an action just said stays (until the next action, or Refresh)."""
        updates = await admin_listing(view, context.api(api_key), state)
        if set(updates) == {view.problem}:  # the listing failed: say why
            return updates
        return {component: value for component, value in updates.items() if component is not view.problem}

    for trigger in (view.refresh.click, view.tab.select, view.state.input):
        trigger(refresh, inputs=[key, view.state], outputs=view.listing, show_progress="hidden")
    view.timer.tick(tick, inputs=[key, view.state], outputs=view.listing, show_progress="hidden")
    view.tab.select(lambda: gr.Timer(active=True), outputs=view.timer)

    def action(
        run: Callable[[StudioApi, str, int], Awaitable[JobView]], done: Callable[[JobView], str]
    ) -> Callable[[str, str, str | None, float], Awaitable[dict[Any, Any]]]:
        async def act(api_key: str, state: str, job_id: str | None, priority: float) -> dict[Any, Any]:
            if not job_id:
                return {view.problem: field_error("pick a job first")}
            api = context.api(api_key)
            try:
                job = await run(api, job_id, int(priority))
            except StudioApiError as error:
                return {view.problem: field_error(error.message)}
            return await admin_listing(view, api, state, lambda jobs: done(as_listed(job, jobs)))

        return act

    inputs = [key, view.state, view.job, view.priority]
    cancel = action(lambda api, job_id, _: api.admin_cancel(job_id), cancel_notice)
    retry = action(lambda api, job_id, _: api.admin_retry(job_id), lambda job: f"Job {job.id:.8} is queued again.")
    prioritise = action(
        lambda api, job_id, priority: api.admin_set_priority(job_id, priority),
        lambda job: f"Job {job.id:.8} now has priority {job.priority}.",
    )
    view.cancel.click(cancel, inputs=inputs, outputs=view.listing)
    view.retry.click(retry, inputs=inputs, outputs=view.listing)
    view.set_priority.click(prioritise, inputs=inputs, outputs=view.listing)
    for change in (view.job.change, view.in_flight.change):
        change(functools.partial(cancel_button, view.cancel), inputs=[view.job, view.in_flight], outputs=view.cancel)

    def picked(job_id: str | None, listed: dict[str, list[Any]]) -> dict[Any, Any]:
        """Retry only for a job it can queue again; the slider at the picked job's own priority."""
        state, priority = listed.get(job_id or "", (None, None))
        updates: dict[Any, Any] = {view.retry: button_shown(view.retry, state in RETRYABLE)}
        if priority is not None:
            updates[view.priority] = priority
        return updates

    view.job.change(picked, inputs=[view.job, view.listed], outputs=[view.retry, view.priority])
    view.listed.change(
        lambda job_id, listed: picked(job_id, listed) | {view.priority: gr.skip()},
        inputs=[view.job, view.listed],
        outputs=[view.retry, view.priority],
    )

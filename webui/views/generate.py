"""Generate: mode, quality and formats; submit; queue position, progress, and listening while it generates.

Submitting checks locally what the page can (a script that parses, names, a voice for every speaker), then
posts the job and follows it. Whatever the api rejects comes back as problems naming a field; each is
shown beside that field, on its screen, and the page switches to the first screen with a problem.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
from gradio.events import Dependency
from pydantic import ValidationError

from api.schemas import GenerationParams, JobOptions, JobView
from core.audio_formats import AUDIO_FORMATS, BITRATES
from core.job_states import FINAL_STATES
from script_text.parser import Script
from webui.api_client import FieldProblem, StudioApi, StudioApiError
from webui.assets import JOB_PROGRESS_JS, SEGMENT_PLAYER_JS
from webui.buttons import button_hidden
from webui.context import StudioContext
from webui.live_audio import LiveFolders
from webui.render import confirmed, field_error, notice, question, script_error_html
from webui.script_preview import SpeakerNameError, preview_script, script_text_to_send
from webui.views.publishing import EpisodeFields, build_episode_fields, episode_options
from webui.views.screens import Screens, follow_updates, listen_components
from webui.voices import VoiceUse, recording_problem, voice_in_use

_DEFAULTS = GenerationParams()
_OPTION_FIELDS = ("settings", "formats", "kbps", "mode", "title", "queue", "priority", "episode")


@dataclass(frozen=True)
class GenerateView:
    title: gr.Textbox
    mode: gr.Radio
    formats: gr.CheckboxGroup
    kbps: dict[str, gr.Dropdown]  # format name -> its bitrate
    queue: gr.Radio  # "auto" (by length, the api's rule), "interactive" or "batch"
    priority: gr.Slider
    cfg_scale: gr.Slider
    diffusion_steps: gr.Slider
    seed: gr.Number
    settings_problem: gr.HTML
    submit: gr.Button
    cancel: gr.Button
    again: gr.Row  # "send another beside the job still generating?", asked before a second job is sent
    again_text: gr.HTML
    send_another: gr.Button
    keep_waiting: gr.Button
    problem: gr.HTML
    progress: gr.HTML
    segments: gr.HTML
    job: gr.State  # id of the job this page follows
    sent: gr.State  # id of the job this page sent last: a new one is followed (`wire_generate`)
    episode: EpisodeFields  # the show it is published in, if any


def build_generate() -> GenerateView:
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=300):
            title = gr.Textbox(label="Title", placeholder="Untitled episode", max_length=200, elem_id="title")
            mode = gr.Radio(
                [("Whole script: the best flow between speakers", "whole"), ("Turn by turn: exact timings", "turns")],
                value="whole",
                label="Mode",
                elem_id="mode",
            )
            formats = gr.CheckboxGroup(
                list(AUDIO_FORMATS), value=["wav", "mp3"], label="Audio formats", elem_id="formats"
            )
            with gr.Row():
                kbps = {
                    name: gr.Dropdown(
                        [(f"{rate} kbit/s", rate) for rate in bitrates.choices],
                        value=bitrates.default,
                        label=f"{name} bitrate",
                        elem_id=f"{name}-kbps",
                    )
                    for name, bitrates in BITRATES.items()
                }
            queue = gr.Radio(
                [("By length", "auto"), ("Interactive", "interactive"), ("Batch", "batch")],
                value="auto",
                label="Queue",
                info="by length: a short episode goes to the interactive queue, which workers take first, a long "
                "one to batch (the admin sets where short ends); a waiting job says which queue it is in",
                elem_id="queue",
            )
            priority = gr.Slider(0, 9, value=5, step=1, label="Priority", info="higher runs sooner", elem_id="priority")
            with gr.Accordion("Publish as an episode", open=False, elem_id="generate-publish"):
                episode = build_episode_fields("generate")
        with gr.Column(scale=1, min_width=300):
            cfg_scale = gr.Slider(
                1.0, 3.0, value=_DEFAULTS.cfg_scale, step=0.05, label="CFG scale",
                info="how closely speech follows the voice and text (1.3 is VibeVoice's default)", elem_id="cfg-scale",
            )  # fmt: skip
            diffusion_steps = gr.Slider(
                1, 50, value=_DEFAULTS.diffusion_steps, step=1, label="Diffusion steps",
                info="more is finer and slower (10 is VibeVoice's default)", elem_id="diffusion-steps",
            )  # fmt: skip
            seed = gr.Number(
                value=_DEFAULTS.seed, precision=0, minimum=0, maximum=2**31 - 1, label="Seed",
                info="the same seed and inputs give the same episode", elem_id="seed",
            )  # fmt: skip
    settings_problem = gr.HTML(elem_id="settings-problem")
    with gr.Row():
        submit = gr.Button("Generate", variant="primary", elem_id="generate")
        cancel = gr.Button("Cancel this job", variant="stop", visible=False, elem_id="cancel-job")
    with gr.Row(visible=False, elem_id="generate-again") as again:
        again_text = gr.HTML()
        send_another = gr.Button("Send another", variant="primary", size="sm", elem_id="send-another")
        keep_waiting = gr.Button("Keep following this one", size="sm", elem_id="keep-waiting")
    problem = gr.HTML(elem_id="generate-problem")
    progress = gr.HTML(js_on_load=JOB_PROGRESS_JS, elem_id="job-progress")
    segments = gr.HTML(js_on_load=SEGMENT_PLAYER_JS, elem_id="segments")
    return GenerateView(
        title, mode, formats, kbps, queue, priority, cfg_scale, diffusion_steps, seed, settings_problem, submit,
        cancel, again, again_text, send_another, keep_waiting, problem, progress, segments, gr.State(None),
        gr.State(None), episode,
    )  # fmt: skip


def wire_generate(screens: Screens, context: StudioContext) -> Dependency:
    """Submit and Cancel; returns the event that follows the page's job until it ends (a new key stops it).

    A page follows one job at a time, and shows one thing at a time. Generate pressed while the job it follows
    is still generating asks first whether to send another beside it (five presses never make five identical
    jobs); sent, the new job is followed, and the follow of the one before stops by itself (`follow_updates`). A
    refusal stands alone: what the page showed of the job before goes, and one still in flight goes on
    generating, reachable from History, no longer followed here. Gradio's `cancels` is not used to stop the
    follow before: it stops every run of the event in the page, the new job's too when its follow starts first.
    """
    view, write, cast, finish = screens.generate, screens.write, screens.cast, screens.finish
    rows = cast.rows
    inputs = {
        screens.key, write.script, view.title, view.mode, view.formats, *view.kbps.values(), view.queue, view.priority,
        view.cfg_scale, view.diffusion_steps, view.seed, *view.episode.components,
        *(row.name for row in rows), *(row.voice for row in rows), *(row.upload for row in rows), view.job,
    }  # fmt: skip
    outputs = [
        screens.tabs, write.problem, cast.problem, *(row.problem for row in rows), view.settings_problem, view.problem,
        view.progress, view.segments, view.job, view.sent, view.cancel, view.again, view.again_text,
        *listen_components(finish),
    ]  # fmt: skip
    follow_outputs = [
        screens.tabs, view.problem, view.progress, view.segments, view.job, view.cancel, *listen_components(finish),
    ]  # fmt: skip

    async def send(values: dict[Any, Any], sure: bool, page: str | None) -> dict[Any, Any]:
        """Send the job, or ask first, or show why not; what follows it is the next step (`follow`)."""
        cleared: dict[Any, Any] = {write.problem: "", cast.problem: "", view.settings_problem: "", view.problem: ""}
        cleared |= {row.problem: "" for row in rows} | {view.again: gr.Row(visible=False)}
        api = context.api(values[screens.key])
        refused = functools.partial(_after_refusal, view, api, values[view.job], context.live_folders, page)
        submission = _submission(screens, values)
        if isinstance(submission, dict):
            return cleared | submission | await refused()
        if not sure and (running := await _in_flight(api, values[view.job])) is not None:
            asked = f"“{_title(running)}” is still {running.state} from this page. Send another job beside it?"
            return cleared | {view.again: gr.Row(visible=True), view.again_text: question(asked)}
        script_text, script, options, uploads = submission
        try:
            job = await api.submit_job(script_text, options, uploads)
        except StudioApiError as error:
            return cleared | _problems_shown(screens, error, script_text, script) | await refused()
        return cleared | {view.job: job.id, view.sent: job.id, view.segments: ""}

    async def submit(values: dict[Any, Any], request: gr.Request) -> dict[Any, Any]:
        return await send(values, False, request.session_hash)

    async def send_another(values: dict[Any, Any], request: gr.Request) -> dict[Any, Any]:
        return await send(values, True, request.session_hash)

    async def follow(key: str | None, job_id: str | None, request: gr.Request) -> AsyncIterator[dict[Any, Any]]:
        """Follow the job just sent."""
        if job_id:
            async for update in follow_updates(screens, context, key, job_id, page=request.session_hash):
                yield update

    # "once": a second press while a job is being sent is dropped, not sent twice
    view.submit.click(submit, inputs=inputs, outputs=outputs, show_progress="hidden", trigger_mode="once")
    view.send_another.click(send_another, inputs=inputs, outputs=outputs, show_progress="hidden", trigger_mode="once")
    view.keep_waiting.click(lambda: gr.Row(visible=False), outputs=view.again)
    # "multiple": a job sent while the one before is still followed is followed at once
    following = view.sent.change(
        follow, inputs=[screens.key, view.sent], outputs=follow_outputs, show_progress="hidden", trigger_mode="multiple"
    )

    async def cancel(key: str, job_id: str | None) -> str:
        if not job_id:
            return field_error("no job to cancel: generate one first")
        try:
            job = await context.api(key).cancel_job(job_id)
        except StudioApiError as error:
            return field_error(error.message)
        return confirmed("Cancelled." if job.state == "cancelled" else "Cancelling: the job stops within a step.")

    view.cancel.click(cancel, inputs=[screens.key, view.job], outputs=view.problem)
    return following


def _title(job: JobView) -> str:
    return job.title or "Untitled episode"


async def _in_flight(api: StudioApi, job_id: str | None) -> JobView | None:
    """The job the page follows, while it is still queued or running (gone or unreachable: none)."""
    if job_id is None:
        return None
    try:
        job = await api.job(job_id)
    except StudioApiError:
        return None
    return None if job.state in FINAL_STATES else job


async def _after_refusal(
    view: GenerateView, api: StudioApi, previous: str | None, folders: LiveFolders, page: str | None
) -> dict[Any, Any]:
    """After a refused submit the refusal stands alone: the job shown before, its progress and parts go. One still in
    flight generates on (History has it); this page stops following it and says so where its progress was."""
    hidden = {view.progress: "", view.segments: "", view.job: None, view.cancel: button_hidden(view.cancel)}
    running = await _in_flight(api, previous)
    if running is None:
        return hidden
    if page is not None:
        folders.release(page)  # its follow stops at its next event
    where = f"“{_title(running)}” ({running.id[:8]}) is still {running.state}: open it from History to follow it again."
    return hidden | {view.progress: notice(where)}


def _submission(
    screens: Screens, values: dict[Any, Any]
) -> tuple[str, Script, JobOptions, dict[str, Path]] | dict[Any, Any]:
    """The job to send, or the updates that show why there is none yet."""
    write, cast, view = screens.write, screens.cast, screens.generate
    preview = preview_script(values[write.script] or "")
    if preview.script is None:
        message = "write or load a script first" if preview.is_empty else "fix the script first: see the preview"
        return {write.problem: field_error(message), screens.tabs: gr.Tabs(selected="write")}
    try:
        text, script = script_text_to_send(preview, [values[row.name] for row in cast.rows])
    except SpeakerNameError as error:
        return {cast.rows[error.index].problem: field_error(error.message), screens.tabs: gr.Tabs(selected="cast")}
    voices: dict[str, str] = {}
    uploads: dict[str, Path] = {}
    missing: dict[Any, Any] = {}
    for row, speaker in zip(cast.rows, script.speakers, strict=False):
        use = voice_in_use(values[row.voice], values[row.upload])
        if use is VoiceUse.UPLOAD:
            uploads[speaker.key] = Path(values[row.upload])
        elif use is VoiceUse.LIBRARY:
            voices[speaker.key] = values[row.voice]
        elif use is VoiceUse.UNUSABLE:
            problem = recording_problem(values[row.upload])
            missing[row.problem] = field_error(f"{speaker.name}'s recording cannot be a voice: {problem}")
        else:
            missing[row.problem] = field_error(f"{speaker.name} needs a voice: pick one from the library or upload one")
    if missing:
        return missing | {screens.tabs: gr.Tabs(selected="cast")}
    if not values[view.formats]:
        return {view.settings_problem: field_error("choose at least one audio format")}
    try:
        options = JobOptions(
            voices=voices,
            mode=values[view.mode],
            formats=values[view.formats],
            kbps={name: int(values[dropdown]) for name, dropdown in view.kbps.items()},
            queue=None if values[view.queue] == "auto" else values[view.queue],
            priority=int(values[view.priority]),
            settings=GenerationParams(
                cfg_scale=values[view.cfg_scale],
                diffusion_steps=int(values[view.diffusion_steps]),
                seed=int(values[view.seed] or 0),
            ),
            title=(values[view.title] or "").strip() or None,
            episode=episode_options(view.episode, values, (values[view.title] or "").strip() or None),
        )
    except ValidationError as error:
        messages = [f"{'.'.join(map(str, item['loc']))}: {item['msg']}" for item in error.errors()]
        return {view.settings_problem: field_error("; ".join(messages))}
    return text, script, options, uploads


def _problems_shown(screens: Screens, error: StudioApiError, script_text: str, script: Script) -> dict[Any, Any]:
    """Each problem the api named beside its field, and the first screen with one selected."""
    updates: dict[Any, Any] = {}
    screens_with_problems: list[str] = []
    for problem in error.problems or (FieldProblem("", error.message),):
        component, screen, shown = _place_of(screens, problem, script_text, script)
        updates[component] = updates.get(component, "") + shown
        screens_with_problems.append(screen)
    first = next(screen for screen in ("write", "cast", "generate") if screen in screens_with_problems)
    return updates | {screens.tabs: gr.Tabs(selected=first)}


def _place_of(screens: Screens, problem: FieldProblem, script_text: str, script: Script) -> tuple[Any, str, str]:
    """Where a problem is shown: (component, screen id, its HTML)."""
    root, _, rest = problem.field.partition(".")
    if root == "script":
        return screens.write.problem, "write", script_error_html(script_text, problem.message, problem.line)
    if root == "voices":
        for row, speaker in zip(screens.cast.rows, script.speakers, strict=False):
            if rest and rest.casefold() in (speaker.key.casefold(), speaker.name.casefold()):
                return row.problem, "cast", field_error(problem.message)
        return screens.cast.problem, "cast", field_error(problem.message)
    if root in _OPTION_FIELDS:
        return screens.generate.settings_problem, "generate", field_error(problem.message)
    return screens.generate.problem, "generate", field_error(problem.message)

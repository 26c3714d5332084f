"""Write's script stage: draft a script from notes, or clean up a transcript, on the service's scripts workers.

The request goes to `POST /v1/scripts`; the page then follows the job's events, showing each attempt of the
script model and why a reply was rejected. The result is shown for review first and goes into the editor
only when asked, and never over a script the user has there without a second click ("Replace my script").
Errors appear beside the field they concern, in the api's own words.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from api.schemas import ScriptView
from core.job_states import FINAL_STATES
from webui.api_client import StudioApi, StudioApiError
from webui.buttons import button_hidden, button_shown
from webui.context import StudioContext
from webui.render import field_error, question, script_job_html
from webui.views.write import WriteView

NOTES_SUFFIXES = (".txt", ".md")
TRANSCRIPT_SUFFIXES = (".txt", ".md", ".srt", ".vtt")
_MAX_TEXT_BYTES = 2 * 1024 * 1024  # as `voxcast script`: far above any notes or transcript
# Which message box shows a problem the api names by field.
_DRAFT_TEXT_FIELDS = ("material",)
_CLEANUP_TEXT_FIELDS = ("transcript",)


@dataclass(frozen=True)
class DraftingView:
    material: gr.Textbox
    material_upload: gr.UploadButton
    material_problem: gr.HTML
    hosts: gr.Number
    names: gr.Textbox
    minutes: gr.Number
    tone: gr.Textbox
    draft_problem: gr.HTML  # hosts, names, minutes, tone, or the api itself
    draft: gr.Button
    transcript: gr.Textbox
    transcript_upload: gr.UploadButton
    transcript_problem: gr.HTML
    force_model: gr.Checkbox
    cleanup_problem: gr.HTML
    cleanup: gr.Button
    status: gr.HTML
    cancel: gr.Button
    result: gr.Textbox
    load: gr.Button
    confirm: gr.Row
    replace: gr.Button
    keep: gr.Button
    script_id: gr.State


def _text_source(
    label: str, info: str, elem_id: str, upload_label: str, suffixes: tuple[str, ...]
) -> tuple[gr.Textbox, gr.HTML, gr.UploadButton]:
    """A box to paste text into, the place for its problem right under it, and a button to upload it instead."""
    text = gr.Textbox(label=label, info=info, lines=6, max_lines=16, elem_id=elem_id)
    problem = gr.HTML(elem_id=f"{elem_id}-problem")
    upload = gr.UploadButton(upload_label, file_types=list(suffixes), size="sm", elem_id=f"{elem_id}-upload")
    return text, problem, upload


def build_drafting() -> DraftingView:
    with gr.Accordion("Start from notes or a transcript", open=False, elem_id="script-stage"):
        with gr.Tabs():
            with gr.Tab("Draft from notes", id="draft"):
                material, material_problem, material_upload = _text_source(
                    "Notes or an article",
                    "the script model writes a dialogue from this material only (at most 30,000 characters)",
                    "draft-material",
                    "Upload notes (.txt, .md)",
                    NOTES_SUFFIXES,
                )
                with gr.Row():
                    hosts = gr.Number(2, label="Hosts", minimum=1, maximum=4, precision=0, elem_id="draft-hosts")
                    names = gr.Textbox(label="Names (optional)", placeholder="Alice, Bob", elem_id="draft-names")
                    minutes = gr.Number(10, label="Minutes", minimum=1, maximum=90, elem_id="draft-minutes")
                    tone = gr.Textbox(label="Tone (optional)", placeholder="warm and curious", elem_id="draft-tone")
                draft_problem = gr.HTML(elem_id="draft-problem")
                draft = gr.Button("Draft a script", variant="primary", elem_id="draft-start")
            with gr.Tab("Clean up a transcript", id="cleanup"):
                transcript, transcript_problem, transcript_upload = _text_source(
                    "Transcript",
                    "subtitles, a meeting export or rough notes of who said what; timestamps are fine",
                    "cleanup-transcript",
                    "Upload a transcript (.txt, .md, .srt, .vtt)",
                    TRANSCRIPT_SUFFIXES,
                )
                force_model = gr.Checkbox(
                    False,
                    label="Rewrite it with the script model even if it reads as a script",
                    elem_id="cleanup-force",
                )
                cleanup_problem = gr.HTML(elem_id="cleanup-problem")
                cleanup = gr.Button("Clean up", variant="primary", elem_id="cleanup-start")
        status = gr.HTML(elem_id="script-job-status")
        cancel = gr.Button("Cancel", visible=False, size="sm", variant="stop", elem_id="script-job-cancel")
        result = gr.Textbox(
            label="Result (review it, then put it in the editor)",
            interactive=False,
            visible=False,
            lines=8,
            max_lines=16,
            elem_id="script-job-result",
        )
        load = gr.Button("Put it in the editor", visible=False, elem_id="script-job-load")
        with gr.Row(visible=False) as confirm:
            gr.HTML(question("The editor holds a script of yours. Replace it with this one?"))
            replace = gr.Button("Replace my script", variant="stop", size="sm", elem_id="script-job-replace")
            keep = gr.Button("Keep mine", size="sm", elem_id="script-job-keep")
        script_id = gr.State(None)
    return DraftingView(
        material, material_upload, material_problem, hosts, names, minutes, tone, draft_problem, draft,
        transcript, transcript_upload, transcript_problem, force_model, cleanup_problem, cleanup,
        status, cancel, result, load, confirm, replace, keep, script_id,
    )  # fmt: skip


def wire_drafting(view: DraftingView, write: WriteView, context: StudioContext, key: gr.Textbox) -> None:
    problems = [view.material_problem, view.draft_problem, view.transcript_problem, view.cleanup_problem]
    shown = [view.status, view.cancel, view.result, view.load, view.confirm, view.script_id, *problems]

    async def start_draft(
        api_key: str | None, material: str, hosts: float | None, names: str, minutes: float | None, tone: str
    ) -> AsyncIterator[dict[Any, Any]]:
        body: dict[str, Any] = {"task": "draft", "material": material or "", "minutes": minutes or 0}
        listed = [name.strip() for name in (names or "").split(",") if name.strip()]
        body |= {"names": listed} if listed else {"hosts": int(hosts or 0)}
        body |= {"tone": tone.strip()} if tone and tone.strip() else {}
        async for update in _run(view, context.api(api_key), body, view.material_problem, view.draft_problem):
            yield update

    async def start_cleanup(api_key: str | None, transcript: str, force: bool) -> AsyncIterator[dict[Any, Any]]:
        body = {"task": "normalise", "transcript": transcript or "", "force_model": bool(force)}
        async for update in _run(view, context.api(api_key), body, view.transcript_problem, view.cleanup_problem):
            yield update

    draft_inputs = [key, view.material, view.hosts, view.names, view.minutes, view.tone]
    view.draft.click(start_draft, inputs=draft_inputs, outputs=shown, show_progress="hidden")
    cleanup_inputs = [key, view.transcript, view.force_model]
    view.cleanup.click(start_cleanup, inputs=cleanup_inputs, outputs=shown, show_progress="hidden")

    async def cancel(api_key: str | None, script_id: str | None) -> dict[Any, Any]:
        if not script_id:
            return {view.cancel: button_hidden(view.cancel)}
        try:
            await context.api(api_key).cancel_script(script_id)
        except StudioApiError as error:
            return {view.status: field_error(error.message)}
        return {view.cancel: button_hidden(view.cancel)}  # the followed events show "Cancelled."

    view.cancel.click(cancel, inputs=[key, view.script_id], outputs=[view.status, view.cancel])

    def load(result: str, editor: str | None) -> dict[Any, Any]:
        """Into the editor when it is empty (or already holds this script); otherwise ask first."""
        if not (editor or "").strip() or editor == result:
            return {write.script: result, view.confirm: gr.Row(visible=False)}
        return {view.confirm: gr.Row(visible=True)}

    view.load.click(load, inputs=[view.result, write.script], outputs=[write.script, view.confirm])
    view.replace.click(
        lambda result: {write.script: result, view.confirm: gr.Row(visible=False)},
        inputs=view.result,
        outputs=[write.script, view.confirm],
    )
    view.keep.click(lambda: gr.Row(visible=False), outputs=view.confirm)
    view.material_upload.upload(
        lambda path: read_text_file(path, NOTES_SUFFIXES), inputs=view.material_upload,
        outputs=[view.material, view.material_problem],
    )  # fmt: skip
    view.transcript_upload.upload(
        lambda path: read_text_file(path, TRANSCRIPT_SUFFIXES), inputs=view.transcript_upload,
        outputs=[view.transcript, view.transcript_problem],
    )  # fmt: skip


async def _run(
    view: DraftingView, api: StudioApi, body: Mapping[str, Any], text_problem: gr.HTML, form_problem: gr.HTML
) -> AsyncIterator[dict[Any, Any]]:
    """Submit the script job, then follow it: each attempt as it happens, and the result for review at the end."""
    cleared = {
        view.material_problem: "",
        view.draft_problem: "",
        view.transcript_problem: "",
        view.cleanup_problem: "",
        view.confirm: gr.Row(visible=False),
        view.result: gr.Textbox(visible=False, value=""),
        view.load: button_hidden(view.load),
    }
    try:
        script = await api.submit_script(body)
    except StudioApiError as error:
        text_fields = _DRAFT_TEXT_FIELDS + _CLEANUP_TEXT_FIELDS
        beside_text = [problem.message for problem in error.problems if problem.field in text_fields]
        elsewhere = [problem.message for problem in error.problems if problem.field not in text_fields]
        yield cleared | {
            view.status: "",
            view.cancel: button_hidden(view.cancel),
            text_problem: field_error("; ".join(beside_text)),
            form_problem: field_error("; ".join(elsewhere) or (None if beside_text else error.message)),
        }
        return
    yield cleared | _shown(view, script)
    try:
        async for event in api.script_events(script.id):
            script = event if isinstance(event, ScriptView) else await api.script(script.id)
            yield _shown(view, script)
    except StudioApiError as error:
        yield {view.status: field_error(error.message), view.cancel: button_hidden(view.cancel)}


def _shown(view: DraftingView, script: ScriptView) -> dict[Any, Any]:
    done = script.state == "done" and script.script is not None
    return {
        view.script_id: script.id,
        view.status: script_job_html(script),
        view.cancel: button_shown(view.cancel, script.state not in FINAL_STATES),
        view.result: gr.Textbox(visible=done, value=script.script if done else ""),
        view.load: button_shown(view.load, done),
    }


def read_text_file(path: str | None, suffixes: tuple[str, ...]) -> tuple[Any, str]:
    """An uploaded text file into its box, or why it cannot be (the box is left alone)."""
    if not path:
        return gr.skip(), ""
    file = Path(path)
    if file.suffix.lower() not in suffixes:
        return gr.skip(), field_error(f"{file.name}: upload a {', '.join(suffixes)} file")
    if file.stat().st_size > _MAX_TEXT_BYTES:
        return gr.skip(), field_error(f"{file.name} is over {_MAX_TEXT_BYTES:,} bytes")
    try:
        return file.read_bytes().decode("utf-8-sig"), ""
    except UnicodeDecodeError as error:
        return gr.skip(), field_error(f"{file.name} is not UTF-8 text (byte {error.start}); save it as UTF-8")

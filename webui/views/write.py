"""Write: paste, type or upload a script, or load an example; see it parsed live, errors at their line.

A file or an example goes into the editor at once when it is empty (or holds that very text, or a bundled example as
it was loaded); over a script of the producer's own it asks first, as the drafting stage's "Put it in the editor" does.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from script_text.parser import MAX_SCRIPT_CHARS
from webui.context import StudioContext
from webui.examples import SCRIPT_SUFFIXES
from webui.render import field_error, question, script_preview_html
from webui.script_preview import preview_script
from webui.views.cast import CastView, cast_for_script

PLACEHOLDER = "Alice: Welcome to the show!\nBob: Thanks, Alice. Glad to be here.\n[pause: 1s]\nAlice: Let's begin."
_MAX_SCRIPT_BYTES = MAX_SCRIPT_CHARS * 4  # UTF-8 needs up to 4 bytes a character


@dataclass(frozen=True)
class WriteView:
    script: gr.Textbox
    upload: gr.UploadButton
    example: gr.Dropdown
    load_example: gr.Button
    problem: gr.HTML  # a file that could not be read, or what the api said about the script
    preview: gr.HTML
    confirm: gr.Row  # "replace your script with ...?", shown while `pending` waits
    confirm_text: gr.HTML
    replace: gr.Button
    keep: gr.Button
    pending: gr.State  # the text of a file or example waiting for the producer's yes


def build_write(context: StudioContext) -> WriteView:
    has_examples = bool(context.examples.scripts)
    # On a phone the two columns stack; the stylesheet puts the preview (where an error shows at its line) right
    # under the script box, above the upload and example controls (`webui.assets`, #write-editor).
    with gr.Row(equal_height=False, elem_id="write-row"):
        with gr.Column(scale=1, min_width=300, elem_id="write-editor"):
            script = gr.Textbox(
                label="Script",
                info="'Speaker 1: ...', 'Name: ...', '[Name] ...' or JSON; [pause: 800ms] for silence; 1 to 4 speakers",
                lines=14,
                max_lines=40,
                placeholder=PLACEHOLDER,
                elem_id="script",
            )
            problem = gr.HTML(elem_id="script-problem")
            with gr.Row(elem_id="script-upload-row"):
                upload = gr.UploadButton(
                    "Upload a script (.txt, .md, .json)",
                    file_types=list(SCRIPT_SUFFIXES),
                    size="sm",
                    elem_id="script-upload",
                )
            with gr.Row(visible=has_examples, elem_id="example-row"):
                example = gr.Dropdown(
                    choices=list(context.examples.scripts),
                    value=None,
                    label="Example scripts",
                    info=f"{len(context.examples.scripts)} bundled: pick one, then Load example",
                    scale=3,
                    elem_id="example-script",
                )
                load_example = gr.Button("Load example", size="sm", scale=1, elem_id="load-example")
            with gr.Row(visible=False, elem_id="script-replace-confirm") as confirm:
                confirm_text = gr.HTML()
                replace = gr.Button("Replace my script", variant="stop", size="sm", elem_id="script-replace")
                keep = gr.Button("Keep mine", size="sm", elem_id="script-keep")
        with gr.Column(scale=1, min_width=300, elem_id="write-preview"):
            preview = gr.HTML(script_preview_html(preview_script("")), label="Preview", elem_id="script-preview")
    return WriteView(
        script, upload, example, load_example, problem, preview, confirm, confirm_text, replace, keep, gr.State(None)
    )


def wire_write(view: WriteView, cast: CastView, context: StudioContext) -> None:
    """The live preview (which also lays out the Cast rows), uploads and examples."""

    def show_script(text: str | None, shown: tuple[str, ...] | None) -> dict[Any, Any]:
        preview = preview_script(text or "")
        updates = {view.preview: script_preview_html(preview), view.problem: ""}
        return updates | cast_for_script(cast, preview, tuple(shown or ()))

    row_parts = [part for row in cast.rows for part in (row.box, row.header, row.name, row.problem)]
    view.script.change(
        show_script,
        inputs=[view.script, cast.speakers],
        outputs=[view.preview, view.problem, cast.hint, cast.speakers, *row_parts],
        trigger_mode="always_last",
        show_progress="hidden",
    )
    asked = [view.script, view.problem, view.confirm, view.confirm_text, view.pending]

    def offer(path: str | None, editor: str | None) -> dict[Any, Any]:
        """The file's text into the editor when it holds nothing else; otherwise ask first (the editor is kept)."""
        if not path:
            return {view.problem: gr.skip()}
        text, problem = read_uploaded_script(path)
        # nothing of the producer's to lose: an empty editor, the same text, or a bundled example left as loaded
        if problem or not (editor or "").strip() or text == editor or editor in example_texts():
            return {view.script: text, view.problem: problem, view.confirm: gr.Row(visible=False), view.pending: None}
        asked = f"The editor holds a script of yours. Replace it with {Path(path).name}?"
        return {view.confirm: gr.Row(visible=True), view.confirm_text: question(asked), view.pending: text}

    @functools.cache
    def example_texts() -> frozenset[str]:
        return frozenset(read_uploaded_script(str(path))[0] for path in context.examples.scripts.values())

    view.upload.upload(offer, inputs=[view.upload, view.script], outputs=asked)

    def load_example(name: str | None, editor: str | None) -> dict[Any, Any]:
        path = context.examples.scripts.get(name or "")
        if path is None:
            return {view.problem: field_error("pick an example script first")}
        return offer(str(path), editor)

    view.load_example.click(load_example, inputs=[view.example, view.script], outputs=asked)
    view.replace.click(
        lambda text: {view.script: text, view.confirm: gr.Row(visible=False), view.pending: None},
        inputs=view.pending,
        outputs=asked,
    )
    view.keep.click(lambda: {view.confirm: gr.Row(visible=False), view.pending: None}, outputs=asked)


def read_uploaded_script(path: str) -> tuple[Any, str]:
    """The file's text for the script box, or a message saying why it cannot be (the box is left alone)."""
    file = Path(path)
    if file.stat().st_size > _MAX_SCRIPT_BYTES:
        return gr.skip(), field_error(
            f"{file.name} is over {_MAX_SCRIPT_BYTES:,} bytes; a script is at most {MAX_SCRIPT_CHARS:,} characters"
        )
    try:
        text = file.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as error:
        return gr.skip(), field_error(f"{file.name} is not UTF-8 text (byte {error.start}); save it as UTF-8")
    return text, ""

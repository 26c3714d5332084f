"""Write: paste, type or upload a script, or load an example; see it parsed live, errors at their line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from pipeline.script import MAX_SCRIPT_CHARS
from webui.context import StudioContext
from webui.examples import SCRIPT_SUFFIXES
from webui.render import field_error, script_preview_html
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


def build_write(context: StudioContext) -> WriteView:
    has_examples = bool(context.examples.scripts)
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=300):
            script = gr.Textbox(
                label="Script",
                info="'Speaker 1: ...', 'Name: ...', '[Name] ...' or JSON; [pause: 800ms] for silence; 1 to 4 speakers",
                lines=14,
                max_lines=40,
                placeholder=PLACEHOLDER,
                elem_id="script",
            )
            problem = gr.HTML(elem_id="script-problem")
            with gr.Row():
                upload = gr.UploadButton(
                    "Upload a script (.txt, .md, .json)",
                    file_types=list(SCRIPT_SUFFIXES),
                    size="sm",
                    elem_id="script-upload",
                )
            with gr.Row(visible=has_examples):
                example = gr.Dropdown(
                    choices=list(context.examples.scripts),
                    value=None,
                    label="Example scripts",
                    info=f"{len(context.examples.scripts)} bundled: pick one, then Load example",
                    scale=3,
                    elem_id="example-script",
                )
                load_example = gr.Button("Load example", size="sm", scale=1, elem_id="load-example")
        with gr.Column(scale=1, min_width=300):
            preview = gr.HTML(script_preview_html(preview_script("")), label="Preview", elem_id="script-preview")
    return WriteView(script, upload, example, load_example, problem, preview)


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
    view.upload.upload(read_uploaded_script, inputs=view.upload, outputs=[view.script, view.problem])

    def load_example(name: str | None) -> tuple[Any, str]:
        path = context.examples.scripts.get(name or "")
        if path is None:
            return gr.skip(), field_error("pick an example script first")
        return read_uploaded_script(str(path))

    view.load_example.click(load_example, inputs=view.example, outputs=[view.script, view.problem])


def read_uploaded_script(path: str | None) -> tuple[Any, str]:
    """The file's text into the script box, or a message saying why it cannot be (the box is left alone)."""
    if not path:
        return gr.skip(), ""
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

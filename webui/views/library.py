"""The voice library on the Cast screen: the caller's voices on the api (`/v1/voices`), to play, rename and
delete; new recordings; the bundled example voices in one click (a second click reuses the first one's voice).

Jobs keep their own copies of the voices they used, so renaming or deleting a library voice changes no job.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from api.schemas import VoiceView
from webui.api_client import StudioApiError
from webui.assets import VOICE_PREVIEW_JS
from webui.context import StudioContext
from webui.render import confirmed, field_error, notice, question, voice_preview_html, voices_html
from webui.voices import recording_shape, same_voice_in


@dataclass(frozen=True)
class LibraryView:
    table: gr.HTML
    voice: gr.Dropdown  # the library voice to play, rename or delete
    play: gr.Button
    preview: gr.HTML
    rename_to: gr.Textbox
    rename: gr.Button
    delete: gr.Button
    confirm: gr.Group  # shown by Delete…: what goes, and the buttons that delete or keep it
    confirm_text: gr.HTML
    confirm_delete: gr.Button
    keep: gr.Button
    new_name: gr.Textbox
    new_recording: gr.Audio
    add: gr.Button
    problem: gr.HTML
    example_buttons: tuple[tuple[gr.Button, str], ...]  # (button, example voice name)
    names: gr.State  # voice id -> name, for what the speaker rows say they use


def build_library(context: StudioContext) -> LibraryView:
    with gr.Accordion("Voice library", open=True, elem_id="voice-library"):
        table = gr.HTML(voices_html([]), elem_id="library")
        with gr.Row(equal_height=False):
            voice = gr.Dropdown(
                choices=[], value=None, label="Library voice", scale=2, min_width=200, elem_id="library-voice"
            )
            play = gr.Button("▶ Play", size="sm", scale=0, min_width=80, elem_id="library-play")
            rename_to = gr.Textbox(label="New name", scale=2, min_width=180, elem_id="library-rename-to")
            rename = gr.Button("Rename", size="sm", scale=0, min_width=80, elem_id="library-rename")
            delete = gr.Button("Delete…", size="sm", scale=0, min_width=80, elem_id="library-delete")
        preview = gr.HTML(js_on_load=VOICE_PREVIEW_JS, elem_id="library-preview")
        with gr.Group(visible=False, elem_id="library-confirm") as confirm:
            confirm_text = gr.HTML(elem_id="library-confirm-text")
            with gr.Row():
                confirm_delete = gr.Button(
                    "Delete for good", size="sm", variant="stop", elem_id="library-confirm-delete"
                )
                keep = gr.Button("Keep it", size="sm", elem_id="library-keep")
        example_buttons = _example_buttons(context)
        with gr.Row(equal_height=False):
            new_name = gr.Textbox(label="New voice's name", scale=1, min_width=180, elem_id="new-voice-name")
            new_recording = gr.Audio(
                label="Recording (any format and rate; 3 to 60 s are used)",
                sources=["upload", "microphone"],
                type="filepath",
                buttons=[],
                scale=2,
                elem_id="new-voice-recording",
                elem_classes=["vx-compact-audio"],
            )
        add = gr.Button("Add to library", size="sm", elem_id="add-voice")
        problem = gr.HTML(elem_id="library-problem")
    return LibraryView(
        table, voice, play, preview, rename_to, rename, delete, confirm, confirm_text, confirm_delete, keep, new_name,
        new_recording, add, problem, example_buttons, gr.State({}),
    )  # fmt: skip


def _example_buttons(context: StudioContext) -> tuple[tuple[gr.Button, str], ...]:
    if not context.examples.voices:
        return ()
    gr.Markdown("Add a bundled example voice to your library:")
    with gr.Row():
        return tuple(
            (gr.Button(f"+ {name}", size="sm", elem_classes=["vx-example-voice"]), name)
            for name in context.examples.voices
        )


def voice_choices(voices: Sequence[VoiceView]) -> list[tuple[str, str]]:
    return [(f"{voice.name} ({voice.seconds:.0f} s)", voice.id) for voice in voices]


def library_view_updates(
    view: LibraryView, pickers: Sequence[gr.Dropdown], voices: Sequence[VoiceView], picked: Sequence[str | None]
) -> dict[Any, Any]:
    """The library's table and names, and every voice picker in `pickers` (with its value in `picked`) offering
    `voices`. A picked voice no longer among them is unpicked in the same update: Gradio refuses a dropdown
    whose value is not one of its choices, so one left behind would break every event that reads it."""
    choices = voice_choices(voices)
    present = {voice.id for voice in voices}
    return {view.table: voices_html(voices), view.names: {voice.id: voice.name for voice in voices}} | {
        picker: gr.update(choices=choices, value=value if value in present else None)
        for picker, value in zip(pickers, picked, strict=True)
    }


def library_view_outputs(view: LibraryView, pickers: Sequence[gr.Dropdown]) -> list[Any]:
    """What `library_view_updates` changes."""
    return [view.table, view.names, *pickers]


async def voice_preview(context: StudioContext, api_key: str | None, voice_id: str, name: str) -> str:
    """A voice's player: fetched on every play, since the api, not a cached file, decides who may hear a voice."""
    destination = await context.api(api_key).download(
        f"/v1/voices/{voice_id}/preview.wav", context.files.voice_preview(voice_id)
    )
    return voice_preview_html(context.files.url(destination), name, secrets.token_hex(4))


def wire_library(
    view: LibraryView, context: StudioContext, key: gr.Textbox, speaker_pickers: Sequence[gr.Dropdown]
) -> None:
    """Upload, examples, rename, delete; each keeps the library's picker and the speakers' pickers in step."""
    pickers = [view.voice, *speaker_pickers]
    changed = Library(view, pickers, library_view_outputs(view, pickers))
    outputs = [*changed.outputs, view.problem, view.new_name, view.new_recording, view.rename_to]

    async def add_voice(api_key: str, name: str, recording: str | None, *picked: str | None) -> dict[Any, Any]:
        if not (name or "").strip():
            return {view.problem: field_error("give the voice a name")}
        if not recording:
            return {view.problem: field_error("upload or record a voice first")}
        return await _upload(api_key, name.strip(), Path(recording), picked)

    async def _upload(api_key: str, name: str, recording: Path, picked: Sequence[str | None]) -> dict[Any, Any]:
        api = context.api(api_key)
        try:
            voice = await api.upload_voice(name, recording)
            voices = await api.voices()
        except StudioApiError as error:
            return {view.problem: field_error(error.message)}
        added = {view.problem: notice(f"Added {voice.name}."), view.new_name: "", view.new_recording: None}
        return changed.updates(voices, picked) | added

    view.add.click(add_voice, inputs=[key, view.new_name, view.new_recording, *pickers], outputs=outputs)

    def example_adder(name: str, recording: Path) -> Callable[..., Awaitable[dict[Any, Any]]]:
        async def add_example(api_key: str, *picked: str | None) -> dict[Any, Any]:
            try:
                voices = await context.api(api_key).voices()
            except StudioApiError as error:
                return {view.problem: field_error(error.message)}
            existing = same_voice_in(voices, name, recording_shape(recording))
            if existing is None:
                return await _upload(api_key, name, recording, picked)
            return changed.updates(voices, picked) | {view.problem: notice(f"{name} is already in your library.")}

        return add_example

    for button, voice_name in view.example_buttons:
        # trigger_mode "once": a second click while the first is at work is dropped, not sent as a second upload
        button.click(
            example_adder(voice_name, context.examples.voices[voice_name]),
            inputs=[key, *pickers],
            outputs=outputs,
            trigger_mode="once",
        )

    _wire_rename(view, context, key, changed, outputs)
    _wire_delete(view, context, key, changed)


@dataclass(frozen=True)
class Library:
    """What a changed library updates: its view and every voice picker, the library's own first."""

    view: LibraryView
    pickers: list[gr.Dropdown]
    outputs: list[Any]

    def updates(self, voices: Sequence[VoiceView], picked: Sequence[str | None]) -> dict[Any, Any]:
        return library_view_updates(self.view, self.pickers, voices, picked)


def _wire_rename(
    view: LibraryView, context: StudioContext, key: gr.Textbox, changed: Library, outputs: Sequence[Any]
) -> None:
    def picked_voice(voice_id: str | None, names: dict[str, str]) -> dict[Any, Any]:
        """The picked voice's name, ready to edit; a question about another voice goes."""
        return {view.rename_to: names.get(voice_id or "", ""), view.confirm: gr.Group(visible=False)}

    view.voice.change(picked_voice, inputs=[view.voice, view.names], outputs=[view.rename_to, view.confirm])

    async def rename(api_key: str, name: str | None, *picked: str | None) -> dict[Any, Any]:
        voice_id = picked[0]
        if not voice_id:
            return {view.problem: field_error("pick a library voice to rename")}
        new_name = (name or "").strip()
        if not new_name:
            return {view.problem: field_error("give the voice a new name")}
        api = context.api(api_key)
        try:
            voice = await api.rename_voice(voice_id, new_name)
            voices = await api.voices()
        except StudioApiError as error:
            return {view.problem: field_error(error.message)}
        return changed.updates(voices, picked) | {view.problem: notice(f"Renamed to {voice.name}.")}

    for trigger in (view.rename.click, view.rename_to.submit):
        trigger(rename, inputs=[key, view.rename_to, *changed.pickers], outputs=outputs)


def _wire_delete(view: LibraryView, context: StudioContext, key: gr.Textbox, changed: Library) -> None:
    def ask(voice_id: str | None, names: dict[str, str]) -> dict[Any, Any]:
        """Say what a delete removes, and what it leaves, before doing it."""
        if not voice_id:
            return {view.problem: field_error("pick a library voice to delete"), view.confirm: gr.Group(visible=False)}
        asked = (
            f"Delete “{names.get(voice_id, voice_id[:8])}” from your library? Jobs that used it keep their own copy; "
            "speakers who had it picked need another voice."
        )
        return {view.confirm_text: question(asked), view.confirm: gr.Group(visible=True), view.problem: ""}

    view.delete.click(ask, inputs=[view.voice, view.names], outputs=[view.confirm_text, view.confirm, view.problem])
    view.keep.click(lambda: (gr.Group(visible=False), ""), outputs=[view.confirm, view.problem])

    async def delete(api_key: str, names: dict[str, str], *picked: str | None) -> dict[Any, Any]:
        voice_id, hidden = picked[0], {view.confirm: gr.Group(visible=False)}
        if not voice_id:
            return hidden | {view.problem: field_error("pick a library voice to delete")}
        api = context.api(api_key)
        try:
            await api.delete_voice(voice_id)
            voices = await api.voices()
        except StudioApiError as error:
            return hidden | {view.problem: field_error(error.message)}
        deleted = confirmed(f"Deleted {names.get(voice_id, 'the voice')}.")
        return hidden | changed.updates(voices, picked) | {view.rename_to: "", view.preview: "", view.problem: deleted}

    view.confirm_delete.click(
        delete,
        inputs=[key, view.names, *changed.pickers],
        outputs=[*changed.outputs, view.confirm, view.problem, view.rename_to, view.preview],
    )

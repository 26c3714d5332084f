"""Cast: a voice for every speaker (from the library, with a play button, or uploaded/recorded), and names.

The library is the caller's voices on the api (`/v1/voices`); the bundled example voices can be added to it
in one click. A recording given to one speaker goes with the job (the api keeps it in the job, not in the
library). Rows follow the script: one per speaker, up to the format's four.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from api.schemas import VoiceView
from pipeline.script import MAX_SPEAKERS
from webui.api_client import StudioApiError
from webui.context import StudioContext
from webui.render import field_error, notice, speaker_header_html, voices_html
from webui.script_preview import ScriptPreview


@dataclass(frozen=True)
class SpeakerRow:
    box: gr.Group
    header: gr.HTML
    name: gr.Textbox
    voice: gr.Dropdown
    play: gr.Button
    preview: gr.Audio
    upload: gr.Audio
    problem: gr.HTML


@dataclass(frozen=True)
class CastView:
    rows: tuple[SpeakerRow, ...]
    hint: gr.HTML  # shown while there is no script to cast
    problem: gr.HTML  # what concerns the cast as a whole
    library: gr.HTML
    new_name: gr.Textbox
    new_recording: gr.Audio
    add: gr.Button
    library_problem: gr.HTML
    example_buttons: tuple[tuple[gr.Button, str], ...]  # (button, example voice name)
    speakers: gr.State  # the speaker names the rows were laid out for

    @property
    def voice_dropdowns(self) -> list[gr.Dropdown]:
        return [row.voice for row in self.rows]


def build_cast(context: StudioContext) -> CastView:
    hint = gr.HTML('<p class="vx-empty">Write or load a script first: its speakers appear here.</p>')
    problem = gr.HTML(elem_id="cast-problem")
    rows = []
    for index in range(MAX_SPEAKERS):
        with gr.Group(visible=False, elem_id=f"speaker-{index + 1}") as box:
            header = gr.HTML()
            with gr.Row(equal_height=False):
                name = gr.Textbox(
                    label="Name in the transcript", scale=1, min_width=180, elem_id=f"speaker-{index + 1}-name"
                )
                voice = gr.Dropdown(
                    choices=[],
                    value=None,
                    label="Library voice",
                    scale=2,
                    min_width=200,
                    elem_id=f"speaker-{index + 1}-voice",
                )
                play = gr.Button("▶ Play", size="sm", scale=0, min_width=80, elem_id=f"speaker-{index + 1}-play")
            preview = gr.Audio(
                label="Library voice",
                interactive=False,
                buttons=["download"],
                autoplay=True,
                visible=False,
                elem_id=f"speaker-{index + 1}-preview",
            )
            upload = gr.Audio(
                label="…or upload or record a voice for this speaker (3 to 60 s; used instead of the library voice)",
                sources=["upload", "microphone"],
                type="filepath",
                buttons=[],
                elem_id=f"speaker-{index + 1}-upload",
                elem_classes=["vx-compact-audio"],
            )
            row_problem = gr.HTML(elem_id=f"speaker-{index + 1}-problem")
        rows.append(SpeakerRow(box, header, name, voice, play, preview, upload, row_problem))
    with gr.Accordion("Voice library", open=True, elem_id="voice-library"):
        library = gr.HTML(voices_html([]), elem_id="library")
        example_buttons = []
        if context.examples.voices:
            gr.Markdown("Add a bundled example voice to your library:")
            with gr.Row():
                for voice_name in context.examples.voices:
                    button = gr.Button(f"+ {voice_name}", size="sm", elem_classes=["vx-example-voice"])
                    example_buttons.append((button, voice_name))
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
        library_problem = gr.HTML(elem_id="library-problem")
    return CastView(
        rows=tuple(rows),
        hint=hint,
        problem=problem,
        library=library,
        new_name=new_name,
        new_recording=new_recording,
        add=add,
        library_problem=library_problem,
        example_buttons=tuple(example_buttons),
        speakers=gr.State(()),
    )


def cast_for_script(view: CastView, preview: ScriptPreview, shown: tuple[str, ...]) -> dict[Any, Any]:
    """Lay the rows out for the script's speakers; names typed earlier stay while the speakers do.

    A script that does not parse changes nothing: the rows wait for the next good version.
    """
    if preview.script is None:
        if preview.is_empty:
            return {view.hint: gr.update(visible=True)} | {row.box: gr.update(visible=False) for row in view.rows}
        return {}
    speakers = preview.script.speakers
    names = tuple(speaker.name for speaker in speakers)
    turns = preview.script.turns
    updates: dict[Any, Any] = {view.hint: gr.update(visible=False), view.speakers: names}
    for index, row in enumerate(view.rows):
        if index >= len(speakers):
            updates[row.box] = gr.update(visible=False)
            continue
        count = sum(turn.speaker == index for turn in turns)
        updates[row.header] = speaker_header_html(index, speakers[index], count)
        if names != shown:
            updates[row.box] = gr.update(visible=True)
            updates[row.name] = speakers[index].name
            updates[row.problem] = ""
    return updates


def voice_choices(voices: Sequence[VoiceView]) -> list[tuple[str, str]]:
    return [(f"{voice.name} ({voice.seconds:.0f} s)", voice.id) for voice in voices]


def library_updates(view: CastView, voices: Sequence[VoiceView]) -> dict[Any, Any]:
    choices = voice_choices(voices)
    return {view.library: voices_html(voices)} | {
        dropdown: gr.update(choices=choices) for dropdown in view.voice_dropdowns
    }


def wire_cast(view: CastView, context: StudioContext, key: gr.Textbox) -> None:
    library_outputs = [view.library, *view.voice_dropdowns, view.library_problem]

    async def add_voice(api_key: str, name: str, recording: str | None) -> dict[Any, Any]:
        if not (name or "").strip():
            return {view.library_problem: field_error("give the voice a name")}
        if not recording:
            return {view.library_problem: field_error("upload or record a voice first")}
        return await _upload_to_library(api_key, name.strip(), Path(recording))

    async def _upload_to_library(api_key: str, name: str, recording: Path) -> dict[Any, Any]:
        api = context.api(api_key)
        try:
            voice = await api.upload_voice(name, recording)
            voices = await api.voices()
        except StudioApiError as error:
            return {view.library_problem: field_error(error.message)}
        return library_updates(view, voices) | {
            view.library_problem: notice(f"Added {voice.name}."),
            view.new_name: "",
            view.new_recording: None,
        }

    view.add.click(
        add_voice,
        inputs=[key, view.new_name, view.new_recording],
        outputs=[*library_outputs, view.new_name, view.new_recording],
    )

    def example_adder(name: str, recording: Path) -> Callable[[str], Awaitable[dict[Any, Any]]]:
        async def add_example(api_key: str) -> dict[Any, Any]:
            return await _upload_to_library(api_key, name, recording)

        return add_example

    for button, voice_name in view.example_buttons:
        button.click(
            example_adder(voice_name, context.examples.voices[voice_name]),
            inputs=[key],
            outputs=[*library_outputs, view.new_name, view.new_recording],
        )

    def player(row: SpeakerRow) -> Callable[[str, str | None], Awaitable[dict[Any, Any]]]:
        async def play(api_key: str, voice_id: str | None) -> dict[Any, Any]:
            if not voice_id:
                return {row.problem: field_error("pick a library voice to play")}
            try:  # fetched on every play: the api, not a cached file, decides who may hear a voice
                destination = await context.api(api_key).download(
                    f"/v1/voices/{voice_id}/preview.wav", context.files.voice_preview(voice_id)
                )
            except StudioApiError as error:
                return {row.problem: field_error(error.message)}
            return {row.preview: gr.update(value=str(destination), visible=True), row.problem: ""}

        return play

    for row in view.rows:
        row.play.click(player(row), inputs=[key, row.voice], outputs=[row.preview, row.problem])

"""Cast: a voice for every speaker (from the library, with a play button, or uploaded/recorded), and names.

The library (`webui.views.library`) is the caller's voices on the api (`/v1/voices`). A recording given to one
speaker goes with the job (the api keeps it in the job, not in the library); a row given both a recording and
a library voice sends the recording, and says so (`webui.voices.voice_in_use`). Rows follow the script: one
per speaker, up to the format's four. One voice preview plays at a time, wherever it was started.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gradio as gr

from api.schemas import VoiceView
from script_text.parser import MAX_SPEAKERS
from webui.api_client import StudioApiError
from webui.assets import VOICE_PREVIEW_JS
from webui.context import StudioContext
from webui.render import field_error, speaker_header_html, voice_use_html
from webui.script_preview import ScriptPreview
from webui.views.library import (
    LibraryView,
    build_library,
    library_view_outputs,
    library_view_updates,
    voice_preview,
    wire_library,
)
from webui.voices import recording_problem, voice_in_use


@dataclass(frozen=True)
class SpeakerRow:
    box: gr.Group
    header: gr.HTML
    name: gr.Textbox
    voice: gr.Dropdown
    play: gr.Button
    preview: gr.HTML
    upload: gr.Audio
    uses: gr.HTML  # which of the two voices the row sends (`webui.voices.voice_in_use`)
    problem: gr.HTML


@dataclass(frozen=True)
class CastView:
    rows: tuple[SpeakerRow, ...]
    hint: gr.HTML  # shown while there is no script to cast
    problem: gr.HTML  # what concerns the cast as a whole
    library: LibraryView
    speakers: gr.State  # the speaker names the rows were laid out for
    pending_voices: gr.State  # voices restored from the browser, picked once the library they are in is loaded

    @property
    def voice_dropdowns(self) -> list[gr.Dropdown]:
        return [row.voice for row in self.rows]

    @property
    def previews(self) -> list[gr.HTML]:
        """Every voice player of the screen: one plays at a time."""
        return [*(row.preview for row in self.rows), self.library.preview]


def build_cast(context: StudioContext) -> CastView:
    hint = gr.HTML('<p class="vx-empty">Write or load a script first: its speakers appear here.</p>')
    problem = gr.HTML(elem_id="cast-problem")
    rows = tuple(_speaker_row(index) for index in range(MAX_SPEAKERS))
    library = build_library(context)
    return CastView(rows, hint, problem, library, speakers=gr.State(()), pending_voices=gr.State(()))


def _speaker_row(index: int) -> SpeakerRow:
    element = f"speaker-{index + 1}"
    with gr.Group(visible=False, elem_id=element) as box:
        header = gr.HTML()
        with gr.Row(equal_height=False):
            name = gr.Textbox(label="Name in the transcript", scale=1, min_width=180, elem_id=f"{element}-name")
            voice = gr.Dropdown(
                choices=[], value=None, label="Library voice", scale=2, min_width=200, elem_id=f"{element}-voice"
            )
            play = gr.Button("▶ Play", size="sm", scale=0, min_width=80, elem_id=f"{element}-play")
        preview = gr.HTML(js_on_load=VOICE_PREVIEW_JS, elem_id=f"{element}-preview")
        upload = gr.Audio(
            label="…or upload or record a voice for this speaker (3 to 60 s; used instead of the library voice)",
            sources=["upload", "microphone"],
            type="filepath",
            buttons=[],
            elem_id=f"{element}-upload",
            elem_classes=["vx-compact-audio"],
        )
        uses = gr.HTML(elem_id=f"{element}-uses")
        row_problem = gr.HTML(elem_id=f"{element}-problem")
    return SpeakerRow(box, header, name, voice, play, preview, upload, uses, row_problem)


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


def voice_pickers(view: CastView) -> list[gr.Dropdown]:
    """Every picker of a library voice on the screen, the library's own first (`library_updates`' order)."""
    return [view.library.voice, *view.voice_dropdowns]


def library_updates(view: CastView, voices: Sequence[VoiceView], picked: Sequence[str | None]) -> dict[Any, Any]:
    """The library and every voice picker (`picked`: their values, in `voice_pickers` order) for `voices`."""
    return library_view_updates(view.library, voice_pickers(view), voices, picked)


def library_outputs(view: CastView) -> list[Any]:
    return library_view_outputs(view.library, voice_pickers(view))


def with_restored_voices(picked: Sequence[str | None], pending: Sequence[str | None]) -> list[str | None]:
    """The pickers' values (`voice_pickers` order) with each speaker's voice restored from the browser put in
    place; `library_updates` then leaves out any no longer in the library."""
    library_voice, *speakers = picked
    restored = [
        pending[index] if index < len(pending) and pending[index] else voice for index, voice in enumerate(speakers)
    ]
    return [library_voice, *restored]


def wire_cast(view: CastView, context: StudioContext, key: gr.Textbox) -> None:
    library = view.library
    wire_library(library, context, key, view.voice_dropdowns)
    for row in view.rows:
        marker_inputs = [row.name, row.voice, row.upload, library.names]
        for trigger in (row.voice.change, row.upload.change, row.name.change, library.names.change):
            trigger(_voice_use, inputs=marker_inputs, outputs=row.uses, show_progress="hidden")
        # a recording the api would refuse says why at once, beside it; a good one (or none) clears what was said
        row.upload.change(_recording_checked, inputs=row.upload, outputs=row.problem, show_progress="hidden")
        row.play.click(
            _player(view, context, row), inputs=[key, row.voice, library.names], outputs=[*view.previews, row.problem]
        )
    library.play.click(
        _player(view, context, None),
        inputs=[key, library.voice, library.names],
        outputs=[*view.previews, library.problem],
    )


async def _recording_checked(upload: str | None) -> str:
    problem = await asyncio.to_thread(recording_problem, upload) if upload else None
    return field_error(problem and f"this recording cannot be a voice: {problem}")


def _voice_use(speaker: str | None, voice_id: str | None, upload: str | None, names: dict[str, str]) -> str:
    library_voice = names.get(voice_id) if voice_id else None
    return voice_use_html((speaker or "").strip() or "This speaker", voice_in_use(voice_id, upload), library_voice)


def _player(
    view: CastView, context: StudioContext, row: SpeakerRow | None
) -> Callable[[str, str | None, dict[str, str]], Awaitable[dict[Any, Any]]]:
    """Play the voice picked on `row` (None: the library's picker) in that place, and stop every other preview."""
    slot, problem = (row.preview, row.problem) if row else (view.library.preview, view.library.problem)

    async def play(api_key: str, voice_id: str | None, names: dict[str, str]) -> dict[Any, Any]:
        if not voice_id:
            return {problem: field_error("pick a library voice to play")}
        try:
            shown = await voice_preview(context, api_key, voice_id, names.get(voice_id, ""))
        except StudioApiError as error:
            return {problem: field_error(error.message)}
        return {preview: "" for preview in view.previews} | {slot: shown, problem: ""}

    return play

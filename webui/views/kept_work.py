"""Work kept on this device: the script and the cast (names, library voices) are saved in the browser as they
change and put back when the page loads again; the API key only when "Remember on this device" is ticked.

Recordings given to one speaker are not kept: they are files in the studio's process, not in the browser.
What is kept and how it is read back is `webui.kept_work`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from pipeline.script import MAX_SPEAKERS
from webui.kept_work import (
    DRAFTS_STORAGE_KEY,
    KEY_STORAGE_KEY,
    STORAGE_SECRET,
    Drafts,
    drafts_to_keep,
    key_to_keep,
    remembered_key,
)
from webui.render import script_preview_html
from webui.script_preview import preview_script
from webui.views.cast import CastView, cast_for_script
from webui.views.write import WriteView


@dataclass(frozen=True)
class KeptWork:
    drafts: gr.BrowserState
    key_store: gr.BrowserState
    remember: gr.Checkbox


def build_kept_work() -> KeptWork:
    """The "remember" box (placed where this is called, beside the key) and the browser's two stores."""
    remember = gr.Checkbox(
        label="Remember the key on this device",
        info="kept in this browser's storage until you untick this; unticked, the key is never stored",
        value=False,
        elem_id="remember-key",
    )
    drafts = gr.BrowserState(Drafts().stored(), storage_key=DRAFTS_STORAGE_KEY, secret=STORAGE_SECRET)
    key_store = gr.BrowserState(key_to_keep("", False), storage_key=KEY_STORAGE_KEY, secret=STORAGE_SECRET)
    return KeptWork(drafts, key_store, remember)


def restore_outputs(kept: KeptWork, key: gr.Textbox, write: WriteView, cast: CastView) -> list[Any]:
    """What `restore_work` may change."""
    rows = [part for row in cast.rows for part in (row.box, row.header, row.name, row.problem)]
    return [key, kept.remember, write.script, write.preview, cast.hint, cast.speakers, cast.pending_voices, *rows]


def restore_work(
    kept: KeptWork, key: gr.Textbox, write: WriteView, cast: CastView, stored_drafts: object, stored_key: object
) -> dict[Any, Any]:
    """The page as it was left: the remembered key, the script laid out with its speakers' names, and the
    library voices to pick once the library is loaded (`cast.pending_voices`)."""
    remembered = remembered_key(stored_key)
    drafts = Drafts.from_stored(stored_drafts)
    updates: dict[Any, Any] = {key: remembered, kept.remember: bool(remembered), cast.pending_voices: drafts.voices}
    if not drafts.script:
        return updates
    preview = preview_script(drafts.script)
    laid_out = cast_for_script(cast, preview, ())
    names = {
        row.name: name for row, name in zip(cast.rows, drafts.names, strict=False) if name and row.name in laid_out
    }
    return updates | {write.script: drafts.script, write.preview: script_preview_html(preview)} | laid_out | names


def wire_kept_work(kept: KeptWork, key: gr.Textbox, write: WriteView, cast: CastView) -> None:
    """Save the drafts on every change of the script, a name or a library voice; save (or forget) the key."""
    names = [row.name for row in cast.rows]
    voices = [row.voice for row in cast.rows]

    def save(script: str | None, *values: Any) -> dict[str, Any]:
        row_names, row_voices = values[:MAX_SPEAKERS], values[MAX_SPEAKERS : 2 * MAX_SPEAKERS]
        return drafts_to_keep(script, row_names, row_voices, values[-1]).stored()

    for trigger in (write.script.change, *(name.change for name in names), *(voice.change for voice in voices)):
        trigger(
            save,
            inputs=[write.script, *names, *voices, cast.pending_voices],
            outputs=kept.drafts,
            trigger_mode="always_last",
            show_progress="hidden",
        )
    for trigger in (kept.remember.input, key.submit):
        trigger(key_to_keep, inputs=[key, kept.remember], outputs=kept.key_store, show_progress="hidden")

"""Work kept on this device: the script, the cast (names, library voices), Generate's settings and the job the page
follows are saved in the browser as they change and put back when the page loads again (the job followed again once
a key connects); the API key only when "Remember on this device" is ticked.

Recordings given to one speaker are not kept: they are files in the studio's process, not in the browser.
What is kept and how it is read back is `webui.kept_work`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from core.job_states import JobState
from script_text.parser import MAX_SPEAKERS
from webui.api_client import StudioApiError
from webui.context import StudioContext
from webui.kept_work import (
    DRAFTS_STORAGE_KEY,
    GENERATE_FIELDS,
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
from webui.views.generate import GenerateView
from webui.views.screens import IN_FLIGHT, Screens, ended_job_shown, show_episode
from webui.views.write import WriteView


@dataclass(frozen=True)
class KeptWork:
    drafts: gr.BrowserState
    key_store: gr.BrowserState
    remember: gr.Checkbox
    # The job the page followed, as read back at load: saving the restored drafts (which starts before the key
    # connects, with no job followed yet) must not lose it before `follow_kept_job` follows it again.
    job: gr.State


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
    return KeptWork(drafts, key_store, remember, gr.State(None))


def generate_settings(view: GenerateView) -> list[Any]:
    """Generate's settings components, in `GENERATE_FIELDS` order (the bitrates as one dict)."""
    return [
        view.title, view.mode, view.formats, *view.kbps.values(), view.queue, view.priority, view.cfg_scale,
        view.diffusion_steps, view.seed,
    ]  # fmt: skip


def restore_outputs(kept: KeptWork, key: gr.Textbox, write: WriteView, cast: CastView, view: GenerateView) -> list[Any]:
    """What `restore_work` may change."""
    rows = [part for row in cast.rows for part in (row.box, row.header, row.name, row.problem)]
    return [
        key, kept.remember, kept.job, write.script, write.preview, cast.hint, cast.speakers, cast.pending_voices,
        *rows, *generate_settings(view),
    ]  # fmt: skip


def restore_work(
    kept: KeptWork,
    key: gr.Textbox,
    write: WriteView,
    cast: CastView,
    view: GenerateView,
    stored_drafts: object,
    stored_key: object,
) -> dict[Any, Any]:
    """The page as it was left: the remembered key, the script laid out with its speakers' names, Generate's
    settings, and the library voices to pick once the library is loaded (`cast.pending_voices`)."""
    remembered = remembered_key(stored_key)
    drafts = Drafts.from_stored(stored_drafts)
    updates: dict[Any, Any] = {
        key: remembered,
        kept.remember: bool(remembered),
        kept.job: drafts.job,
        cast.pending_voices: drafts.voices,
    }
    if drafts.generate:
        settings = drafts.generate
        updates |= {view.title: settings["title"], view.mode: settings["mode"], view.formats: settings["formats"]}
        rates = settings["kbps"]
        updates |= {dropdown: rates[name] for name, dropdown in view.kbps.items() if name in rates}
        updates |= {view.queue: settings["queue"], view.priority: settings["priority"]}
        updates |= {view.cfg_scale: settings["cfg_scale"], view.diffusion_steps: settings["diffusion_steps"]}
        updates[view.seed] = settings["seed"]
    if not drafts.script:
        return updates
    preview = preview_script(drafts.script)
    laid_out = cast_for_script(cast, preview, ())
    names = {
        row.name: name for row, name in zip(cast.rows, drafts.names, strict=False) if name and row.name in laid_out
    }
    return updates | {write.script: drafts.script, write.preview: script_preview_html(preview)} | laid_out | names


def wire_kept_work(kept: KeptWork, key: gr.Textbox, write: WriteView, cast: CastView, view: GenerateView) -> None:
    """Save the drafts on every change of the script, a name, a library voice, a setting of Generate or the job the
    page follows; save (or forget) the key."""
    names = [row.name for row in cast.rows]
    voices = [row.voice for row in cast.rows]
    settings = generate_settings(view)
    kbps_names = list(view.kbps)

    def save(script: str | None, *values: Any) -> dict[str, Any]:
        """The drafts as the page holds them. The job is the one Generate follows or, while none is followed yet, the
        one still to follow again after a reload (`KeptWork.job`): connecting a key forgets the jobs shown first, and
        that passing "none" must not be what is kept."""
        row_names, row_voices = values[:MAX_SPEAKERS], values[MAX_SPEAKERS : 2 * MAX_SPEAKERS]
        pending, *generate, followed, to_follow = values[2 * MAX_SPEAKERS :]
        job = followed or to_follow
        title, mode, formats, *rates = generate[: 3 + len(kbps_names)]
        queue, priority, cfg_scale, diffusion_steps, seed = generate[3 + len(kbps_names) :]
        kept_settings = dict(
            zip(
                GENERATE_FIELDS,
                (title or "", mode, formats, dict(zip(kbps_names, rates, strict=True)), queue, priority, cfg_scale,
                 diffusion_steps, seed),
                strict=True,
            )
        )  # fmt: skip
        return drafts_to_keep(script, row_names, row_voices, pending, kept_settings, job).stored()

    triggers = [write.script, *names, *voices, *settings, view.job]
    for component in triggers:
        component.change(
            save,
            inputs=[write.script, *names, *voices, cast.pending_voices, *settings, view.job, kept.job],
            outputs=kept.drafts,
            trigger_mode="always_last",
            show_progress="hidden",
        )
    for trigger in (kept.remember.input, key.submit):
        trigger(key_to_keep, inputs=[key, kept.remember], outputs=kept.key_store, show_progress="hidden")


async def follow_kept_job(
    kept: KeptWork, screens: Screens, context: StudioContext, key: str | None, job_id: str | None
) -> dict[Any, Any]:
    """Once a key connects after a reload (by itself when remembered, or typed): the job the page followed
    (`KeptWork.job`), followed again when it is still in flight (Generate's `sent`), or shown as it ended (Generate's
    last figures, and Listen's episode when done); nothing when there was none, or the key cannot see it. Once shown,
    it is no longer kept apart (the drafts keep it as the job followed): a key typed later does not bring it back
    over what the page follows then."""
    generate = screens.generate
    nothing = {generate.sent: gr.skip()}  # (Gradio takes an empty dict for one value, not for no update)
    if job_id is None:
        return nothing
    api = context.api(key)
    try:
        job = await api.job(job_id)
    except StudioApiError:
        return nothing
    if job.state in IN_FLIGHT:  # in the same update as `kept.job`'s clearing, so the drafts always hold it
        return {generate.sent: job.id, generate.job: job.id, kept.job: None}
    shown = ended_job_shown(screens, job) | {kept.job: None}
    return shown | await show_episode(screens, context, key, job) if job.state == JobState.DONE else shown

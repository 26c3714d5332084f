"""Publishing in the studio: the Shows screen (a show's fields, its artwork, its feed URL to copy), the episode fields
Generate sends with a job, and History's "add to a show / take out".

Everything goes through the api (`/v1/shows`, `PUT`/`DELETE /v1/jobs/{id}/episode`); a show picker fetches the key's
shows when it is opened, so a show created a moment ago is there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import gradio as gr
from pydantic import ValidationError

from api.podcast_categories import category_names
from api.schemas import EpisodeOptions, ShowChange, ShowFields, ShowView
from webui.api_client import StudioApiError
from webui.context import StudioContext
from webui.render import artwork_html, confirmed, field_error, question, show_episodes_html

NEW_SHOW = ""  # the show picker's value for "a new show"


@dataclass(frozen=True)
class EpisodeFields:
    """A job as an episode: its show (none: not published), title, notes, number and season."""

    show: gr.Dropdown
    title: gr.Textbox
    description: gr.Textbox
    number: gr.Textbox
    season: gr.Textbox

    @property
    def components(self) -> list[Any]:
        return [self.show, self.title, self.description, self.number, self.season]


def build_episode_fields(prefix: str) -> EpisodeFields:
    show = gr.Dropdown(
        # Gradio types a choice's value as never None; None is "not published" here
        choices=cast(Any, [("Not published", None)]), value=None, label="Show",
        info="publish it in a show's feed (needs MP3)",
        elem_id=f"{prefix}-show",
    )  # fmt: skip
    title = gr.Textbox(label="Episode title", max_length=200, elem_id=f"{prefix}-episode-title")
    description = gr.Textbox(label="Episode notes", lines=2, max_length=4000, elem_id=f"{prefix}-episode-notes")
    # Textboxes, not Numbers: Gradio draws an empty Number as 0, where empty means "no number"
    with gr.Row():
        number = gr.Textbox(
            label="Episode number", info="from 1; empty: none", placeholder="none", max_length=12,
            elem_id=f"{prefix}-episode-number",
        )  # fmt: skip
        season = gr.Textbox(
            label="Season", info="from 1; empty: none", placeholder="none", max_length=12,
            elem_id=f"{prefix}-episode-season",
        )  # fmt: skip
    return EpisodeFields(show, title, description, number, season)


def episode_options(fields: EpisodeFields, values: dict[Any, Any], fallback_title: str | None) -> EpisodeOptions | None:
    """The episode to send, or None when no show is picked; `ValidationError` naming the field otherwise (a number
    or season that is not a whole number from 1 among them)."""
    show_id = values[fields.show]
    if not show_id:
        return None
    return EpisodeOptions(
        show_id=show_id,
        title=(values[fields.title] or "").strip() or fallback_title or "",
        description=(values[fields.description] or "").strip() or None,
        number=(values[fields.number] or "").strip() or None,
        season=(values[fields.season] or "").strip() or None,
    )


def wire_show_picker(picker: gr.Dropdown, key: gr.Textbox, context: StudioContext, *, allow_none: bool) -> None:
    """Fill the picker with the key's shows when it is opened."""

    async def load(api_key: str | None, picked: str | None) -> dict[str, Any]:
        try:
            shows = await context.api(api_key).shows()
        except StudioApiError:
            return gr.update()
        choices = [("Not published", None)] if allow_none else [("New show", NEW_SHOW)]
        return gr.update(choices=choices + [(show.title, show.id) for show in shows], value=picked)

    picker.focus(load, inputs=[key, picker], outputs=picker, show_progress="hidden")


# --- the Shows screen --------------------------------------------------------------------------------------------

SHOWS_INTRO = (
    "A show is a podcast: a title, artwork and a feed that listeners subscribe to in their podcast apps. Each "
    "episode is a finished job published in it, from Generate or History; the feed lists it once the job is done."
)
SHOW_TYPES = [
    ("Episodic: apps list the newest episode first", "episodic"),
    ("Serial: apps list it in order, from episode 1", "serial"),
]
# A click on an episode's Unpublish button (`show_episodes_html`) tells the server which job, as the event's data.
UNPUBLISH_JS = """
element.addEventListener('click', (event) => {
  const button = event.target.closest('button.vx-unpublish[data-job]');
  if (button) trigger('click', {job: button.dataset.job});
});
"""


@dataclass(frozen=True)
class ShowsView:
    picker: gr.Dropdown
    title: gr.Textbox
    description: gr.Textbox
    author: gr.Textbox
    language: gr.Textbox
    category: gr.Dropdown
    explicit: gr.Checkbox
    owner_email: gr.Textbox
    show_type: gr.Radio
    locked: gr.Checkbox
    save: gr.Button
    artwork_preview: gr.HTML
    artwork: gr.File
    upload: gr.Button
    feed_url: gr.Textbox
    rotate: gr.Button
    rotate_confirm: gr.Row  # "cut off every subscriber?", asked before a new feed URL
    rotate_question: gr.HTML
    rotate_yes: gr.Button
    rotate_no: gr.Button
    delete: gr.Button
    status: gr.HTML
    episodes: gr.HTML  # what the feed holds, each with Unpublish

    @property
    def fields(self) -> list[Any]:
        """The show's fields, in `ShowFields` order."""
        return [
            self.title, self.description, self.author, self.language, self.category, self.explicit, self.owner_email,
            self.show_type, self.locked,
        ]  # fmt: skip

    @property
    def acting(self) -> list[gr.Button]:
        """What acts on a saved show: inactive until there is one."""
        return [self.upload, self.rotate, self.delete]


def build_shows() -> ShowsView:
    gr.HTML(f'<p class="vx-intro">{SHOWS_INTRO}</p>', elem_id="shows-intro")
    picker = gr.Dropdown(choices=[("New show", NEW_SHOW)], value=NEW_SHOW, label="Show", elem_id="shows-picker")
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=300):
            title = gr.Textbox(label="Title", max_length=200, elem_id="show-title")
            description = gr.Textbox(label="Description", lines=3, max_length=4000, elem_id="show-description")
            author = gr.Textbox(label="Author", max_length=200, elem_id="show-author")
            owner_email = gr.Textbox(
                label="Owner's e-mail (optional)",
                info="directories such as Apple Podcasts and Spotify send a code here to confirm the show is yours; "
                "it is in the feed, so anyone with the feed URL can read it",
                max_length=254,
                elem_id="show-owner-email",
            )
        with gr.Column(scale=1, min_width=300):
            language = gr.Textbox(
                label="Language", value="en", info="a language tag: en, en-GB, de", elem_id="show-lang"
            )
            category = gr.Dropdown(category_names(), value="Technology", label="Category", elem_id="show-category")
            explicit = gr.Checkbox(label="Explicit", elem_id="show-explicit")
            show_type = gr.Radio(SHOW_TYPES, value="episodic", label="Type", elem_id="show-type")
            locked = gr.Checkbox(
                label="Locked: other podcast hosts may not import this feed",
                info="needs the owner's e-mail; untick it before moving the show to another host",
                elem_id="show-locked",
            )
            save = gr.Button("Save show", variant="primary", elem_id="show-save")
    status = gr.HTML(elem_id="shows-status")
    with gr.Row(equal_height=False):
        artwork_preview = gr.HTML(artwork_html(None), elem_id="show-artwork-preview", min_width=160)
        artwork = gr.File(
            label="Artwork: a square JPEG or PNG, 1400 to 3000 pixels",
            file_types=[".jpg", ".jpeg", ".png"],
            elem_id="show-artwork",
        )
        upload = gr.Button("Upload artwork", interactive=False, elem_id="show-artwork-upload")
    feed_url = gr.Textbox(
        label="Feed URL: podcast apps subscribe to it (anyone holding it can listen)",
        interactive=False,
        buttons=["copy"],
        elem_id="show-feed-url",
    )
    episodes = gr.HTML(js_on_load=UNPUBLISH_JS, elem_id="show-episodes")
    with gr.Row():
        rotate = gr.Button(
            "New feed URL (the old one stops working)", size="sm", interactive=False, elem_id="show-rotate"
        )
        delete = gr.Button("Delete show", size="sm", variant="stop", interactive=False, elem_id="show-delete")
    with gr.Row(visible=False, elem_id="show-rotate-confirm") as rotate_confirm:
        rotate_question = gr.HTML()
        rotate_yes = gr.Button("Yes, a new feed URL", variant="stop", size="sm", elem_id="show-rotate-yes")
        rotate_no = gr.Button("Keep this feed URL", size="sm", elem_id="show-rotate-no")
    return ShowsView(
        picker, title, description, author, language, category, explicit, owner_email, show_type, locked, save,
        artwork_preview, artwork, upload, feed_url, rotate, rotate_confirm, rotate_question, rotate_yes, rotate_no,
        delete, status, episodes,
    )  # fmt: skip


def _shown(view: ShowsView, show: ShowView | None, message: str, artwork: str | None = None) -> dict[Any, Any]:
    """The screen for `show` (None: a blank new show) with `message` under it; `artwork` is the URL of its preview."""
    saved = show is not None
    updates: dict[Any, Any] = {button: gr.update(interactive=saved) for button in view.acting}
    updates |= {view.rotate_confirm: gr.Row(visible=False), view.status: message}
    if show is None:
        blank: dict[Any, Any] = {
            view.title: "", view.description: "", view.author: "", view.owner_email: "", view.feed_url: "",
        }  # fmt: skip
        blank |= {
            view.locked: False,
            view.show_type: "episodic",
            view.episodes: "",
            view.artwork_preview: artwork_html(None),
        }
        return updates | blank | {view.picker: gr.update(value=NEW_SHOW)}
    return updates | {
        view.picker: gr.update(choices=[("New show", NEW_SHOW), (show.title, show.id)], value=show.id),
        view.title: show.title,
        view.description: show.description,
        view.author: show.author,
        view.language: show.language,
        view.category: show.category,
        view.explicit: show.explicit,
        view.owner_email: show.owner_email or "",
        view.show_type: show.show_type,
        view.locked: show.locked,
        view.feed_url: show.feed_url,
        view.episodes: show_episodes_html(show.episodes),
        view.artwork_preview: artwork_html(artwork),
    }


async def _artwork_url(context: StudioContext, api_key: str | None, show: ShowView) -> str | None:
    """The URL the page shows the show's artwork at (fetched from the api with the key), None without one."""
    if show.artwork is None:
        return None
    fetched = await context.api(api_key).download(show.artwork, context.files.show_artwork(show.id))
    # named by what it is, so the browser is told an image's type
    image = fetched.replace(fetched.with_suffix(".png" if fetched.read_bytes()[:4] == b"\x89PNG" else ".jpg"))
    return context.files.url(image)


def _problems(error: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())


def wire_shows(view: ShowsView, key: gr.Textbox, context: StudioContext) -> None:
    outputs = [
        view.picker, *view.fields, view.feed_url, view.status, view.episodes, view.artwork_preview, *view.acting,
        view.rotate_confirm,
    ]  # fmt: skip
    wire_show_picker(view.picker, key, context, allow_none=False)

    async def shown(api_key: str | None, show: ShowView, message: str) -> dict[Any, Any]:
        try:
            artwork = await _artwork_url(context, api_key, show)
        except StudioApiError as error:
            return _shown(view, show, message + field_error(f"its artwork could not be shown: {error.message}"))
        return _shown(view, show, message, artwork)

    async def open_show(api_key: str | None, show_id: str | None) -> dict[Any, Any]:
        if not show_id:
            return _shown(view, None, "")
        try:
            return await shown(api_key, await context.api(api_key).show(show_id), "")
        except StudioApiError as error:
            return {view.status: field_error(error.message)}

    view.picker.input(open_show, inputs=[key, view.picker], outputs=outputs)

    async def save(api_key: str | None, show_id: str | None, *fields: Any) -> dict[Any, Any]:
        names = (
            "title", "description", "author", "language", "category", "explicit", "owner_email", "show_type", "locked",
        )  # fmt: skip
        values = dict(zip(names, fields, strict=True))
        values["owner_email"] = (values["owner_email"] or "").strip() or None
        api = context.api(api_key)
        try:
            if show_id:
                show = await api.change_show(show_id, ShowChange(**values))
                if values["owner_email"] is None and show.owner_email is not None:  # emptied: the address goes
                    show = await api.remove_owner_email(show_id)
            else:
                show = await api.create_show(ShowFields(**values))
        except ValidationError as error:
            return {view.status: field_error(_problems(error))}
        except StudioApiError as error:
            return {view.status: field_error(error.message)}
        return await shown(
            api_key, show, confirmed(f"Saved “{show.title}”. Publish episodes in it from Generate or History.")
        )

    view.save.click(save, inputs=[key, view.picker, *view.fields], outputs=outputs)

    async def upload(api_key: str | None, show_id: str | None, artwork: str | None) -> dict[Any, Any]:
        if not show_id or not artwork:
            return {view.status: field_error("save the show and pick an image first")}
        try:
            show = await context.api(api_key).upload_artwork(show_id, artwork)
        except StudioApiError as error:
            return {view.status: field_error(error.message)}
        return await shown(api_key, show, confirmed("Artwork stored: podcast apps show it from the next feed check."))

    view.upload.click(upload, inputs=[key, view.picker, view.artwork], outputs=outputs)

    def ask_rotate(show_id: str | None) -> dict[Any, Any]:
        if not show_id:
            return {view.status: field_error("pick a show first")}
        asked = (
            "A new feed URL cuts off everyone subscribed to this one: their apps stop getting episodes until they "
            "subscribe again with the new URL. Make a new feed URL?"
        )
        return {view.rotate_confirm: gr.Row(visible=True), view.rotate_question: question(asked), view.status: ""}

    view.rotate.click(ask_rotate, inputs=view.picker, outputs=[view.rotate_confirm, view.rotate_question, view.status])
    view.rotate_no.click(lambda: gr.Row(visible=False), outputs=view.rotate_confirm)

    async def rotate(api_key: str | None, show_id: str | None) -> dict[Any, Any]:
        if not show_id:
            return {view.status: field_error("pick a show first")}
        try:
            show = await context.api(api_key).rotate_feed(show_id)
        except StudioApiError as error:
            return {view.status: field_error(error.message)}
        return await shown(
            api_key, show, confirmed("A new feed URL: subscribers of the old one must subscribe again with this one.")
        )

    view.rotate_yes.click(rotate, inputs=[key, view.picker], outputs=outputs)

    async def unpublish(api_key: str | None, show_id: str | None, event: gr.EventData) -> dict[Any, Any]:
        job_id = event._data.get("job") if isinstance(event._data, dict) else None  # from `UNPUBLISH_JS`
        if not show_id or not job_id:
            return {view.status: gr.skip()}
        api = context.api(api_key)
        try:
            job = await api.unpublish_job(str(job_id))
            show = await api.show(show_id)
        except StudioApiError as error:
            return {view.status: field_error(error.message)}
        title = job.title or "the episode"
        return await shown(api_key, show, confirmed(f"“{title}” is unpublished: the feed no longer lists it."))

    view.episodes.click(unpublish, inputs=[key, view.picker], outputs=outputs)

    async def delete(api_key: str | None, show_id: str | None) -> dict[Any, Any]:
        if not show_id:
            return {view.status: field_error("pick a show first")}
        try:
            await context.api(api_key).delete_show(show_id)
        except StudioApiError as error:
            return {view.status: field_error(error.message)}
        return _shown(view, None, confirmed("Show deleted; its episodes' jobs stay in History."))

    view.delete.click(delete, inputs=[key, view.picker], outputs=outputs)


# --- History: a finished job into a show, or out of it ----------------------------------------------------------


@dataclass(frozen=True)
class HistoryPublishing:
    episode: EpisodeFields
    add: gr.Button
    remove: gr.Button
    status: gr.HTML


def build_history_publishing() -> HistoryPublishing:
    with gr.Accordion("Publish the picked job in a show", open=False, elem_id="history-publish"):
        episode = build_episode_fields("history")
        with gr.Row():
            add = gr.Button("Add to show", size="sm", variant="primary", elem_id="history-add-episode")
            remove = gr.Button("Take out of its show", size="sm", elem_id="history-remove-episode")
        status = gr.HTML(elem_id="history-publish-status")
    return HistoryPublishing(episode, add, remove, status)


def wire_history_publishing(view: HistoryPublishing, job: gr.Dropdown, key: gr.Textbox, context: StudioContext) -> None:
    """Add the job picked in History to a show (or change its episode), or take it out."""
    wire_show_picker(view.episode.show, key, context, allow_none=True)
    fields = view.episode

    async def add(api_key: str | None, job_id: str | None, *values: Any) -> str:
        if not job_id:
            return field_error("pick a job first (click its row)")
        try:
            options = episode_options(fields, dict(zip(fields.components, values, strict=True)), None)
        except ValidationError as error:
            return field_error(_problems(error))
        if options is None:
            return field_error("pick a show to publish it in")
        try:
            published = await context.api(api_key).publish_job(job_id, options)
        except StudioApiError as error:
            return field_error(error.message)
        assert published.episode is not None
        return confirmed(f"“{published.episode.title}” is an episode of {published.episode.show_title}.")

    view.add.click(add, inputs=[key, job, *fields.components], outputs=view.status)

    async def remove(api_key: str | None, job_id: str | None) -> str:
        if not job_id:
            return field_error("pick a job first (click its row)")
        try:
            await context.api(api_key).unpublish_job(job_id)
        except StudioApiError as error:
            return field_error(error.message)
        return confirmed("Taken out of its show: its feed no longer lists it.")

    view.remove.click(remove, inputs=[key, job], outputs=view.status)

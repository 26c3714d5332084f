"""Publishing in the studio: the Shows screen (a show's fields, its artwork, its feed URL to copy), the episode fields
Generate sends with a job, and History's "add to a show / take out".

Everything goes through the api (`/v1/shows`, `PUT`/`DELETE /v1/jobs/{id}/episode`); a show picker fetches the key's
shows when it is opened, so a show created a moment ago is there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr
from pydantic import ValidationError

from api.podcast_categories import category_names
from api.schemas import EpisodeOptions, ShowChange, ShowFields, ShowView
from webui.api_client import StudioApiError
from webui.context import StudioContext
from webui.render import confirmed, field_error, notice

NEW_SHOW = ""  # the show picker's value for "a new show"


@dataclass(frozen=True)
class EpisodeFields:
    """A job as an episode: its show (none: not published), title, notes and number."""

    show: gr.Dropdown
    title: gr.Textbox
    description: gr.Textbox
    number: gr.Number

    @property
    def components(self) -> list[Any]:
        return [self.show, self.title, self.description, self.number]


def build_episode_fields(prefix: str) -> EpisodeFields:
    show = gr.Dropdown(
        choices=[("Not published", None)], value=None, label="Show", info="publish it in a show's feed (needs MP3)",
        elem_id=f"{prefix}-show",
    )  # fmt: skip
    title = gr.Textbox(label="Episode title", max_length=200, elem_id=f"{prefix}-episode-title")
    description = gr.Textbox(label="Episode notes", lines=2, max_length=4000, elem_id=f"{prefix}-episode-notes")
    # No `minimum`: Gradio refuses a whole event for a Number out of its bounds, and an empty one reads 0 here
    number = gr.Number(
        value=None, label="Episode number", info="from 1; empty: none", precision=0, elem_id=f"{prefix}-episode-number"
    )
    return EpisodeFields(show, title, description, number)


def episode_options(fields: EpisodeFields, values: dict[Any, Any], fallback_title: str | None) -> EpisodeOptions | None:
    """The episode to send, or None when no show is picked; `ValidationError` naming the field otherwise."""
    show_id = values[fields.show]
    if not show_id:
        return None
    number = values[fields.number]
    return EpisodeOptions(
        show_id=show_id,
        title=(values[fields.title] or "").strip() or fallback_title or "",
        description=(values[fields.description] or "").strip() or None,
        number=int(number) if number else None,  # empty (None, or Gradio's 0): no number; a negative one is refused
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


@dataclass(frozen=True)
class ShowsView:
    picker: gr.Dropdown
    title: gr.Textbox
    description: gr.Textbox
    author: gr.Textbox
    language: gr.Textbox
    category: gr.Dropdown
    explicit: gr.Checkbox
    save: gr.Button
    artwork: gr.File
    upload: gr.Button
    feed_url: gr.Textbox
    rotate: gr.Button
    delete: gr.Button
    status: gr.HTML

    @property
    def fields(self) -> list[Any]:
        return [self.title, self.description, self.author, self.language, self.category, self.explicit]


def build_shows() -> ShowsView:
    picker = gr.Dropdown(choices=[("New show", NEW_SHOW)], value=NEW_SHOW, label="Show", elem_id="shows-picker")
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=300):
            title = gr.Textbox(label="Title", max_length=200, elem_id="show-title")
            description = gr.Textbox(label="Description", lines=3, max_length=4000, elem_id="show-description")
            author = gr.Textbox(label="Author", max_length=200, elem_id="show-author")
        with gr.Column(scale=1, min_width=300):
            language = gr.Textbox(
                label="Language", value="en", info="a language tag: en, en-GB, de", elem_id="show-lang"
            )
            category = gr.Dropdown(category_names(), value="Technology", label="Category", elem_id="show-category")
            explicit = gr.Checkbox(label="Explicit", elem_id="show-explicit")
            save = gr.Button("Save show", variant="primary", elem_id="show-save")
    with gr.Row(equal_height=False):
        artwork = gr.File(
            label="Artwork: a square JPEG or PNG, 1400 to 3000 pixels",
            file_types=[".jpg", ".jpeg", ".png"],
            elem_id="show-artwork",
        )
        upload = gr.Button("Upload artwork", elem_id="show-artwork-upload")
    feed_url = gr.Textbox(
        label="Feed URL: podcast apps subscribe to it (anyone holding it can listen)",
        interactive=False,
        buttons=["copy"],
        elem_id="show-feed-url",
    )
    with gr.Row():
        rotate = gr.Button("New feed URL (the old one stops working)", size="sm", elem_id="show-rotate")
        delete = gr.Button("Delete show", size="sm", variant="stop", elem_id="show-delete")
    status = gr.HTML(elem_id="shows-status")
    return ShowsView(
        picker, title, description, author, language, category, explicit, save, artwork, upload, feed_url, rotate,
        delete, status,
    )  # fmt: skip


def _shown(view: ShowsView, show: ShowView | None, message: str) -> dict[Any, Any]:
    """The screen for `show` (None: a blank new show) with `message` under it."""
    if show is None:
        blank = {view.title: "", view.description: "", view.author: "", view.feed_url: ""}
        return blank | {view.picker: gr.update(value=NEW_SHOW), view.status: message}
    return {
        view.picker: gr.update(choices=[("New show", NEW_SHOW), (show.title, show.id)], value=show.id),
        view.title: show.title,
        view.description: show.description,
        view.author: show.author,
        view.language: show.language,
        view.category: show.category,
        view.explicit: show.explicit,
        view.feed_url: show.feed_url,
        view.status: message,
    }


def wire_shows(view: ShowsView, key: gr.Textbox, context: StudioContext) -> None:
    outputs = [view.picker, *view.fields, view.feed_url, view.status]
    wire_show_picker(view.picker, key, context, allow_none=False)

    async def open_show(api_key: str | None, show_id: str | None) -> dict[Any, Any]:
        if not show_id:
            return _shown(view, None, "")
        try:
            return _shown(view, await context.api(api_key).show(show_id), "")
        except StudioApiError as error:
            return {view.status: field_error(error.message)}

    view.picker.input(open_show, inputs=[key, view.picker], outputs=outputs)

    async def save(api_key: str | None, show_id: str | None, *fields: Any) -> dict[Any, Any]:
        names = ("title", "description", "author", "language", "category", "explicit")
        values = dict(zip(names, fields, strict=True))
        api = context.api(api_key)
        try:
            if show_id:
                show = await api.change_show(show_id, ShowChange(**values))
            else:
                show = await api.create_show(ShowFields(**values))
        except ValidationError as error:
            problems = [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()]
            return {view.status: field_error("; ".join(problems))}
        except StudioApiError as error:
            return {view.status: field_error(error.message)}
        return _shown(view, show, notice("Saved. Add episodes from Generate or History."))

    view.save.click(save, inputs=[key, view.picker, *view.fields], outputs=outputs)

    async def upload(api_key: str | None, show_id: str | None, artwork: str | None) -> dict[Any, Any]:
        if not show_id or not artwork:
            return {view.status: field_error("save the show and pick an image first")}
        try:
            show = await context.api(api_key).upload_artwork(show_id, artwork)
        except StudioApiError as error:
            return {view.status: field_error(error.message)}
        return _shown(view, show, notice("Artwork stored."))

    view.upload.click(upload, inputs=[key, view.picker, view.artwork], outputs=outputs)

    async def rotate(api_key: str | None, show_id: str | None) -> dict[Any, Any]:
        if not show_id:
            return {view.status: field_error("pick a show first")}
        try:
            show = await context.api(api_key).rotate_feed(show_id)
        except StudioApiError as error:
            return {view.status: field_error(error.message)}
        return _shown(view, show, notice("A new feed URL: subscribers of the old one must subscribe again."))

    view.rotate.click(rotate, inputs=[key, view.picker], outputs=outputs)

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
            return field_error("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()))
        if options is None:
            return field_error("pick a show to publish it in")
        try:
            published = await context.api(api_key).publish_job(job_id, options)
        except StudioApiError as error:
            return field_error(error.message)
        assert published.episode is not None
        return notice(f"“{published.episode.title}” is an episode of {published.episode.show_title}.")

    view.add.click(add, inputs=[key, job, *fields.components], outputs=view.status)

    async def remove(api_key: str | None, job_id: str | None) -> str:
        if not job_id:
            return field_error("pick a job first (click its row)")
        try:
            await context.api(api_key).unpublish_job(job_id)
        except StudioApiError as error:
            return field_error(error.message)
        return notice("Taken out of its show: its feed no longer lists it.")

    view.remove.click(remove, inputs=[key, job], outputs=view.status)

"""The studio: a Gradio app in the browser, and a client of the api over HTTP only.

    mount_studio(app, api_url)   the studio at /studio of a FastAPI app (`voxcast serve` mounts it on the api)
    studio_app(api_url)          a FastAPI app with only the studio (`voxcast webui`, for a separate process)

Screens (tabs): Write (with drafting from notes and transcript clean-up), Cast, Generate, Listen (the finished
episode), History, and Admin for admin keys. The
API key typed at the top lives in the page (and in the browser's storage only when "Remember the key on this
device" is ticked): every action sends it to the api, which alone decides what the key may see and do. The
script and the cast are kept in the browser as they change and come back when the page is loaded again.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import gradio as gr
from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

from webui.api_client import Access, StudioApiError
from webui.assets import PAGE_HEAD, STUDIO_CSS, VENDOR_DIR, VENDOR_FOLDER
from webui.context import StudioContext
from webui.examples import find_examples
from webui.files import StudioFiles
from webui.render import field_error, notice
from webui.views.admin import AdminView, admin_listing, build_admin, wire_admin
from webui.views.cast import (
    CastView,
    build_cast,
    library_outputs,
    library_updates,
    voice_pickers,
    wire_cast,
    with_restored_voices,
)
from webui.views.drafting import build_drafting, wire_drafting
from webui.views.finish import build_finish, wire_finish
from webui.views.generate import build_generate, wire_generate
from webui.views.history import HistoryView, build_history, history_updates, wire_history
from webui.views.kept_work import build_kept_work, follow_kept_job, restore_outputs, restore_work, wire_kept_work
from webui.views.publishing import (
    build_history_publishing,
    build_shows,
    wire_history_publishing,
    wire_show_picker,
    wire_shows,
)
from webui.views.screens import Screens, forget_jobs, listen_components
from webui.views.write import build_write, wire_write

STUDIO_PATH = "/studio"


def build_studio(context: StudioContext) -> gr.Blocks:
    # Gradio's copies of files it served go after a day, checked hourly.
    with gr.Blocks(title="voxcast studio", analytics_enabled=False, delete_cache=(3600, 24 * 3600)) as studio:
        gr.HTML('<h1 class="vx-brand">voxcast studio</h1>')
        key = gr.Textbox(
            label="API key",
            type="password",
            placeholder="vxc_… (none on a single-user install)",
            submit_btn="Connect",
            elem_id="api-key",
        )
        kept = build_kept_work()
        connection = gr.HTML(elem_id="connection")
        with gr.Tabs(selected="write", overflow_behavior="wrap") as tabs:
            with gr.Tab("1 · Write", id="write"):
                write = build_write(context)
                drafting = build_drafting()
            with gr.Tab("2 · Cast", id="cast"):
                cast = build_cast(context)
            with gr.Tab("3 · Generate", id="generate"):
                generate = build_generate()
            with gr.Tab("4 · Listen", id="finish"):
                finish = build_finish()
            with gr.Tab("History", id="history") as history_tab:
                history = build_history(history_tab)
                publishing = build_history_publishing()
            with gr.Tab("Shows", id="shows"):
                shows = build_shows()
            with gr.Tab("Admin", id="admin", visible=False) as admin_tab:
                admin = build_admin(admin_tab)
        screens = Screens(tabs, key, write, cast, generate, finish)
        wire_write(write, cast, context)
        wire_drafting(drafting, write, context, key)
        wire_cast(cast, context, key)
        generating = wire_generate(screens, context)
        wire_finish(screens, context)
        following = wire_history(history, screens, context)
        wire_history_publishing(publishing, history.job, key, context)
        wire_show_picker(generate.episode.show, key, context, allow_none=True)
        wire_shows(shows, key, context)
        wire_admin(admin, context, key)
        wire_kept_work(kept, key, write, cast, generate)

        async def connect_key(api_key: str | None, pending: list[str | None], *picked: str | None) -> dict[Any, Any]:
            connected = await _connect(
                context, connection, cast, history, admin, api_key, with_restored_voices(picked, pending)
            )
            return forget_jobs(screens) | connected

        connect_outputs = [
            connection, admin.tab, *library_outputs(cast), cast.library.problem, cast.pending_voices, *history.listing,
            history.problem, *admin.listing, *forget_jobs(screens),
        ]  # fmt: skip
        connect_inputs = [key, cast.pending_voices, *voice_pickers(cast)]

        async def follow_again(api_key: str | None, job_id: str | None) -> dict[Any, Any]:
            return await follow_kept_job(kept, screens, context, api_key, job_id)

        follow_again_outputs = [
            kept.job, generate.sent, generate.job, generate.progress, generate.segments, generate.cancel,
            *listen_components(finish),
        ]  # fmt: skip
        # another key: the jobs followed for the one before stop, and what they showed goes; the job the page followed
        # before a reload is followed again once a key that sees it is typed
        key.submit(
            connect_key,
            inputs=connect_inputs,
            outputs=connect_outputs,
            show_progress="hidden",
            cancels=[generating, following],
        ).then(follow_again, inputs=[key, kept.job], outputs=follow_again_outputs, show_progress="hidden")

        def restore(stored_drafts: object, stored_key: object) -> dict[Any, Any]:
            return restore_work(kept, key, write, cast, generate, stored_drafts, stored_key)

        restored = studio.load(
            restore, inputs=[kept.drafts, kept.key_store], outputs=restore_outputs(kept, key, write, cast, generate)
        )
        connected = restored.then(connect_key, inputs=connect_inputs, outputs=connect_outputs, show_progress="hidden")
        connected.then(follow_again, inputs=[key, kept.job], outputs=follow_again_outputs, show_progress="hidden")

        async def forget_page(request: gr.Request) -> None:
            """A closed page plays no more: the live parts it kept go (`LiveFolders`)."""
            context.live_folders.release(request.session_hash)

        studio.unload(forget_page)
    return studio


async def _connect(
    context: StudioContext,
    connection: gr.HTML,
    cast: CastView,
    history: HistoryView,
    admin: AdminView,
    api_key: str | None,
    picked: list[str | None],
) -> dict[Any, Any]:
    """Check the key; show the library (with `picked` in its pickers, `voice_pickers` order, those it holds), the
    history and (for an admin) the Admin tab it gives access to."""
    api = context.api(api_key)
    cleared = library_updates(cast, [], picked) | history_updates(history, []) | {admin.tab: gr.Tab(visible=False)}
    try:
        access = await api.access()
        voices = await api.voices()
        jobs = await api.jobs()
    except StudioApiError as error:
        message = error.message
        if error.status == 401 and api.key is None:
            message = "enter your API key (an admin creates one with “voxcast keys create”)"
        return cleared | {connection: field_error(message)}
    if api.key is None:
        status = "Single-user install: no key needed."
    else:
        status = f"Connected with {'an admin' if access is Access.ADMIN else 'a user'} key."
    updates = library_updates(cast, voices, picked) | {cast.pending_voices: ()}  # the restored voices are placed
    updates |= history_updates(history, jobs) | {connection: notice(status)}
    if access is Access.ADMIN:
        updates |= {admin.tab: gr.Tab(visible=True)} | await admin_listing(admin, api, "")
    else:
        updates[admin.tab] = gr.Tab(visible=False)
    return updates


# Gradio's default colours for a few texts fall short of WCAG's 4.5:1 on their background, and a producer squints at
# them: its softer text (hints, file sizes, status lines) is neutral-400, 1.9:1 on white (neutral-600: 7.7:1); a
# selected tab and a primary button are indigo-500, 4.5:1 (indigo-600: 6.3:1); a stop button's white is 3.8:1 on red-500
# (red-700, as its dark theme has it: 6.5:1). The dark theme keeps its own, which pass.
STUDIO_THEME = gr.themes.Default(primary_hue="indigo").set(
    body_text_color_subdued="*neutral_600",
    color_accent="*primary_600",
    button_primary_background_fill="*primary_600",
    button_primary_background_fill_hover="*primary_700",
    button_cancel_background_fill="#b91c1c",
    button_cancel_background_fill_hover="#991b1b",
)


def mount_studio(app: FastAPI, api_url: str, *, max_upload_bytes: int | None = None) -> FastAPI:
    """Serve the studio at /studio of `app` (and redirect / there when `app` has no page of its own)."""
    context = StudioContext(api_url=api_url, files=StudioFiles.temporary(), examples=find_examples())
    studio = build_studio(context)
    studio.queue(default_concurrency_limit=None)  # handlers wait on the api, not on this process's CPU
    # before the studio's own mount, which would otherwise answer for every path under it
    app.mount(f"{STUDIO_PATH}/{VENDOR_FOLDER}", StaticFiles(directory=VENDOR_DIR), name="studio-vendor")
    if not any(getattr(route, "path", None) == "/" for route in app.routes):
        app.add_api_route("/", lambda: RedirectResponse(f"{STUDIO_PATH}/"), include_in_schema=False)
    return gr.mount_gradio_app(
        app,
        studio,
        path=STUDIO_PATH,
        footer_links=[],
        run_history=False,  # runs would keep the API key in the browser's storage
        allowed_paths=[str(context.files.root)],
        max_file_size=max_upload_bytes,
        ssr_mode=False,
        mcp_server=False,
        theme=STUDIO_THEME,
        css=STUDIO_CSS,
        head=PAGE_HEAD,
        # Gradio's status line for screen readers says "common.complete" when an event ends: its English texts lack
        # that key (issue 38 saw it flash in the page)
        i18n=gr.I18n(en={"common.complete": "Done"}),
    )


def studio_app(api_url: str, *, max_upload_bytes: int | None = None) -> FastAPI:
    """The studio alone, for `voxcast webui`: a process of its own talking to an api elsewhere."""
    app = FastAPI(title="voxcast studio", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/healthz", include_in_schema=False)
    def health() -> dict[str, str]:
        return {"status": "ok"}

    return mount_studio(app, api_url, max_upload_bytes=max_upload_bytes)


def local_api_url(host: str, port: int) -> str:
    """How a process reaches an api it serves on host:port: a wildcard address becomes the loopback one."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return f"http://{host or '127.0.0.1'}:{port}"
    if address.is_unspecified:
        address = ipaddress.ip_address("::1" if address.version == 6 else "127.0.0.1")
    return f"http://[{address}]:{port}" if address.version == 6 else f"http://{address}:{port}"

"""HTML for what the studio shows: the parsed script, errors at their line, progress, players, tables.

Pure functions of the data they show, every text escaped, class names prefixed `vx-` (styled in
`webui.assets`). The colours of speakers are the same on every screen: the first speaker is blue, and so on.
"""

from __future__ import annotations

import bisect
import html
import json
import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from api.schemas import (
    JobView,
    QueueDepth,
    RegenerationPlan,
    ScriptView,
    ShowEpisodeView,
    UsageView,
    VoiceView,
    WorkerList,
)
from core.audio_rates import FRAMES_PER_SECOND
from core.byte_sizes import byte_size, megabytes
from core.job_states import JobState
from script_text.parser import Pause, ScriptWarning, Speaker, Turn
from script_text.plan import estimate_seconds
from webui.follow import JobSnapshot, ProgressFigures
from webui.live_audio import LivePart, buffer_text
from webui.metrics_summary import MetricsSummary
from webui.script_preview import ScriptPreview
from webui.voices import VoiceUse
from webui.waveform import Waveform

# Speaker 1 to 4: blue, pink, green and amber, each dark enough for its name to read on white and on the light grey of
# a turn (4.5:1 at least: the 600s of blue, and the 700s of the others).
SPEAKER_COLOURS = ("#2563eb", "#be185d", "#047857", "#b45309")
_PREVIEW_TURNS = 400  # a 90-minute script has ~1,000 turns; the rest are counted, not drawn
_SOURCE_CONTEXT_LINES = 2
_STATE_LABELS = {
    JobState.QUEUED: "Queued",
    JobState.RUNNING: "Generating",
    JobState.DONE: "Done",
    JobState.FAILED: "Failed",
    JobState.CANCELLED: "Cancelled",
    "deleted": "Deleted",  # not a state of the api's: a job the page showed, deleted since (`deleted_job_html`)
}


def clock(seconds: float) -> str:
    """Seconds as m:ss, or h:mm:ss from an hour; whole seconds floored, as audio players show a duration (a
    22.6 s episode reads 0:22 in its title and in its player alike)."""
    total = max(0, math.floor(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _colour(index: int) -> str:
    return SPEAKER_COLOURS[index % len(SPEAKER_COLOURS)]


def field_error(message: str | None) -> str:
    """An error shown under the field it concerns; empty when there is none."""
    return f'<p class="vx-field-error" role="alert">{_e(message)}</p>' if message else ""


def notice(message: str) -> str:
    """A quiet status line: what the page did or where something stands."""
    return f'<p class="vx-notice" role="status">{_e(message)}</p>'


def question(message: str) -> str:
    """What the page asks before it replaces or deletes something, shown where it cannot be missed."""
    return f'<p class="vx-question" role="alert">{_e(message)}</p>'


def confirmed(message: str) -> str:
    """That something was deleted or cancelled, as visible as the question that asked for it."""
    return f'<p class="vx-confirmed" role="status">{_e(message)}</p>'


# --- Write -----------------------------------------------------------------------------------------------


def script_preview_html(preview: ScriptPreview) -> str:
    if preview.is_empty:
        return '<div class="vx-preview vx-empty">Paste, type or upload a script, or load an example.</div>'
    if preview.error is not None or preview.script is None:
        assert preview.error is not None
        return script_error_html(preview.text, preview.error.message, preview.error.line)
    script = preview.script
    turns = script.turns
    counts = [sum(turn.speaker == index for turn in turns) for index in range(len(script.speakers))]
    legend = "".join(
        f'<span class="vx-chip" style="--vx-c:{_colour(index)}">{_e(speaker.name)} · {count} '
        f"turn{'s' if count != 1 else ''}</span>"
        for index, (speaker, count) in enumerate(zip(script.speakers, counts, strict=True))
    )
    beside = _warnings_by_item(script.items, preview.warnings)
    items = [
        _preview_item(item, script.speakers, beside.get(position, ()))
        for position, item in enumerate(script.items[:_PREVIEW_TURNS])
    ]
    hidden = len(script.items) - _PREVIEW_TURNS
    if hidden > 0:
        items.append(f'<li class="vx-more">… and {hidden} more</li>')
    return (
        '<div class="vx-preview" data-state="ok">'
        f'<p class="vx-summary"><b>{len(turns)}</b> turn{"s" if len(turns) != 1 else ""} · '
        f"<b>{len(script.speakers)}</b> speaker{'s' if len(script.speakers) != 1 else ''} · "
        f'about <b class="vx-duration">{clock(preview.estimated_seconds)}</b> of audio'
        + (f' · <span class="vx-warning-count">{len(preview.warnings)} to check</span>' if preview.warnings else "")
        + "</p>"
        f'<div class="vx-legend">{legend}</div>'
        f'<ol class="vx-turns">{"".join(items)}</ol></div>'
    )


def _warnings_by_item(
    items: Sequence[Turn | Pause], warnings: Sequence[ScriptWarning]
) -> dict[int, tuple[ScriptWarning, ...]]:
    """Each warning beside the item holding its line: the last item that starts at or before it."""
    beside: dict[int, tuple[ScriptWarning, ...]] = {}
    starts = [item.line for item in items]
    for warning in warnings:
        position = max(bisect.bisect_right(starts, warning.line) - 1, 0)
        beside[position] = (*beside.get(position, ()), warning)
    return beside


def _preview_item(item: Turn | Pause, speakers: Sequence[Speaker], warnings: Sequence[ScriptWarning] = ()) -> str:
    notes = "".join(
        f'<p class="vx-warning" role="note" data-line="{warning.line}">Line {warning.line}: {_e(warning.message)}</p>'
        for warning in warnings
    )
    if isinstance(item, Pause):
        return (
            f'<li class="vx-pause">pause {item.seconds:g} s <span class="vx-meta">line {item.line}</span>{notes}</li>'
        )
    return (
        f'<li class="vx-turn" style="--vx-c:{_colour(item.speaker)}" data-speaker="{item.speaker + 1}">'
        f'<span class="vx-who">{_e(speakers[item.speaker].name)}</span>'
        f'<span class="vx-meta">line {item.line} · ~{estimate_seconds(item.text):.0f} s</span>'
        f"<p>{_e(item.text)}</p>{notes}</li>"
    )


def script_error_html(text: str, message: str, line: int | None) -> str:
    """The error, and when it has a line, the script around that line with the line marked."""
    where = f"<b>Line {line}:</b> " if line is not None else ""
    parts = [
        f'<div class="vx-preview vx-script-error" data-state="error" role="alert">'
        f'<p class="vx-error-message">{where}{_e(message)}</p>'
    ]
    lines = text.replace("\r\n", "\n").replace("\r", "\n").removesuffix("\n").split("\n")
    if line is not None and 1 <= line <= len(lines):
        first = max(1, line - _SOURCE_CONTEXT_LINES)
        last = min(len(lines), line + _SOURCE_CONTEXT_LINES)
        rows = []
        for number in range(first, last + 1):
            marked = ' class="vx-bad-line" aria-current="true"' if number == line else ""
            rows.append(
                f'<li{marked} data-line="{number}"><span class="vx-line-number">{number}</span>'
                f"<code>{_e(lines[number - 1]) or '&nbsp;'}</code></li>"
            )
        parts.append(f'<ol class="vx-source">{"".join(rows)}</ol>')
    parts.append("</div>")
    return "".join(parts)


# --- Cast ------------------------------------------------------------------------------------------------


def script_job_html(view: ScriptView) -> str:
    """Where a draft or a clean-up stands: each attempt of the script model with its verdict, then the outcome."""
    what = "Drafting" if view.task == "draft" else "Cleaning up"
    items = []
    for attempt in view.attempts:
        label = f"Attempt {attempt.attempt} of {view.max_attempts}"
        if attempt.rejected is not None:
            items.append(
                f'<li class="vx-attempt" data-verdict="rejected">{label} was rejected: {_e(attempt.rejected)}</li>'
            )
        else:
            verdict, said = _unjudged_attempt(view.state, last=attempt is view.attempts[-1])
            items.append(f'<li class="vx-attempt" data-verdict="{verdict}">{label}{said}</li>')
    outcome = {
        "queued": f"{what}: waiting for a scripts worker…",
        "running": f"{what}…" if view.attempts else f"{what}: loading the script model…",
        "done": f"Done: {len(view.speakers)} speakers, {view.words or 0:,} words"
        + {"parser": " (read as it was)", "cleanup": " (after clean-up)", "model": ""}.get(view.via or "", "")
        + ". Review it below, then put it in the editor.",
        "failed": f"Failed: {view.error or 'no reason given'}",
        "cancelled": "Cancelled.",
    }[view.state]
    notes = "".join(f'<li class="vx-note">{_e(note)}</li>' for note in view.notes)
    role = "alert" if view.state == "failed" else "status"
    return (
        f'<div class="vx-script-job" data-state="{_e(view.state)}">'
        f'<p role="{role}">{_e(outcome)}</p>'
        + (f'<ol class="vx-attempts">{"".join(items)}</ol>' if items else "")
        + (f"<ul>{notes}</ul>" if notes else "")
        + "</div>"
    )


def _unjudged_attempt(state: str, *, last: bool) -> tuple[str, str]:
    """An attempt with no rejection: (its verdict, what follows its label). Only the last attempt of a done job gave
    the script; the last of a job that ended otherwise was stopped before its reply was judged."""
    if not last or state == "done":
        return "taken", " was taken."
    if state == "running":
        return "writing", ": the script model is writing…"
    if state == "cancelled":
        return "stopped", " was stopped by the cancel, before its reply was finished."
    return "stopped", " ended before its reply was judged."


def speaker_header_html(index: int, speaker: Speaker, turns: int) -> str:
    return (
        f'<div class="vx-speaker-head" style="--vx-c:{_colour(index)}">'
        f'<span class="vx-dot"></span><b>{_e(speaker.name)}</b>'
        f'<span class="vx-meta">{turns} turn{"s" if turns != 1 else ""}</span></div>'
    )


def voices_html(voices: Sequence[VoiceView]) -> str:
    if not voices:
        return '<p class="vx-empty">No voices yet: add an example voice or upload a recording below.</p>'
    rows = "".join(
        f"<tr><td>{_e(voice.name)}</td><td>{voice.seconds:.1f} s{' (trimmed)' if voice.trimmed else ''}</td>"
        f"<td>{voice.original_sample_rate // 1000} kHz</td></tr>"
        for voice in voices
    )
    return (
        '<div class="vx-table-wrap"><table class="vx-table vx-voices"><thead><tr><th>Voice</th><th>Length</th>'
        f"<th>Recorded at</th></tr></thead><tbody>{rows}</tbody></table></div>"
    )


def voice_use_html(speaker: str, use: VoiceUse, library_voice: str | None) -> str:
    """Which voice the speaker's row sends (`webui.voices.voice_in_use`), and what is set aside when both are given."""
    if use is VoiceUse.UPLOAD:
        text = f"{speaker} uses the recording given here"
        if library_voice is not None:
            text += f"; the library voice “{library_voice}” is set aside (clear the recording to use it)"
    elif use is VoiceUse.LIBRARY:
        text = f"{speaker} uses the library voice “{library_voice or 'picked above'}”"
    elif use is VoiceUse.UNUSABLE:
        text = f"{speaker}'s recording cannot be used (see below): replace it, or clear it to use a library voice"
    else:
        text = f"{speaker} has no voice yet: pick a library voice or give a recording"
    return f'<p class="vx-voice-use" data-uses="{use.value}">{_e(text)}.</p>'


def voice_preview_html(url: str, name: str, take: str) -> str:
    """A voice's player, started by the page's script; `take` differs on every play, so playing again restarts it."""
    return (
        f'<div class="vx-voice-preview" data-take="{_e(take)}"><span class="vx-meta">{_e(name)}</span>'
        f'<audio controls preload="auto" src="{_e(url)}"></audio></div>'
    )


# --- Generate --------------------------------------------------------------------------------------------


NO_WORKER = (
    "No worker is running, so nothing takes this job yet: start one (“voxcast serve” runs one beside the api, "
    "“voxcast serve --only worker” one on its own), or ask the admin, who sees the workers on the Admin screen. "
    "The job stays queued and starts as soon as a worker is up."
)


CANCELLED_JOB = (
    "Cancelled: nothing more of it is generated. To make it after all, press Generate again (it sends the script "
    "and cast on Write and Cast); History deletes it when you no longer want it."
)


def job_progress_html(snapshot: JobSnapshot) -> str:
    job, progress = snapshot.job, snapshot.progress
    head = (
        f'<div class="vx-job" data-state="{_e(job.state)}" data-job="{_e(job.id)}">'
        f'<p class="vx-job-head">{state_badge(job.state)} <b>{_e(job.title or "Untitled episode")}</b> '
        f'<code class="vx-id">{_e(job.id[:8])}</code></p>'
    )
    if job.state == JobState.QUEUED:
        where = f"number {job.position} in the {job.queue} queue" if job.position else f"in the {job.queue} queue"
        body = f'<p class="vx-queue-position">Waiting: {where}.</p>'
        if snapshot.workers == 0:
            body += field_error(NO_WORKER)
    else:
        body = _progress_bar(progress, job.state, snapshot.segments_stored)
    if job.state == JobState.FAILED:
        body += field_error(job.error or "the job failed")
    if job.state == JobState.CANCELLED:
        body += f'<p class="vx-meta">{_e(CANCELLED_JOB)}</p>'
    return head + body + "</div>"


def deleted_job_html(title: str | None, job_id: str) -> str:
    """Where the page showed a job that was deleted since: it says so, with nothing left to play or download."""
    return (
        f'<div class="vx-job" data-state="deleted" data-job="{_e(job_id)}">'
        f'<p class="vx-job-head">{state_badge("deleted")} <b>{_e(title or "Untitled episode")}</b> '
        f'<code class="vx-id">{_e(job_id[:8])}</code></p>'
        f"{confirmed('Deleted, with its episode, transcripts, segments and inputs: nothing of it is left.')}</div>"
    )


def _progress_bar(progress: ProgressFigures, state: str, segments_ready: int) -> str:
    """The bar and its figures, by `core.progress_estimate`'s rules: 100% only when done, no ETA before a steady
    speed, and past the plan's estimate the audio made so far and "finishing" instead of a share of a passed figure."""
    done = state == JobState.DONE
    percent = progress.percent(done=done)
    finishing = state == JobState.RUNNING and progress.past_estimate
    if finishing:
        audio = (
            f"{clock(progress.audio_seconds_done)} of audio so far (about {clock(progress.audio_seconds_planned)} "
            "was estimated)"
        )
    else:
        audio = f"{clock(progress.audio_seconds_done)} of about {clock(progress.audio_seconds_planned)} of audio"
    figures = [f'<span class="vx-audio-done">{audio}</span>']
    if not finishing:  # past the estimate a share would be of a figure already passed
        figures.append(f'<span class="vx-share">{percent}%</span>')
    if progress.segments_total:
        figures.append(f"{max(segments_ready, progress.segments_done)} of {progress.segments_total} segments ready")
    if finishing:
        figures.append('<span class="vx-eta">finishing</span>')
    elif state == JobState.RUNNING and progress.eta_seconds is not None:
        figures.append(f'<span class="vx-eta">about {clock(progress.eta_seconds)} left</span>')
    value = "" if finishing else f' aria-valuenow="{percent}"'  # an indeterminate bar while finishing
    return (
        f'<div class="vx-bar" role="progressbar" aria-valuemin="0" aria-valuemax="100"{value}>'
        f'<div style="width:{percent}%"></div></div><p class="vx-figures">{" · ".join(figures)}</p>'
    )


def cancel_notice(job: JobView) -> str:
    """What a cancel did: a queued job is cancelled at once; a running one stops within a step (the api's answer still
    says running, which read alone looks like the cancel failed)."""
    name = f"“{job.title or 'Untitled'}” ({job.id[:8]})"
    if job.state == JobState.CANCELLED:
        return f"{name} is cancelled."
    if job.cancel_requested and job.state == JobState.RUNNING:
        return f"Cancelling {name}: it stops within a step."
    return f"{name} is {job.state}."


def state_badge(state: str) -> str:
    return f'<span class="vx-state vx-state-{_e(state)}">{_e(_STATE_LABELS.get(state, state))}</span>'


def live_parts_html(parts: Sequence[LivePart], *, final: bool = False) -> str:
    """The audio made so far, part by part in episode order, each labelled with who speaks and what; the page's
    script plays the next part when one ends. Parts are only ever appended, so a part playing keeps playing.
    Once the job is `final` the heading says so, not that it is still generating."""
    if not parts:
        return ""
    items = "".join(
        f'<li class="vx-segment" data-index="{position}" data-segment="{part.segment}" '
        f'data-seconds="{part.seconds:.2f}"><span class="vx-part-label">{_e(part.label)}</span>'
        f'<audio controls preload="metadata" src="{_e(part.url)}"></audio></li>'
        for position, part in enumerate(parts)
    )
    heading = "Heard as it generated" if final else "Listen while it generates"
    return (
        f'<div class="vx-segments"><p class="vx-meta">{heading}: '
        f'<span class="vx-live-buffer">{_e(buffer_text(tuple(parts)))}</span>'
        f' <span class="vx-live-heard" hidden></span></p><ol>{items}</ol></div>'
    )


# --- Finish ----------------------------------------------------------------------------------------------


EMPTY_EPISODE_HTML = '<p class="vx-empty">A finished episode plays here. Generate one, or open one from History.</p>'


def episode_html(
    job: JobView, audio_url: str, chapters: dict[str, Any], waveform: Waveform, focus_turn: int | None = None
) -> str:
    """The episode's player, its waveform, its chapters and its transcript; the page's script draws the waveform
    with each turn's span in its speaker's colour and highlights the turn playing.

    `focus_turn` (a turn's `index` in turns.json) marks the turn the player starts from, e.g. one just
    regenerated.
    """
    turns = chapters.get("turns", [])
    focus = next((n for n, turn in enumerate(turns) if turn.get("index") == focus_turn), None)
    speakers = list(dict.fromkeys(str(turn.get("speaker", "")) for turn in turns))
    chapter_items = "".join(
        f'<li><button type="button" class="vx-seek" data-start="{float(chapter["start"]):.3f}">'
        f"{clock(float(chapter['start']))} {_e(chapter.get('title', ''))}</button></li>"
        for chapter in chapters.get("chapters", [])
    )
    cues = "".join(
        f'<li class="vx-cue" data-index="{_e(turn.get("index", n))}" data-start="{float(turn["start"]):.3f}" '
        f'data-end="{float(turn["end"]):.3f}"{" data-focus" if n == focus else ""} '
        f'style="--vx-c:{_colour(speakers.index(str(turn.get("speaker", ""))))}">'
        f'<button type="button" class="vx-seek" data-start="{float(turn["start"]):.3f}">'
        f"{clock(float(turn['start']))}</button>"
        f'<span class="vx-who">{_e(turn.get("speaker", ""))}</span><p>{_e(turn.get("text", ""))}</p></li>'
        for n, turn in enumerate(turns)
    )
    chapter_list = f'<details class="vx-chapters"><summary>Chapters</summary><ol>{chapter_items}</ol></details>'
    return (
        f'<div class="vx-episode" data-job="{_e(job.id)}">'
        f'<p class="vx-job-head">{state_badge(job.state)} <b>{_e(job.title or "Untitled episode")}</b> · '
        f"{clock(job.audio_seconds or 0)}</p>"
        f"{published_html(job)}"
        f'<audio class="vx-episode-audio" controls preload="metadata" src="{_e(audio_url)}"></audio>'
        f'<div class="vx-waveform" data-duration="{waveform.duration:.3f}" '
        f'data-peaks="{_e(json.dumps(waveform.peaks, separators=(",", ":")))}" '
        'title="Each turn in its speaker\'s colour: click one to play from there"></div>'
        f"{chapter_list if chapter_items else ''}"
        f'<ol class="vx-transcript" aria-label="Transcript">{cues}</ol></div>'
    )


def published_html(job: JobView) -> str:
    """Where the episode is published: its show and its title there (nothing when it is in no show)."""
    episode = job.episode
    if episode is None:
        return ""
    number = f", episode {episode.number}" if episode.number else ""
    season = f" of season {episode.season}" if episode.season and number else ""
    where = "listed in its feed" if episode.published_at else "listed in its feed once the job is done"
    return (
        f'<p class="vx-published">Published in the show <b>{_e(episode.show_title)}</b> as '
        f"“{_e(episode.title)}”{number}{season}: {where}.</p>"
    )


def show_episodes_html(episodes: Sequence[ShowEpisodeView]) -> str:
    """A show's episodes as its feed lists them, newest first (podcast apps list a serial show from episode 1 on
    their own), each with an Unpublish button (`data-job`, for the page's script); then those whose job is not done
    yet, which the feed lists once they are."""
    listed = sorted(
        (episode for episode in episodes if episode.published_at is not None),
        key=lambda episode: episode.published_at or datetime.min,
        reverse=True,
    )
    waiting = [episode for episode in episodes if episode.published_at is None]
    if not listed and not waiting:
        return (
            '<p class="vx-episodes-empty">No episodes yet: publish a job in this show from Generate ("Publish as an '
            'episode") or from History.</p>'
        )

    def item(episode: ShowEpisodeView, when: str) -> str:
        number = f"#{episode.number} " if episode.number else ""
        season = f"season {episode.season} · " if episode.season else ""
        return (
            f'<li class="vx-show-episode" data-job="{_e(episode.job_id)}"><span><b>{_e(number)}{_e(episode.title)}'
            f'</b> <span class="vx-meta">{_e(season)}{_e(when)}</span></span>'
            f'<button type="button" class="vx-unpublish" data-job="{_e(episode.job_id)}" '
            f'aria-label="Unpublish “{_e(episode.title)}”">Unpublish</button></li>'
        )

    parts = []
    if listed:
        items = "".join(
            item(episode, f"published {episode.published_at:%Y-%m-%d %H:%M}")
            for episode in listed
            if episode.published_at
        )
        parts.append(
            f'<p class="vx-episodes-head">The feed holds {len(listed)} episode'
            f'{"s" if len(listed) != 1 else ""}, newest first:</p><ol class="vx-show-episodes">{items}</ol>'
        )
    if waiting:
        items = "".join(
            item(episode, f"{_STATE_LABELS.get(episode.state, episode.state).lower()}: listed once done")
            for episode in waiting
        )
        parts.append(f'<p class="vx-episodes-head">Not in the feed yet:</p><ul class="vx-show-episodes">{items}</ul>')
    return f'<div class="vx-episodes">{"".join(parts)}</div>'


def artwork_html(url: str | None) -> str:
    """The show's artwork as podcast apps get it, or a word that there is none yet."""
    if url is None:
        return '<p class="vx-artwork-none">No artwork yet: podcast apps need a square image to list the show.</p>'
    return f'<img class="vx-artwork" src="{_e(url)}" alt="The show\'s artwork">'


def downloads_html(files: Sequence[tuple[str, str, int]]) -> str:
    """The episode's files, each (name, URL, size in bytes), as plain download links: a listener can save any of them
    and remove none (Gradio's file list offers a × that takes a file off the list)."""
    if not files:
        return ""
    items = "".join(
        f'<li><a class="vx-download" href="{_e(url)}" download="{_e(name)}">{_e(name)}</a> '
        f'<span class="vx-meta">{byte_size(size)}</span></li>'
        for name, url, size in files
    )
    return f'<div class="vx-downloads"><p class="vx-downloads-head">Downloads</p><ul>{items}</ul></div>'


def regeneration_plan_html(plan: RegenerationPlan) -> str:
    """What a regeneration will speak anew (every turn of its segments: in `whole` mode more than the one picked)
    and about how long it takes, for the listener to confirm."""
    turns = "".join(
        f"<li{' data-picked' if turn.index == plan.turn else ''}>{turn.index + 1} · "
        f'<span class="vx-who">{_e(turn.speaker)}:</span> {_e(turn.words)}</li>'
        for turn in plan.turns
    )
    took = "how long is not known" if plan.estimated_seconds is None else f"about {plan.estimated_seconds:.0f} s"
    count = f"{len(plan.turns)} turn{'s' if len(plan.turns) != 1 else ''}"
    return (
        f'<div class="vx-plan"><p>Regenerating turn {plan.turn + 1} speaks {count} anew '
        f"({clock(plan.audio_seconds)} of audio): {took}.</p><ol>{turns}</ol></div>"
    )


def takes_html(pairs: Sequence[tuple[int, str, str]]) -> str:
    """Each regenerated segment's earlier and new take side by side: (segment, earlier URL, new URL)."""
    rows = "".join(
        f'<li class="vx-take-pair" data-segment="{segment}"><span class="vx-meta">Segment {segment + 1}</span>'
        f'<label>Earlier take <audio class="vx-take-previous" controls preload="metadata" src="{_e(previous)}">'
        f'</audio></label><label>New take <audio class="vx-take-new" controls preload="metadata" src="{_e(new)}">'
        "</audio></label></li>"
        for segment, previous, new in pairs
    )
    return f'<div class="vx-takes"><p>Compare the takes, then keep one:</p><ol>{rows}</ol></div>' if rows else ""


# --- History and Admin -----------------------------------------------------------------------------------


HISTORY_COLUMNS = ["Title", "State", "Progress", "Audio", "Created", "Id"]


def history_rows(jobs: Sequence[JobView]) -> list[list[str]]:
    """The History table's rows (plain text: a row is clicked to open its job), in the order of `jobs`."""
    return [
        [job.title or "Untitled", _STATE_LABELS.get(job.state, job.state), progress_text(job), _length(job),
         _when(job.created_at), job.id[:8]]
        for job in jobs
    ]  # fmt: skip


def admin_jobs_table_html(jobs: Sequence[JobView]) -> str:
    if not jobs:
        return '<p class="vx-empty">No jobs yet.</p>'
    rows = [
        f'<tr data-job="{_e(job.id)}" data-state="{_e(job.state)}"><td>{_e(job.title or "Untitled")}</td>'
        f"<td>{state_badge(job.state)}</td><td>{progress_text(job)}</td><td>{_length(job)}</td>"
        f"<td>{_e(job.owner_name)}</td><td>{_e(job.queue)}</td><td>{job.priority}</td>"
        f"<td>{_when(job.created_at)}</td><td><code>{_e(job.id[:8])}</code></td></tr>"
        for job in jobs
    ]
    return (
        '<div class="vx-table-wrap"><table class="vx-table vx-jobs"><thead><tr><th>Title</th><th>State</th>'
        "<th>Progress</th><th>Audio</th><th>Owner</th><th>Queue</th><th>Priority</th><th>Created</th><th>Id</th>"
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def progress_text(job: JobView) -> str:
    """A job's progress in a table, in the words Generate's panel uses (`_progress_bar`): "finishing" once past the
    plan's estimate rather than a share stuck at 99%, and "waiting" for a queued job, whose frames (one handed back at
    a stop keeps them) are not being made now."""
    figures = ProgressFigures.of_job(job)
    if job.state == JobState.QUEUED:
        return "waiting"
    if job.state == JobState.RUNNING and figures.past_estimate:
        return "finishing"
    return f"{figures.percent(done=job.state == JobState.DONE)}%"


def _length(job: JobView) -> str:
    """The episode's length once made, else the plan's estimate (marked ~)."""
    if job.audio_seconds:
        return clock(job.audio_seconds)
    return f"~{clock(ProgressFigures.of_job(job).audio_seconds_planned)}"


def job_choice_label(job: JobView, *, admin: bool = False) -> str:
    owner = f" · {job.owner_name}" if admin else ""
    return f"{job.title or 'Untitled'} · {_STATE_LABELS.get(job.state, job.state)}{owner} · {job.id[:8]}"


def queues_html(queues: Sequence[QueueDepth]) -> str:
    rows = "".join(
        f'<tr data-queue="{_e(queue.queue)}"><td>{_e(queue.queue)}</td><td>{queue.queued}</td><td>{queue.running}</td>'
        f"<td>{'-' if queue.waiting_in_broker is None else queue.waiting_in_broker}</td></tr>"
        for queue in queues
    )
    return (
        '<div class="vx-table-wrap"><table class="vx-table vx-queues"><thead><tr><th>Queue</th><th>Queued</th>'
        f"<th>Running</th><th>Messages in Redis</th></tr></thead><tbody>{rows}</tbody></table></div>"
    )


# How a worker's engine decodes (`WorkerView.step_mode`), in an admin's words.
STEP_NAMES = {"graphs": "CUDA graphs", "fixed": "fixed shapes, no graphs", "eager": "eager"}


def workers_html(listing: WorkerList) -> str:
    """The live workers: where each runs, its engine's rows and K/V blocks in use, its speed, the decode step it runs
    (and why, on hover), and the jobs it holds; and the worker `voxcast serve` supervises, with its restarts."""
    if not listing.workers:
        rows = '<tr class="vx-no-workers"><td colspan="8">No worker is running: jobs wait in their queues.</td></tr>'
    else:
        rows = "".join(
            f'<tr data-worker="{_e(worker.name)}"><td>{_e(worker.name)}</td><td>{_e(worker.model)}</td>'
            f"<td>{_e(worker.device)} · {_e(worker.dtype)}</td><td>{worker.slots_in_use} of {worker.slots}"
            f"{f' (+{worker.waiting} waiting)' if worker.waiting else ''}</td>"
            f"<td>{worker.kv_blocks_in_use} of {worker.kv_blocks}</td><td>{worker.frames_per_second:.1f}</td>"
            f'<td title="{_e(worker.step_mode_reason)}">{_e(STEP_NAMES.get(worker.step_mode, worker.step_mode))}</td>'
            f"<td>{len(worker.running_jobs)}</td></tr>"
            for worker in listing.workers
        )
    supervised = listing.supervised
    note = ""
    if supervised is not None:
        last = f"; last exit: {supervised.last_exit}" if supervised.last_exit else ""
        note = (
            f'<p class="vx-meta vx-supervised">Supervised worker: {_e(supervised.state)}, '
            f"{supervised.restarts} restart{'s' if supervised.restarts != 1 else ''}{_e(last)}.</p>"
        )
    return (
        '<div class="vx-table-wrap"><table class="vx-table vx-workers"><thead><tr><th>Worker</th><th>Model</th>'
        "<th>Device</th><th>Rows in use</th><th>K/V blocks in use</th><th>Frames/s</th><th>Decode step</th>"
        "<th>Jobs</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></div>{note}"
    )


def metrics_html(summary: MetricsSummary) -> str:
    """`/metrics`' headline figures, as one line of figures."""
    states = " · ".join(f"{count} {state}" for state, count in summary.jobs_by_state.items() if count)
    depth = sum(summary.queue_depth.values())
    figures = [
        f"{summary.workers_up} worker{'s' if summary.workers_up != 1 else ''} up",
        f"{depth} message{'s' if depth != 1 else ''} in the queues",
        f"oldest queued job waiting {clock(summary.oldest_queued_seconds)}",
        f"{summary.frames_per_second:.1f} frames/s ({summary.frames_per_second / FRAMES_PER_SECOND:.1f}× real time)",
        f"jobs: {states or 'none'}",
    ]
    return f'<p class="vx-metrics">{" · ".join(_e(figure) for figure in figures)}</p>'


def usage_html(keys: Sequence[UsageView]) -> str:
    """Every key's storage, the largest first: what deletes and the retention policy would free."""
    rows = "".join(
        f'<tr data-key="{usage.key_id}"><td>{_e(usage.key_name)}</td><td>{megabytes(usage.bytes)}</td>'
        f"<td>{usage.jobs}</td><td>{usage.voices}</td><td>{usage.audio_minutes:,.1f}</td>"
        f"<td>{'-' if usage.quota_bytes is None else megabytes(usage.quota_bytes)}</td></tr>"
        for usage in keys
    )
    return (
        '<div class="vx-table-wrap"><table class="vx-table vx-usage"><thead><tr><th>Key</th><th>Stored</th>'
        "<th>Jobs</th><th>Voices</th><th>Audio minutes</th><th>Quota</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></div>"
    )


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M")

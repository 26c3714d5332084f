"""The studio's pure parts, without a browser: the script preview and speaker names, reading the api's errors
and events, HTML that escapes what users typed, and where files and the api are found."""

from __future__ import annotations

import base64
import html
import json
from datetime import datetime
from functools import partial
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf

from api.schemas import (
    JobPlanView,
    JobProgress,
    JobView,
    PlannedTurn,
    RegenerationPlan,
    ScriptAttemptView,
    ScriptView,
    VoiceView,
    WorkerList,
    WorkerView,
)
from api.services.job_plan import plan_view
from core.job_events import AudioEvent
from core.worker_presence import SupervisedWorker
from script_text.parser import parse_script
from script_text.plan import plan_script
from tests.conftest import write_voice_file
from webui.api_client import StudioApiError, _raise_for_problem
from webui.app import local_api_url
from webui.examples import example_voice_name, find_examples
from webui.files import StudioFiles, episode_file_name
from webui.follow import JobSnapshot, ProgressFigures
from webui.kept_work import Drafts, drafts_to_keep, key_to_keep, remembered_key
from webui.live_audio import (
    PAST_ESTIMATE,
    LiveAudio,
    LiveFolders,
    LivePart,
    buffer_text,
    first_words,
    part_label,
    part_length_seconds,
)
from webui.render import (
    CANCELLED_JOB,
    cancel_notice,
    clock,
    confirmed,
    deleted_job_html,
    downloads_html,
    episode_html,
    history_rows,
    job_progress_html,
    live_parts_html,
    progress_text,
    question,
    regeneration_plan_html,
    script_error_html,
    script_job_html,
    script_preview_html,
    takes_html,
    voice_use_html,
    workers_html,
)
from webui.script_preview import SpeakerNameError, preview_script, renamed_script, script_text_to_send
from webui.views.cast import with_restored_voices
from webui.views.finish import needs_confirmation
from webui.views.history import clicked_job
from webui.voices import RecordingShape, VoiceUse, recording_problem, recording_shape, same_voice_in, voice_in_use
from webui.waveform import MAX_PEAKS, PEAKS_PER_SECOND, Waveform, read_waveform, waveform_source


def test_the_preview_parses_estimates_and_places_errors_at_their_line() -> None:
    assert preview_script("  \n").is_empty and preview_script("  \n").error is None
    good = preview_script("Alice: Hello there, how are you today?\n[pause: 1s]\nBob: Fine.\n")
    assert good.script is not None and [speaker.name for speaker in good.script.speakers] == ["Alice", "Bob"]
    spoken = len("Hello there, how are you today?") / 14  # seconds at 14 characters a second
    assert good.estimated_seconds == pytest.approx(spoken + 1 + 1, abs=0.01)  # + the pause + "Fine." (at least 1 s)
    bad = preview_script("Alice: Hi.\nBob: Hello.\n[pause: 99s]\n")
    assert bad.script is None and bad.error is not None and bad.error.line == 3


def test_renamed_speakers_become_the_script_sent_and_bad_names_point_at_their_speaker() -> None:
    preview = preview_script("Speaker 1: Hi.\nSpeaker 2: Hello.\n[pause: 0.5s]\nSpeaker 1: Bye.\n")
    assert preview.script is not None
    assert renamed_script(preview.script, ["Speaker 1", " ", None, None]) is None
    text, sent = script_text_to_send(preview, ["Ann", "Speaker 2", "", ""])
    assert text == "Ann: Hi.\nSpeaker 2: Hello.\n[pause: 0.5s]\nAnn: Bye.\n"
    assert [speaker.key for speaker in sent.speakers] == ["Ann", "2"]
    unchanged_text, unchanged = script_text_to_send(preview, ["", "", "", ""])
    assert unchanged_text == preview.text and unchanged is preview.script
    with pytest.raises(SpeakerNameError) as duplicate:
        renamed_script(preview.script, ["Ann", "ann"])
    assert duplicate.value.index == 1 and "already called" in duplicate.value.message
    with pytest.raises(SpeakerNameError) as invalid:
        renamed_script(preview.script, ["Ann", "2nd guest: x"])
    assert invalid.value.index == 1 and "cannot be a speaker name" in invalid.value.message


def _response(status: int, body: object) -> httpx.Response:
    content = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    return httpx.Response(status, content=content, request=httpx.Request("GET", "http://api/v1/jobs"))


def test_api_errors_become_messages_with_their_fields_and_lines() -> None:
    detail = [{"field": "script", "msg": "no speaker tag", "line": 3}, {"field": "voices.Bob", "msg": "silent"}]
    with pytest.raises(StudioApiError) as invalid:
        _raise_for_problem(_response(422, {"detail": detail}))
    assert invalid.value.status == 422 and invalid.value.message == "no speaker tag; silent"
    assert [(p.field, p.line) for p in invalid.value.problems] == [("script", 3), ("voices.Bob", None)]
    with pytest.raises(StudioApiError, match="^the limit is 4$"):
        _raise_for_problem(_response(429, {"detail": "the limit is 4"}))
    with pytest.raises(StudioApiError, match="answered 502 Bad Gateway"):
        _raise_for_problem(_response(502, "<html>proxy error</html>"))
    _raise_for_problem(_response(200, {"jobs": []}))


def test_html_escapes_what_users_typed_and_marks_the_bad_line() -> None:
    shown = script_error_html("Alice: <b>hi</b>\n<script>x</script>\nBob: ok", "bad <tag>", 2)
    assert "<script>" not in shown and "&lt;script&gt;" in shown and "bad &lt;tag&gt;" in shown
    assert 'class="vx-bad-line" aria-current="true" data-line="2"' in shown
    preview = script_preview_html(preview_script('Alice: "<img src=x onerror=alert(1)>"\n'))
    assert "<img" not in preview and "&lt;img" in preview
    assert [clock(seconds) for seconds in (0, 59.4, 59.6, 61, 3725)] == ["0:00", "0:59", "0:59", "1:01", "1:02:05"]


def _job(title: str | None) -> JobView:
    """A done job, with only what the naming and the player read (built unvalidated, as the api's view grows)."""
    return JobView.model_construct(
        id="0123456789abcdef0123456789abcdef", state="done", title=title, audio_seconds=3.0, episode=None
    )


def test_the_episode_player_marks_the_turn_to_play_from() -> None:
    chapters = {
        "chapters": [{"title": "Ann: Hi", "start": 0.0, "end": 3.0}],
        "turns": [
            {"index": 0, "speaker": "Ann", "text": "Hi.", "start": 0.0, "end": 1.0},
            {"index": 1, "speaker": "Ben", "text": "Hello.", "start": 1.0, "end": 3.0},
        ],
    }
    waveform = Waveform(3.0, (0.5, 1.0, 0.25))
    shown = episode_html(_job("Pilot"), "gradio_api/file=/x/a.mp3?v=1", chapters, waveform, focus_turn=1)
    assert shown.count("data-focus") == 1 and 'data-index="1" data-start="1.000" data-end="3.000" data-focus' in shown
    assert "data-focus" not in episode_html(_job("Pilot"), "a.mp3", chapters, waveform)
    assert 'data-duration="3.000" data-peaks="[0.5,1.0,0.25]"' in shown


def _slices(samples: np.ndarray, count: int) -> np.ndarray:
    """Each slice's loudest sample, slice by slice in plain Python: what `read_waveform` must agree with."""
    frames = len(samples)
    bounds = [(b * frames + count - 1) // count for b in range(count + 1)]
    loudest = np.array([np.abs(samples[bounds[b] : bounds[b + 1]]).max() for b in range(count)])
    return loudest / loudest.max()


@pytest.mark.parametrize(("seconds", "channels"), [(37.2, 1), (0.01, 1), (3.5, 2)])
def test_the_waveform_holds_each_slices_loudest_sample_read_in_blocks(
    tmp_path: Path, seconds: float, channels: int
) -> None:
    rng = np.random.default_rng(7)
    samples = (rng.standard_normal((round(24_000 * seconds), channels)) * 0.1).astype(np.float32)
    samples[len(samples) // 3, 0] = 0.9  # one loud click: the slice holding it is the loudest
    path = tmp_path / "episode.wav"
    sf.write(path, samples, 24_000, subtype="FLOAT")
    waveform = read_waveform(path)
    count = min(MAX_PEAKS, max(1, round(seconds * PEAKS_PER_SECOND)))
    assert waveform.duration == pytest.approx(seconds, abs=1e-4) and len(waveform.peaks) == count
    assert np.allclose(waveform.peaks, _slices(np.abs(samples).max(axis=1), count), atol=1e-3)
    assert max(waveform.peaks) == 1.0 and waveform.peaks.index(1.0) == (len(samples) // 3) * count // len(samples)


def test_a_long_episode_keeps_a_bounded_waveform_and_the_lossless_file_is_read(tmp_path: Path) -> None:
    files = {fmt: tmp_path / f"episode.{fmt}" for fmt in ("mp3", "wav")}
    assert waveform_source(files) == files["wav"] and waveform_source({"mp3": files["mp3"]}) == files["mp3"]
    samples = np.sin(np.arange(24_000 * 200) / 30).astype(np.float32) * 0.5
    sf.write(files["wav"], samples, 24_000)
    assert len(read_waveform(files["wav"]).peaks) == MAX_PEAKS  # 200 s would be 10,000 slices
    sf.write(tmp_path / "silence.wav", np.zeros(2400, np.float32), 24_000)
    assert set(read_waveform(tmp_path / "silence.wav").peaks) == {0.0}


def test_files_get_safe_names_and_a_new_url_when_rewritten(tmp_path: Path) -> None:
    files = StudioFiles(tmp_path)
    job_id = "0123456789abcdef0123456789abcdef"
    assert files.job_folder(job_id) != files.job_folder("b") and job_id[:8] not in files.job_folder(job_id).name
    assert StudioFiles(tmp_path).job_folder(job_id) != files.job_folder(job_id)  # a secret per process
    assert episode_file_name(_job("My show: ep/1"), "mp3") == "My-show-ep-1-01234567.mp3"
    assert episode_file_name(_job(None), "srt") == "episode-01234567.srt"
    path = files.job_folder(job_id) / "episode.wav"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"1")
    first = files.url(path)
    path.write_bytes(b"22")
    assert first.startswith(f"gradio_api/file={path}?v=") and files.url(path) != first


def test_the_api_is_found_on_loopback_when_served_on_every_address_and_examples_get_names(tmp_path: Path) -> None:
    assert local_api_url("0.0.0.0", 8000) == "http://127.0.0.1:8000"
    assert local_api_url("::", 8000) == "http://[::1]:8000"
    assert local_api_url("10.0.0.5", 81) == "http://10.0.0.5:81"
    assert local_api_url("api.internal", 8000) == "http://api.internal:8000"
    assert example_voice_name(Path("en-Alice_woman.wav")) == "Alice (en, woman)"
    assert example_voice_name(Path("studio take.wav")) == "studio take"
    assert find_examples(tmp_path / "missing").scripts == {}
    assert parse_script("Alice: hi").speakers[0].name == "Alice"


def test_the_studio_alone_serves_its_page_and_sends_visitors_of_the_root_there() -> None:
    from fastapi.testclient import TestClient

    from webui.app import studio_app

    with TestClient(studio_app("http://127.0.0.1:9")) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        root = client.get("/", follow_redirects=False)
        assert root.status_code == 307 and root.headers["location"] == "/studio/"
        page = client.get("/studio/")
        assert page.status_code == 200 and "voxcast studio" in page.text


def test_script_warnings_show_beside_the_turn_holding_their_line() -> None:
    preview = preview_script("Alice: Hi.\nBob: Hello.\nstill Bob\nAlice: Bye.\n")
    shown = script_preview_html(preview)
    assert "1 to check" in shown
    turns = shown.split('<li class="vx-turn"')[1:]
    assert 'data-line="3"' in turns[1] and "continues Bob&#x27;s turn from line 2" in turns[1]
    assert "vx-warning" not in turns[0] and "vx-warning" not in turns[2]


def test_a_cancel_says_what_it_did_not_a_state_that_reads_as_a_failure() -> None:
    base = {"id": "0123456789abcdef0123456789abcdef", "title": "Pilot", "cancel_requested": True}
    assert cancel_notice(JobView.model_construct(**base, state="running")) == (
        "Cancelling “Pilot” (01234567): it stops within a step."
    )
    assert cancel_notice(JobView.model_construct(**base, state="cancelled")) == "“Pilot” (01234567) is cancelled."


def _job_in_state(state: str, **fields: object) -> JobView:
    progress = JobProgress(
        frames_done=30, frames_planned=60, audio_seconds_done=4.0, audio_seconds_planned=8.0, segments_done=0,
        segments_total=1, eta_seconds=None,
    )  # fmt: skip
    base = {"id": "0123456789abcdef0123456789abcdef", "title": "Pilot", "queue": "interactive", "position": None}
    return JobView.model_construct(**(base | {"state": state, "progress": progress, "error": None} | fields))


def test_history_and_admin_say_what_generate_says_of_a_jobs_progress() -> None:
    """Issue 38: History said 99% while Generate said "finishing", and a job handed back at a stop "Queued 99%"."""
    past = JobProgress(
        frames_done=70, frames_planned=60, audio_seconds_done=9.0, audio_seconds_planned=8.0, segments_done=0,
        segments_total=1, eta_seconds=None,
    )  # fmt: skip
    finishing = _job_in_state("running", progress=past)
    assert progress_text(finishing) == "finishing"
    assert "finishing" in job_progress_html(JobSnapshot(finishing, ProgressFigures.of_job(finishing)))
    handed_back = _job_in_state("queued", progress=past, audio_seconds=None, created_at=datetime(2026, 12, 3, 14, 0))
    assert progress_text(handed_back) == "waiting"
    assert history_rows([handed_back])[0][2] == "waiting"
    assert progress_text(_job_in_state("running")) == "50%"
    assert progress_text(_job_in_state("done")) == "100%"


def test_a_cancelled_job_tells_its_owner_what_to_do_and_a_deleted_one_says_it_was_deleted() -> None:
    job = _job_in_state("cancelled")
    shown = job_progress_html(JobSnapshot(job, ProgressFigures.of_job(job)))
    assert 'data-state="cancelled"' in shown and html.escape(CANCELLED_JOB, quote=True) in shown
    assert "press Generate again" in CANCELLED_JOB and "admin" not in shown
    deleted = deleted_job_html("<Pilot>", job.id)
    assert 'data-state="deleted"' in deleted and "&lt;Pilot&gt;" in deleted and "01234567" in deleted
    assert "Deleted, with its episode" in deleted and "Cancelled" not in deleted and "retry" not in deleted


def test_questions_before_a_delete_and_what_it_did_stand_out_from_quiet_notices() -> None:
    assert question("Delete “<b>”?") == '<p class="vx-question" role="alert">Delete “&lt;b&gt;”?</p>'
    assert confirmed("Deleted.") == '<p class="vx-confirmed" role="status">Deleted.</p>'


def test_downloads_are_links_that_save_each_file_and_remove_none() -> None:
    shown = downloads_html([("Pilot-01234567.wav", "gradio_api/file=/x/a.wav?v=1", 3_417_644), ("a<b>.srt", "s", 775)])
    assert shown.count('class="vx-download"') == 2
    assert 'href="gradio_api/file=/x/a.wav?v=1" download="Pilot-01234567.wav">Pilot-01234567.wav</a>' in shown
    assert "3.259 MiB" in shown and "775 bytes" in shown and "a&lt;b&gt;.srt" in shown
    assert "<button" not in shown and downloads_html([]) == ""


def _script_job(state: str, attempts: list[str | None]) -> ScriptView:
    views = [ScriptAttemptView(attempt=n + 1, rejected=reason) for n, reason in enumerate(attempts)]
    return ScriptView.model_construct(
        task="draft", state=state, attempts=views, max_attempts=3, speakers=["Ann", "Ben"], words=120, via="model",
        error=None, notes=[],
    )  # fmt: skip


def test_a_script_jobs_attempts_say_what_became_of_each_reply() -> None:
    cancelled = script_job_html(_script_job("cancelled", [None]))
    assert "Attempt 1 of 3 was stopped by the cancel" in cancelled and "was taken" not in cancelled
    assert 'data-verdict="stopped"' in cancelled
    writing = script_job_html(_script_job("running", ["the reply was broken JSON", None]))
    assert "Attempt 1 of 3 was rejected: the reply was broken JSON" in writing
    assert "Attempt 2 of 3: the script model is writing…" in writing
    done = script_job_html(_script_job("done", ["no", None]))
    assert "Attempt 2 of 3 was taken." in done
    assert "Attempt 1 of 3 ended before its reply was judged" in script_job_html(_script_job("failed", [None]))


def test_the_workers_view_shows_rows_and_kv_blocks_in_use_jobs_held_and_the_supervised_workers_restarts() -> None:
    worker = WorkerView.model_construct(
        name="host:42", model="tiny", device="cpu", dtype="float32", slots=16, slots_in_use=3, waiting=2, kv_blocks=512,
        kv_blocks_in_use=40, frames_per_second=12.5, running_jobs=["a" * 32, "b" * 32], step_mode="eager",
        step_mode_reason="the graphs step differs from the eager step by 3.0e-01 of the latents' RMS",
    )  # fmt: skip
    supervised = SupervisedWorker.model_construct(state="running", restarts=2, last_exit="killed by SIGKILL")
    shown = workers_html(WorkerList.model_construct(workers=[worker], supervised=supervised))
    cells = shown.split('<tr data-worker="host:42">')[1].split("</tr>")[0]
    assert "<td>3 of 16 (+2 waiting)</td>" in cells and "<td>40 of 512</td>" in cells and "<td>12.5</td>" in cells
    assert cells.endswith("<td>2</td>")  # the jobs it holds
    # the decode step it fell back to, and why on hover
    assert (
        '<td title="the graphs step differs from the eager step by 3.0e-01 of the latents&#x27; RMS">eager</td>'
        in cells
    )
    assert "Supervised worker: running, 2 restarts; last exit: killed by SIGKILL." in shown
    idle = workers_html(WorkerList.model_construct(workers=[], supervised=None))
    assert "No worker is running" in idle and "Supervised" not in idle


def test_a_speakers_own_recording_wins_over_its_library_voice_and_the_row_says_which_is_used(tmp_path: Path) -> None:
    own = str(write_voice_file(tmp_path / "own.wav", seconds=4.0))
    assert voice_in_use("a" * 32, own) is VoiceUse.UPLOAD
    assert voice_in_use("a" * 32, None) is VoiceUse.LIBRARY
    assert voice_in_use(None, "") is VoiceUse.NONE
    both = voice_use_html("Ann", VoiceUse.UPLOAD, "<Carter>")
    assert 'data-uses="upload"' in both and "&lt;Carter&gt;” is set aside" in both and "<Carter>" not in both
    assert voice_use_html("Ben", VoiceUse.LIBRARY, "Alice") == (
        '<p class="vx-voice-use" data-uses="library">Ben uses the library voice “Alice”.</p>'
    )
    assert "has no voice yet" in voice_use_html("Ben", VoiceUse.NONE, None)


def test_a_recording_the_api_would_refuse_is_unusable_and_says_why(tmp_path: Path) -> None:
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"RIFF" + bytes(range(256)) * 40)
    short = write_voice_file(tmp_path / "short.wav", seconds=1.0)
    for path, said in ((broken, "not audio"), (short, "3")):
        assert voice_in_use("a" * 32, str(path)) is VoiceUse.UNUSABLE  # not the library voice either: nothing is sent
        problem = recording_problem(str(path))
        assert problem is not None and said in problem and path.name in problem and str(tmp_path) not in problem
    assert recording_problem(str(write_voice_file(tmp_path / "good.wav", seconds=4.0))) is None
    shown = voice_use_html("Ann", VoiceUse.UNUSABLE, "Carter")
    assert 'data-uses="unusable"' in shown and "Ann&#x27;s recording cannot be used" in shown


def _voice(name: str, shape: RecordingShape, voice_id: str = "0" * 32) -> VoiceView:
    return VoiceView.model_construct(
        id=voice_id, name=name, seconds=shape.seconds, original_sample_rate=shape.sample_rate,
        original_channels=shape.channels,
    )  # fmt: skip


def test_an_example_voice_is_found_in_the_library_by_its_name_and_recording(tmp_path: Path) -> None:
    example = recording_shape(write_voice_file(tmp_path / "carter.wav", seconds=4.0, sample_rate=16_000))
    assert example == RecordingShape(seconds=4.0, sample_rate=16_000, channels=1)  # as the api records it
    other = recording_shape(write_voice_file(tmp_path / "other.wav", seconds=5.0, sample_rate=16_000))
    stored = _voice("Carter (en, man)", example, "1" * 32)
    assert same_voice_in([_voice("Carter (en, man)", other), stored], "Carter (en, man)", example) is stored
    assert same_voice_in([_voice("Narrator", example)], "Carter (en, man)", example) is None  # renamed: not it
    assert same_voice_in([], "Carter (en, man)", example) is None


def test_drafts_read_back_from_the_browser_keep_only_what_fits() -> None:
    voice = "ab" * 16
    drafts = Drafts("Alice: Hi.\n", ("Ann", "Ben"), (voice, None))
    assert Drafts.from_stored(drafts.stored()) == drafts
    assert Drafts.from_stored(None) == Drafts() and Drafts.from_stored("text") == Drafts()
    hostile = {"script": 42, "names": ["x" * 101, 7, "Cy", "Di", "Ed"], "voices": ["../etc/passwd", voice, None]}
    assert Drafts.from_stored(hostile) == Drafts("", ("", "", "Cy", "Di"), (None, voice, None))
    # a voice restored but not yet placed (no key, no library) is kept until the library has been loaded
    assert drafts_to_keep(None, ["Ann", None], [None, "c" * 32], [voice, voice], {}, None).voices == (voice, "c" * 32)
    assert with_restored_voices(["d" * 32, None, "c" * 32], [voice]) == ["d" * 32, voice, "c" * 32]


def test_generate_settings_and_the_followed_job_come_back_only_as_the_api_would_take_them() -> None:
    settings = {
        "title": "Pilot", "mode": "turns", "formats": ["mp3"], "kbps": {"mp3": 96, "opus": 64}, "queue": "auto",
        "priority": 8, "cfg_scale": 1.5, "diffusion_steps": 12, "seed": 7,
    }  # fmt: skip
    kept = Drafts("Alice: Hi.\n", ("Ann",), (None,), settings, "e" * 32)
    assert Drafts.from_stored(kept.stored()) == kept
    for wrong in ({"priority": 12}, {"mode": "all"}, {"formats": ["exe"]}, {"queue": "fast"}, {"kbps": {"mp3": 7}},
                  {"seed": "7; drop"}, {"diffusion_steps": 0}, {"title": "x" * 201}):  # fmt: skip
        assert Drafts.from_stored({**kept.stored(), "generate": settings | wrong}).generate == {}, wrong
    assert Drafts.from_stored({**kept.stored(), "generate": {"title": "Pilot"}}).generate == {}  # fields missing
    assert Drafts.from_stored({**kept.stored(), "job": "../jobs"}).job is None


def test_the_key_is_kept_only_when_asked_and_a_stored_value_is_checked() -> None:
    assert key_to_keep(" vxc_abc ", True) == {"key": "vxc_abc"}
    assert key_to_keep("vxc_abc", False) == {"key": ""}  # replaces a key remembered before
    assert remembered_key({"key": "vxc_abc"}) == "vxc_abc"
    assert [remembered_key(value) for value in (None, {"key": 5}, {"key": "a\nb"}, {"key": "k" * 300})] == [""] * 4


def test_history_rows_follow_the_jobs_and_a_clicked_row_gives_its_job() -> None:
    import gradio as gr

    def job(n: int, state: str, title: str | None, seconds: float | None, frames: tuple[int, int]) -> JobView:
        progress = JobProgress(
            frames_done=frames[0], frames_planned=frames[1], audio_seconds_done=frames[0] / 7.5,
            audio_seconds_planned=frames[1] / 7.5, segments_done=0, segments_total=1, eta_seconds=None,
        )  # fmt: skip
        return JobView.model_construct(
            id=f"{n}" * 32, state=state, title=title, audio_seconds=seconds, progress=progress,
            created_at=datetime(2025, 8, 7, 9, 30),
        )  # fmt: skip

    jobs = [job(1, "done", "Pilot", 65.0, (490, 480)), job(2, "failed", None, None, (15, 60))]
    assert history_rows(jobs) == [
        ["Pilot", "Done", "100%", "1:05", "2025-08-07 09:30", "11111111"],
        ["Untitled", "Failed", "25%", "~0:08", "2025-08-07 09:30", "22222222"],
    ]
    ids = [job.id for job in jobs]
    assert clicked_job(ids, gr.SelectData(None, {"index": [1, 3], "value": "0:03"})) == "2" * 32
    assert clicked_job(ids, gr.SelectData(None, {"index": [2, 0], "value": "gone"})) is None


def _chunk(segment: int, first_frame: int, frames: int, value: int) -> AudioEvent:
    """A live chunk of `frames` frames (3,200 samples each at 24 kHz), every sample `value`."""
    samples = np.full(frames * 3200, value, dtype="<i2")
    return AudioEvent(segment=segment, first_frame=first_frame, frames=frames, pcm=base64.b64encode(samples).decode())


def _live(tmp_path: Path, plan: JobPlanView | None = None) -> LiveAudio:
    return LiveAudio(tmp_path, lambda path: path.name, partial(part_label, plan))


def _stored(tmp_path: Path, name: str, values: np.ndarray) -> Path:
    path = tmp_path / f"{name}.flac"
    sf.write(str(path), values.astype("<i2"), 24_000, subtype="PCM_16")
    return path


def _part_audio(tmp_path: Path, part: LivePart) -> np.ndarray:
    return sf.read(str(tmp_path / part.url), dtype="int16")[0]


def test_live_audio_becomes_parts_in_episode_order_whatever_order_segments_generate_in(tmp_path: Path) -> None:
    live = _live(tmp_path)
    # turns mode: segment 1 generates beside segment 0 and is held back until segment 0 is complete
    assert not any(live.add_chunk(_chunk(1, frame, 8, 1)) for frame in range(0, 48, 8))  # 6.4 s, not yet playable
    assert [live.add_chunk(_chunk(0, frame, 8, 0)) for frame in range(0, 48, 8)] == [False] * 4 + [True, False]
    assert [(part.segment, part.start_seconds, part.label) for part in live.parts] == [(0, 0.0, "Part 1")]
    first = live.parts[0].seconds
    assert first == pytest.approx(40 * 3200 / 24_000)  # cut once 5 s waited: 40 frames of 7.5 a second
    # segment 0 ends: its rest comes from the stored file, then segment 1's buffered audio is published at once
    assert live.add_stored(0, _stored(tmp_path, "segment-0", np.zeros(48 * 3200)))
    assert [(part.segment, part.start_seconds) for part in live.parts] == [(0, 0.0), (0, first), (1, 0.0)]
    assert len(_part_audio(tmp_path, live.parts[1])) == 8 * 3200 and set(_part_audio(tmp_path, live.parts[2])) == {1}
    assert live.segments_stored == 1 and buffer_text(tuple(live.parts)) == "13 s of audio buffered in 3 parts"
    assert not live.add_stored(0, tmp_path / "again.flac")  # a segment is complete once


def test_live_audio_skips_replayed_frames_and_falls_back_to_the_stored_segment_after_a_gap(tmp_path: Path) -> None:
    live = _live(tmp_path)
    for chunk in (_chunk(0, 0, 24, 3), _chunk(0, 0, 8, 3), _chunk(0, 8, 24, 3)):  # a resumed segment starts over
        live.add_chunk(chunk)
    assert len(live.parts) == 0  # 32 frames: under 5 s
    live.add_chunk(_chunk(0, 32, 8, 3))
    assert [len(_part_audio(tmp_path, part)) for part in live.parts] == [40 * 3200]
    live.add_chunk(_chunk(0, 56, 8, 3))  # frames 40-55 were missed: nothing more is heard live
    live.add_chunk(_chunk(0, 64, 48, 3))
    assert len(live.parts) == 1
    live.add_stored(0, _stored(tmp_path, "segment-0", np.full(112 * 3200, 3)))
    assert len(_part_audio(tmp_path, live.parts[1])) == 72 * 3200  # the rest, from the stored segment
    # a segment nobody heard live plays from its stored file as it is
    live.add_stored(1, _stored(tmp_path, "segment-1", np.zeros(16 * 3200)))
    assert live.parts[2].url == "segment-1.flac" and live.parts[2].start_seconds == 0.0


def test_parts_are_labelled_with_the_turn_they_start_in_by_the_transcripts_rule() -> None:
    script = parse_script(
        "Alice: Welcome to the show, where we talk about tea every single week.\n"
        "Bob: Thanks for having me.\n[pause: 1s]\nAlice: Bye.\n"
    )
    whole = plan_view(plan_script(script, "whole"), revision=0)
    welcome, thanks = "Alice: Welcome to the show, where we…", "Bob: Thanks for having me."
    share = 63 / (63 + 21)  # of the first segment's text, Alice's turn: where Bob starts, as the transcript has it
    assert part_label(whole, 0, 0.0, 1, 3.0, False) == welcome
    # a stored segment of 10 s: Bob from 7.5 s on
    assert [part_label(whole, 0, at, 2, 10.0, True) for at in (10 * share - 0.1, 10 * share + 0.1)] == [welcome, thanks]
    # while it generates: of the plan's estimate, or of the audio made once that runs past it
    estimate = whole.segments[0].estimated_seconds
    assert part_label(whole, 0, estimate * share + 0.1, 2, 1.0, False) == thanks
    assert part_label(whole, 0, estimate * share + 0.1, 2, estimate * 2, False) == welcome
    assert part_label(whole, 1, 0.0, 3, 1.0, True) == "Alice: Bye."
    # past the estimate, still generating, a part could be in any later turn: it says so instead of naming the last
    assert part_label(whole, 0, estimate + 0.5, 3, estimate + 6, False) == PAST_ESTIMATE
    assert part_label(whole, 0, estimate + 0.5, 3, estimate + 1, True) == thanks  # once stored: by its real length
    turns = plan_view(plan_script(script, "turns"), revision=0)
    assert [part_label(turns, n, 0.0, n + 1, 1.0, False) for n in range(3)] == [welcome, thanks, "Alice: Bye."]
    assert part_label(turns, 1, 60.0, 4, 65.0, False) == thanks  # a segment of one turn: that turn, however long
    assert part_label(None, 0, 0.0, 4, 1.0, True) == "Part 4" and part_label(whole, 9, 0.0, 4, 1.0, True) == "Part 4"
    # a long turn cut by the server's segment length (turns mode) is labelled by the piece each segment speaks
    long_turn = parse_script("Alice: " + "Tea is a drink that many people like. " * 60 + "\nBob: Indeed.\n")
    pieces = plan_view(plan_script(long_turn, "turns", max_segment_seconds=40), revision=0)
    assert len(pieces.segments) > 3 and pieces.segments[-1].turns[0].speaker == "Bob"
    assert part_label(pieces, len(pieces.segments) - 1, 0.0, 9, 1.0, True) == "Bob: Indeed."
    assert first_words("one two three", 2) == "one two…"
    assert [part_length_seconds(seconds) for seconds in (0, 40, 600)] == [5.0, 10.0, 30.0]
    shown = live_parts_html([LivePart(0, 0.0, 5.0, "a.flac", "Bob: <b>hi</b>")])
    assert "Bob: &lt;b&gt;hi&lt;/b&gt;" in shown and "5 s of audio buffered in 1 part<" in shown
    assert live_parts_html([]) == ""


def test_a_pages_live_parts_go_when_it_follows_another_job_or_closes(tmp_path: Path) -> None:
    folders = LiveFolders()
    first = folders.claim("page-a", tmp_path / "job-1")
    other = folders.claim("page-b", tmp_path / "job-1")
    live = _live(first)
    live.add_chunk(_chunk(0, 0, 40, 1))
    assert first != other and [path.name for path in first.iterdir()] == ["live-0000-0000000000.flac"]
    second = folders.claim("page-a", tmp_path / "job-2")  # page a follows another job: its first parts go
    assert not first.exists() and second.is_dir() and other.is_dir()
    live.add_chunk(_chunk(0, 40, 40, 1))  # the first job's follower, not stopped yet, writes nothing more
    assert not first.exists() and len(live.parts) == 1
    folders.release("page-b")  # page b closed
    folders.release("page-b")
    assert not other.exists() and second.is_dir()


def test_a_regeneration_asks_first_when_more_than_its_turn_is_spoken_anew_and_says_how_long() -> None:
    alone = RegenerationPlan(
        turn=1, segments=[1], turns=[PlannedTurn(index=1, speaker="Bob", words="Hi")], audio_seconds=2.0,
        estimated_seconds=None,
    )  # fmt: skip
    whole = alone.model_copy(
        update={"turns": [PlannedTurn(index=0, speaker="<Ann>", words="Welcome…"), *alone.turns],
                "estimated_seconds": 12.4, "audio_seconds": 65.0}
    )  # fmt: skip
    assert not needs_confirmation(alone, "turns")
    assert needs_confirmation(alone, "whole") and needs_confirmation(whole, "turns")
    shown = regeneration_plan_html(whole)
    assert "Regenerating turn 2 speaks 2 turns anew (1:05 of audio): about 12 s." in shown
    assert '1 · <span class="vx-who">&lt;Ann&gt;:</span>' in shown and "<li data-picked>2 · " in shown
    assert "how long is not known" in regeneration_plan_html(alone)
    pairs = takes_html([(3, "old.flac?v=1", "new.flac?v=2")])
    assert "Segment 4" in pairs and 'class="vx-take-previous" controls preload="metadata" src="old.flac?v=1"' in pairs
    assert takes_html([]) == ""

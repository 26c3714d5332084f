"""`voxcast generate` refuses bad input with exit code 2, one `error:` line, and nothing written.

Every case runs the real console command in a subprocess on real files. All of these problems must be
caught before the model loads, so each run costs only the interpreter start and imports (a few seconds).
To keep the file fast, the module fixture starts every case's subprocess up front, as many at a time as
there are CPUs, and each test then checks its own result.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import soundfile as sf

from tests.synthetic_audio import voice_like
from tokenizer.voice_prompt import MAX_SECONDS, MIN_SECONDS

# About twenty interpreter starts, each importing torch: minutes of CPU on two cores (refusals in this process:
# tests/test_cli_script.py).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
CONSOLE_SCRIPT = Path(sys.executable).with_name("voxcast")
# What the `voxcast` console script does, for a checkout where it is not installed.
CONSOLE_EQUIVALENT = [sys.executable, "-c", "import sys; from cli.main import main; sys.exit(main())"]
EXIT_BAD_INPUT = 2
SUBPROCESS_TIMEOUT_S = 120  # a case that loads a model instead of refusing early would blow through this

TWO_SPEAKERS = "Speaker 1: Welcome to the show.\nSpeaker 2: Thanks for having me.\n"


def voxcast_command() -> list[str]:
    return [str(CONSOLE_SCRIPT)] if CONSOLE_SCRIPT.is_file() else list(CONSOLE_EQUIVALENT)


def write_voice(path: Path, seconds: float, sample_rate: int = 24_000, seed: int = 0) -> Path:
    sf.write(path, voice_like(seconds, sample_rate, seed=seed), sample_rate)
    return path


@dataclass
class Case:
    """One invocation of `voxcast generate` and the fragments its error line must contain."""

    args: list[str]
    expected: list[str]
    unexpected: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Run:
    case: Case
    folder: Path
    files_before: set[Path]
    result: subprocess.CompletedProcess[str]


class Workspace:
    """A folder per case with its script, voices and the (never to be written) output path."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.output = folder / "episodes" / "out.wav"  # `episodes/` exists only if the CLI writes

    def script(self, text: str | bytes, name: str = "script.txt") -> Path:
        path = self.folder / name
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
        return path

    def voice(self, name: str, seconds: float = 4.0) -> Path:
        return write_voice(self.folder / name, seconds, seed=len(name))

    def generate(self, script: Path, *options: str, voices: tuple[str, ...] | None = None) -> list[str]:
        """Arguments for `generate`; by default one valid voice for each of Speaker 1 and Speaker 2."""
        if voices is None:
            voices = (f"1={self.voice('alice.wav')}", f"2={self.voice('bob.wav')}")
        voice_args = [arg for spec in voices for arg in ("--voice", spec)]
        output = [] if "-o" in options else ["-o", str(self.output)]
        return ["generate", str(script), *voice_args, *output, "--model", "tiny-random", *options]


# --- the cases ----------------------------------------------------------------------


def missing_script(ws: Workspace) -> Case:
    return Case(ws.generate(ws.folder / "missing.txt"), ["missing.txt", "no such script file"])


def script_is_a_directory(ws: Workspace) -> Case:
    folder = ws.folder / "scripts"
    folder.mkdir()
    return Case(ws.generate(folder), [str(folder), "is a folder", "script file (.txt, .md or .json)"])


def script_not_utf8(ws: Workspace) -> Case:
    script = ws.script(b"\xff\xfe\x00bad")
    return Case(ws.generate(script), [str(script), "not UTF-8", "byte 0", "save the script as UTF-8"])


def script_error_on_line_3(ws: Workspace) -> Case:
    script = ws.script("Speaker 1: Hello.\nSpeaker 2: Hi there.\nSpeaker 1:\nSpeaker 2: Anyone?\n")
    return Case(
        ws.generate(script),
        [str(script), "line 3", "'Speaker 1:' has no text", "after the tag or on the lines below it"],
    )


def turn_with_nothing_to_say(ws: Workspace) -> Case:
    script = ws.script("Speaker 1: Hello.\nSpeaker 2: \U0001f389\U0001f389\nSpeaker 1: Well?\n")
    return Case(
        ws.generate(script),
        [
            f"{script} line 2: Speaker 2's turn has nothing to say aloud: '\U0001f389\U0001f389' is only emoji, "
            "symbols or punctuation (no letter or number); write the words to speak, or remove the turn",
        ],
    )


def turn_of_only_control_characters(ws: Workspace) -> Case:
    # Control characters are dropped as the script is read, so a turn of nothing else has no text.
    script = ws.script("Speaker 1: Hello.\nSpeaker 2: \x00\x07\x1b\x9b\n")
    return Case(ws.generate(script), [str(script), "line 2", "'Speaker 2:' has no text"])


def five_speakers(ws: Workspace) -> Case:
    script = ws.script("".join(f"Speaker {n}: Line from speaker {n}.\n" for n in range(1, 6)))
    return Case(ws.generate(script), [str(script), "line 5", "Speaker 5", "at most 4 speakers"])


def unsupported_output_extension(ws: Workspace) -> Case:
    output = ws.folder / "episodes" / "out.aac"
    return Case(
        ws.generate(ws.script(TWO_SPEAKERS), "-o", str(output)),
        [f"-o {output}", "'.aac'", ".wav", ".flac", ".mp3", ".ogg", ".opus"],
    )


def cfg_scale_out_of_range(ws: Workspace) -> Case:
    return Case(ws.generate(ws.script(TWO_SPEAKERS), "--cfg-scale", "0.5"), ["--cfg-scale 0.5", "1.0 to 10.0"])


def diffusion_steps_out_of_range(ws: Workspace) -> Case:
    return Case(ws.generate(ws.script(TWO_SPEAKERS), "--diffusion-steps", "0"), ["--diffusion-steps 0", "1 to 100"])


def missing_voice(ws: Workspace) -> Case:
    voices = (f"1={ws.voice('alice.wav')}",)
    return Case(
        ws.generate(ws.script(TWO_SPEAKERS), voices=voices),
        ["no voice for Speaker 2", "--voice 2="],
        unexpected=["Speaker 1", "--voice 1="],
    )


def voice_for_unknown_speaker(ws: Workspace) -> Case:
    script = ws.script("Alice: Hello Bob.\nBob: Hello Alice.\n")
    voices = (f"Alice={ws.voice('alice.wav')}", f"Carol={ws.voice('carol.wav')}")
    return Case(
        ws.generate(script, voices=voices), ["--voice Carol=", "no speaker 'Carol'", "its speakers are", "Alice", "Bob"]
    )


def voices_counted_from_one_for_speakers_from_zero(ws: Workspace) -> Case:
    script = ws.script("Speaker 0: Welcome.\nSpeaker 1: Thanks.\n")
    voices = (f"1={ws.voice('alice.wav')}", f"2={ws.voice('bob.wav')}")
    return Case(
        ws.generate(script, voices=voices),
        [
            '--voice 2=...: the script has no Speaker 2; its speakers are Speaker 0 and Speaker 1 (voice keys "0" '
            'and "1", or their names); voice key N means "Speaker N" as written in the script, not the Nth speaker'
        ],
        unexpected=["already has a voice"],
    )


def two_voices_for_one_speaker(ws: Workspace) -> Case:
    second = ws.voice("second.wav")
    voices = (f"1={ws.voice('alice.wav')}", f"Speaker 1={second}", f"2={ws.voice('bob.wav')}")
    return Case(
        ws.generate(ws.script(TWO_SPEAKERS), voices=voices),
        [
            f'--voice Speaker 1={second}: "1" and "Speaker 1" are the same speaker, Speaker 1 '
            '("1" is its number, "Speaker 1" its name); give each speaker one voice'
        ],
    )


def voice_not_audio(ws: Workspace) -> Case:
    notes = ws.folder / "notes.txt"
    notes.write_text("These are my notes, not a recording.\n" * 20, encoding="utf-8")
    voices = (f"1={ws.voice('alice.wav')}", f"2={notes}")
    return Case(
        ws.generate(ws.script(TWO_SPEAKERS), voices=voices),
        ["Speaker 2", str(notes), "not audio", "accepted formats: WAV"],
        unexpected=["Speaker 1"],
    )


def voice_too_short(ws: Workspace) -> Case:
    short = ws.voice("short.wav", seconds=1.0)
    voices = (f"1={short}", f"2={ws.voice('bob.wav')}")
    return Case(
        ws.generate(ws.script(TWO_SPEAKERS), voices=voices),
        ["Speaker 1", str(short), "1.00 s long", f"{MIN_SECONDS:g}–{MAX_SECONDS:g} s"],
    )


def script_beyond_episode_limit(ws: Workspace) -> Case:
    turn = "This line is part of a very long episode. " * 20  # 840 characters: 60 s each
    script = ws.script("".join(f"Speaker {n % 2 + 1}: {turn}\n" for n in range(100)))
    return Case(ws.generate(script), [str(script), "about 100 minutes", "at most 90 minutes"])


def model_folder_without_config(ws: Workspace) -> Case:
    model = ws.folder / "my-model"
    model.mkdir()
    (model / "weights.txt").write_text("not a checkpoint", encoding="utf-8")
    args = ws.generate(ws.script(TWO_SPEAKERS))
    args[args.index("tiny-random")] = str(model)
    return Case(args, [f"--model {model}", "no config.json", "not a checkpoint folder"])


def unreachable_hub_id(ws: Workspace) -> Case:
    args = ws.generate(ws.script(TWO_SPEAKERS))
    args[args.index("tiny-random")] = "voxcast-test/no-such-model"
    return Case(
        args,
        ["'voxcast-test/no-such-model'", "cannot reach the Hugging Face hub", "--model /path/to/no-such-model"],
        env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(ws.folder / "hf")},
    )


CASES: dict[str, Callable[[Workspace], Case]] = {
    builder.__name__: builder
    for builder in (
        missing_script,
        script_is_a_directory,
        script_not_utf8,
        script_error_on_line_3,
        turn_with_nothing_to_say,
        turn_of_only_control_characters,
        five_speakers,
        unsupported_output_extension,
        cfg_scale_out_of_range,
        diffusion_steps_out_of_range,
        missing_voice,
        voice_for_unknown_speaker,
        voices_counted_from_one_for_speakers_from_zero,
        two_voices_for_one_speaker,
        voice_not_audio,
        voice_too_short,
        script_beyond_episode_limit,
        model_folder_without_config,
        unreachable_hub_id,
    )
}


# --- running them -------------------------------------------------------------------


def all_files(folder: Path) -> set[Path]:
    return {path for path in folder.rglob("*") if path.is_file()}


def base_env(data_dir: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("VOXCAST_")}
    env["VOXCAST_DATA_DIR"] = str(data_dir)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    return env


def run_command(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, check=False
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    prepared = []
    for name, build in CASES.items():
        folder = tmp_path_factory.mktemp(name)
        case = build(Workspace(folder))
        env = base_env(folder / "data") | case.env
        prepared.append((name, case, folder, all_files(folder), env))
    with ThreadPoolExecutor(max_workers=max(1, len(os.sched_getaffinity(0)))) as pool:
        futures = {
            name: (case, folder, before, pool.submit(run_command, [*voxcast_command(), *case.args], env))
            for name, case, folder, before, env in prepared
        }
        return {
            name: Run(case, folder, before, future.result()) for name, (case, folder, before, future) in futures.items()
        }


def assert_refused(run: Run) -> str:
    """Exit 2, exactly one stderr line starting with 'error:', nothing written; returns that line."""
    result = run.result
    assert result.returncode == EXIT_BAD_INPUT, f"exit {result.returncode}\nstderr:\n{result.stderr}"
    lines = result.stderr.splitlines()
    assert len(lines) == 1, f"expected one stderr line, got {len(lines)}:\n{result.stderr}"
    assert lines[0].startswith("error: "), lines[0]
    assert result.stdout == ""
    # Nothing written: no output folder, no episode files, no new file anywhere in the case folder
    # (the offline hub case may leave hub bookkeeping under its own HF_HOME, which is not output).
    assert not (run.folder / "episodes").exists()
    new_files = {path for path in all_files(run.folder) - run.files_before if (run.folder / "hf") not in path.parents}
    assert new_files == set()
    assert not [path for path in all_files(run.folder) if path.name.startswith("out.")]
    return lines[0]


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_refused_with_one_error_line_and_nothing_written(runs: dict[str, Run], name: str) -> None:
    run = runs[name]
    line = assert_refused(run)
    for fragment in run.case.expected:
        assert fragment in line, f"{fragment!r} missing from: {line}"
    for fragment in run.case.unexpected:
        assert fragment not in line, f"{fragment!r} should not be in: {line}"
    # A problem found before the model loads never mentions the toy model.
    assert "tiny-random is an untrained toy model" not in run.result.stderr


def test_python_dash_m_entry_point_reports_input_errors_like_the_console_script(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "cli.main", "generate", str(tmp_path / "missing.txt")]
    command += ["--voice", "v.wav", "-o", str(tmp_path / "out.wav"), "--model", "tiny-random"]
    result = run_command(command, base_env(tmp_path / "data"))
    assert result.returncode == EXIT_BAD_INPUT, result.stderr
    assert result.stderr.splitlines() == [f"error: {tmp_path / 'missing.txt'}: no such script file"]


def test_a_script_with_a_likely_typo_is_read_with_a_warning_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    from cli.generate import read_script

    script = tmp_path / "show.txt"
    script.write_text("Speaker 1: Hi.\nSpeaker 2: Hello.\nSpeaker 5: Me too.\n", encoding="utf-8")
    assert len(read_script(script).speakers) == 3  # generated as written
    assert capsys.readouterr().err == (
        f"warning: {script} line 3: Speaker 5 is a speaker of its own beside Speaker 1 and Speaker 2; if it is one of "
        "them, fix the number\n"
    )

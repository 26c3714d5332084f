"""`voxcast script normalise|draft`: what a user sees, on real files.

Two runs go through the real console command in a subprocess (the parser path, and a draft on the
`tiny-random` model that must fail clearly: `run_cli`, so they are slow); the rest call `cli.main.main` in this process, which is
the same code without paying an interpreter start and the torch import per case. Every refusal is one
`error:` line, exit code 2, and nothing written; a script model that gives no valid script is exit code 1.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.main import main
from cli.script import MAX_INPUT_BYTES
from tests.conftest import RunCli

EXIT_FAILED, EXIT_BAD_INPUT = 1, 2
TWO_SPEAKERS = "Alice: Welcome to the show.\nBob: Thanks for having me.\n"
MESSY_TRANSCRIPT = (
    "[00:00:01] ALICE: Welcome to the show (laughs).\n"
    "00:00:04 Bob: Thanks for having me. [crosstalk]\n"
    "Alice  00:00:07\n"
    "So [pause] let's start.\n"
)
NOTES = "# Tea\n- green tea is unoxidised\n- black tea is fully oxidised\n- oolong sits between\n"
UNREACHABLE = "voxcast-test/no-such-instruct-model"


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No hub, an empty cache, short replies: a case that loads a hub model fails fast and visibly."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("VOXCAST_SCRIPT_MAX_NEW_TOKENS", "24")
    monkeypatch.setenv("VOXCAST_SCRIPT_MODEL", UNREACHABLE)


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def only_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ")
    return lines[0]


# --- the console command ---------------------------------------------------------------------------------


def test_console_normalise_prints_a_script_the_parser_reads(tmp_path: Path, run_cli: RunCli) -> None:
    result = run_cli(
        "script", "normalise", str(write(tmp_path, "t.txt", TWO_SPEAKERS)), env={"VOXCAST_SCRIPT_MODEL": UNREACHABLE}
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == TWO_SPEAKERS
    assert "read as is by the parser, no model needed" in result.stderr


def test_console_draft_on_tiny_random_retries_then_fails_clearly(tmp_path: Path, run_cli: RunCli) -> None:
    """The console process loads the tiny-random script model and generates three replies."""
    output = tmp_path / "out" / "script.txt"
    result = run_cli(
        "script", "draft", str(write(tmp_path, "notes.md", NOTES)), "--hosts", "2", "--minutes", "1",
        "-o", str(output), "--script-model", "tiny-random",
        env={"VOXCAST_SCRIPT_MAX_NEW_TOKENS": "24"},
    )  # fmt: skip
    assert result.returncode == EXIT_FAILED
    lines = result.stderr.strip().splitlines()
    assert lines[0] == "note: tiny-random is an untrained toy model; its replies are garbage and will fail validation"
    assert lines[-1].startswith(
        "error: the script model (tiny-random) gave no valid script in 3 attempts; the last reply was rejected because "
    )
    assert not output.parent.exists()


# --- normalise --------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("offline")
def test_normalise_cleans_a_messy_transcript_into_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "scripts" / "episode.txt"
    code = main(["script", "normalise", str(write(tmp_path, "t.txt", MESSY_TRANSCRIPT)), "-o", str(output)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert output.read_text(encoding="utf-8") == (
        "ALICE: Welcome to the show.\nBob: Thanks for having me.\nALICE: So\n[pause: 1s]\nALICE: let's start.\n"
    )
    assert captured.out.splitlines() == [
        f"script: {output}",
        "4 turns, 2 speakers (ALICE, Bob); timestamps and stage directions removed, no model needed",
    ]
    assert [path.name for path in output.parent.iterdir()] == ["episode.txt"]


@pytest.mark.usefixtures("offline")
def test_normalize_is_the_same_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["script", "normalize", str(write(tmp_path, "t.txt", TWO_SPEAKERS))]) == 0
    assert capsys.readouterr().out == TWO_SPEAKERS


@pytest.mark.usefixtures("offline")
def test_normalise_says_when_two_names_may_be_one_person(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    transcript = write(tmp_path, "t.txt", "Alice: Hi.\nAlice Smith: Hello.\n")
    assert main(["script", "normalise", str(transcript)]) == 0
    assert "note: 'Alice' and 'Alice Smith' may be the same person" in capsys.readouterr().err


@pytest.mark.usefixtures("offline")
def test_force_llm_with_a_local_checkpoint_fails_clearly_on_garbage(
    tiny_instruct_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "script.txt"
    code = main(
        ["script", "normalise", str(write(tmp_path, "t.txt", TWO_SPEAKERS)), "--force-llm",
         "--script-model", str(tiny_instruct_checkpoint), "-o", str(output)]
    )  # fmt: skip
    line = only_error_line(capsys.readouterr().err)
    assert code == EXIT_FAILED
    assert f"the script model ({tiny_instruct_checkpoint}) gave no valid script in 3 attempts" in line
    assert not output.exists()


@pytest.mark.usefixtures("offline")
def test_a_transcript_that_needs_the_model_says_when_none_is_available(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["script", "normalise", str(write(tmp_path, "t.txt", "no speaker tags at all, just talk\n"))])
    line = only_error_line(capsys.readouterr().err)
    assert code == EXIT_BAD_INPUT
    assert line.startswith(f"error: --script-model {UNREACHABLE}: no script model available: cannot reach the Hugging")
    assert "--script-model /path/to/Qwen2.5-1.5B-Instruct" in line


# --- draft ------------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("offline")
def test_draft_with_a_local_checkpoint_fails_clearly_on_garbage(
    tiny_instruct_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "script.txt"
    code = main(
        ["script", "draft", str(write(tmp_path, "notes.md", NOTES)), "--names", "Ann, Ben, Cy", "--minutes", "2",
         "--tone", "calm", "-o", str(output), "--script-model", str(tiny_instruct_checkpoint)]
    )  # fmt: skip
    line = only_error_line(capsys.readouterr().err)
    assert code == EXIT_FAILED
    assert "gave no valid script in 3 attempts; the last reply was rejected because" in line
    assert not output.exists()


@pytest.mark.usefixtures("offline")
def test_draft_says_when_no_model_is_available(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["script", "draft", str(write(tmp_path, "notes.md", NOTES)), "-o", str(tmp_path / "s.txt")])
    line = only_error_line(capsys.readouterr().err)
    assert code == EXIT_BAD_INPUT
    assert "cannot reach the Hugging Face hub" in line
    assert "--script-model /path/to/Qwen2.5-1.5B-Instruct" in line
    assert "tiny-random" in line


# --- refusals: checked before any model loads ------------------------------------------------------------

REFUSALS = [
    (["draft", "{notes}", "--hosts", "5"], "error: --hosts: a script has 1 to 4 hosts, not 5"),
    (["draft", "{notes}", "--hosts", "0"], "error: --hosts: a script has 1 to 4 hosts, not 0"),
    (
        ["draft", "{notes}", "--hosts", "2", "--names", "Ann,Ben,Cy"],
        "error: --hosts 2: --names gives 3 names (Ann, Ben, Cy)",
    ),
    (["draft", "{notes}", "--names", "Ann,B:en"], "error: --names: 'B:en' is not a usable name"),
    (["draft", "{notes}", "--names", "Ann,,Ben"], "error: --names: '' is not a usable name"),
    (["draft", "{notes}", "--names", "Ann,ann"], "error: --names: the hosts' names must differ"),
    (["draft", "{notes}", "--minutes", "0"], "error: --minutes: the length must be 1 to 90 minutes, not 0"),
    (["draft", "{notes}", "--minutes", "120"], "error: --minutes: the length must be 1 to 90 minutes, not 120"),
    (["draft", "{notes}", "--tone", "x" * 200], "error: --tone: the tone must be one line of 1 to 120 characters"),
    (["draft", "{empty}"], "error: {empty}: the source material is empty"),
    (["draft", "{long}"], "error: {long}: the source material is 30,001 characters; at most 30,000 fit the prompt"),
    (["draft", "{missing}"], "error: {missing}: no such source file"),
    (["draft", "{folder}"], "error: {folder}: is a folder; give a source file (.txt or .md)"),
    (["draft", "{latin1}"], "error: {latin1}: not UTF-8 text (byte 3); save it as UTF-8"),
    (
        ["draft", "{huge}"],
        f"error: {{huge}}: {MAX_INPUT_BYTES + 1:,} bytes; a source file may have at most {MAX_INPUT_BYTES:,}",
    ),
    (["normalise", "{empty}"], "error: {empty}: the transcript is empty"),
    (["normalise", "{untagged_long}"], "error: {untagged_long}: the transcript is 29,999 characters after clean-up;"),
    (["normalise", "{notes}", "-o", "{folder}"], "error: -o {folder}: is a folder"),
]


@pytest.mark.usefixtures("offline")
@pytest.mark.parametrize(("args", "expected"), REFUSALS, ids=[" ".join(args) for args, _ in REFUSALS])
def test_refusals_are_one_line_and_write_nothing(
    args: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = {
        "notes": write(tmp_path, "notes.md", NOTES),
        "empty": write(tmp_path, "empty.md", " \n"),
        "long": write(tmp_path, "long.md", "x" * 30_001),
        "untagged_long": write(tmp_path, "untagged.txt", "talk " * 6_000),
        "missing": tmp_path / "missing.md",
        "folder": tmp_path,
        "huge": write(tmp_path, "huge.md", "x" * (MAX_INPUT_BYTES + 1)),
        "latin1": tmp_path / "latin1.md",
    }
    files["latin1"].write_bytes("caf\xe9".encode("latin-1"))
    output = tmp_path / "never" / "script.txt"
    argv = ["script", *(arg.format(**files) for arg in args)]
    if "-o" not in argv:
        argv += ["-o", str(output)]
    code = main(argv)
    line = only_error_line(capsys.readouterr().err)
    assert code == EXIT_BAD_INPUT
    assert line.startswith(expected.format(**files))
    assert not output.parent.exists()


def test_a_bad_attempts_setting_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VOXCAST_SCRIPT_MAX_ATTEMPTS", "0")
    assert main(["script", "normalise", str(write(tmp_path, "t.txt", TWO_SPEAKERS))]) == EXIT_BAD_INPUT
    assert (
        only_error_line(capsys.readouterr().err)
        == "error: VOXCAST_SCRIPT_MAX_ATTEMPTS='0': input should be greater than or equal to 1"
    )
    monkeypatch.setenv("VOXCAST_SCRIPT_MAX_ATTEMPTS", "11")
    assert main(["script", "normalise", str(write(tmp_path, "t.txt", TWO_SPEAKERS))]) == EXIT_BAD_INPUT
    assert (
        only_error_line(capsys.readouterr().err)
        == "error: VOXCAST_SCRIPT_MAX_ATTEMPTS='11': input should be less than or equal to 10"
    )

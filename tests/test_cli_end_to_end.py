"""`voxcast generate` end to end, as a user runs it: a real subprocess, tiny checkpoints of both layouts."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import soundfile as sf

from tests.conftest import RunCli

SRT_TIME = re.compile(r"(\d+):(\d\d):(\d\d),(\d{3}) --> (\d+):(\d\d):(\d\d),(\d{3})")


def srt_spans(text: str) -> list[tuple[float, float]]:
    spans = []
    for match in SRT_TIME.finditer(text):
        h1, m1, s1, ms1, h2, m2, s2, ms2 = (int(group) for group in match.groups())
        spans.append((h1 * 3600 + m1 * 60 + s1 + ms1 / 1000, h2 * 3600 + m2 * 60 + s2 + ms2 / 1000))
    return spans


@pytest.mark.parametrize(
    ("layout_fixture", "mode", "extension"),
    [
        ("tiny_hf_checkpoint", "whole", ".mp3"),
        ("tiny_original_checkpoint", "turns", ".wav"),
        ("tiny_hf_checkpoint", "turns", ".opus"),
    ],
)
def test_generate_writes_a_consistent_episode(
    layout_fixture: str,
    mode: str,
    extension: str,
    examples: Path,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    run_cli: RunCli,
) -> None:
    checkpoint: Path = request.getfixturevalue(layout_fixture)
    script = tmp_path / "show.txt"
    script.write_text(
        "Alice: Welcome to the show, everyone.\n"
        "Bob: Thanks, Alice. Happy to be here.\n"
        "[pause: 1.5s]\n"
        "Alice: Let's get started.\n",
        encoding="utf-8",
    )
    output = tmp_path / "out" / f"episode{extension}"
    result = run_cli(
        "generate", str(script),
        "--voice", f"Alice={examples / 'voices' / 'en-Alice_woman.wav'}",
        "--voice", f"bob={examples / 'voices' / 'en-Carter_man.wav'}",
        "--model", str(checkpoint), "--mode", mode, "--seed", "7", "-o", str(output),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"episode: {output}" in result.stdout
    assert "generating" in result.stderr  # the progress bar

    info = sf.info(output)
    assert info.samplerate == 24_000 and info.channels == 1
    timeline = json.loads(output.with_suffix(".turns.json").read_text())
    turns = timeline["turns"]
    assert [turn["speaker"] for turn in turns] == ["Alice", "Bob", "Alice"]
    assert info.duration == pytest.approx(timeline["duration"], abs=0.06)
    assert turns[-1]["end"] == pytest.approx(timeline["duration"], abs=0.002)
    # The 1.5 s pause sits between Bob's turn and Alice's last one.
    assert turns[2]["start"] - turns[1]["end"] == pytest.approx(1.5, abs=0.002)
    chapters = json.loads(output.with_suffix(".chapters.json").read_text())["chapters"]
    assert chapters[0]["startTime"] == 0 and chapters[-1]["endTime"] == timeline["duration"]

    srt = output.with_suffix(".srt").read_text()
    spans = srt_spans(srt)
    assert spans == [(pytest.approx(t["start"], abs=0.002), pytest.approx(t["end"], abs=0.002)) for t in turns]
    vtt = output.with_suffix(".vtt").read_text()
    assert vtt.startswith("WEBVTT") and vtt.count("<v Alice>") == 2 and vtt.count("<v Bob>") == 1


def test_generate_the_real_three_speaker_example_with_tiny_random(
    examples: Path, tmp_path: Path, run_cli: RunCli
) -> None:
    """The opening of the bundled 3-speaker script (the tiny model speaks to its full frame budget, so the
    whole 47-turn script would take minutes here), with a bare voice file assigned to the third speaker."""
    opening = (examples / "scripts" / "3p_gpt5.txt").read_text(encoding="utf-8").splitlines()[:6]
    script = tmp_path / "opening.txt"
    script.write_text("\n".join(opening), encoding="utf-8")
    output = tmp_path / "episode.flac"
    voices = examples / "voices"
    result = run_cli(
        "generate", str(script),
        "--voice", f"1={voices / 'en-Alice_woman.wav'}", "--voice", f"2={voices / 'en-Carter_man.wav'}",
        "--voice", str(voices / "en-Alice_woman.wav"),
        "--model", "tiny-random", "--mode", "turns", "--diffusion-steps", "2", "-q", "-o", str(output),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "tiny-random is an untrained toy model" in result.stderr
    timeline = json.loads(output.with_suffix(".turns.json").read_text())
    assert len(timeline["turns"]) == 6
    assert {turn["speaker"] for turn in timeline["turns"]} == {"Speaker 1", "Speaker 2", "Speaker 3"}
    assert len(json.loads(output.with_suffix(".chapters.json").read_text())["chapters"]) > 1
    assert sf.info(output).duration == pytest.approx(timeline["duration"], abs=0.002)


def test_tiny_checkpoint_command_writes_a_loadable_folder(tmp_path: Path, run_cli: RunCli) -> None:
    result = run_cli("dev", "tiny-checkpoint", str(tmp_path / "ckpt"), "--layout", "original")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "ckpt" / "config.json").exists()
    from models.loading import detect_layout

    assert detect_layout(tmp_path / "ckpt") == "original"


def test_a_published_original_checkpoint_takes_its_tokenizer_from_the_hub_cache(
    tiny_original_checkpoint: Path, examples: Path, tmp_path: Path, run_cli: RunCli
) -> None:
    """Like `microsoft/VibeVoice-1.5B`, the folder holds no tokenizer and names Qwen's; a user without the hub has
    it in the Hugging Face cache (HF_HUB_OFFLINE=1). Without it there, the error says where to put it."""
    checkpoint = tmp_path / "VibeVoice-1.5B"
    shutil.copytree(tiny_original_checkpoint, checkpoint, ignore=shutil.ignore_patterns("Qwen"))
    cache = tmp_path / "hub"
    env = {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    script = tmp_path / "show.txt"
    script.write_text("Alice: Hello there.\nBob: Hi, Alice.\n", encoding="utf-8")
    output = tmp_path / "episode.wav"
    arguments = (
        "generate", str(script), "--voice", f"1={examples / 'voices' / 'en-Alice_woman.wav'}",
        "--voice", f"2={examples / 'voices' / 'en-Carter_man.wav'}", "--model", str(checkpoint), "-o", str(output),
    )  # fmt: skip

    missing = run_cli(*arguments, env=env)
    assert missing.returncode != 0 and not output.exists()
    assert "'Qwen/Qwen2.5-1.5B'" in missing.stderr and str(checkpoint / "Qwen" / "Qwen2.5-1.5B") in missing.stderr
    assert "Traceback" not in missing.stderr

    revision = "0123456789abcdef0123456789abcdef01234567"
    repository = cache / "models--Qwen--Qwen2.5-1.5B"
    shutil.copytree(tiny_original_checkpoint / "Qwen" / "Qwen2.5-1.5B", repository / "snapshots" / revision)
    (repository / "refs").mkdir()
    (repository / "refs" / "main").write_text(revision)
    result = run_cli(*arguments, env=env)
    assert result.returncode == 0, result.stderr
    assert sf.info(output).duration > 0.5

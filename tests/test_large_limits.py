"""A script's length is held to the loaded model's context, named: VibeVoice-Large's 32,768 tokens, not 64K.

The same 50-minute `whole`-mode script is refused on a worker running a Large-shaped checkpoint, at submission
("VibeVoice-Large holds 32,768 tokens (about 45 minutes); ... needs about N"), and by `voxcast generate` before it
generates anything, while one running a 1.5B-shaped checkpoint (65,536 positions) takes it. The limits come from
the real loaded models and engines, as a worker announces them (`workers.engine_host.worker_engine`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import soundfile as sf

from api.errors import InvalidInput
from api.services.job_limits import GenerationLimits, check_generation_lengths
from cli.main import main
from models.family import VIBEVOICE_1_5B, VIBEVOICE_LARGE, FamilyMember
from models.loading import load_model
from models.tiny_checkpoint import write_tiny_checkpoint
from pipeline.engine.engine import EngineConfig
from pipeline.engine.factory import engine_for_model
from script_text.parser import parse_script
from script_text.plan import Plan, plan_script
from tests.synthetic_audio import voice_like
from workers.engine_host import worker_engine

LINE = "Every line of this story adds a little more to say, and the show goes on for a while longer."
TURNS = 460  # about 43,000 characters: about 51 minutes of speech, one generation in `whole` mode
VOICE_SECONDS = {0: 5.0, 1: 5.0}
# Blocks of 16 tokens for both branches of a 65,536-token generation: the pool never binds before the context.
KV_BLOCKS = 2 * 65_536 // 16 + 8


def script_text() -> str:
    return "".join(f"{'Alice' if turn % 2 == 0 else 'Bob'}: {LINE}\n" for turn in range(TURNS))


def plan(mode: str = "whole") -> Plan:
    return plan_script(parse_script(script_text()), mode)  # type: ignore[arg-type]


def announced_limits(folder: Path) -> GenerationLimits:
    """What a worker running the checkpoint in `folder` announces, as the api reads it."""
    engine = engine_for_model(load_model(str(folder), device="cpu"), EngineConfig(slots=1, kv_blocks=KV_BLOCKS))
    announced = worker_engine(engine)
    return GenerationLimits(announced.load.longest_generation, announced.chars_per_token, announced.context)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    members: dict[str, FamilyMember] = {"large": VIBEVOICE_LARGE, "1.5b": VIBEVOICE_1_5B}
    return {
        name: write_tiny_checkpoint(tmp_path_factory.mktemp(name), member=member) for name, member in members.items()
    }


def test_the_api_refuses_a_generation_past_larges_context_naming_the_model(checkpoints: dict[str, Path]) -> None:
    limits = announced_limits(checkpoints["large"])
    assert limits.longest_tokens == 32_768  # the model's context binds, not the pool
    whole = plan()
    assert 45 < whole.estimated_seconds / 60 < 60 and len(whole.segments) == 1
    with pytest.raises(InvalidInput) as refused:
        check_generation_lengths(whole, VOICE_SECONDS, limits, "script")
    (problem,) = refused.value.problems
    assert (problem.field, problem.line) == ("script", 1)
    assert problem.message.startswith(
        f"VibeVoice-Large holds 32,768 tokens (about 45 minutes); generation 1 of 1 (lines 1 to {TURNS}, about "
    )
    needed = int(problem.message.split("needs about ")[1].split(" tokens")[0].replace(",", ""))
    assert 32_768 < needed < 65_536
    assert problem.message.endswith("split it with pause tags or use mode `turns`")
    check_generation_lengths(plan("turns"), VOICE_SECONDS, limits, "script")  # a turn at a time fits


def test_the_same_script_fits_a_model_of_64k_positions(checkpoints: dict[str, Path]) -> None:
    limits = announced_limits(checkpoints["1.5b"])
    assert limits.context is not None and limits.context.name == "VibeVoice-1.5B"
    assert limits.longest_tokens == 65_536
    check_generation_lengths(plan(), VOICE_SECONDS, limits, "script")


def test_the_cli_refuses_it_before_generating(
    checkpoints: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "show.txt").write_text(script_text(), encoding="utf-8")
    for name, seed in (("alice", 0), ("bob", 1)):
        sf.write(tmp_path / f"{name}.wav", voice_like(VOICE_SECONDS[seed], 24_000, seed=seed), 24_000)
    output = tmp_path / "episode.wav"
    code = main(
        ["generate", str(tmp_path / "show.txt"), "--model", str(checkpoints["large"]), "--mode", "whole",
         "--voice", f"Alice={tmp_path / 'alice.wav'}", "--voice", f"Bob={tmp_path / 'bob.wav'}", "-o", str(output)]
    )  # fmt: skip
    error = capsys.readouterr().err
    assert code == 2, error
    assert (
        f"error: VibeVoice-Large holds 32,768 tokens (about 45 minutes); generation 1 of 1 (lines 1 to {TURNS}" in error
    )
    assert error.rstrip().endswith("split it with pause tags or use --mode turns")
    assert not output.exists()

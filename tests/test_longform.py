"""Long-form in one pass, through the service and the CLI: what a worker can hold decides what the api takes.

- A worker announces the longest generation it can hold (its model's context, within its K/V pool) and its
  tokenizer's rate; the api refuses, at submission, a `whole`-mode generation no live worker could hold,
  with the numbers and the remedy, and takes the same script in `turns` mode.
- A `whole`-mode generation past 8,192 tokens (what the fixed slots held before the paged pool) runs through
  the service with the default settings and finishes; `voxcast generate`'s engine, built from the same settings,
  holds it too.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cli.generate import _check_fits, _engine_config
from core.settings import Settings
from models.loading import load_model
from models.segment_io import prompt_token_count
from pipeline.engine.factory import engine_for_model
from script_text.parser import parse_script
from script_text.plan import plan_script
from tests.conftest import write_voice_file
from tests.service_client import upload_voice, wait_for
from tokenizer.voice_prompt import load_voice_prompt

LINE = "Every line of this story adds a little more to say, and the show goes on for a while longer."


def script(turns: int) -> str:
    return "".join(f"{'Alice' if turn % 2 == 0 else 'Bob'}: {LINE}\n" for turn in range(turns))


def announced(client, timeout: float = 30) -> dict:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not (workers := client.get("/v1/admin/workers").json()["workers"]):
        assert time.monotonic() < deadline, "no worker announced itself"
        time.sleep(0.2)
    return workers[0]


def test_the_api_refuses_a_generation_no_worker_can_hold(make_service_stack, voice_wav: Path) -> None:  # type: ignore[no-untyped-def]
    # A pool of 3 MB: 768 blocks of 16 tokens of the tiny model (256 bytes a token for both K and V).
    stack = make_service_stack(engine_kv_memory=str(3 * 2**20)).start()
    admin = stack.client(stack.mint_key("ops", admin=True))
    worker = announced(admin)
    assert (worker["kv_blocks"], worker["kv_block_tokens"]) == (767, 16)
    assert worker["longest_generation_tokens"] == (767 // 2 - 1) * 16 - 2
    assert 2 < worker["chars_per_token"] < 4
    voice = upload_voice(admin, voice_wav, "voice")
    body = {"script": script(80), "voices": {"Alice": voice, "Bob": voice}, "settings": {"diffusion_steps": 2}}

    refused = admin.post("/v1/jobs", json={**body, "mode": "whole"})
    assert refused.status_code == 422, refused.text
    (problem,) = refused.json()["detail"]
    assert (problem["field"], problem["line"]) == ("script", 1)
    assert problem["msg"].startswith("the job's generation 1 of 1 (lines 1 to 80, about ")
    assert (
        f"the longest generation a worker here holds is {worker['longest_generation_tokens']:,} tokens"
        in problem["msg"]
    )
    assert problem["msg"].endswith("split it with pause tags or use mode `turns`")
    assert admin.get("/v1/jobs").json()["jobs"] == []  # nothing stored

    accepted = admin.post("/v1/jobs", json={**body, "mode": "turns"})
    assert accepted.status_code == 202, accepted.text
    assert admin.delete(f"/v1/jobs/{accepted.json()['id']}").status_code == 200


@pytest.mark.timeout(1800)
def test_a_whole_mode_generation_past_8192_tokens_finishes_through_the_service(shared_stack, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    stack = shared_stack  # the default settings: the model's context, the default pool
    client = stack.client(stack.mint_key("long"))
    # Minute-long voices (450 prompt tokens each) and 56 turns: a prompt of about 2,900 tokens, then about 5,700
    # frames (the plan's budget: twice its estimate, which the tiny model always runs to).
    voices = {
        name: write_voice_file(tmp_path / f"{name}.wav", seconds=60, seed=seed) for seed, name in enumerate(("a", "b"))
    }
    ids = {name: upload_voice(client, path, name) for name, path in voices.items()}
    text = script(56)
    body = {"script": text, "voices": {"Alice": ids["a"], "Bob": ids["b"]}, "mode": "whole"}
    response = client.post("/v1/jobs", json={**body, "settings": {"diffusion_steps": 1, "seed": 3}})
    assert response.status_code == 202, response.text
    job = wait_for(client, response.json()["id"], {"done", "failed"}, timeout=900)
    assert job["state"] == "done", job["error"]

    prompt, frames = whole_generation(stack.settings.worker_model, text, voices)
    assert job["progress"]["frames_done"] == frames
    assert prompt + frames > 8192, (prompt, frames)


def whole_generation(model: str | Path, text: str, voices: dict[str, Path]) -> tuple[int, int]:
    """The prompt tokens of `text` as one `whole`-mode generation with `voices`, and its frame budget."""
    loaded = load_model(str(model), device="cpu")
    (segment,) = plan_script(parse_script(text), "whole").segments
    levelled = {index: load_voice_prompt(path).samples for index, path in enumerate(voices.values())}
    return prompt_token_count(loaded, segment.text, levelled), segment.max_frames


def test_the_cli_engine_holds_a_whole_mode_generation_past_8192_tokens(
    tiny_hf_checkpoint: Path, tmp_path: Path
) -> None:
    """`voxcast generate` builds its engine from the same settings (`cli.generate._engine_config`) and checks the plan
    against it (`_check_fits`): the service test above's generation fits it, past 8,192 tokens, and is not refused.
    The generation itself is the same engine's run, which the service test makes to the last frame (running it a
    second time here cost 7 minutes of the suite and proved nothing more)."""
    voices = {
        name: write_voice_file(tmp_path / f"{name}.wav", seconds=60, seed=seed) for seed, name in enumerate(("a", "b"))
    }
    text = script(56)
    loaded = load_model(str(tiny_hf_checkpoint), device="cpu")
    plan = plan_script(parse_script(text), "whole")
    levelled = {index: load_voice_prompt(path).samples for index, path in enumerate(voices.values())}
    engine = engine_for_model(loaded, _engine_config(plan, Settings()))
    _check_fits(engine, loaded, plan, levelled)  # raises `InputError` naming the limit for a plan past it
    prompt, frames = whole_generation(tiny_hf_checkpoint, text, voices)
    assert prompt + frames > 8192, (prompt, frames)
    assert engine.longest_generation >= prompt + frames, (engine.longest_generation, prompt, frames)

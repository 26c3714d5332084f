"""Parity: a request's audio and latents from the engine equal transformers' `generate()` for it alone.

Float32 on the CPU with a tiny checkpoint whose attention matters (hiding one key moves the latents far beyond
the tolerance: `test_hiding_one_key_more_or_less_moves_the_latents_far_beyond_the_tolerance`). Each test mixes requests of different prompt and output
lengths, seeds and settings, joining and leaving the batch at different steps, and checks every one of
them against the reference run alone, through the eager step and through the fixed-shape step (the one
CUDA graphs replay on a GPU; here it runs eagerly, the same arithmetic at padded shapes), read back at
once or one step late.

The runs of several requests on every step kind take minutes on two cores: they are `slow`. The everyday tier
keeps the single-request checks, the speech restart on every step kind and the original's codec rule.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers.generation import LogitsProcessor, LogitsProcessorList

from models.loading import LoadedModel, load_model
from models.reference import reference_generate_segment
from models.segment_io import GenerationSettings, SegmentAudio, prompt_inputs
from pipeline.engine.engine import Engine, EngineConfig
from pipeline.engine.factory import engine_for_model
from pipeline.engine.kv_blocks import BranchBlocks, CacheSpan
from pipeline.engine.requests import EngineEvent, EventKind, GenerationRequest, Replay
from pipeline.engine.runner import ModelRunner, RunnerConfig, packs
from pipeline.engine.step_records import PrefillChunk, RowOutcome, StepInput
from pipeline.generation import SegmentRequest, submit_segment
from script_text.prompt import SegmentText
from tests.synthetic_audio import voice_like

# Small blocks, so requests hold many and grow through them as they go.
PAGED = {"block_size": 4, "kv_blocks": 4096}
AUDIO_TOLERANCE = 1e-4
LATENT_TOLERANCE = 1e-5


STEP_KINDS = {
    "eager": {"fixed_shapes": False},
    "fixed": {"fixed_shapes": True, "overlap": False},
    "fixed-overlap": {"fixed_shapes": True, "overlap": True},
}


@pytest.fixture(params=list(STEP_KINDS))
def step_kind(request: pytest.FixtureRequest) -> dict:
    """How the engine decodes: the eager step, the fixed-shape step, or that step read back one step late."""
    return STEP_KINDS[request.param]


_references: dict[int, tuple[SegmentRequest, SegmentAudio]] = {}


def reference(tiny: LoadedModel, request: SegmentRequest) -> SegmentAudio:
    """`generate()` for the request alone, run once per request object (both step kinds compare with it)."""
    if id(request) not in _references:
        _references[id(request)] = (request, reference_generate_segment(tiny, request))
    return _references[id(request)][1]


@pytest.fixture(scope="module")
def tiny(tiny_attentive_checkpoint: Path) -> LoadedModel:
    return load_model(str(tiny_attentive_checkpoint), device="cpu")


VOICES = {0: voice_like(4.0, 24_000, seed=0), 1: voice_like(6.5, 24_000, seed=1), 2: voice_like(3.2, 24_000, seed=2)}
TEXTS = [
    ((0, "Hello and welcome to the show."), (1, "Thanks, glad to be here.")),
    ((1, "A much longer line of text, which goes on for a while and then some more, to make a long prompt."),),
    ((2, "Short."),),
    ((0, "Three speakers now."), (1, "Indeed."), (2, "Quite a crowd.")),
]


def segment(text_index: int, frames: int, seed: int, **settings: object) -> SegmentRequest:
    return SegmentRequest(SegmentText(TEXTS[text_index]), VOICES, frames, GenerationSettings(seed=seed, **settings))


def run_in_engine(engine: Engine, arrivals: list[tuple[int, SegmentRequest]]) -> list[SegmentAudio]:
    """Submit each request at its engine step, run to the end, and gather every request's frames."""
    handles: list = [None] * len(arrivals)
    step = 0
    while step == 0 or not engine.idle or any(h is None for h in handles):
        for i, (at_step, request) in enumerate(arrivals):
            if at_step == step:
                handles[i] = submit_segment(engine, request)
        engine.step()
        step += 1
    results = []
    for handle in handles:
        events = list(handle.events(timeout=1))
        assert events[-1].kind is EventKind.FINISHED, events[-1]
        frames = [event for event in events if event.kind is EventKind.AUDIO]
        results.append(
            SegmentAudio(
                np.concatenate([f.audio for f in frames]), torch.stack([f.latent for f in frames]), len(frames), True
            )
        )
    return results


def assert_same(engine_result: SegmentAudio, reference: SegmentAudio) -> None:
    assert engine_result.frames == reference.frames
    torch.testing.assert_close(engine_result.latents, reference.latents, atol=LATENT_TOLERANCE, rtol=0)
    np.testing.assert_allclose(engine_result.audio, reference.audio, atol=AUDIO_TOLERANCE, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("policy", "prefill_chunk", "arrivals"),
    [
        # all at once, long prompts prefilled in small chunks between decode steps
        ("online", 16, [(0, segment(0, 12, 3)), (0, segment(1, 20, 4)), (0, segment(2, 6, 5))]),
        # staggered: requests join while others decode, and the short ones leave early
        ("online", 64, [(0, segment(1, 14, 1)), (3, segment(2, 4, 2)), (5, segment(3, 10, 3)), (9, segment(0, 5, 4))]),
        # offline policy, one request alone in the middle of the run, different steps and guidance per request
        (
            "offline",
            512,
            [
                (0, segment(0, 8, 7, diffusion_steps=5)),
                (2, segment(3, 9, 8, cfg_scale=2.0)),
                (2, segment(2, 3, 9, diffusion_steps=3, cfg_scale=1.0)),
            ],
        ),
    ],
)
def test_engine_matches_generate_alone(
    tiny: LoadedModel, step_kind: dict, policy: str, prefill_chunk: int, arrivals: list
) -> None:
    config = EngineConfig(slots=4, policy=policy, prefill_chunk=prefill_chunk, **PAGED, **step_kind)
    results = run_in_engine(engine_for_model(tiny, config), arrivals)
    for (_, request), result in zip(arrivals, results, strict=True):
        assert_same(result, reference(tiny, request))


def test_prompts_prefilled_together_in_one_packed_forward_each_match_generate_alone(tiny: LoadedModel) -> None:
    """Three prompts arrive together and prefill side by side, a step's chunks packed into one forward (each entry
    sees only its own request's: `paged_kv.packed_view`); each request still equals `generate()` run alone."""
    arrivals = [(0, segment(1, 4, 11)), (0, segment(3, 3, 12)), (0, segment(0, 5, 13))]
    engine = engine_for_model(tiny, EngineConfig(slots=4, policy="offline", prefill_chunk=48, **PAGED))
    packed: list[int] = []
    run = engine.runner.run

    def counting(step: StepInput) -> list[RowOutcome]:  # delegates: the real runner runs every step
        packed.append(len(step.prefill))
        return run(step)

    engine.runner.run = counting  # type: ignore[method-assign]
    results = run_in_engine(engine, arrivals)
    assert max(packed) >= 2, packed  # prompts' chunks went through one forward together
    for (_, request), result in zip(arrivals, results, strict=True):
        assert_same(result, reference(tiny, request))


def test_chunks_pack_while_their_scores_fit_and_long_windows_go_alone() -> None:
    """A packed forward scores every new entry against every key of its pack: fresh prompts pack, a chunk that reads
    a long history (a replay's, a long prompt's late chunk) goes alone, and the order of the step's chunks is kept."""

    def chunk(tokens: int, history: int) -> PrefillChunk:
        return PrefillChunk(0, 0, history, tokens, CacheSpan((), history, 0), None)

    fresh = [chunk(455, 0) for _ in range(4)]  # 1,820 new entries against 1,820 keys: 3.3M scores
    assert packs(fresh) == [[0, 1, 2, 3]]
    assert packs([*fresh, chunk(455, 0)]) == [[0, 1, 2, 3], [4]]  # a fifth would make 5.2M
    assert packs([chunk(455, 0), chunk(512, 30_000), chunk(455, 0), chunk(300, 0)]) == [[0], [1], [2, 3]]
    assert packs([chunk(16, 0)]) == [[0]]


WAITING = [(0, segment(i % 4, 3 + i, seed=i)) for i in range(5)]


@pytest.mark.slow
def test_more_requests_than_slots_wait_for_a_free_slot(tiny: LoadedModel, step_kind: dict) -> None:
    engine = engine_for_model(tiny, EngineConfig(slots=2, prefill_chunk=64, **step_kind))
    results = run_in_engine(engine, WAITING)
    for (_, request), result in zip(WAITING, results, strict=True):
        assert_same(result, reference(tiny, request))


@pytest.mark.slow
def test_cancel_stops_one_request_and_spares_the_others(tiny: LoadedModel, step_kind: dict) -> None:
    engine = engine_for_model(tiny, EngineConfig(slots=4, **step_kind))
    keep, drop = submit_segment(engine, segment(0, 10, 1)), submit_segment(engine, segment(1, 40, 2))
    for _ in range(4):
        engine.step()
    drop.cancel()
    engine.run_until_idle()
    dropped = list(drop.events(timeout=1))
    assert dropped[-1].kind is EventKind.CANCELLED
    assert dropped[-1].frames < 40
    kept = [e for e in keep.events(timeout=1) if e.kind is EventKind.AUDIO]
    reference = reference_generate_segment(tiny, segment(0, 10, 1))
    np.testing.assert_allclose(np.concatenate([e.audio for e in kept]), reference.audio, atol=AUDIO_TOLERANCE)
    assert engine.idle and sorted(engine.free_rows) == [0, 1, 2, 3] and engine.pool.in_use == 0


def test_a_request_beyond_the_models_context_or_the_pool_fails_at_once(tiny: LoadedModel) -> None:
    engine = engine_for_model(tiny, EngineConfig(slots=2, block_size=4, kv_blocks=64))
    prompt = prompt_inputs(tiny, SegmentText(TEXTS[2]), VOICES)
    context = tiny.model.config.text_config.max_position_embeddings
    too_long = engine.submit(GenerationRequest(prompt, max_new_tokens=context))
    (event,) = too_long.events(timeout=1)
    assert event.kind is EventKind.FAILED
    assert event.reason == (
        f"the prompt ({prompt.length} tokens) plus up to {context} new tokens exceed the model's context of "
        f"{context} tokens"
    )
    too_big = engine.submit(GenerationRequest(prompt, max_new_tokens=200))
    (event,) = too_big.events(timeout=1)
    assert event.kind is EventKind.FAILED and event.reason.endswith("the pool holds 63; raise VOXCAST_ENGINE_KV_MEMORY")
    assert engine.idle  # neither was queued


def test_events_come_in_order(tiny: LoadedModel) -> None:
    engine = engine_for_model(tiny, EngineConfig(slots=2))
    handle = submit_segment(engine, segment(2, 3, 1))
    engine.run_until_idle()
    kinds = [event.kind for event in handle.events(timeout=1)]
    assert kinds == [EventKind.STARTED, EventKind.FIRST_AUDIO, *[EventKind.AUDIO] * 3, EventKind.FINISHED]


RESUMED = segment(0, 12, seed=21)


def frames_only(tiny: LoadedModel, latents: torch.Tensor) -> Replay:
    """What a run that chose nothing but frames made (all the tiny model ever chooses by itself)."""
    return Replay((tiny.model.config.audio_token_id,) * len(latents), latents.clone())


@pytest.mark.slow
@pytest.mark.parametrize("stored_frames", [1, 5, 11])
def test_a_resumed_request_carries_on_as_if_never_interrupted(
    tiny: LoadedModel, stored_frames: int, step_kind: dict
) -> None:
    """Frames replayed from stored latents rebuild every cache, so the frames after them are the same."""
    expected = reference(tiny, RESUMED)
    resumed = dataclasses.replace(RESUMED, resume=frames_only(tiny, expected.latents[:stored_frames]))
    engine = engine_for_model(tiny, EngineConfig(slots=2, prefill_chunk=32, **step_kind))
    (result,) = run_in_engine(engine, [(0, segment(2, 4, seed=3)), (0, resumed)])[1:]
    torch.testing.assert_close(result.latents[:stored_frames], expected.latents[:stored_frames])
    assert_same(result, expected)


def test_a_request_resumed_at_its_last_frame_finishes_at_once(tiny: LoadedModel) -> None:
    reference = reference_generate_segment(tiny, segment(2, 4, seed=5))
    resumed = dataclasses.replace(segment(2, 4, seed=5), resume=frames_only(tiny, reference.latents))
    engine = engine_for_model(tiny, EngineConfig(slots=1))
    handle = submit_segment(engine, resumed)
    engine.run_until_idle()
    events = list(handle.events(timeout=1))
    assert events[-1].kind is EventKind.FINISHED and events[-1].frames == 4
    audio = np.concatenate([e.audio for e in events if e.kind is EventKind.AUDIO])
    np.testing.assert_allclose(audio, reference.audio, atol=AUDIO_TOLERANCE)


# --- paging: more requests than the pool holds, replayed exactly after each preemption ---------------------------

CROWD = [(0, segment(1, 14, 31)), (0, segment(3, 12, 32)), (1, segment(0, 16, 33)), (2, segment(2, 10, 34))]


@pytest.mark.slow
def test_more_requests_than_memory_are_preempted_and_replayed_exactly(tiny: LoadedModel, step_kind: dict) -> None:
    """A pool that starts three of these at a time but cannot hold them to their ends (124 usable blocks of 4 tokens:
    the first three prompts take 122 to start, 142 at their ends): the engine preempts, replays, and every request
    ends as if alone."""
    config = EngineConfig(slots=4, prefill_chunk=64, block_size=4, kv_blocks=125, **step_kind)
    engine = engine_for_model(tiny, config)
    results = run_in_engine(engine, CROWD)
    assert engine.preemptions > 0
    for (_, request), result in zip(CROWD, results, strict=True):
        assert_same(result, reference(tiny, request))
    assert engine.pool.in_use == 0


# --- a speech restart: speech end and start mid-generation, forced in both implementations ------------------------

RESTART_SCHEDULE = ["frame"] * 3 + ["speech_end", "speech_start"] + ["frame"] * 4 + ["speech_start"] + ["frame"] * 3


def schedule_ids(config) -> list[int]:  # type: ignore[no-untyped-def]
    names = {
        "frame": config.audio_token_id,
        "speech_end": config.audio_eos_token_id,
        "speech_start": config.audio_bos_token_id,
    }
    return [names[name] for name in RESTART_SCHEDULE] + [config.eos_token_id]


class ForcedTokens(LogitsProcessor):
    """Makes `generate()` choose the scheduled token at every step (the prompt is `prompt_length` long)."""

    def __init__(self, schedule: list[int], prompt_length: int) -> None:
        self.schedule = schedule
        self.prompt_length = prompt_length

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        forced = torch.full_like(scores, -math.inf)
        forced[:, self.schedule[input_ids.shape[1] - self.prompt_length]] = 0.0
        return forced


class ForcedTokensRunner(ModelRunner):
    """The engine's steps (eager, and the fixed-shape one) choosing the scheduled token at every step of every
    request."""

    def __init__(self, *args, schedule: list[int], **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.schedule = schedule
        self.chosen: dict[int, int] = {}

    def start_request(self, start):  # type: ignore[no-untyped-def]
        # A replayed request goes on from the tokens the engine kept (a choice in flight when it was preempted is
        # gone with it).
        self.chosen[start.request_id] = len(start.replay.tokens) if start.replay is not None else 0
        return super().start_request(start)

    def _next(self, request_id: int) -> int:
        step = self.chosen.get(request_id, 0)
        self.chosen[request_id] = step + 1
        # An overlapped step may be launched for a request whose last token is still in flight: its choice is
        # thrown away once that token is read back.
        return self.schedule[min(step, len(self.schedule) - 1)]

    def choose_tokens(self, chosen):  # type: ignore[no-untyped-def]
        return [self._next(row.request_id) for row in chosen]

    def choose_token_ids(self, positive: torch.Tensor) -> torch.Tensor:
        """The fixed-shape step's choice (on the CPU it runs as Python, so its choice can be replaced)."""
        assert self.fixed is not None
        decoding = self.fixed.inputs.decoding[: len(positive)].bool().tolist()
        owners = self.row_owner[: len(positive)]
        tokens = [
            self._next(owner) if on and owner is not None else self.choosable_ids[0]
            for on, owner in zip(decoding, owners, strict=True)
        ]
        return torch.tensor(tokens, device=positive.device)


# 78 usable blocks of 4 tokens: both prompts (153 and 124 tokens) start together (73 blocks), but both grow to 81.
@pytest.mark.parametrize("kv_blocks", [4096, 79], ids=["roomy", "preempting"])
def test_a_speech_restart_mid_generation_follows_the_original(
    tiny: LoadedModel, kv_blocks: int, step_kind: dict
) -> None:
    """After a speech end the codec streams start from silence, and after a speech start the negative branch sees
    only the entries since the restart, as in the original VibeVoice.

    The tiny model never chooses these tokens itself, so both implementations are made to follow one schedule
    (`generate_as_the_original`: the reference, with the original's rules, forced). With a small pool the
    requests are also preempted and replayed across the restarts.
    """
    schedule = schedule_ids(tiny.model.config)
    requests = [segment(0, len(schedule), 41), segment(1, len(schedule), 42)]
    expected = [generate_as_the_original(tiny, request, schedule) for request in requests]
    assert all(result.frames == RESTART_SCHEDULE.count("frame") for result in expected)
    config = EngineConfig(slots=2, prefill_chunk=64, block_size=4, kv_blocks=kv_blocks, **step_kind)
    runner_config = RunnerConfig(rows=2, block_size=4, kv_blocks=kv_blocks, **step_kind)
    engine = Engine(ForcedTokensRunner(tiny, runner_config, schedule=schedule), config, tiny)
    results = run_in_engine(engine, [(0, requests[0]), (2, requests[1])])
    assert (engine.preemptions > 0) == (kv_blocks < 4096)
    for result, reference_result in zip(results, expected, strict=True):
        assert_same(result, reference_result)


@pytest.mark.parametrize("kind", ["eager", "fixed"])
def test_an_engine_with_the_restart_rule_broken_on_purpose_fails_the_restart_parity(
    tiny: LoadedModel, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The restart test can fail: an engine whose negative branch keeps seeing its history after a speech start (its
    blocks never hidden, its positions counted on) agrees with the original up to the restart, then leaves it by far
    more than the tolerance `assert_same` holds it to."""
    monkeypatch.setattr(BranchBlocks, "hide_history", lambda self, pool: None)
    schedule = schedule_ids(tiny.model.config)
    request = segment(0, len(schedule), 41)
    expected = generate_as_the_original(tiny, request, schedule)
    step_kind = STEP_KINDS[kind]
    runner = ForcedTokensRunner(tiny, RunnerConfig(rows=1, block_size=4, **step_kind), schedule=schedule)
    engine = Engine(runner, EngineConfig(slots=1, prefill_chunk=64, block_size=4, **step_kind), tiny)
    (result,) = run_in_engine(engine, [(0, request)])
    before = RESTART_SCHEDULE[: RESTART_SCHEDULE.index("speech_start")].count("frame")  # frames before the restart
    torch.testing.assert_close(result.latents[:before], expected.latents[:before], atol=LATENT_TOLERANCE, rtol=0)
    drift = (result.latents[before:] - expected.latents[before:]).abs().max()
    assert drift > 100 * LATENT_TOLERANCE, f"the broken rule moves the latents by {drift:.2e} only"
    with pytest.raises(AssertionError):
        assert_same(result, expected)


def test_without_the_originals_rule_generate_carries_the_codec_streams_over_a_speech_end(tiny: LoadedModel) -> None:
    """Why the reference adds the original's rules: transformers' port differs from the original right there."""
    schedule = schedule_ids(tiny.model.config)
    request = segment(0, len(schedule), 41)
    original = generate_as_the_original(tiny, request, schedule)
    with generate_forced(tiny, ForcedTokens(schedule, prompt_inputs(tiny, request.text, request.voices).length)):
        port = reference_generate_segment(tiny, request, port_only=True)
    samples = 3 * tiny.model.config.audio_config.hop_length  # the three frames before the speech end
    np.testing.assert_allclose(port.audio[:samples], original.audio[:samples], atol=AUDIO_TOLERANCE)
    # after it, the port's decoder goes on from the last speech's state, the original's from silence
    assert np.abs(port.audio[samples:] - original.audio[samples:]).max() > 100 * AUDIO_TOLERANCE


def test_hiding_one_key_more_or_less_moves_the_latents_far_beyond_the_tolerance(tiny: LoadedModel) -> None:
    """The restart tests can see the negative branch's mask: the original with its first entry kept visible after
    each speech start (one key more, the rule voxcast once had) drifts from the original at the second frame after
    the first restart, by far more than the parity tolerance."""
    schedule = schedule_ids(tiny.model.config)
    request = segment(0, len(schedule), 41)
    original = generate_as_the_original(tiny, request, schedule)
    with first_negative_entry_kept_visible(tiny):
        one_key_more = generate_as_the_original(tiny, request, schedule)
    same_until = 4  # three frames before the restart; the first after it sees the speech start twice, same value
    torch.testing.assert_close(one_key_more.latents[:same_until], original.latents[:same_until])
    drift = (one_key_more.latents[same_until:] - original.latents[same_until:]).abs().max()
    assert drift > 100 * LATENT_TOLERANCE, f"hiding one key moves the latents by {drift:.2e} only"


@pytest.mark.parametrize("port_only", [False, True], ids=["reference", "port"])
def test_the_references_negative_branch_counts_positions_from_each_restart(tiny: LoadedModel, port_only: bool) -> None:
    """The original derives the negative branch's RoPE positions from its attention mask, so they start from 0 again
    at each speech start; transformers' port counts on (the attention is the same but for rounding)."""
    schedule = schedule_ids(tiny.model.config)
    request = segment(0, len(schedule), 41)
    prompt_length = prompt_inputs(tiny, request.text, request.voices).length
    rotary = tiny.model.model.language_model.rotary_emb
    positions: list[int] = []

    def recording(hidden, position_ids):  # type: ignore[no-untyped-def]
        if position_ids.shape[-1] == 1 and int(position_ids) < prompt_length:  # the negative branch's steps
            positions.append(int(position_ids))
        return type(rotary).forward(rotary, hidden, position_ids)

    rotary.forward = recording
    try:
        with generate_forced(tiny, ForcedTokens(schedule, prompt_length)):
            reference_generate_segment(tiny, request, port_only=port_only)
    finally:
        del rotary.forward
    assert positions == (list(range(10)) if port_only else [0, 1, 2, 0, 1, 2, 3, 0, 1, 2])


@contextlib.contextmanager
def first_negative_entry_kept_visible(tiny: LoadedModel):  # type: ignore[no-untyped-def]
    """`generate()` whose negative branch keeps attending to its first entry after a speech start."""
    model = tiny.model
    reset = model._reset_negative_cache_for_audio_start

    def reset_keeping_the_first(starts, negative_input_ids, negative_model_kwargs):  # type: ignore[no-untyped-def]
        reset(starts, negative_input_ids, negative_model_kwargs)
        negative_model_kwargs["attention_mask"][starts, 0] = 1

    model._reset_negative_cache_for_audio_start = reset_keeping_the_first
    try:
        yield
    finally:
        del model._reset_negative_cache_for_audio_start


def generate_as_the_original(tiny: LoadedModel, request: SegmentRequest, schedule: list[int]) -> SegmentAudio:
    """The reference (`generate()` with the original's rules) following `schedule`."""
    with generate_forced(tiny, ForcedTokens(schedule, prompt_inputs(tiny, request.text, request.voices).length)):
        return reference_generate_segment(tiny, request)


@pytest.mark.slow
@pytest.mark.parametrize("stored_frames", [3, 4, 8], ids=["before-the-restart", "after-it", "after-two-starts"])
def test_a_run_resumed_across_a_speech_restart_carries_on_as_the_original(
    tiny: LoadedModel, stored_frames: int, step_kind: dict
) -> None:
    """A resume replays the tokens chosen between frames as well as the latents (each `audio` event carries them,
    and a worker stores them beside each latent): the speech end and start are part of what it must rebuild."""
    schedule = schedule_ids(tiny.model.config)
    request = segment(0, len(schedule), 41)
    expected = generate_as_the_original(tiny, request, schedule)
    config = EngineConfig(slots=2, prefill_chunk=64, block_size=4, kv_blocks=4096, **step_kind)
    runner_config = RunnerConfig(rows=2, block_size=4, kv_blocks=4096, **step_kind)

    def forced_engine() -> Engine:
        return Engine(ForcedTokensRunner(tiny, runner_config, schedule=schedule), config, tiny)

    frames = frame_events(forced_engine(), request)
    assert [token for frame in frames for token in frame.tokens] == schedule[:-1]  # all but the end of text
    stored = frames[:stored_frames]
    replay = Replay(tuple(t for frame in stored for t in frame.tokens), torch.stack([f.latent for f in stored]))
    (result,) = run_in_engine(forced_engine(), [(0, dataclasses.replace(request, resume=replay))])
    assert_same(result, expected)
    if len(replay.tokens) > stored_frames:  # a restart inside the replay: the latents alone would lose it
        latents_only = dataclasses.replace(request, resume=frames_only(tiny, replay.latents))
        (wrong,) = run_in_engine(forced_engine(), [(0, latents_only)])
        shared = min(len(wrong.audio), len(expected.audio))
        assert np.abs(wrong.audio[:shared] - expected.audio[:shared]).max() > 100 * AUDIO_TOLERANCE


def frame_events(engine: Engine, request: SegmentRequest) -> list[EngineEvent]:
    """The `audio` events of `request` run alone to its end."""
    handle = submit_segment(engine, request)
    engine.run_until_idle()
    events = list(handle.events(timeout=1))
    assert events[-1].kind is EventKind.FINISHED, events[-1]
    return [event for event in events if event.kind is EventKind.AUDIO]


@contextlib.contextmanager
def generate_forced(tiny: LoadedModel, processor: LogitsProcessor):  # type: ignore[no-untyped-def]
    """`generate()` with `processor` after its own logits processors."""
    model = tiny.model
    get_processors = model._get_logits_processor

    def with_forcing(*args, **kwargs) -> LogitsProcessorList:  # type: ignore[no-untyped-def]
        return LogitsProcessorList([*get_processors(*args, **kwargs), processor])

    model._get_logits_processor = with_forcing
    try:
        yield
    finally:
        vars(model).pop("_get_logits_processor", None)  # the reference path removes its own wrapper, and ours with it


@pytest.mark.slow
def test_a_generation_longer_than_the_old_slots_matches_generate(tiny: LoadedModel) -> None:
    """Past 8,192 tokens (what the fixed slots held): a long script's prompt, prefilled in chunks, then frames."""
    line = "Every line of this long script adds a few more words for the show to say, and then some more."
    text = SegmentText(tuple((i % 3, line) for i in range(300)))
    request = SegmentRequest(text, VOICES, 24, GenerationSettings(seed=51, diffusion_steps=3))
    prompt = prompt_inputs(tiny, text, VOICES).length
    assert prompt + request.max_frames > 8192
    engine = engine_for_model(tiny, EngineConfig(slots=2, prefill_chunk=1024, block_size=16))
    (result,) = run_in_engine(engine, [(0, request)])
    assert_same(result, reference(tiny, request))

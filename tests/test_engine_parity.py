"""Parity: a request's audio and latents from the engine equal transformers' `generate()` for it alone.

Float32 on the CPU with a tiny checkpoint. Each test mixes requests of different prompt and output
lengths, seeds and settings, joining and leaving the batch at different steps, and checks every one of
them against the reference run alone, through the eager step and through the fixed-shape step (the one
CUDA graphs replay on a GPU; here it runs eagerly, the same arithmetic at padded shapes), read back at
once or one step late.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline.engine import Engine, EngineConfig, EventKind
from pipeline.generation import GenerationSettings, SegmentAudio, SegmentRequest, submit_segment
from pipeline.model_loading import LoadedModel, load_model
from pipeline.prompt import SegmentText
from pipeline.reference import reference_generate_segment
from tests.synthetic_audio import voice_like

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
def tiny(tiny_hf_checkpoint: Path) -> LoadedModel:
    return load_model(str(tiny_hf_checkpoint), device="cpu")


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
    config = EngineConfig(slots=4, max_context=1024, policy=policy, prefill_chunk=prefill_chunk, **step_kind)
    results = run_in_engine(Engine(tiny, config), arrivals)
    for (_, request), result in zip(arrivals, results, strict=True):
        assert_same(result, reference(tiny, request))


WAITING = [(0, segment(i % 4, 3 + i, seed=i)) for i in range(5)]


def test_more_requests_than_slots_wait_for_a_free_slot(tiny: LoadedModel, step_kind: dict) -> None:
    engine = Engine(tiny, EngineConfig(slots=2, max_context=1024, prefill_chunk=64, **step_kind))
    results = run_in_engine(engine, WAITING)
    for (_, request), result in zip(WAITING, results, strict=True):
        assert_same(result, reference(tiny, request))


def test_cancel_stops_one_request_and_spares_the_others(tiny: LoadedModel, step_kind: dict) -> None:
    engine = Engine(tiny, EngineConfig(slots=4, max_context=1024, **step_kind))
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
    assert engine.idle and sorted(engine.free_slots) == [0, 1, 2, 3]


def test_request_beyond_the_context_fails_alone(tiny: LoadedModel) -> None:
    engine = Engine(tiny, EngineConfig(slots=2, max_context=64))
    handle = submit_segment(engine, segment(1, 200, 1))
    events = list(handle.events(timeout=1))
    assert events[-1].kind is EventKind.FAILED
    assert "exceed the engine's context of 64 tokens" in events[-1].reason


def test_events_come_in_order(tiny: LoadedModel) -> None:
    engine = Engine(tiny, EngineConfig(slots=2, max_context=1024))
    handle = submit_segment(engine, segment(2, 3, 1))
    engine.run_until_idle()
    kinds = [event.kind for event in handle.events(timeout=1)]
    assert kinds == [EventKind.STARTED, EventKind.FIRST_AUDIO, *[EventKind.AUDIO] * 3, EventKind.FINISHED]


RESUMED = segment(0, 12, seed=21)


@pytest.mark.parametrize("stored_frames", [1, 5, 11])
def test_a_resumed_request_carries_on_as_if_never_interrupted(
    tiny: LoadedModel, stored_frames: int, step_kind: dict
) -> None:
    """Frames replayed from stored latents rebuild every cache, so the frames after them are the same."""
    expected = reference(tiny, RESUMED)
    resumed = dataclasses.replace(RESUMED, resume_latents=expected.latents[:stored_frames].clone())
    engine = Engine(tiny, EngineConfig(slots=2, max_context=1024, prefill_chunk=32, **step_kind))
    (result,) = run_in_engine(engine, [(0, segment(2, 4, seed=3)), (0, resumed)])[1:]
    torch.testing.assert_close(result.latents[:stored_frames], expected.latents[:stored_frames])
    assert_same(result, expected)


def test_a_request_resumed_at_its_last_frame_finishes_at_once(tiny: LoadedModel) -> None:
    reference = reference_generate_segment(tiny, segment(2, 4, seed=5))
    resumed = dataclasses.replace(segment(2, 4, seed=5), resume_latents=reference.latents)
    engine = Engine(tiny, EngineConfig(slots=1, max_context=1024))
    handle = submit_segment(engine, resumed)
    engine.run_until_idle()
    events = list(handle.events(timeout=1))
    assert events[-1].kind is EventKind.FINISHED and events[-1].frames == 4
    audio = np.concatenate([e.audio for e in events if e.kind is EventKind.AUDIO])
    np.testing.assert_allclose(audio, reference.audio, atol=AUDIO_TOLERANCE)

"""The generation seam, the reference path and the renderer, on a tiny checkpoint (float32, CPU)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers.generation import UnbatchedClassifierFreeGuidanceLogitsProcessor

from core.audio_rates import SAMPLES_PER_FRAME
from models.loading import LoadedModel, load_model
from models.reference import reference_generate_segment
from models.segment_io import GenerationSettings, SegmentAudio
from pipeline.engine.engine import Engine, EngineConfig
from pipeline.engine.factory import engine_for_model
from pipeline.generation import SegmentDone, SegmentFrame, SegmentGeneration, SegmentRequest
from pipeline.podcast import render_podcast
from script_text.parser import parse_script
from script_text.plan import plan_script
from script_text.prompt import SegmentText, build_prompt_text
from tests.synthetic_audio import voice_like


def voice(seconds: float, seed: int) -> np.ndarray:
    return voice_like(seconds, 24_000, seed=seed)


@pytest.fixture(scope="module")
def tiny(tiny_hf_checkpoint: Path) -> LoadedModel:
    return load_model(str(tiny_hf_checkpoint), device="cpu")


@pytest.fixture(scope="module")
def engine(tiny: LoadedModel) -> Engine:
    return engine_for_model(tiny, EngineConfig(slots=4, prefill_chunk=64))


def request(max_frames: int = 12, seed: int = 0) -> SegmentRequest:
    text = SegmentText(((0, "Hello and welcome."), (1, "Thanks, glad to be here."), (0, "Let's begin.")))
    return SegmentRequest(text, {0: voice(4, 0), 1: voice(5, 1)}, max_frames, GenerationSettings(seed=seed))


def generate_alone(engine: Engine, request: SegmentRequest) -> SegmentAudio:
    """One request through the seam, to its end."""
    generation = SegmentGeneration.start(engine, {0: request})
    updates = []
    while generation.running:
        updates += generation.updates()
    (done,) = [update for update in updates if isinstance(update, SegmentDone)]
    return done.result


def test_prompt_has_one_voice_placeholder_per_speaker() -> None:
    text = SegmentText(((2, "Hi."), (0, "Hello."), (2, "Bye.")))
    prompt = build_prompt_text(text, "<bos>", "<a>", "<eos>")
    assert prompt.count("<a>") == 2
    assert " Speaker 0:<bos><a><eos>\n Speaker 1:<bos><a><eos>\n" in prompt
    assert " Speaker 0: Hi.\n Speaker 1: Hello.\n Speaker 0: Bye.\n Speech output:\n<bos>" in prompt


def test_segment_audio_and_latents_line_up(engine: Engine, tiny: LoadedModel) -> None:
    """The seam hands over every frame as it comes, under the caller's key, then the finished segment: the frames'
    samples and latents, together."""
    generation = SegmentGeneration.start(engine, {7: request()})
    frames: list[SegmentFrame] = []
    done: list[SegmentDone] = []
    while generation.running:
        for update in generation.updates():
            (frames if isinstance(update, SegmentFrame) else done).append(update)  # type: ignore[arg-type]
    (finished,) = done
    result = finished.result
    assert finished.index == 7 and {frame.index for frame in frames} == {7}
    assert result.frames == 12 and result.reached_frame_budget
    assert result.audio.dtype == np.float32 and result.audio.shape == (12 * SAMPLES_PER_FRAME,)
    assert result.latents.shape == (12, tiny.model.config.audio_config.hidden_size)
    assert np.isfinite(result.audio).all() and np.abs(result.audio).max() > 0
    assert [frame.frames for frame in frames] == list(range(1, 13))
    np.testing.assert_array_equal(np.concatenate([frame.samples for frame in frames]), result.audio)
    np.testing.assert_array_equal(np.stack([frame.latent for frame in frames]), result.latents.numpy())


@pytest.mark.slow  # several generations
def test_same_seed_same_audio_other_seed_other_audio(engine: Engine) -> None:
    first, again, other = (generate_alone(engine, request(seed=s)) for s in (5, 5, 6))
    assert np.array_equal(first.audio, again.audio)
    assert torch.equal(first.latents, again.latents)
    assert not np.array_equal(first.audio, other.audio)


def test_recorded_latents_decode_to_the_returned_audio(engine: Engine, tiny: LoadedModel) -> None:
    """The latents we keep are the ones the audio came from: decoding them again gives the same samples."""
    result = generate_alone(engine, request(max_frames=6))
    model = tiny.model
    scaled = result.latents / model.model.latent_scaling_factor - model.model.latent_bias_factor
    with torch.inference_mode():
        audio = model.model.audio_tower.decode(scaled.unsqueeze(0)).audio
    np.testing.assert_allclose(audio.reshape(-1).numpy(), result.audio, atol=1e-4)


@pytest.mark.slow  # several generations
def test_token_cfg_pass_is_dropped_but_diffusion_cfg_still_applies(tiny: LoadedModel) -> None:
    seen: list[list[type]] = []
    original = tiny.model.__class__._get_logits_processor

    def spy(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        processors = original(self, *args, **kwargs)
        seen.append([type(p) for p in processors])
        return processors

    tiny.model.__class__._get_logits_processor = spy
    try:
        with_cfg = reference_generate_segment(tiny, request(max_frames=4))
        as_shipped = reference_generate_segment(tiny, request(max_frames=4), token_cfg_pass=True)
    finally:
        tiny.model.__class__._get_logits_processor = original
    assert UnbatchedClassifierFreeGuidanceLogitsProcessor in seen[0]
    assert "_get_logits_processor" not in vars(tiny.model)
    # The dropped pass changes nothing VibeVoice emits here: same frames, same audio.
    np.testing.assert_array_equal(with_cfg.audio, as_shipped.audio)
    plain = reference_generate_segment(
        tiny, SegmentRequest(request().text, request().voices, 4, GenerationSettings(cfg_scale=1.0))
    )
    assert not np.array_equal(with_cfg.audio, plain.audio)


@pytest.mark.slow  # several generations
def test_render_turns_mode_places_pauses_and_turns_exactly(engine: Engine) -> None:
    script = parse_script("Speaker 1: Hi there.\n[pause: 500ms]\nSpeaker 2: Hello.\nSpeaker 1: Bye now.")
    plan = plan_script(script, "turns")
    rendered = render_podcast(engine, plan, {0: voice(4, 0), 1: voice(4, 1)}, GenerationSettings(seed=3))
    lengths = [segment.seconds for segment in rendered.segments]
    assert len(lengths) == 3
    assert rendered.seconds == pytest.approx(sum(lengths) + 0.5)
    first, second, third = rendered.turns
    assert (first.start, first.end) == (0.0, pytest.approx(lengths[0]))
    assert second.start == pytest.approx(lengths[0] + 0.5)
    assert third.end == pytest.approx(rendered.seconds)
    pause = rendered.audio[int(lengths[0] * 24_000) : int((lengths[0] + 0.5) * 24_000)]
    assert not pause.any()
    assert [turn.speaker_name for turn in rendered.turns] == ["Speaker 1", "Speaker 2", "Speaker 1"]


def test_prompt_token_count_matches_the_prepared_prompt(tiny: LoadedModel) -> None:
    from models.segment_io import prompt_inputs, prompt_token_count

    segment = request()
    assert (
        prompt_token_count(tiny, segment.text, segment.voices)
        == prompt_inputs(tiny, segment.text, segment.voices).length
    )

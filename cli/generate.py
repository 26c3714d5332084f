"""`voxcast generate`: script file in, finished episode files out.

Everything the user gave is checked before the model loads (script, voices, output extension), so a
typo costs a second, not a model load; and nothing is written unless the whole episode was generated.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import numpy as np
from tqdm import tqdm

from assembly.episode import Episode, OutputError, audio_format_for, write_episode
from assembly.transcripts import chapters_from_turns
from cli.errors import EXIT_OK, InputError
from core.audio_formats import BITRATES
from core.progress_estimate import MAX_SHARE_UNTIL_DONE, EtaEstimator, past_estimate
from core.settings import Settings
from script_text import voice_assignment
from script_text.parser import (
    Script,
    ScriptError,
    Speaker,
    check_speakable,
    parse_script,
    script_warnings,
)
from script_text.plan import Plan, context_refusal, plan_script
from tokenizer.voice_prompt import VoicePromptError, load_voice_prompt

if TYPE_CHECKING:
    from models.loading import LoadedModel
    from pipeline.engine.engine import Engine, EngineConfig
    from pipeline.podcast import Progress


def register(subcommands: argparse._SubParsersAction, settings: Settings) -> None:
    generate = subcommands.add_parser("generate", help="turn a script into a podcast")
    generate.add_argument("script", type=Path, help="script: 'Speaker 1: ...', 'Name: ...', '[Name] ...' or JSON")
    generate.add_argument(
        "--voice",
        action="append",
        default=[],
        metavar="SPEAKER=FILE",
        help="voice recording for a speaker (number or name as in the script); repeat per speaker. "
        "A bare FILE goes to the next speaker without one.",
    )
    generate.add_argument(
        "--model",
        default=settings.model,
        help=f"hub id, checkpoint folder, or 'tiny-random' (default: {settings.model})",
    )
    generate.add_argument("-o", "--output", type=Path, required=True, help="audio file: .wav .flac .mp3 .ogg .opus")
    generate.add_argument(
        "--mode", choices=["whole", "turns"], default="whole", help="one generation per script (whole) or per turn"
    )
    generate.add_argument("--cfg-scale", type=float, default=1.3, help="classifier-free guidance scale (default 1.3)")
    generate.add_argument("--diffusion-steps", type=int, default=10, help="diffusion steps per frame (default 10)")
    generate.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    generate.add_argument("--device", default=settings.device, help="torch device (default: cuda if present, else cpu)")
    generate.add_argument("--dtype", default=settings.dtype, help="float32, bfloat16 or float16 (default: bf16 on GPU)")
    for name, bitrates in BITRATES.items():
        generate.add_argument(
            f"--{name}-kbps",
            type=int,
            choices=bitrates.choices,
            default=bitrates.default,
            help=f"bitrate of a .{name} output in kbit/s (default {bitrates.default})",
        )
    generate.add_argument("--no-normalize", action="store_true", help="skip loudness normalisation to -16 LUFS")
    generate.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    generate.set_defaults(run=run_generate)


def run_generate(args: argparse.Namespace, settings: Settings) -> int:
    audio_format_for_output(args.output)
    _check_generation_settings(args)
    script = read_script(args.script)
    plan = _plan(script, args, settings)
    voices = load_voices(script.speakers, args.voice)
    # torch and transformers load only once the inputs are known good: a typo costs a second, not a model import.
    from assembly.loudness import normalize_loudness
    from models.loading import ModelLoadError, load_model
    from models.segment_io import GenerationSettings
    from pipeline.engine.factory import engine_for_model
    from pipeline.engine.warm_up import prepare_to_serve
    from pipeline.podcast import render_podcast

    try:
        loaded = load_model(args.model, device=args.device, dtype=args.dtype)
    except ModelLoadError as error:
        raise InputError(f"--model {args.model}: {error}") from error
    if loaded.is_tiny_random:
        print("note: tiny-random is an untrained toy model; the audio will be noise", file=sys.stderr)
    generation = GenerationSettings(cfg_scale=args.cfg_scale, diffusion_steps=args.diffusion_steps, seed=args.seed)
    engine = engine_for_model(loaded, _engine_config(plan, settings))
    _check_fits(engine, loaded, plan, voices)
    prepare_to_serve(engine, diffusion_steps=args.diffusion_steps)  # a fast path that fails its check is not used
    with _progress_bar(plan, disabled=args.quiet) as report:
        rendered = render_podcast(engine, plan, voices, generation, on_progress=report)
    audio = rendered.audio if args.no_normalize else normalize_loudness(rendered.audio)
    episode = Episode(audio=audio, turns=rendered.turns, chapters=chapters_from_turns(rendered.turns))
    kbps = {name: getattr(args, f"{name}_kbps") for name in BITRATES}
    files = write_episode(episode, args.output, kbps=kbps)
    counts = f"{len(episode.turns)} turns, {len(episode.chapters)} chapters"
    print(f"episode: {files.audio} ({episode.seconds:.1f} s, {counts})")
    print(f"transcript: {files.srt} and {files.vtt}")
    print(f"chapters: {files.chapters}")
    return EXIT_OK


def _engine_config(plan: Plan, settings: Settings) -> EngineConfig:
    """One job alone: as many rows as it has segments (up to the setting), the K/V pool the settings give."""
    from pipeline.engine.engine import EngineConfig
    from pipeline.engine.factory import engine_slots, step_options

    slots = min(engine_slots(settings.engine_slots, settings.device), len(plan.segments))
    step = step_options(settings.engine_step)
    return EngineConfig(
        slots=slots,
        kv_memory=settings.engine_kv_memory,
        policy="offline",
        max_graphs=settings.engine_max_graphs,
        **step,  # type: ignore[arg-type]  # `step_options` returns an untyped dict; the engine's to type
    )


def _check_fits(engine: Engine, loaded: LoadedModel, plan: Plan, voices: dict[int, np.ndarray]) -> None:
    """Refuse, before generating anything, a segment no engine of this model and memory could ever run, and one whose
    estimated speech runs past the model's context (naming the model and its limit): its frame budget would be cut
    to the context, and the rest of its text never spoken."""
    from models.segment_io import prompt_token_count
    from pipeline.generation import frame_budget

    for number, segment in enumerate(plan.segments, start=1):
        prompt = prompt_token_count(loaded, segment.text, voices)
        if (beyond := context_refusal(loaded.context, segment, len(plan.segments), prompt)) is not None:
            raise InputError(f"{beyond}; split it with pause tags or use --mode turns")
        frames = frame_budget(engine, prompt, segment.max_frames)
        if (problem := engine.refusal(prompt, frames)) is not None:
            raise InputError(
                f"generation {number} of {len(plan.segments)} is too long: {problem}; split it with pause tags "
                "or use --mode turns"
            )


def audio_format_for_output(path: Path) -> None:
    try:
        audio_format_for(path)
    except OutputError as error:
        raise InputError(f"-o {path}: {error}") from error


def _check_generation_settings(args: argparse.Namespace) -> None:
    if not 1.0 <= args.cfg_scale <= 10.0:
        raise InputError(f"--cfg-scale {args.cfg_scale}: allowed range is 1.0 to 10.0")
    if not 1 <= args.diffusion_steps <= 100:
        raise InputError(f"--diffusion-steps {args.diffusion_steps}: allowed range is 1 to 100")


def read_script(path: Path) -> Script:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError(f"{path}: no such script file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a folder; give a script file (.txt, .md or .json)") from None
    except UnicodeDecodeError as error:
        raise InputError(f"{path}: not UTF-8 text (byte {error.start}); save the script as UTF-8") from None
    try:
        script = parse_script(text)
        check_speakable(script)
    except ScriptError as error:
        raise InputError(f"{path} {error}") from error
    for warning in script_warnings(text, script):  # generated as written; said so the user can fix a typo
        print(f"warning: {path} line {warning.line}: {warning.message}", file=sys.stderr)
    return script


def _plan(script: Script, args: argparse.Namespace, settings: Settings) -> Plan:
    try:
        return plan_script(script, args.mode, max_segment_seconds=settings.max_segment_seconds)
    except ScriptError as error:
        raise InputError(f"{args.script}: {error}") from error


def assign_voices(speakers: Sequence[Speaker], specs: Sequence[str]) -> dict[int, str]:
    """Map `--voice` values to speaker indices: `KEY=FILE` by number or name (`script_text.voice_assignment`, the
    api's rule too), a bare `FILE` to the next speaker without one."""
    keyed = [(key.strip(), path) for key, sep, path in (spec.partition("=") for spec in specs) if sep]
    bare = [spec for spec in specs if "=" not in spec]
    assignment = voice_assignment.assign_voices(speakers, keyed)
    if assignment.refused:
        refusal = assignment.refused[0]
        path = "..." if refusal.unknown_speaker else refusal.voice
        raise InputError(f"--voice {refusal.key}={path}: {refusal.why}")
    free = [index for index in range(len(speakers)) if index not in assignment.voices]
    if len(bare) > len(free):
        raise InputError(f"--voice: {len(bare)} unnamed voice files but only {len(free)} speakers without a voice")
    assigned = assignment.voices | dict(zip(free, bare, strict=False))  # no more bare files than free speakers
    missing = [speakers[index] for index in range(len(speakers)) if index not in assigned]
    if missing:
        names = ", ".join(speaker.name for speaker in missing)
        example = " ".join(f"--voice {speaker.key}=FILE.wav" for speaker in missing)
        raise InputError(f"no voice for {names}; give one per speaker, e.g. {example}")
    return assigned


def load_voices(speakers: Sequence[Speaker], specs: Sequence[str]) -> dict[int, np.ndarray]:
    voices = {}
    for index, path in assign_voices(speakers, specs).items():
        try:
            voices[index] = load_voice_prompt(path).samples
        except VoicePromptError as error:
            raise InputError(f"--voice for {speakers[index].name}: {error}") from error
    return voices


class _progress_bar:
    """A tqdm bar over frames of speech, showing audio seconds and the ETA by `core.progress_estimate`'s rules (the
    worker's `EtaEstimator`, not tqdm's own remaining time): 100% only once the episode is done, no ETA before a
    steady speed, one that moves smoothly and never reads 0:00 early, and past the plan's estimate "finishing"
    instead of an ETA and of a share (of a figure already passed)."""

    _COUNTING = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"
    _FINISHING = "{desc}: {n_fmt} frames [{elapsed}, finishing{postfix}]"

    def __init__(
        self, plan: Plan, disabled: bool, file: TextIO | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.estimated = plan.estimated_frames
        self.clock = clock
        self.eta = EtaEstimator()
        self._audio = "0.0s audio"
        self.bar = tqdm(
            total=self.estimated,
            unit="frame",
            desc="generating",
            disable=disabled,
            file=file or sys.stderr,
            dynamic_ncols=True,
            bar_format=self._COUNTING,
        )

    def __enter__(self) -> Callable[[Progress], None]:
        return self.report

    def __exit__(self, error_type: type[BaseException] | None, *exc_info: object) -> None:
        if error_type is None:  # done: whatever the estimate said, this is all of it
            self.bar.total = self.bar.n
            self.bar.bar_format = self._COUNTING
            self.bar.set_postfix_str(self._audio, refresh=False)
            self.bar.refresh()
        self.bar.close()

    def report(self, progress: Progress) -> None:
        frames = progress.frames_done
        self._audio = f"{progress.audio_seconds:.1f}s audio"
        eta = self.eta.estimate(self.clock(), frames, self.estimated - frames)
        if past_estimate(frames, self.estimated):
            self.bar.total = max(self.bar.total, math.ceil(frames / MAX_SHARE_UNTIL_DONE) + 1)
            self.bar.bar_format = self._FINISHING
            postfix = self._audio
        else:
            self.bar.bar_format = self._COUNTING
            postfix = self._audio if eta is None else f"{self._audio}, ETA {_clock(eta)}"
        self.bar.set_postfix_str(postfix, refresh=False)
        self.bar.update(frames - self.bar.n)


def _clock(seconds: float) -> str:
    """`m:ss` (or `h:mm:ss`), rounded up: an ETA never shows less than is left."""
    whole = math.ceil(seconds)
    hours, rest = divmod(whole, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"

"""The `voxcast` command: turn a script into a podcast, and developer helpers.

    voxcast generate SCRIPT --voice 1=alice.wav --voice 2=bob.wav --model MODEL -o episode.mp3
    voxcast dev tiny-checkpoint DIR --layout hf|original

Input problems (script, voices, model, output path) end with one `error:` line naming the file, line or
option and what is allowed, and exit code 2; nothing is written in that case.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from cli.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, InputError
from core.logging import configure_logging
from core.settings import Settings, SettingsError


def build_parser(settings: Settings) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="voxcast", description="Speaker-tagged scripts in, podcasts out.")
    commands = parser.add_subparsers(dest="command", required=True)

    generate = commands.add_parser("generate", help="turn a script into a podcast")
    generate.add_argument("script", type=Path, help="script file: 'Speaker 1: ...', 'Name: ...', '[Name] ...' or JSON")
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
        help=f"hub id, local checkpoint folder, or 'tiny-random' (default: {settings.model})",
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
    generate.add_argument("--no-normalize", action="store_true", help="skip loudness normalisation to -16 LUFS")
    generate.add_argument("-q", "--quiet", action="store_true", help="no progress bar")

    dev = commands.add_parser("dev", help="developer helpers").add_subparsers(dest="dev_command", required=True)
    tiny = dev.add_parser("tiny-checkpoint", help="write a tiny random VibeVoice checkpoint")
    tiny.add_argument("directory", type=Path)
    tiny.add_argument("--layout", choices=["hf", "original"], default="hf")
    tiny.add_argument("--seed", type=int, default=0)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = Settings.from_env()
    except SettingsError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    args = build_parser(settings).parse_args(argv)
    configure_logging(settings.log_level, settings.log_format)
    try:
        if args.command == "generate":
            from cli.generate import run_generate

            return run_generate(args, settings)
        from pipeline.tiny_checkpoint import write_tiny_checkpoint

        folder = write_tiny_checkpoint(args.directory, layout=args.layout, seed=args.seed)
        print(f"tiny {args.layout}-layout checkpoint written to {folder}")
        return EXIT_OK
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (OSError, RuntimeError) as error:  # disk full, unwritable folder, a model that said nothing
        print(f"error: {error}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted; nothing was written", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())

"""The `voxcast` command: turn a script into a podcast, and developer helpers.

    voxcast generate SCRIPT --voice 1=alice.wav --voice 2=bob.wav --model MODEL -o episode.mp3
    voxcast dev tiny-checkpoint DIR --layout hf|original

Each command lives in its own module, which adds its parser with `register(subcommands, settings)`
and sets `run(args, settings) -> exit code` as the parser default; this file only wires them up.
Input problems (script, voices, model, output path) end with one `error:` line naming the file, line or
option and what is allowed, and exit code 2; nothing is written in that case.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from cli.errors import EXIT_BAD_INPUT, EXIT_FAILED, InputError
from core.logging import configure_logging
from core.settings import Settings, SettingsError

COMMAND_MODULES = ("cli.generate", "cli.dev", "cli.serve", "cli.keys", "cli.script", "cli.webui")


def build_parser(settings: Settings) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="voxcast", description="Speaker-tagged scripts in, podcasts out.")
    subcommands = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subcommands, settings)
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
        return args.run(args, settings)
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

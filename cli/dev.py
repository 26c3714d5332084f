"""`voxcast dev`: helpers for developers and tests."""

from __future__ import annotations

import argparse
from pathlib import Path

from cli.errors import EXIT_OK
from core.settings import Settings


def register(subcommands: argparse._SubParsersAction, settings: Settings) -> None:
    dev = subcommands.add_parser("dev", help="developer helpers").add_subparsers(dest="dev_command", required=True)
    tiny = dev.add_parser("tiny-checkpoint", help="write a tiny random VibeVoice checkpoint")
    tiny.add_argument("directory", type=Path)
    tiny.add_argument("--layout", choices=["hf", "original"], default="hf")
    tiny.add_argument("--seed", type=int, default=0)
    tiny.set_defaults(run=run_tiny_checkpoint)


def run_tiny_checkpoint(args: argparse.Namespace, settings: Settings) -> int:
    from models.tiny_checkpoint import write_tiny_checkpoint

    folder = write_tiny_checkpoint(args.directory, layout=args.layout, seed=args.seed)
    print(f"tiny {args.layout}-layout checkpoint written to {folder}")
    return EXIT_OK

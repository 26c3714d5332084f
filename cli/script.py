"""`voxcast script`: turn notes, articles and rough transcripts into a script `voxcast generate` takes.

    voxcast script normalise transcript.txt [-o script.txt] [--force-llm] [--script-model M]
    voxcast script draft notes.md --hosts 2 [--names Ann,Ben] --minutes 10 [--tone T] -o script.txt

`normalise` needs no model when the parser reads the transcript as is or after the deterministic clean-up;
the script model (an instruct LLM) is loaded only when it is needed. Everything the user gave is checked
before it loads, and the output file is written only once a script was accepted.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from cli.errors import EXIT_OK, InputError
from core.settings import Settings
from script_text.drafting import (
    DraftedScript,
    DraftInputError,
    DraftRequest,
    ModelBudget,
    default_host_names,
    draft_script,
    normalise_transcript,
)
from script_text.drafting.jobs import DEFAULT_TONE, MAX_MINUTES, MIN_MINUTES, WORDS_PER_MINUTE, check_source_text

if TYPE_CHECKING:
    from models.instruct_chat import TransformersChatModel

MAX_INPUT_BYTES = 2 * 1024 * 1024  # far above any script or article; refuses a wrong file before reading it
DEFAULT_HOSTS = 2
DEFAULT_MINUTES = 5.0

_WHERE_TO_CHANGE = {
    "hosts": "--hosts",
    "names": "--names",
    "minutes": "--minutes",
    "tone": "--tone",
}


def register(subcommands: argparse._SubParsersAction, settings: Settings) -> None:
    script = subcommands.add_parser("script", help="draft or normalise a script with an instruct LLM")
    jobs = script.add_subparsers(dest="script_command", required=True)

    normalise = jobs.add_parser(
        "normalise", aliases=["normalize"], help="turn a rough transcript into a clean speaker-tagged script"
    )
    normalise.add_argument("transcript", type=Path, help="transcript file (.txt, .md, .srt, .vtt)")
    normalise.add_argument("-o", "--output", type=Path, help="script file to write (default: print it)")
    normalise.add_argument(
        "--force-llm", action="store_true", help="rewrite it with the script model even if the parser reads it"
    )
    _add_model_options(normalise, settings)
    normalise.set_defaults(run=run_normalise)

    draft = jobs.add_parser("draft", help="write a podcast dialogue from notes or an article")
    draft.add_argument("source", type=Path, help="notes or article (.txt, .md)")
    draft.add_argument("--hosts", type=int, help=f"1 to 4 hosts (default: as many as --names, else {DEFAULT_HOSTS})")
    draft.add_argument("--names", help="the hosts' names, comma-separated (default: Alice, Bob, Carol, Dave)")
    draft.add_argument(
        "--minutes",
        type=float,
        default=DEFAULT_MINUTES,
        help=f"target length, {MIN_MINUTES} to {MAX_MINUTES} minutes at ~{WORDS_PER_MINUTE} words a minute "
        f"(default {DEFAULT_MINUTES:g})",
    )
    draft.add_argument("--tone", default=DEFAULT_TONE, help=f"how it should sound (default: {DEFAULT_TONE})")
    draft.add_argument("-o", "--output", type=Path, required=True, help="script file to write")
    _add_model_options(draft, settings)
    draft.set_defaults(run=run_draft)


def _add_model_options(parser: argparse.ArgumentParser, settings: Settings) -> None:
    parser.add_argument(
        "--script-model",
        default=settings.script_model,
        help=f"instruct LLM: hub id, local checkpoint folder, or 'tiny-random' (default: {settings.script_model})",
    )
    parser.add_argument("--device", default=settings.device, help="torch device (default: cuda if present, else cpu)")
    parser.add_argument("--dtype", default=settings.dtype, help="float32, bfloat16 or float16 (default: bf16 on GPU)")


def run_normalise(args: argparse.Namespace, settings: Settings) -> int:
    budget = _budget(settings)
    text = _read_text(args.transcript, "transcript")
    _check_output_path(args.output)
    try:
        result = normalise_transcript(text, lambda: _load_script_model(args), budget, force_model=args.force_llm)
    except DraftInputError as error:
        raise InputError(f"{_where(error, args.transcript)}: {error}") from error
    how = {
        "parser": "read as is by the parser, no model needed",
        "cleanup": "timestamps and stage directions removed, no model needed",
        "model": f"rewritten by {args.script_model} in {_attempts(result.attempts)}",
    }[result.via]
    _deliver(result, args.output, f"{_shape(result)}; {how}")
    return EXIT_OK


def run_draft(args: argparse.Namespace, settings: Settings) -> int:
    budget = _budget(settings)
    request = _draft_request(args)
    source = _read_text(args.source, "source")
    try:
        check_source_text(source)
    except DraftInputError as error:
        raise InputError(f"{args.source}: {error}") from error
    _check_output_path(args.output)
    result = draft_script(source, request, _load_script_model(args), budget)
    minutes = result.words / WORDS_PER_MINUTE
    summary = (
        f"{_shape(result)}; {result.words:,} words, about {minutes:.1f} of the {request.minutes:g} minutes asked; "
        f"drafted by {args.script_model} in {_attempts(result.attempts)}"
    )
    _deliver(result, args.output, summary)
    return EXIT_OK


def _budget(settings: Settings) -> ModelBudget:
    return ModelBudget(settings.script_max_attempts, settings.script_max_new_tokens)  # in range: the settings check


def _draft_request(args: argparse.Namespace) -> DraftRequest:
    """Hosts' names (given, or the defaults for --hosts), length and tone, checked before anything loads."""
    try:
        if args.names is None:
            names = default_host_names(DEFAULT_HOSTS if args.hosts is None else args.hosts)
        else:
            names = tuple(name.strip() for name in args.names.split(","))
            if args.hosts is not None and args.hosts != len(names):
                raise InputError(f"--hosts {args.hosts}: --names gives {len(names)} names ({', '.join(names)})")
        return DraftRequest(names=names, minutes=args.minutes, tone=args.tone)
    except DraftInputError as error:
        raise InputError(f"{_WHERE_TO_CHANGE[error.field]}: {error}") from error


def _read_text(path: Path, what: str) -> str:
    try:
        if path.stat().st_size > MAX_INPUT_BYTES:
            raise InputError(
                f"{path}: {path.stat().st_size:,} bytes; a {what} file may have at most {MAX_INPUT_BYTES:,}"
            )
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError(f"{path}: no such {what} file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a folder; give a {what} file (.txt or .md)") from None
    except UnicodeDecodeError as error:
        raise InputError(f"{path}: not UTF-8 text (byte {error.start}); save it as UTF-8") from None


def _check_output_path(path: Path | None) -> None:
    if path is not None and path.is_dir():
        raise InputError(f"-o {path}: is a folder; give the script file to write, e.g. {path / 'script.txt'}")


def _load_script_model(args: argparse.Namespace) -> TransformersChatModel:
    # transformers loads only when a model is needed: the parser path never pays for the import.
    from models.instruct_chat import load_chat_model
    from models.loading import ModelLoadError

    try:
        model = load_chat_model(args.script_model, device=args.device, dtype=args.dtype)
    except ModelLoadError as error:
        raise InputError(f"--script-model {args.script_model}: {error}") from error
    if model.is_tiny_random:
        print(
            f"note: {model.source} is an untrained toy model; its replies are garbage and will fail validation",
            file=sys.stderr,
        )
    return model


def _deliver(result: DraftedScript, output: Path | None, summary: str) -> None:
    """Write the script (or print it when there is no output file), then say what was done."""
    if output is None:
        sys.stdout.write(result.text)
        report = sys.stderr
    else:
        _write_atomically(output, result.text)
        report = sys.stdout
        print(f"script: {output}", file=report)
    print(summary, file=report)
    for note in result.notes:
        print(f"note: {note}", file=report)


def _write_atomically(path: Path, text: str) -> None:
    """Replace `path` in one step, so an interrupted run never leaves half a script."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    try:
        temp.write_text(text, encoding="utf-8")
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def _shape(result: DraftedScript) -> str:
    speakers = ", ".join(speaker.name for speaker in result.script.speakers)
    return f"{len(result.script.turns)} turns, {len(result.script.speakers)} speakers ({speakers})"


def _attempts(count: int) -> str:
    return f"{count} attempt{'s' if count != 1 else ''}"


def _where(error: DraftInputError, path: Path) -> str:
    return str(path) if error.field == "text" else _WHERE_TO_CHANGE[error.field]

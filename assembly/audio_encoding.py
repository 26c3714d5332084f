"""Encoding a finished track into an audio file: a second of audio at a time, in an encoder process.

Why a second at a time: libvorbis, behind libsndfile's Ogg/Vorbis writer, copies the first buffer it is
handed onto the stack (`alloca` in `_preextrapolate_helper`), so one `sf.write` of more than about 85 s of
24 kHz audio overflows an 8 MiB thread stack and kills the whole process with SIGSEGV (reported upstream
as libsndfile#1095 and python-soundfile#396). Writing every format in `ENCODE_BLOCK_SAMPLES` blocks keeps
each buffer an encoder sees the same size however long the episode is.

Why another process: encoders are native code, and a crash in one we have not met yet must cost one file of
one job, not the worker and every job it holds. Encoder processes are started once and kept (`python -m
assembly.audio_encoding`, one per file encoded at a time, so starting Python is not paid per file): each
reads a request line (JSON) and then the raw float32 samples on its stdin, writes the file as
`core.storage.write_durably` does, and answers one line. A process that dies mid-file is a crash
(`EncoderCrashed`, naming the signal) and is not reused; a full disk is `NoSpaceLeft`; any other failure is
`EncodingError` with its message.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO, Protocol

import numpy as np
import soundfile as sf

from core.audio_rates import SAMPLE_RATE
from core.storage import NoSpaceLeft, write_durably

ENCODE_BLOCK_SAMPLES = SAMPLE_RATE  # one second
_SAMPLE_BYTES = 4  # float32 on the pipe
_MESSAGE_LIMIT = 2000  # characters of a failure kept in the error


class EncodingError(RuntimeError):
    """An audio file could not be encoded; the message names the file and why."""


class EncoderCrashed(EncodingError):
    """The encoder's process died (a native crash): only this file failed."""


@dataclass(frozen=True)
class EncodeRequest:
    """One file to encode: where, in which format, how many samples follow on the pipe."""

    file: str
    format: str
    subtype: str | None
    target: str  # the file `file` stands in for (for messages)
    samples: int
    block_samples: int
    compression_level: float | None = None  # a lossy format's bitrate, as libsndfile takes it
    bitrate_mode: str | None = None


class Readable(Protocol):
    """What `encode_blocks` reads samples from: a binary file, or the encoder's counting reader over one."""

    def read(self, size: int, /) -> bytes: ...


def encode_blocks(source: Readable, handle: BinaryIO, request: EncodeRequest) -> None:
    """Encode the request's raw float32 mono samples read from `source` into `handle`, a block at a time."""
    samples, block_samples = request.samples, request.block_samples
    with sf.SoundFile(
        handle,
        "w",
        SAMPLE_RATE,
        1,
        subtype=request.subtype,
        format=request.format,
        compression_level=request.compression_level,
        bitrate_mode=request.bitrate_mode,
    ) as audio_file:
        left = samples
        while left > 0:
            count = min(block_samples, left)
            block = source.read(count * _SAMPLE_BYTES)
            if len(block) != count * _SAMPLE_BYTES:
                raise EncodingError(f"the track ended after {samples - left} of {samples} samples")
            audio_file.write(np.frombuffer(block, dtype="<f4"))
            left -= count


class EncoderProcess:
    """One encoder process, used for one file at a time."""

    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.process.stdin is not None and self.process.stdout is not None  # both are pipes
        self.stdin: IO[bytes] = self.process.stdin
        self.stdout: IO[bytes] = self.process.stdout

    def encode(self, request: EncodeRequest, pcm: np.ndarray) -> None:
        """Send `request` and its samples; raise as the module's docstring says. A crashed process is left dead."""
        try:
            self.stdin.write((json.dumps(request.__dict__) + "\n").encode())
            for start in range(0, len(pcm), request.block_samples):
                self.stdin.write(pcm[start : start + request.block_samples].tobytes())
            self.stdin.flush()
        except BrokenPipeError:
            pass  # it died; its exit status says how
        reply = self.stdout.readline()
        if not reply:
            raise EncoderCrashed(self._how_it_died(request))
        answer = json.loads(reply)
        if answer.get("no_space"):
            raise NoSpaceLeft(Path(request.target))
        if "error" in answer:
            what = _format_name(request)
            raise EncodingError(f"could not encode {Path(request.target).name} as {what}: {answer['error']}")

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        if self.alive:
            self.stdin.close()
            self.process.wait()

    def _how_it_died(self, request: EncodeRequest) -> str:
        status = self.process.wait()
        how = f"signal {-status}" if status < 0 else f"exit status {status}"
        if status < 0 and -status in signal.valid_signals():
            how = signal.Signals(-status).name
        return f"the {_format_name(request)} encoder crashed ({how}) while writing {Path(request.target).name}"


class _Encoders:
    """The idle encoder processes of this process, started on demand and reused."""

    def __init__(self) -> None:
        self._idle: list[EncoderProcess] = []
        self._lock = threading.Lock()

    def take(self) -> EncoderProcess:
        with self._lock:
            while self._idle:
                encoder = self._idle.pop()
                if encoder.alive:
                    return encoder
        return EncoderProcess()

    def give_back(self, encoder: EncoderProcess) -> None:
        if not encoder.alive:
            return
        with self._lock:
            self._idle.append(encoder)


_encoders = _Encoders()


def encode_in_child(
    samples: np.ndarray,
    file: Path,
    fmt: str,
    subtype: str | None,
    *,
    target: Path,
    block_samples: int = ENCODE_BLOCK_SAMPLES,
    compression_level: float | None = None,
    bitrate_mode: str | None = None,
) -> None:
    """Create `file` holding `samples` (float32 mono at 24 kHz) encoded as `fmt`/`subtype` (at `compression_level`
    and `bitrate_mode`, libsndfile's bitrate setting, when given), in an encoder process.

    `target` is the file `file` stands in for (errors name it). Raises `EncoderCrashed` when the encoder
    dies, `NoSpaceLeft` on a full disk, `EncodingError` otherwise; `file` may then be left partly written
    for the caller to remove.
    """
    pcm = np.ascontiguousarray(samples, dtype="<f4")
    request = EncodeRequest(
        str(file), fmt, subtype, str(target), len(pcm), block_samples, compression_level, bitrate_mode
    )
    encoder = _encoders.take()
    try:
        encoder.encode(request, pcm)
    finally:
        _encoders.give_back(encoder)


def _format_name(request: EncodeRequest) -> str:
    return f"{request.format}/{request.subtype}" if request.subtype else request.format


class _CountingReader:
    """`source`, counting the bytes read, so a request that fails midway can skip the rest of its samples."""

    def __init__(self, source: BinaryIO) -> None:
        self.source = source
        self.count = 0

    def read(self, size: int) -> bytes:
        data = self.source.read(size)
        self.count += len(data)
        return data


def serve(source: BinaryIO, replies: BinaryIO) -> None:
    """The encoder process: one request after another from `source` until it closes, one reply line each."""
    while line := source.readline():
        request = EncodeRequest(**json.loads(line))
        samples = _CountingReader(source)
        answer: dict[str, object] = {"ok": True}

        def encode(handle: BinaryIO, request: EncodeRequest = request, samples: _CountingReader = samples) -> None:
            encode_blocks(samples, handle, request)

        try:
            write_durably(
                Path(request.file),
                encode,
                target=Path(request.target),
                exclusive=True,
            )
        except NoSpaceLeft:
            answer = {"no_space": True}
        except Exception as error:  # reported to the parent, which raises it
            answer = {"error": f"{type(error).__name__}: {error}"[-_MESSAGE_LIMIT:]}
        left = request.samples * _SAMPLE_BYTES - samples.count
        while left > 0 and (skipped := source.read(min(left, 1 << 20))):  # what a failed request did not read
            left -= len(skipped)
        replies.write((json.dumps(answer) + "\n").encode())
        replies.flush()


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(prog=f"python -m {__name__}", description=__doc__.splitlines()[0]).parse_args(argv)
    try:
        serve(sys.stdin.buffer, sys.stdout.buffer)
    except BrokenPipeError:  # the worker that started it is gone (killed): nobody is left to answer
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nor to flush to at exit
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

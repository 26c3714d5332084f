"""Where the service keeps files, under the data folder, and how it writes them so no reader sees half a file.

    <data_dir>/voices/<voice id>.wav                 a voice prompt, levelled, 24 kHz mono 16-bit
    <data_dir>/jobs/<job id>/inputs/script.txt        the script as submitted
    <data_dir>/jobs/<job id>/inputs/voices/<n>.wav    speaker n's voice prompt, copied at submission
    <data_dir>/jobs/<job id>/segments/<nnnn>.flac     a generated segment, 24 kHz mono, 24-bit FLAC
    <data_dir>/jobs/<job id>/segments/<nnnn>.latents.npy   its acoustic latents, [frames, latent_dim]
    <data_dir>/jobs/<job id>/outputs/episode.<ext>    the finished episode and its .srt/.vtt/.chapters.json/.turns.json
    <data_dir>/shows/<show id>/artwork.<jpg|png>      a show's artwork, as uploaded

A job's inputs are copied rather than referenced, so deleting a voice never breaks a job that used it.
Every file is written to a temporary sibling, flushed to disk and renamed into place. With an object store
(`core.file_store`), the same layout is the bucket's, under its prefix, and this folder is scratch.
"""

from __future__ import annotations

import errno
import math
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar, cast

import numpy as np
import soundfile as sf

from core.audio_rates import SAMPLE_RATE
from core.file_store import FileStore, LocalFiles, file_store

if TYPE_CHECKING:
    from core.settings import Settings

_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class NoSpaceLeft(OSError):
    """A write failed because the filesystem is full or the quota is spent; says which file and what to do."""

    def __init__(self, path: Path) -> None:
        super().__init__(errno.ENOSPC, "no space left on the device", str(path))

    def __str__(self) -> str:
        return f"no space left on the device to write {self.filename}; free some space, then retry"


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> Path:
    """Write `path` through `write(handle)` into a temporary sibling, fsync it, then rename it into place.

    On any error the temporary file is removed and `path` is left as it was; a full disk is `NoSpaceLeft`.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        write_durably(temporary, write, target=path)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return path


def write_durably(file: Path, write: Callable[[BinaryIO], object], *, target: Path, exclusive: bool = False) -> None:
    """Create `file` through `write(handle)`, flush and fsync it; an error that hides a full disk is `NoSpaceLeft`.

    soundfile writes through C callbacks that swallow the handle's exceptions: on a full disk it either
    fails with an empty AssertionError or returns as if it had written a file that is in fact cut short.
    The handle is wrapped so the first OS error is kept and raised after `write` returns or fails anyway.
    """
    guarded: _ErrorKeepingFile | None = None
    try:  # around the `with`: closing flushes what is still buffered, and that can hit the full disk too
        with file.open("xb" if exclusive else "wb") as handle:
            guarded = _ErrorKeepingFile(handle)
            write(cast(BinaryIO, guarded))
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException as error:
        kept = guarded.error if guarded is not None else None
        raise _as_no_space(kept or error, target) from error
    if guarded.error is not None:
        raise _as_no_space(guarded.error, target) from guarded.error


def is_disk_full(error: BaseException) -> bool:
    """Whether `error` says the filesystem is full or the quota spent (a condition that passes once space is freed,
    not a fault of what was being written)."""
    return isinstance(error, OSError) and error.errno in _FULL_ERRNOS


def _as_no_space(error: BaseException, target: Path) -> BaseException:
    if is_disk_full(error):
        return NoSpaceLeft(target)
    return error


_Result = TypeVar("_Result")


class _ErrorKeepingFile:
    """A binary file handle that remembers the first OSError of its writes and seeks, and re-raises it.

    After that error every call fails quietly (a short write, an error position): a Python writer stopped at the
    raise, and soundfile's C callbacks print each exception they swallow, thousands of tracebacks for one full disk
    (chaos soak); the failure values end its write all the same, and `write_durably` raises the kept error."""

    def __init__(self, handle: BinaryIO) -> None:
        self._handle = handle
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        return self._kept(0, self._handle.write, data)

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return self._kept(-1, self._handle.seek, offset, whence)

    def tell(self) -> int:
        return self._kept(-1, self._handle.tell)

    def read(self, size: int = -1) -> bytes:
        return self._kept(b"", self._handle.read, size)

    def flush(self) -> None:
        self._kept(None, self._handle.flush)

    def _kept(self, failed: _Result, operation: Callable[..., _Result], *args: Any) -> _Result:
        if self.error is not None:
            return failed
        try:
            return operation(*args)
        except OSError as error:
            self.error = error
            raise


def write_audio(path: Path, samples: np.ndarray, subtype: str) -> Path:
    """Atomically write 24 kHz mono audio as WAV (`subtype` e.g. FLOAT for lossless, PCM_16 for players)."""
    return atomic_write(path, lambda handle: sf.write(handle, samples, SAMPLE_RATE, format="WAV", subtype=subtype))


def read_audio(path: Path) -> np.ndarray:
    """24 kHz mono float32 samples from a WAV written by `write_audio`."""
    samples: np.ndarray  # soundfile is untyped
    samples, sample_rate = sf.read(path, dtype="float32", always_2d=False)
    if sample_rate != SAMPLE_RATE:
        raise ValueError(f"{path}: expected {SAMPLE_RATE} Hz audio, found {sample_rate} Hz")
    return samples


# A generated segment is kept as 24-bit FLAC: a third of 32-bit float WAV or less, 144 dB below full scale. The
# samples are divided by a power of two (1 unless they peak above 1.0, kept in the file's comment) so that none
# clips; quantising and reading back are exact integer steps, so what `write_segment_audio` returns is exactly
# what `read_segment_audio` gives, and an episode laid out from stored segments equals one laid out as they came.
_SEGMENT_FULL_SCALE = 1 << 23
_GAIN_COMMENT = "voxcast-gain="


def write_segment_audio(path: Path, samples: np.ndarray) -> np.ndarray:
    """Atomically write a generated segment (a `.flac` path); returns the samples as they read back."""
    if not np.all(np.isfinite(samples)):
        raise ValueError(f"{path.name}: the generated audio holds non-finite samples")
    peak = float(np.max(np.abs(samples))) if len(samples) else 0.0
    gain = 1.0 if peak <= 1.0 else 2.0 ** math.ceil(math.log2(peak))
    scaled = np.round(samples / gain * _SEGMENT_FULL_SCALE)
    quantised = np.clip(scaled, -_SEGMENT_FULL_SCALE, _SEGMENT_FULL_SCALE - 1).astype(np.int32)

    def write(handle: BinaryIO) -> None:
        with sf.SoundFile(handle, "w", SAMPLE_RATE, 1, subtype="PCM_24", format="FLAC") as audio_file:
            audio_file.comment = f"{_GAIN_COMMENT}{gain:g}"
            audio_file.write(quantised << 8)  # libsndfile takes 24-bit samples in the top bits of int32

    atomic_write(path, write)
    return _dequantised(quantised, gain)


def read_segment_audio(path: Path) -> np.ndarray:
    """A stored segment's samples: 24-bit FLAC as `write_segment_audio` wrote it, or the float WAV of older jobs."""
    if path.suffix == ".wav":
        return read_audio(path)
    with sf.SoundFile(path) as audio_file:
        if audio_file.samplerate != SAMPLE_RATE:
            raise ValueError(f"{path}: expected {SAMPLE_RATE} Hz audio, found {audio_file.samplerate} Hz")
        comment = audio_file.comment or ""
        quantised = audio_file.read(dtype="int32", always_2d=False) >> 8
    gain = float(comment.removeprefix(_GAIN_COMMENT)) if comment.startswith(_GAIN_COMMENT) else 1.0
    return _dequantised(quantised, gain)


def _dequantised(quantised: np.ndarray, gain: float) -> np.ndarray:
    # Exact in float32: a 24-bit integer over 2^23, times a power of two.
    return quantised.astype(np.float32) / np.float32(_SEGMENT_FULL_SCALE) * np.float32(gain)


@dataclass(frozen=True)
class JobFolder:
    """The files of one job."""

    root: Path

    @property
    def script(self) -> Path:
        return self.root / "inputs" / "script.txt"

    def voice(self, speaker: int) -> Path:
        return self.root / "inputs" / "voices" / f"{speaker}.wav"

    @property
    def segments(self) -> Path:
        """Every segment's audio, latents and partial frames: the job's intermediates (see `core.retention`)."""
        return self.root / "segments"

    def segment_audio(self, index: int) -> Path:
        return self.segments / f"{index:04d}.flac"

    def segment_latents(self, index: int) -> Path:
        return self.segments / f"{index:04d}.latents.npy"

    def previous_take(self, index: int) -> tuple[Path, Path]:
        """Audio and latents of the segment's take before its last regeneration, kept until the listener chooses
        (`api.services.takes`)."""
        return self.segments / f"{index:04d}.previous.flac", self.segments / f"{index:04d}.previous.latents.npy"

    def segment_partial_frames(self, index: int) -> Path:
        """The frames of a segment still being generated, appended as they come (for resuming; `partial_frames`)."""
        return self.segments / f"{index:04d}.partial.frames"

    def segment_live_audio(self, index: int) -> Path:
        """The audio a segment still being generated has made so far, as the live `audio` events carried it (16-bit
        PCM from its frame 0): what a listener who connects late hears first (`workers.live_audio`)."""
        return self.segments / f"{index:04d}.live.pcm"

    def live_audio(self) -> list[tuple[int, Path]]:
        """(segment, file) of each segment generating here now, with its live audio so far, in segment order."""
        return sorted((int(path.name.split(".")[0]), path) for path in self.segments.glob("*.live.pcm"))

    @property
    def outputs(self) -> Path:
        return self.root / "outputs"

    def remove_temporaries(self) -> list[Path]:
        """Delete what a writer killed mid-write left: temporaries and backups (`.<name>.<hex>.tmp|.bak`); returns them.

        Only for the job's holder: it alone writes to the folder, so no temporary here is still being written.
        """
        patterns = (".*.tmp", ".*.bak")
        left = [path for pattern in patterns for path in self.root.rglob(pattern) if path.is_file()]
        for path in left:
            path.unlink(missing_ok=True)
        return left

    def output(self, name: str) -> Path:
        """An output file by name: `episode.mp3`, `episode.srt`, `episode.chapters.json`, `episode.turns.json`."""
        return self.outputs / name


@dataclass(frozen=True)
class DataFolder:
    """The service's data folder: voices and jobs, addressed by id; `files` says where they are kept for every host
    (`core.file_store`: this folder alone, or an S3-compatible bucket with this folder as scratch)."""

    root: Path
    files: FileStore

    @classmethod
    def local(cls, root: Path) -> DataFolder:
        """The folder alone (one machine, or a folder the hosts share)."""
        return cls(root, LocalFiles(root))

    @classmethod
    def from_settings(cls, settings: Settings) -> DataFolder:
        """`VOXCAST_DATA_DIR`, with the store `VOXCAST_STORAGE_URL` names (none: the folder alone)."""
        root = settings.data_dir
        return cls(root, file_store(root, settings.storage_url, settings.storage_endpoint_url))

    def job(self, job_id: str) -> JobFolder:
        return JobFolder(self.root / "jobs" / _checked_id(job_id))

    def voice(self, voice_id: str) -> Path:
        return self.root / "voices" / f"{_checked_id(voice_id)}.wav"

    def show(self, show_id: str) -> Path:
        """A show's folder: its artwork."""
        return self.root / "shows" / _checked_id(show_id)

    def show_artwork(self, show_id: str, extension: str) -> Path:
        """A show's artwork as uploaded: `jpg` or `png`."""
        return self.show(show_id) / f"artwork.{extension}"

    @property
    def trash_root(self) -> Path:
        """Where a deleted job's folder goes, in one rename, before it is removed (see `core.job_deletion`)."""
        return self.root / "trash"

    def trash(self, job_id: str) -> Path:
        return self.trash_root / _checked_id(job_id)

    def relative(self, path: Path) -> str:
        """How the database names a file: relative to the data folder, so the folder can move."""
        return path.relative_to(self.root).as_posix()

    def resolve(self, relative: str) -> Path:
        return self.root / relative


def new_id() -> str:
    """A random 32-hex-digit id for jobs and voices: unguessable, and safe in paths and URLs."""
    return secrets.token_hex(16)


def _checked_id(identifier: str) -> str:
    # Ids come from URLs; only our own hex ids may become path components.
    if not identifier or len(identifier) > 64 or not all(c in "0123456789abcdef" for c in identifier):
        raise ValueError(f"not a voxcast id: {identifier!r}")
    return identifier

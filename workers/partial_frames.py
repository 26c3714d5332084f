"""The frames of a segment still generating, appended to a file as they come, so a rerun can carry on from them.

A worker killed mid-segment leaves the file behind; the next attempt replays what it holds (the engine rebuilds
its caches from it) and generates only what follows, instead of the whole segment again. Each frame's record
holds the tokens chosen since the previous frame and the frame's latent: the latents alone are not enough, since
a speech end and start between two frames change what comes after them.

Stored frames are trusted because they can only come from the same segment, seed and revision: the file is
discarded the moment its segment is stored, and a turn can be regenerated (with a new seed) only once every
segment of the job is stored.

The file only grows: one record per frame, synced every `SYNC_EVERY` frames (and at once by `flush` when the job is
handed back on a planned stop), so a long segment costs a constant amount of writing per frame (rewriting a whole
array each time cost the square of its length). A crash mid-write leaves at most a torn last record, which reading
ignores and the next append cuts off.

Layout, little-endian: the header `MAGIC` then the latent size (uint32); then per frame the token count
(uint32), the tokens (int32 each) and the latent (float32 each).
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

import numpy as np
import torch

from pipeline.engine.requests import Replay

logger = logging.getLogger(__name__)

MAGIC = b"voxcast-frames-1\n"
SYNC_EVERY = 8  # frames (~1 s of audio) a crash may cost
_HEADER = struct.Struct("<I")
_COUNT = struct.Struct("<I")


class PartialFrames:
    """One segment's frames on disk: what an earlier attempt left (`stored`), and this attempt's as they come."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._valid_bytes = 0  # the stored file's length up to its last whole record
        self._stored: Replay | None = self._read()
        self._pending = bytearray()  # records not yet written
        self._unsynced = 0  # frames among them
        self._kept = True  # False once the file went from under this attempt: its frames are no longer written

    def stored(self) -> Replay | None:
        """The frames an earlier attempt made (their tokens and latents), or None when there are none to trust."""
        return self._stored

    @property
    def stored_frames(self) -> int:
        return 0 if self._stored is None else len(self._stored.latents)

    def add(self, frame: int, tokens: tuple[int, ...], latent: np.ndarray) -> None:
        """Record frame number `frame` (from 1); the stored frames, which the replay hands back, are kept as is."""
        if frame <= self.stored_frames or not self._kept:
            return
        if self._valid_bytes == 0 and not self._pending:
            self._pending += MAGIC + _HEADER.pack(latent.shape[-1])
        self._pending += _COUNT.pack(len(tokens)) + np.asarray(tokens, dtype="<i4").tobytes()
        self._pending += np.asarray(latent, dtype="<f4").tobytes()
        self._unsynced += 1
        if self._unsynced == SYNC_EVERY:
            self._write()

    def flush(self) -> None:
        """Write and sync the frames not yet on disk (fewer than `SYNC_EVERY`): the segment stops here for now (its
        worker hands the job back) and the next attempt replays every frame it made."""
        if self._pending:
            self._write()

    def discard(self) -> None:
        """Forget the file: the segment is stored whole (or must start over)."""
        self._pending.clear()
        self._unsynced = 0
        self._valid_bytes = 0
        self._stored = None
        self._kept = True
        self.path.unlink(missing_ok=True)

    def _write(self) -> None:
        """Append the pending records after the last whole one on disk, and sync them."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            handle = open(self.path, "r+b" if self._valid_bytes else "wb")  # closed by the `with` below
        except FileNotFoundError:
            self._let_go()
            return
        with handle:
            handle.truncate(self._valid_bytes)  # a torn record of an earlier attempt goes
            handle.seek(self._valid_bytes)
            handle.write(self._pending)
            handle.flush()
            os.fsync(handle.fileno())
        self._valid_bytes += len(self._pending)
        self._pending.clear()
        self._unsynced = 0

    def _let_go(self) -> None:
        """The file this attempt appends to is gone: another attempt of the job took it (this worker was silent long
        enough for its job to be taken over, or the other stored the segment and discarded it). Frames must run from
        the first, so this attempt's alone would be a wrong file: it stops keeping them, and the segment goes on (a
        crash now costs its frames so far; a stale holder learns at its next heartbeat that the job is not its own)."""
        logger.warning("partial frames gone from under this attempt; no longer kept", extra={"path": str(self.path)})
        self._kept = False
        self._pending.clear()
        self._unsynced = 0
        self._valid_bytes = 0

    def _read(self) -> Replay | None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as error:
            logger.warning("unreadable partial frames ignored", extra={"path": str(self.path), "error": str(error)})
            return None
        header = len(MAGIC) + _HEADER.size
        if len(data) < header or not data.startswith(MAGIC):
            if data:
                logger.warning("partial frames of another format ignored", extra={"path": str(self.path)})
            return None
        (latent_size,) = _HEADER.unpack_from(data, len(MAGIC))
        tokens: list[int] = []
        latents: list[np.ndarray] = []
        offset = header
        while offset + _COUNT.size <= len(data):
            (count,) = _COUNT.unpack_from(data, offset)
            end = offset + _COUNT.size + 4 * count + 4 * latent_size
            if end > len(data):
                break  # torn by a crash mid-write
            start = offset + _COUNT.size
            tokens += np.frombuffer(data, "<i4", count, start).tolist()
            latents.append(np.frombuffer(data, "<f4", latent_size, start + 4 * count))
            offset = end
        self._valid_bytes = offset
        if not latents:
            return None
        return Replay(tuple(tokens), torch.from_numpy(np.stack(latents).astype(np.float32)))

"""A segment's frames on disk while it generates: what a killed attempt leaves, and what the next one makes of it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from workers.partial_frames import SYNC_EVERY, PartialFrames

FRAME, SPEECH_END, SPEECH_START = 7, 8, 9
LATENT_SIZE = 5


def frame(number: int) -> tuple[tuple[int, ...], np.ndarray]:
    """Frame `number`'s tokens (a speech restart before every fifth frame) and latent (its number, repeated)."""
    tokens = (SPEECH_END, SPEECH_START, FRAME) if number % 5 == 0 else (FRAME,)
    return tokens, np.full(LATENT_SIZE, number, dtype=np.float32)


def write_frames(partial: PartialFrames, numbers: range) -> None:
    for number in numbers:
        partial.add(number, *frame(number))


def assert_holds(path: Path, frames: int) -> None:
    """The file replays frames 1..`frames`, each with its own tokens and latent."""
    stored = PartialFrames(path).stored()
    assert stored is not None
    expected = [frame(number) for number in range(1, frames + 1)]
    assert stored.tokens == tuple(token for tokens, _ in expected for token in tokens)
    torch.testing.assert_close(stored.latents, torch.from_numpy(np.stack([latent for _, latent in expected])))


def test_frames_reach_the_disk_every_few_frames(tmp_path: Path) -> None:
    path = tmp_path / "0000.partial.frames"
    partial = PartialFrames(path)
    assert partial.stored() is None and partial.stored_frames == 0
    write_frames(partial, range(1, SYNC_EVERY))
    assert not path.exists()  # a crash now costs less than a second of audio
    write_frames(partial, range(SYNC_EVERY, 2 * SYNC_EVERY + 3))
    assert_holds(path, 2 * SYNC_EVERY)


def test_the_file_only_grows(tmp_path: Path) -> None:
    """Each sync appends its frames and never writes what is on disk again (no cost growing with the segment)."""
    path = tmp_path / "0000.partial.frames"
    partial = PartialFrames(path)
    write_frames(partial, range(1, SYNC_EVERY + 1))
    written = path.read_bytes()
    marked = written[:-1] + b"\xff"  # a byte of the last latent changed on disk: a rewrite would undo it
    path.write_bytes(marked)
    write_frames(partial, range(SYNC_EVERY + 1, 3 * SYNC_EVERY + 1))
    after = path.read_bytes()
    assert after.startswith(marked)
    fresh = tmp_path / "fresh.partial.frames"
    write_frames(PartialFrames(fresh), range(1, 3 * SYNC_EVERY + 1))
    assert len(after) == fresh.stat().st_size  # nothing written twice


def test_a_resumed_attempt_keeps_the_stored_frames_and_appends_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "0000.partial.frames"
    write_frames(PartialFrames(path), range(1, 2 * SYNC_EVERY + 1))
    resumed = PartialFrames(path)
    assert resumed.stored_frames == 2 * SYNC_EVERY
    write_frames(resumed, range(1, 4 * SYNC_EVERY + 1))  # the replay hands the stored frames back first
    assert_holds(path, 4 * SYNC_EVERY)


def test_a_record_torn_by_a_crash_is_dropped_and_cut_off_by_the_next_append(tmp_path: Path) -> None:
    path = tmp_path / "0000.partial.frames"
    write_frames(PartialFrames(path), range(1, 2 * SYNC_EVERY + 1))
    with open(path, "r+b") as handle:
        handle.truncate(path.stat().st_size - 3)  # the last record, half written
    resumed = PartialFrames(path)
    assert resumed.stored_frames == 2 * SYNC_EVERY - 1
    write_frames(resumed, range(1, 3 * SYNC_EVERY))
    assert_holds(path, 3 * SYNC_EVERY - 1)


def test_a_file_of_another_format_is_not_replayed_and_gets_replaced(tmp_path: Path) -> None:
    path = tmp_path / "0000.partial.frames"
    np.save(path.open("wb"), np.zeros((4, LATENT_SIZE), dtype=np.float32))  # the older latents-only format
    partial = PartialFrames(path)
    assert partial.stored() is None
    write_frames(partial, range(1, SYNC_EVERY + 1))
    assert_holds(path, SYNC_EVERY)


def test_discard_removes_the_file_and_what_was_not_written_yet(tmp_path: Path) -> None:
    path = tmp_path / "0000.partial.frames"
    partial = PartialFrames(path)
    write_frames(partial, range(1, SYNC_EVERY + 3))
    partial.discard()
    assert not path.exists()
    write_frames(partial, range(1, SYNC_EVERY + 1))
    assert_holds(path, SYNC_EVERY)


def test_a_flush_writes_the_frames_since_the_last_sync_and_the_file_grows_on_from_them(tmp_path: Path) -> None:
    """A job handed back on a planned stop keeps every frame it made, not only those up to the last sync."""
    path = tmp_path / "0000.partial.frames"
    partial = PartialFrames(path)
    write_frames(partial, range(1, SYNC_EVERY + 3))
    assert_holds(path, SYNC_EVERY)
    partial.flush()
    assert_holds(path, SYNC_EVERY + 2)
    partial.flush()  # nothing pending: nothing written
    assert_holds(path, SYNC_EVERY + 2)
    resumed = PartialFrames(path)  # the next attempt replays them and carries on after them
    write_frames(resumed, range(1, 2 * SYNC_EVERY + 3))
    resumed.flush()
    assert_holds(path, 2 * SYNC_EVERY + 2)


def test_an_attempt_whose_file_another_took_goes_on_without_it(tmp_path: Path) -> None:
    """This worker was silent and its job taken over: the other attempt stored the segment and discarded the file.
    Appending here would write frames that do not start from the first, so this attempt stops keeping them, and
    the segment goes on: no error, no file made again, and a discard afterwards still starts over cleanly."""
    path = tmp_path / "0000.partial.frames"
    partial = PartialFrames(path)
    write_frames(partial, range(1, SYNC_EVERY + 1))
    assert_holds(path, SYNC_EVERY)
    path.unlink()  # the other attempt's discard
    write_frames(partial, range(SYNC_EVERY + 1, 3 * SYNC_EVERY + 1))
    partial.flush()
    assert not path.exists()
    partial.discard()  # the segment must start over here: its frames are kept again, from the first
    write_frames(partial, range(1, SYNC_EVERY + 1))
    assert_holds(path, SYNC_EVERY)

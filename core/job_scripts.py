"""Which script a job generates: the one submitted (revision 0), or the one its newest regeneration wrote.

Every regeneration writes the whole script of its revision beside the submitted one, before the database
commits the revision: a commit that fails leaves an unused file, never a job whose script and stored
segments disagree. Earlier revisions' scripts stay, so a job's history can be read back.

    <data_dir>/jobs/<job id>/inputs/script.txt        revision 0, as submitted
    <data_dir>/jobs/<job id>/inputs/script.r<n>.txt   revision n (n >= 1)
"""

from __future__ import annotations

from pathlib import Path

from core.file_store import FileStore
from core.storage import JobFolder, atomic_write


def script_path(folder: JobFolder, revision: int) -> Path:
    return folder.script if revision == 0 else folder.script.with_name(f"script.r{revision}.txt")


def read_script(folder: JobFolder, revision: int) -> str:
    """The script text a job at `revision` generates (UTF-8)."""
    return script_path(folder, revision).read_text(encoding="utf-8")


def read_stored_script(files: FileStore, folder: JobFolder, revision: int) -> str | None:
    """The script text of `revision` as the store keeps it, read without a local copy left behind (a worker on
    this host may be generating the job in the same folder); None when it exists nowhere."""
    path = script_path(folder, revision)
    size = files.size(path)
    return None if size is None else b"".join(files.read_range(path, 0, size - 1)).decode("utf-8")


def write_script(folder: JobFolder, revision: int, text: str) -> Path:
    """Store the script of a new revision atomically; returns its path."""
    return atomic_write(script_path(folder, revision), lambda handle: handle.write(text.encode("utf-8")))

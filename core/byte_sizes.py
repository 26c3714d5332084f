"""How sizes read in messages and tables: one place, so a limit and a usage figure are worded alike everywhere.

`byte_size` for limits (binary units, as uploads and bodies are bounded), `megabytes` for storage figures (decimal,
as disks and quotas are sold). Imports nothing, so the studio words sizes as the api does without loading it.
"""

from __future__ import annotations


def byte_size(count: int) -> str:
    """A size as people read it: '2 MiB', '64 KiB', '1.5 MiB', '900 bytes'."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:.4g} {unit}"
    return f"{count} bytes"


def megabytes(count: int) -> str:
    """Bytes as people read them in messages and tables: `812.4 MB`."""
    return f"{count / 1_000_000:,.1f} MB"

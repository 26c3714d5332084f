"""Path and query parameters several routes share, with the bounds that keep odd values out of the database.

Ids are checked for their shape (32 hex digits, as `core.storage.new_id` makes them) before any lookup, so
a NUL, a path or a megabyte of text is a 422 naming the parameter, never a database error. Whole numbers
that reach a query are held to a 32-bit column's range (no real key id, offset or index is larger), so no
query gets a Python int past 64 bits, on which SQLite and PostgreSQL fail (a 500 before this).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

ID_PATTERN = r"^[0-9a-f]{32}$"
FEED_TOKEN_PATTERN = r"^[A-Za-z0-9_-]{43}$"  # secrets.token_urlsafe(32), as api.services.shows makes it
ARTWORK_VERSION_PATTERN = r"^[0-9a-f]{16}$"  # the artwork URL's version, as api.services.feed_files names it
MAX_DATABASE_INT = 2**31 - 1

JobId = Annotated[str, Path(pattern=ID_PATTERN, description="a job id: 32 lowercase hex digits")]
ScriptId = Annotated[str, Path(pattern=ID_PATTERN, description="a script job id: 32 lowercase hex digits")]
VoiceId = Annotated[str, Path(pattern=ID_PATTERN, description="a voice id: 32 lowercase hex digits")]
SegmentIndex = Annotated[int, Path(ge=0, le=MAX_DATABASE_INT, description="0-based, as in the job's events")]
OwnerId = Annotated[int | None, Query(ge=1, le=MAX_DATABASE_INT, description="an API key's id")]
Offset = Annotated[int, Query(ge=0, le=MAX_DATABASE_INT)]

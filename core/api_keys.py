"""API keys: minted once, stored only as SHA-256 hashes, looked up by hash on every request.

A key is 256 random bits, so a fast hash is enough (nothing to brute-force, unlike a password), and the
lookup is one indexed equality. In single-user mode every request acts as one local admin key, created on
first use, whose hash matches no key anyone holds.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.models import ApiKey

KEY_PREFIX = "vxc_"
LOCAL_KEY_NAME = "local (single-user mode)"
_SHOWN_PREFIX_CHARS = 12


@dataclass(frozen=True)
class MintedKey:
    """A new key: `secret` is shown to its holder once and never stored."""

    id: int
    name: str
    secret: str
    is_admin: bool


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def create_api_key(session: Session, name: str, *, admin: bool = False) -> MintedKey:
    """Store a new key's hash and return the key itself, which only the caller will ever see."""
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    row = ApiKey(name=name, key_hash=hash_key(secret), key_prefix=secret[:_SHOWN_PREFIX_CHARS], is_admin=admin)
    session.add(row)
    session.flush()
    return MintedKey(id=row.id, name=name, secret=secret, is_admin=admin)


def find_api_key(session: Session, secret: str) -> ApiKey | None:
    """The live (not revoked) key with this secret, if any."""
    row = session.scalar(select(ApiKey).where(ApiKey.key_hash == hash_key(secret)))
    return row if row is not None and row.revoked_at is None else None


def local_admin_key(session: Session) -> ApiKey:
    """The one key of single-user mode, created the first time it is needed."""
    row = session.scalar(select(ApiKey).where(ApiKey.name == LOCAL_KEY_NAME, ApiKey.is_admin.is_(True)))
    if row is None:
        row = ApiKey(name=LOCAL_KEY_NAME, key_hash=hash_key(secrets.token_hex(32)), key_prefix="local", is_admin=True)
        session.add(row)
        session.flush()
    return row

"""`voxcast keys`: mint, list and revoke API keys (the database keeps only their hashes)."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from sqlalchemy import select

from cli.errors import EXIT_OK, InputError
from core.api_keys import create_api_key
from core.db import Database, database_url, upgrade_database
from core.models import ApiKey
from core.settings import Settings


def register(subcommands: argparse._SubParsersAction, settings: Settings) -> None:
    keys = subcommands.add_parser("keys", help="manage API keys").add_subparsers(dest="keys_command", required=True)
    create = keys.add_parser("create", help="mint a key and print it (shown once)")
    create.add_argument("--name", default="default", help="who or what the key is for")
    create.add_argument("--admin", action="store_true", help="may see and manage every job")
    create.set_defaults(run=run_create)
    listing = keys.add_parser("list", help="list keys (prefix, name, admin, revoked)")
    listing.set_defaults(run=run_list)
    revoke = keys.add_parser("revoke", help="revoke a key by its id")
    revoke.add_argument("id", type=int)
    revoke.set_defaults(run=run_revoke)


def _database(settings: Settings) -> Database:
    upgrade_database(database_url(settings), settings.start_wait_seconds)
    return Database.from_settings(settings)


def run_create(args: argparse.Namespace, settings: Settings) -> int:
    database = _database(settings)
    with database.session() as session:
        minted = create_api_key(session, args.name, admin=args.admin)
    role = "admin key" if minted.is_admin else "key"
    print(f"{role} {minted.id} ({minted.name}); keep it, it is not shown again:")
    print(minted.secret)
    return EXIT_OK


def run_list(args: argparse.Namespace, settings: Settings) -> int:
    database = _database(settings)
    with database.session() as session:
        for key in session.scalars(select(ApiKey).order_by(ApiKey.id)):
            flags = ("admin " if key.is_admin else "") + ("revoked" if key.revoked_at else "")
            print(f"{key.id}\t{key.key_prefix}…\t{key.name}\t{flags.strip()}")
    return EXIT_OK


def run_revoke(args: argparse.Namespace, settings: Settings) -> int:
    database = _database(settings)
    with database.session() as session:
        key = session.get(ApiKey, args.id)
        if key is None:
            raise InputError(f"no key {args.id}; `voxcast keys list` shows them")
        key.revoked_at = key.revoked_at or datetime.now(UTC)
    print(f"key {args.id} revoked")
    return EXIT_OK

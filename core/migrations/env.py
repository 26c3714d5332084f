"""Alembic's entry point: migrate the connection `core.db.upgrade_database` hands over, or the configured URL.

`alembic upgrade head` from the repository root (see alembic.ini) uses the same settings as the service.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from core.db import create_database_engine, database_url
from core.models import Base
from core.settings import Settings

config = context.config


def run_migrations(connection: Connection) -> None:
    # SQLite cannot ALTER most things in place; batch mode rebuilds the table, and is a no-op elsewhere.
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run_migrations(connection)
        return
    url = config.get_main_option("sqlalchemy.url") or database_url(Settings.from_env())
    engine = create_database_engine(url)
    try:
        with engine.connect() as own_connection:
            run_migrations(own_connection)
            own_connection.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("voxcast migrations run online only: `alembic upgrade head` against a database")
run_migrations_online()

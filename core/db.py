"""The database: one engine and session factory per process, from the `database_url` setting.

SQLite (a file under the data folder) is the embedded default; PostgreSQL is the deployed one. Both see
the same SQLAlchemy 2 models and the same Alembic migrations. SQLite is shared here by the api, the
worker's task threads and the CLI, so every connection runs in WAL mode with a busy timeout and opens its
transactions with `BEGIN IMMEDIATE`: a writer waits its turn instead of failing with "database is locked"
when a read transaction would have to be upgraded. A transaction that only reads (`Database.reading`) opens
with a plain `BEGIN` instead: in WAL mode it reads the last commit without waiting for a writer, so the checks
a worker makes every engine step (a job's cancel flag) do not queue behind every other job's writes.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, make_url, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from core.settings import Settings

logger = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
SQLITE_BUSY_TIMEOUT_SECONDS = 30.0
# Any constant works: it only has to be the same in every process that migrates the same database.
_POSTGRES_MIGRATION_LOCK = 0x766F78636173
# How long a transaction whose connection died is tried again: a server restart or failover takes seconds.
RECONNECT_SECONDS = 10.0
_RECONNECT_FIRST_DELAY = 0.05

_P = ParamSpec("_P")
_R = TypeVar("_R")


def database_url(settings: Settings) -> str:
    """The configured URL, or a SQLite file in the data folder."""
    return settings.database_url or f"sqlite:///{settings.data_dir / 'voxcast.db'}"


def create_database_engine(url: str) -> Engine:
    """An engine for `url`; SQLite gets WAL, a busy timeout and immediate transactions, others pre-ping."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url, connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_SECONDS}, pool_pre_ping=True
    )
    event.listen(engine, "connect", _configure_sqlite_connection)
    event.listen(engine, "begin", _begin_immediate)
    return engine


def _configure_sqlite_connection(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None  # we issue BEGIN ourselves (see _begin_immediate)
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_SECONDS * 1000)}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


_READ_ONLY = "voxcast_read_only"  # an execution option: the transaction only reads


def _begin_immediate(connection: Any) -> None:
    read_only = connection.get_execution_options().get(_READ_ONLY, False)
    connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


@dataclass(frozen=True)
class Database:
    """An engine and its session factory; one per process, shared by its threads."""

    engine: Engine
    sessions: sessionmaker[Session]
    read_sessions: sessionmaker[Session]

    @classmethod
    def connect(cls, url: str) -> Database:
        engine = create_database_engine(url)
        return cls(
            engine=engine,
            sessions=sessionmaker(engine, expire_on_commit=False),
            read_sessions=sessionmaker(engine.execution_options(**{_READ_ONLY: True}), expire_on_commit=False),
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> Database:
        return cls.connect(database_url(settings))

    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        """A session whose transaction commits when the block ends and rolls back if it raises."""
        with self.sessions.begin() as session:
            yield session

    @contextlib.contextmanager
    def reading(self) -> Iterator[Session]:
        """A session for reads only: on SQLite its transaction does not wait for writers (see the module's
        docstring); anything it writes is rolled back."""
        with self.read_sessions() as session:
            try:
                yield session
            finally:
                session.rollback()

    def dispose(self) -> None:
        self.engine.dispose()


def retry_on_disconnect(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run `function` (one short transaction) again when the server dropped its connection mid-way.

    Pre-ping replaces a pooled connection that died while idle, but not one that dies during a query (a
    server restart, a failover, an administrator's pg_terminate_backend): that transaction is rolled back
    and raises. For a function whose whole effect is that one transaction, running it again on a fresh
    connection is what should happen; a running job must not fail because its progress write met a
    restart. Retries back off for up to `RECONNECT_SECONDS`; other database errors are raised at once.
    """

    @functools.wraps(function)
    def retrying(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        deadline = time.monotonic() + RECONNECT_SECONDS
        delay = _RECONNECT_FIRST_DELAY
        while True:
            try:
                return function(*args, **kwargs)
            except DBAPIError as error:
                if not error.connection_invalidated or time.monotonic() + delay > deadline:
                    raise
                logger.warning(
                    "database connection lost; trying again",
                    extra={"operation": function.__name__, "error": str(error.orig).strip()},
                )
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    return retrying


def upgrade_database(url: str) -> None:
    """Bring the schema to the newest migration; safe when the api and workers start at the same time.

    Concurrent starters take turns on a lock (a PostgreSQL advisory lock, or a lock file beside a SQLite
    database), so the second one finds the schema current and does nothing.
    """
    engine = create_database_engine(url)
    try:
        with _migration_lock(engine), engine.connect() as connection:
            config = Config()
            config.set_main_option("script_location", str(MIGRATIONS_DIR))
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
            connection.commit()
    finally:
        engine.dispose()
    logger.info("database schema is current", extra={"database": make_url(url).render_as_string()})


@contextlib.contextmanager
def _migration_lock(engine: Engine) -> Iterator[None]:
    backend = engine.url.get_backend_name()
    if backend == "postgresql":
        with engine.connect() as connection:
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": _POSTGRES_MIGRATION_LOCK})
            try:
                yield
            finally:
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": _POSTGRES_MIGRATION_LOCK})
        return
    if backend == "sqlite" and engine.url.database and engine.url.database != ":memory:":
        lock_path = Path(engine.url.database).with_suffix(".migrate.lock")
        with lock_path.open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
        return
    yield

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
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar, cast

from alembic import command
from alembic.config import Config
from sqlalchemy import CursorResult, Engine, Result, create_engine, event, make_url, text
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as SQLAlchemyTimeoutError
from sqlalchemy.orm import Session, sessionmaker

from core.settings import Settings

logger = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
SQLITE_BUSY_TIMEOUT_SECONDS = 30.0
# Any constant works: it only has to be the same in every process that migrates the same database.
_POSTGRES_MIGRATION_LOCK = 0x766F78636173
# How long a transaction that met a "not now" error is tried again, unless the settings say otherwise
# (`VOXCAST_DATABASE_RETRY_SECONDS`): a restart, a failover or a managed database's maintenance takes seconds.
DEFAULT_RETRY_SECONDS = 60.0
_RETRY_FIRST_DELAY = 0.05
_RETRY_LONGEST_DELAY = 2.0
# SQLSTATE classes and codes that mean "not now": connection exceptions (08), operator intervention (57: admin or
# crash shutdown, cannot connect now), serialization failures and deadlocks (40001, 40P01), too many connections.
_TRANSIENT_SQLSTATE_CLASSES = ("08", "57")
_TRANSIENT_SQLSTATES = {"40001", "40P01", "53300"}

_P = ParamSpec("_P")
_R = TypeVar("_R")


def rows_changed(result: Result[Any]) -> int:
    """How many rows an UPDATE or DELETE changed. `Session.execute` is typed to return a `Result`; for those
    statements it returns the `CursorResult` that alone has `rowcount`."""
    return cast(CursorResult[Any], result).rowcount


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
    retry_seconds: float = DEFAULT_RETRY_SECONDS  # how long `retry_transient` tries a transaction again

    @classmethod
    def connect(cls, url: str, retry_seconds: float = DEFAULT_RETRY_SECONDS) -> Database:
        engine = create_database_engine(url)
        return cls(
            engine=engine,
            sessions=sessionmaker(engine, expire_on_commit=False),
            read_sessions=sessionmaker(engine.execution_options(**{_READ_ONLY: True}), expire_on_commit=False),
            retry_seconds=retry_seconds,
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> Database:
        return cls.connect(database_url(settings), settings.database_retry_seconds)

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


def is_transient(error: BaseException) -> bool:
    """Whether a database error means "not now" rather than "never": the connection was refused or lost, the server
    is shutting down or starting, a serialization failure or deadlock, the pool had no connection in time, or
    SQLite's file was locked past its busy timeout. Running the same transaction again later is then right."""
    if isinstance(error, SQLAlchemyTimeoutError):
        return True
    if not isinstance(error, DBAPIError):
        return False
    if error.connection_invalidated:
        return True
    sqlstate = getattr(error.orig, "sqlstate", None) or getattr(error.orig, "pgcode", None)
    if sqlstate:
        return sqlstate[:2] in _TRANSIENT_SQLSTATE_CLASSES or sqlstate in _TRANSIENT_SQLSTATES
    if isinstance(error.orig, sqlite3.OperationalError):
        return any(word in str(error.orig) for word in ("locked", "busy"))
    # no SQLSTATE: psycopg could not connect at all (refused, reset, the server closed the connection)
    return isinstance(error, OperationalError)


class DatabaseUnavailable(Exception):
    """The database answered "not now" for longer than the retry budget: the caller hands its work back."""

    def __init__(self, operation: str, seconds: float, error: BaseException) -> None:
        super().__init__(f"the database did not answer {operation} for {seconds:.0f} s: {_one_line(error)}")
        self.operation = operation


def _one_line(error: BaseException) -> str:
    orig = getattr(error, "orig", None) or error
    return (str(orig).strip().splitlines() or [type(orig).__name__])[0]


def retry_transient(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run `function` (one short transaction, taking a `Database` among its arguments) again while the database
    answers "not now" (`is_transient`), backing off, for up to the database's `retry_seconds`.

    Pre-ping replaces a pooled connection that died while idle, but not one that dies during a query (a server
    restart, a failover, an administrator's pg_terminate_backend), nor a server that refuses connections for a
    while: that transaction is rolled back and raises. For a function whose whole effect is that one transaction,
    running it again on a fresh connection is what should happen; a running job must not fail because its progress
    write met a restart. Past the budget it raises `DatabaseUnavailable`, which callers treat as "hand the work back",
    never as the job's failure; other database errors are raised at once.
    """

    @functools.wraps(function)
    def retrying(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        budget = next(
            (value.retry_seconds for value in (*args, *kwargs.values()) if isinstance(value, Database)),
            DEFAULT_RETRY_SECONDS,
        )
        return call_retrying(functools.partial(function, *args, **kwargs), function.__name__, budget)

    return retrying


def call_retrying(call: Callable[[], _R], operation: str, budget: float) -> _R:
    """`call()`, run again with backoff while the database answers "not now", for up to `budget` seconds; past it
    `DatabaseUnavailable` (see `retry_transient`)."""
    started = time.monotonic()
    delay = _RETRY_FIRST_DELAY
    while True:
        try:
            return call()
        except (DBAPIError, SQLAlchemyTimeoutError) as error:
            if not is_transient(error):
                raise
            waited = time.monotonic() - started
            if waited + delay > budget:
                raise DatabaseUnavailable(operation, waited, error) from error
            logger.warning(
                "database not available; trying again",
                extra={"operation": operation, "error": _one_line(error), "waited_s": round(waited, 1)},
            )
        time.sleep(delay)
        delay = min(delay * 2, _RETRY_LONGEST_DELAY)


def upgrade_database(url: str, retry_seconds: float = DEFAULT_RETRY_SECONDS) -> None:
    """Bring the schema to the newest migration; safe when the api and workers start at the same time.

    Concurrent starters take turns on a lock (a PostgreSQL advisory lock, or a lock file beside a SQLite
    database), so the second one finds the schema current and does nothing. A process that starts while the
    database is away (a restart, a failover) waits for it, saying so, for up to `retry_seconds`, instead of
    exiting at once: a restart policy would only start it again into the same outage, over and over.
    """
    call_retrying(lambda: _upgrade(url), "upgrade_database", retry_seconds)
    logger.info("database schema is current", extra={"database": make_url(url).render_as_string()})


def _upgrade(url: str) -> None:
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

"""The api through a real PostgreSQL outage: while the database is stopped every route answers 503 with
`Retry-After`, naming the database, on a connection that stays open; `/healthz` stays 200 and `/health` says what is
down; once the server is started again the same client is served as before.

The database is a private cluster (initdb as the `postgres` user into the test's folder, its own port): stopping the
PostgreSQL everyone else's tests share is never an option.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from core.settings import Settings
from tests.conftest import free_port


def _as_postgres(*command: str) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command]


class PrivateCluster:
    """A PostgreSQL cluster of the test's own, stopped and started by it."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.data, self.port = folder, folder / "data", free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def init(self) -> None:
        self.folder.mkdir()
        shutil.chown(self.folder, "postgres")
        command = _as_postgres("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")
        subprocess.run(command, check=True, capture_output=True)
        self.start()

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self.folder / "server.log")
        command = _as_postgres("pg_ctl", "-D", str(self.data), "-l", log, "-w", "-o", options, "start")
        subprocess.run(command, check=True, capture_output=True)

    def stop(self, mode: str = "fast") -> None:
        subprocess.run(_as_postgres("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop"), capture_output=True)


@pytest.fixture
def cluster() -> Iterator[PrivateCluster]:
    if shutil.which("initdb") is None or shutil.which("runuser") is None:
        pytest.skip("needs PostgreSQL's initdb and pg_ctl, and runuser, to start a private cluster")
    # not under pytest's tmp_path: its folders are root's alone, and the server runs as `postgres`
    root = Path(tempfile.mkdtemp(prefix="voxcast-postgres-"))
    shutil.chown(root, "postgres")
    cluster = PrivateCluster(root / "cluster")
    try:
        cluster.init()
        yield cluster
    finally:
        cluster.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


def test_every_route_answers_503_while_the_database_is_stopped_and_serves_again_after(
    cluster: PrivateCluster, tmp_path: Path, service_redis_url: str
) -> None:
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url=cluster.url,
        redis_url=service_redis_url,
        single_user=True,
        database_retry_seconds=1,
    )
    with TestClient(create_app(settings)) as client:
        assert client.get("/v1/jobs").status_code == 200
        cluster.stop("fast")
        for method, path in (("GET", "/v1/jobs"), ("GET", "/v1/voices"), ("POST", "/v1/shows")):
            answer = client.request(method, path, json={"title": "A show"} if method == "POST" else None)
            assert answer.status_code == 503, (path, answer.text)
            assert answer.headers["Retry-After"].isdigit()
            assert "the database does not answer" in answer.json()["detail"]
        assert client.get("/healthz").status_code == 200
        health = client.get("/health")
        assert health.status_code == 503 and health.json()["database"] != "ok"
        cluster.start()
        assert client.get("/v1/jobs").status_code == 200
        assert client.get("/health").json()["database"] == "ok"


def test_an_api_started_while_the_database_is_stopped_waits_for_it_and_serves_once_it_answers(
    cluster: PrivateCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A process that starts into an outage (a restart policy, a deploy during a failover) waits for the database,
    saying so, and comes up once it answers, instead of exiting at once to be started into the same outage again."""
    cluster.stop()
    settings = Settings(data_dir=tmp_path / "data", database_url=cluster.url, single_user=True)
    starter = threading.Timer(3.0, cluster.start)  # the database comes back while the api waits for it
    starter.start()
    try:
        with caplog.at_level(logging.WARNING, logger="core.db"), TestClient(create_app(settings)) as client:
            assert client.get("/v1/jobs").status_code == 200
    finally:
        starter.join()
    waits = [record for record in caplog.records if record.getMessage() == "database not available; trying again"]
    assert waits and all(getattr(record, "operation", None) == "upgrade_database" for record in waits)

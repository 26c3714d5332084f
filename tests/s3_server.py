"""An S3-compatible server for the tests: moto's, started as a process of its own (`moto_server`).

Why moto: it is the most complete S3 server that installs from this machine's registries (PyPI; neither MinIO nor
Ceph's gateway can run here: MinIO is not packaged for Debian or PyPI, Debian's radosgw needs a RADOS cluster). In
server mode it is a real HTTP endpoint speaking the S3 REST API (signed requests, Range, multipart uploads,
DeleteObjects, paginated listings), which voxcast's processes reach over the network like any other store.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.conftest import free_port

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "voxcast-test",
    "AWS_SECRET_ACCESS_KEY": "voxcast-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str

    def client(self):  # type: ignore[no-untyped-def]
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=CREDENTIALS["AWS_DEFAULT_REGION"],
        )

    def new_bucket(self) -> str:
        """A bucket of its own for a test or a module."""
        name = f"voxcast-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> dict[str, int]:
        """Every object under `prefix`: key to size."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return {item["Key"]: item["Size"] for page in pages for item in page.get("Contents", [])}


@contextmanager
def running_s3_server(log: Path) -> Iterator[S3Server]:
    port = free_port()
    with log.open("ab") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=output, stderr=output
        )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{endpoint}/moto-api/", timeout=1)
                break
            except httpx.HTTPError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not start; see {log}") from None
                time.sleep(0.2)
        yield S3Server(endpoint)
    finally:
        process.kill()
        process.wait()

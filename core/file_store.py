"""Where the data folder's files are kept for every host: on this machine alone, or in an S3-compatible bucket.

Every process reads and writes its files as paths under the data folder (`core.storage.DataFolder`), as it
always has. The store decides what those paths mean beyond this machine:

- `LocalFiles` (the default): the data folder is the store. Publishing and fetching do nothing; a path is
  there or it is not. One machine, or hosts that share the folder.
- `S3Files` (`VOXCAST_STORAGE_URL=s3://bucket/prefix`): the bucket is the store and each host's data folder is
  scratch. A writer publishes a file once it is whole (the object appears whole or not at all: S3's PUT, and a
  multipart upload completes in one step); a reader fetches it first (downloaded to a temporary sibling, then
  renamed into place, so a half-downloaded file is never read); downloads stream ranges from the bucket; a
  removal removes the objects under the path. The key of a path is the prefix plus its path under the folder.

The client is boto3, the AWS SDK: the most used S3 client in Python, it speaks to AWS and to every S3-compatible
server (`VOXCAST_STORAGE_ENDPOINT_URL`: MinIO, Ceph, R2, ...), and takes credentials from the usual AWS
variables and files. It is imported only when an S3 store is configured.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

CHUNK_BYTES = 256 * 1024  # a streamed download's read size


@dataclass(frozen=True)
class StoredFile:
    """What a store says of a file without reading it: its size, when it was last written, and a tag that changes
    whenever its content does (for HTTP validators: `ETag`, `Last-Modified`)."""

    size: int
    modified: datetime
    version: str


class StoreUnavailable(RuntimeError):
    """The store does not answer, or refuses what was asked; the message says which store and why."""


class FileStore(Protocol):
    """The files of the data folder (`root`), as every host sees them."""

    root: Path

    def __hash__(self) -> int:
        """A store is hashable (by identity): caches of what it holds key on it."""
        ...

    def publish(self, path: Path) -> None:
        """The whole file at `path` (written here) is now every host's."""

    def publish_tree(self, folder: Path) -> None:
        """Every whole file under `folder` (temporaries aside) is now every host's."""

    def fetch(self, path: Path) -> bool:
        """Make the file at `path` present here as every host sees it; False when it exists nowhere."""

    def size(self, path: Path) -> int | None:
        """The file's size in bytes, None when it exists nowhere."""

    def stat(self, path: Path) -> StoredFile | None:
        """The file's size, time and version, None when it exists nowhere."""

    def tree_bytes(self, path: Path) -> int:
        """The size of every whole file under the folder `path` (temporaries aside), wherever they are kept."""

    def holds(self, folder: Path) -> bool:
        """Whether any file is kept under the folder `folder` (one cheap request)."""

    def read_range(self, path: Path, start: int, end: int) -> Iterator[bytes]:
        """Bytes `start` to `end` (inclusive) of the file, in chunks."""

    def remove(self, path: Path) -> None:
        """The file, or the folder and everything under it, gone here and from the store."""

    def remove_file(self, path: Path) -> None:
        """The file at `path` gone here and from the store (absent is fine): one request, where `remove` must list
        what is under the path first."""

    def drop_local(self, path: Path) -> None:
        """Forget this host's copy of a file or folder the store keeps (scratch no longer needed)."""

    def check(self) -> None:
        """Raise `StoreUnavailable` when the store cannot be used (a process checks at start)."""


class LocalFiles:
    """The data folder alone: what is on this machine is all there is."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def publish(self, path: Path) -> None:
        pass

    def publish_tree(self, folder: Path) -> None:
        pass

    def fetch(self, path: Path) -> bool:
        return path.is_file()

    def size(self, path: Path) -> int | None:
        return path.stat().st_size if path.is_file() else None

    def stat(self, path: Path) -> StoredFile | None:
        try:
            status = path.stat()
        except FileNotFoundError:
            return None
        # Files are replaced whole (a rename), never written in place: a new inode or time is a new version.
        version = f"{status.st_ino:x}-{status.st_mtime_ns:x}-{status.st_size:x}"
        return StoredFile(status.st_size, datetime.fromtimestamp(status.st_mtime, UTC), version)

    def tree_bytes(self, path: Path) -> int:
        if not path.exists():
            return 0
        # A writer's temporary is not stored yet: counted, it would be usage that vanishes when its writer (a stale
        # holder resumed after a stop, say) renames or removes it.
        return sum(entry.stat().st_size for entry in path.rglob("*") if entry.is_file() and not is_temporary(entry))

    def holds(self, folder: Path) -> bool:
        return folder.exists()

    def read_range(self, path: Path, start: int, end: int) -> Iterator[bytes]:
        with path.open("rb") as handle:
            handle.seek(start)
            left = end - start + 1
            while left > 0 and (chunk := handle.read(min(CHUNK_BYTES, left))):
                left -= len(chunk)
                yield chunk

    def remove(self, path: Path) -> None:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)

    def remove_file(self, path: Path) -> None:
        path.unlink(missing_ok=True)

    def drop_local(self, path: Path) -> None:
        pass  # the local copy is the only one

    def check(self) -> None:
        pass


class S3Files:
    """An S3-compatible bucket holds the files; the data folder is this host's scratch."""

    def __init__(self, root: Path, bucket: str, prefix: str, client: Any) -> None:  # a boto3 S3 client
        self.root = root
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.client = client

    @classmethod
    def from_url(cls, root: Path, url: str, endpoint_url: str | None) -> S3Files:
        import boto3
        from botocore.config import Config

        bucket, prefix = parse_s3_url(url)
        config = Config(retries={"max_attempts": 5, "mode": "standard"}, max_pool_connections=32)
        return cls(root, bucket, prefix, boto3.client("s3", endpoint_url=endpoint_url, config=config))

    def key(self, path: Path) -> str:
        relative = path.relative_to(self.root).as_posix()
        return f"{self.prefix}/{relative}" if self.prefix else relative

    def publish(self, path: Path) -> None:
        with self._errors(path):
            self.client.upload_file(str(path), self.bucket, self.key(path))

    def publish_tree(self, folder: Path) -> None:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and not is_temporary(path):
                self.publish(path)

    def fetch(self, path: Path) -> bool:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            with self._errors(path):
                self.client.download_file(self.bucket, self.key(path), str(temporary))
        except BaseException as error:
            temporary.unlink(missing_ok=True)
            if isinstance(error, _Missing):
                return False
            raise
        os.replace(temporary, path)
        return True

    def size(self, path: Path) -> int | None:
        stored = self.stat(path)
        return None if stored is None else stored.size

    def stat(self, path: Path) -> StoredFile | None:
        try:
            with self._errors(path):
                head = self.client.head_object(Bucket=self.bucket, Key=self.key(path))
        except _Missing:
            return None
        return StoredFile(int(head["ContentLength"]), head["LastModified"].astimezone(UTC), head["ETag"].strip('"'))

    def tree_bytes(self, path: Path) -> int:
        return sum(size for _, size in self._objects(path))

    def holds(self, folder: Path) -> bool:
        with self._errors(folder):
            listed = self.client.list_objects_v2(Bucket=self.bucket, Prefix=self.key(folder) + "/", MaxKeys=1)
        return bool(listed.get("KeyCount"))

    def read_range(self, path: Path, start: int, end: int) -> Iterator[bytes]:
        with self._errors(path):
            body = self.client.get_object(Bucket=self.bucket, Key=self.key(path), Range=f"bytes={start}-{end}")["Body"]
        try:
            yield from body.iter_chunks(CHUNK_BYTES)
        finally:
            body.close()

    def remove(self, path: Path) -> None:
        LocalFiles(self.root).remove(path)
        keys = [key for key, _ in self._objects(path)]
        if not keys:
            self.remove_file(path)  # a file (absent is fine)
            return
        for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1000 keys
            batch = [{"Key": key} for key in keys[start : start + 1000]]
            with self._errors(path):
                self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})

    def remove_file(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        with self._errors(path):
            self.client.delete_object(Bucket=self.bucket, Key=self.key(path))

    def drop_local(self, path: Path) -> None:
        LocalFiles(self.root).remove(path)

    def check(self) -> None:
        try:
            with self._errors(self.root):
                self.client.head_bucket(Bucket=self.bucket)
        except _Missing:
            raise StoreUnavailable(_S3Errors(self, self.root).where("no such bucket; create it first")) from None

    def _objects(self, folder: Path) -> Iterator[tuple[str, int]]:
        """(key, size) of every object under the folder `folder`."""
        paginator = self.client.get_paginator("list_objects_v2")
        with self._errors(folder):
            for page in paginator.paginate(Bucket=self.bucket, Prefix=self.key(folder) + "/"):
                for item in page.get("Contents", []):
                    yield item["Key"], int(item["Size"])

    def _errors(self, path: Path) -> _S3Errors:
        return _S3Errors(self, path)


class _Missing(Exception):
    """The object does not exist (404): for the callers that answer None or False."""


class _S3Errors:
    """Turns botocore's errors into `_Missing` (404) or `StoreUnavailable` naming the bucket, the key and the cause."""

    def __init__(self, store: S3Files, path: Path) -> None:
        self.store = store
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, _: object) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        if isinstance(error, ClientError):
            code = str(error.response.get("Error", {}).get("Code", ""))
            if code in {"404", "NoSuchKey", "NotFound"}:
                raise _Missing from None
            raise StoreUnavailable(self.where(f"{code}: {error}")) from error
        if isinstance(error, BotoCoreError):
            raise StoreUnavailable(self.where(str(error))) from error

    def where(self, cause: str) -> str:
        store = self.store
        key = store.key(self.path) if self.path != store.root else ""
        return f"object store s3://{store.bucket}/{key} ({store.client.meta.endpoint_url}): {cause}"


def is_temporary(path: Path) -> bool:
    """A writer's temporary or backup (`.<name>.<hex>.tmp|.bak`, `core.storage`): never anyone else's to read."""
    return path.name.startswith(".") and path.suffix in {".tmp", ".bak"}


def parse_s3_url(url: str) -> tuple[str, str]:
    """(bucket, prefix) of `s3://bucket/optional/prefix`; ValueError saying what is allowed otherwise."""
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc or parts.query or parts.fragment:
        raise ValueError(f"{url!r} is not s3://bucket or s3://bucket/prefix")
    return parts.netloc, parts.path.strip("/")


def file_store(root: Path, storage_url: str | None, endpoint_url: str | None) -> FileStore:
    """The store the settings name: the data folder alone, or an S3-compatible bucket in front of it."""
    if storage_url is None:
        return LocalFiles(root)
    return S3Files.from_url(root, storage_url, endpoint_url)

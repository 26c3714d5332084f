"""The file store's contract, held by both backends: the data folder alone, and an S3-compatible bucket (moto's
server, a real HTTP endpoint: `tests.s3_server`) with the folder as scratch."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.file_store import FileStore, LocalFiles, S3Files, StoreUnavailable, is_temporary, parse_s3_url
from core.settings import Settings, SettingsError
from core.storage import DataFolder, atomic_write


# The bucket's server is asked for only when the s3 case runs, out of conftest's sight: that case says `slow` itself.
@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.slow)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> FileStore:
    root = tmp_path / "data"
    if request.param == "local":
        return LocalFiles(root)
    server = request.getfixturevalue("s3_server")
    bucket = server.new_bucket()
    return S3Files.from_url(root, f"s3://{bucket}/install-1", server.endpoint_url)


@pytest.fixture(autouse=True)
def _credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.s3_server import CREDENTIALS

    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)


def write(path: Path, data: bytes) -> Path:
    return atomic_write(path, lambda handle: handle.write(data))


def as_another_host(store: FileStore, tmp_path: Path) -> FileStore:
    """The same store seen from a host with a data folder of its own (for the folder alone: the same folder)."""
    if isinstance(store, LocalFiles):
        return store
    assert isinstance(store, S3Files)
    return S3Files(tmp_path / "other-host", store.bucket, store.prefix, store.client)


def test_a_published_file_is_every_hosts_and_reads_back_whole(store: FileStore, tmp_path: Path) -> None:
    data = bytes(range(256)) * 4096  # 1 MiB
    path = write(store.root / "jobs" / "a" / "segments" / "0000.flac", data)
    store.publish(path)
    other = as_another_host(store, tmp_path)
    there = other.root / "jobs" / "a" / "segments" / "0000.flac"
    assert other.fetch(there) and there.read_bytes() == data
    assert other.size(there) == len(data)
    assert b"".join(other.read_range(there, 10, 20)) == data[10:21]
    assert b"".join(other.read_range(there, 0, len(data) - 1)) == data
    assert [p.name for p in there.parent.iterdir()] == ["0000.flac"]  # no temporary left beside it


def test_what_exists_nowhere_is_said_so(store: FileStore) -> None:
    missing = store.root / "jobs" / "b" / "outputs" / "episode.mp3"
    assert store.fetch(missing) is False and not missing.exists()
    assert store.size(missing) is None
    assert store.tree_bytes(store.root / "jobs" / "b") == 0
    assert store.holds(store.root / "jobs" / "b") is False
    store.remove(missing)  # nothing to remove is no error
    store.remove_file(missing)


def test_a_tree_is_published_counted_and_removed_whole(store: FileStore, tmp_path: Path) -> None:
    folder = store.root / "jobs" / "c"
    write(folder / "inputs" / "script.txt", b"Alice: hi\n")
    write(folder / "inputs" / "voices" / "0.wav", b"R" * 1000)
    # A writer's temporary: never published, never counted (in both backends: usage a stale writer's rename or
    # removal would take back is not usage).
    (folder / "inputs" / ".script.txt.0badcafe.tmp").write_bytes(b"half")
    store.publish_tree(folder)
    other = as_another_host(store, tmp_path)
    assert other.tree_bytes(other.root / "jobs" / "c") == len(b"Alice: hi\n") + 1000
    assert other.holds(other.root / "jobs" / "c") and other.holds(other.root / "jobs" / "c" / "inputs")
    store.remove(folder)
    assert not folder.exists()
    assert other.tree_bytes(other.root / "jobs" / "c") == 0 and not other.holds(other.root / "jobs" / "c")


def test_dropping_the_local_copy_keeps_the_stores(store: FileStore, tmp_path: Path) -> None:
    path = write(store.root / "voices" / "v.wav", b"voice")
    store.publish(path)
    store.drop_local(path)
    if isinstance(store, LocalFiles):
        assert path.read_bytes() == b"voice"  # the folder alone: the local copy is the store
    else:
        assert not path.exists()
        assert store.fetch(path) and path.read_bytes() == b"voice"


def test_a_file_removed_is_gone_for_every_host_and_its_neighbours_stay(store: FileStore, tmp_path: Path) -> None:
    folder = store.root / "jobs" / "e" / "segments"
    for name in ("0000.flac", "0000.partial"):
        store.publish(write(folder / name, name.encode()))
    store.remove_file(folder / "0000.partial")
    other = as_another_host(store, tmp_path)
    there = other.root / "jobs" / "e" / "segments"
    assert not (folder / "0000.partial").exists() and other.fetch(there / "0000.partial") is False
    assert other.fetch(there / "0000.flac") and (there / "0000.flac").read_bytes() == b"0000.flac"


def test_a_file_published_again_replaces_the_old_one_for_every_reader(store: FileStore, tmp_path: Path) -> None:
    path = write(store.root / "jobs" / "d" / "segments" / "0001.flac", b"first take")
    store.publish(path)
    other = as_another_host(store, tmp_path)
    there = other.root / "jobs" / "d" / "segments" / "0001.flac"
    assert other.fetch(there) and there.read_bytes() == b"first take"
    store.publish(write(path, b"second take"))
    assert other.fetch(there) and there.read_bytes() == b"second take"  # a fetch never keeps a stale copy


def test_temporaries_are_told_apart() -> None:
    assert is_temporary(Path(".episode.mp3.0badcafe.tmp")) and is_temporary(Path(".x.wav.12345678.bak"))
    assert not is_temporary(Path("episode.mp3")) and not is_temporary(Path(".hidden"))


def test_a_bucket_that_does_not_exist_stops_a_process_at_start(s3_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store = S3Files.from_url(tmp_path, "s3://no-such-bucket-here/x", s3_server.endpoint_url)
    with pytest.raises(StoreUnavailable, match=r"object store s3://no-such-bucket-here/ \(http://127\.0\.0\.1:\d+\)"):
        store.check()


def test_an_unreachable_store_says_where_and_why(tmp_path: Path) -> None:
    store = S3Files.from_url(tmp_path, "s3://bucket", "http://127.0.0.1:9")  # nothing listens on the discard port
    with pytest.raises(
        StoreUnavailable, match=r"object store s3://bucket/ \(http://127\.0\.0\.1:9\): Could not connect"
    ):
        store.check()


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"VOXCAST_STORAGE_URL": "bucket/prefix"},
            "VOXCAST_STORAGE_URL='bucket/prefix': value error, 'bucket/prefix' is not s3://bucket",
        ),
        ({"VOXCAST_STORAGE_URL": "s3://"}, "VOXCAST_STORAGE_URL='s3://'"),
        (
            {"VOXCAST_STORAGE_ENDPOINT_URL": "minio:9000"},
            "VOXCAST_STORAGE_ENDPOINT_URL='minio:9000': value error, 'minio:9000' is not an http",
        ),
    ],
)
def test_a_bad_store_setting_is_refused_naming_it(environ: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env(environ)
    assert message in str(raised.value)


def test_the_settings_choose_the_store(s3_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    local = DataFolder.from_settings(Settings(data_dir=tmp_path))
    assert isinstance(local.files, LocalFiles) and local.files.root == tmp_path
    bucket = s3_server.new_bucket()
    remote = DataFolder.from_settings(
        Settings(data_dir=tmp_path, storage_url=f"s3://{bucket}/a/b/", storage_endpoint_url=s3_server.endpoint_url)
    )
    assert isinstance(remote.files, S3Files)
    assert (remote.files.bucket, remote.files.prefix) == (bucket, "a/b")
    assert remote.files.key(tmp_path / "jobs" / "x" / "inputs" / "script.txt") == "a/b/jobs/x/inputs/script.txt"
    assert parse_s3_url("s3://only-bucket") == ("only-bucket", "")

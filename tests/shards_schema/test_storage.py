"""Storage by URI: the same operations on a local folder and on a local S3-compatible server."""

from __future__ import annotations

import pytest

from shards_schema import storage


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "root")
    return request.getfixturevalue("s3_bucket") + "/root"


def test_write_read_list_delete(root):
    storage.write_bytes(storage.join(root, "b", "GAME.SLP"), b"slp")
    storage.write_bytes(storage.join(root, "a.json"), b"{}")
    storage.write_bytes(storage.join(root, "b", "c", "notes.txt"), b"hi")
    assert storage.is_dir(root) and not storage.is_file(root)
    assert storage.read_bytes(storage.join(root, "b", "GAME.SLP")) == b"slp"
    assert storage.size(storage.join(root, "a.json")) == 2
    listed = storage.list_files(root)
    assert [storage.relative(u, root) for u in listed] == ["a.json", "b/GAME.SLP", "b/c/notes.txt"]
    assert [storage.relative(u, root) for u in storage.list_files(root, (".slp",))] == ["b/GAME.SLP"]
    single = storage.join(root, "a.json")
    assert storage.list_files(single) == [storage.normalize(single)]
    assert storage.relative(single, single) == "a.json"
    with storage.open_input(storage.join(root, "b", "c", "notes.txt")) as fh:
        fh.seek(1)
        assert fh.read() == b"i"
    storage.delete(storage.join(root, "b"))
    assert [storage.relative(u, root) for u in storage.list_files(root)] == ["a.json"]
    storage.delete(storage.join(root, "missing"))  # missing_ok by default
    with pytest.raises(FileNotFoundError):
        storage.delete(storage.join(root, "missing"), missing_ok=False)


def test_missing_root_is_an_error(root):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        storage.list_files(storage.join(root, "nothing-here"))


def test_uri_spellings(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert storage.normalize("out") == str(tmp_path / "out")  # relative paths mean the driver's folder, made absolute
    assert storage.normalize(f"file://{tmp_path}/x") == str(tmp_path / "x")
    assert storage.normalize("s3://bucket/prefix/") == "s3://bucket/prefix"
    assert storage.join("s3://bucket/p", "a", "b.parquet") == "s3://bucket/p/a/b.parquet"
    assert storage.relative("s3://bucket/p/a/b.parquet", "s3://bucket/p") == "a/b.parquet"
    assert storage.parent("s3://bucket/p/a") == "s3://bucket/p" and storage.name("s3://bucket/p/a") == "a"
    assert storage.scheme("S3://b/k") == "s3" and storage.is_local("/x") and not storage.is_local("hf://datasets/x")
    with pytest.raises(ValueError, match="not below"):
        storage.relative("s3://bucket/q/a", "s3://bucket/p")
    with pytest.raises(ValueError, match="no filesystem for nosuchproto"):
        storage.resolve("nosuchproto://x/y")


def test_s3_endpoint_and_credentials_come_from_the_standard_variables(s3_bucket, monkeypatch):
    """The endpoint is read when a URI is resolved: a wrong one fails, the server's works."""
    storage.write_bytes(f"{s3_bucket}/k", b"v")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens on the discard port
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # the S3 client's own tries, beside ours
    monkeypatch.setattr(storage, "RETRY", storage.RetryPolicy(attempts=2, base_s=0.01))
    with pytest.raises(storage.StorageError, match="read s3://.* failed after 2 attempts: .*NETWORK_CONNECTION"):
        storage.read_bytes(f"{s3_bucket}/k")
    monkeypatch.undo()
    assert storage.read_bytes(f"{s3_bucket}/k") == b"v"

"""The reader by URI: a published version copied to an S3 bucket (moto's server on 127.0.0.1) verifies and reads
the same rows as the local one through every access path; a corrupted object and a folder without a manifest are
refused by name."""

from __future__ import annotations

import pytest
from conftest import copy_tree

from shards_schema import storage
from shards_schema.reader import ShardIntegrityError, open_version


@pytest.fixture
def both(s3_bucket, tiny_generated):
    """(local version, the same version on S3). s3_bucket comes first: the S3 variables are then set before the
    session's Ray starts, and its workers (the ray_dataset read tasks) inherit them."""
    _, published, _ = tiny_generated
    local = open_version(published.path)
    uri = f"{s3_bucket}/out/pokemon_turns/{published.path.name}"
    copy_tree(local.path, uri)
    return local, uri


def test_s3_version_reads_the_rows_of_the_local_one(both):
    local, uri = both
    remote = open_version(uri)
    assert remote.path == uri and remote.manifest == local.manifest
    assert all(f.startswith(uri + "/") for f in remote.files) and len(remote.files) == len(local.files)
    assert remote.table().equals(local.table())
    assert remote.index().equals(local.index()) and remote.quarantine().equals(local.quarantine())
    columns = ["trajectory_id", "turn_index", "action"]
    batches = [b.to_pylist() for b in remote.iter_batches(columns, batch_size=7)]
    assert [r for b in batches for r in b] == local.table(columns).to_pylist()
    trajectory_id = local.index().column("trajectory_id")[-1].as_py()
    assert remote.trajectory(trajectory_id).equals(local.trajectory(trajectory_id))
    assert remote.lazy().collect().equals(local.lazy().collect())
    rows = remote.ray_dataset(columns=columns).take_all()
    assert sorted((r["trajectory_id"], r["turn_index"]) for r in rows) == sorted(
        (r["trajectory_id"], r["turn_index"]) for r in local.table(columns).to_pylist())


def test_corrupted_object_on_s3_is_refused(both):
    local, uri = both
    part = storage.join(uri, local.manifest.files[0].path)
    data = bytearray(storage.read_bytes(part))
    data[len(data) // 2] ^= 0xFF  # same size: only the sha256 can tell
    storage.write_bytes(part, bytes(data))
    with pytest.raises(ShardIntegrityError, match="sha256") as err:
        open_version(uri)
    assert part in str(err.value)
    open_version(uri, check_sha256=False)  # what training workers do after the driver verified: size only
    storage.delete(part)
    with pytest.raises(ShardIntegrityError, match="missing"):
        open_version(uri)


def test_version_without_manifest_is_refused_by_name(both, tmp_path):
    _, uri = both
    storage.delete(storage.join(uri, "manifest.json"))  # what a crashed run leaves: shards, no manifest
    with pytest.raises(ShardIntegrityError, match="no manifest.json") as err:
        open_version(uri)
    assert str(err.value).startswith(uri + " has no manifest.json")
    empty = tmp_path / "pokemon_turns" / "v-unfinished"
    empty.mkdir(parents=True)
    with pytest.raises(ShardIntegrityError, match=f"^{empty} has no manifest.json"):
        open_version(empty)


def test_path_inputs_become_uri_strings(tiny_generated, tmp_path, monkeypatch):
    _, published, _ = tiny_generated
    version = open_version(published.path)  # a pathlib.Path
    assert isinstance(version.path, str) and version.path == str(published.path.resolve())
    monkeypatch.chdir(published.path.parent)
    assert open_version(published.path.name).path == version.path  # relative: made absolute


def test_newest_local_version_is_the_newest_manifest_not_the_last_name(tmp_path):
    import os

    from shards_schema.reader import newest_local_version

    with pytest.raises(FileNotFoundError, match="make demo"):
        newest_local_version(tmp_path / "out", "pokemon_turns")
    for name, mtime in (("v1.0.0-zzz", 1_000), ("v1.0.0-aaa", 2_000)):
        version = tmp_path / "out" / "pokemon_turns" / name
        version.mkdir(parents=True)
        (version / "manifest.json").write_text("{}")
        os.utime(version / "manifest.json", (mtime, mtime))
    (tmp_path / "out" / "pokemon_turns" / "v9.9.9-unpublished").mkdir()  # no manifest: not a version yet
    assert newest_local_version(tmp_path / "out", "pokemon_turns").name == "v1.0.0-aaa"
    assert newest_local_version(tmp_path / "out").name == "v1.0.0-aaa"

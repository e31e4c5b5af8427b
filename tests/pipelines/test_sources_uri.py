"""Inputs by URI: every file source lists and reads through ``shards_schema.storage``, so the same inputs in an S3
bucket (moto's server on 127.0.0.1, reached through a proxy that injects store faults) and on local disk publish the
same version, byte for byte; other fsspec protocols take the route ``hf://`` takes; a hub URI is pinned to a commit
on the driver."""

from __future__ import annotations

import gzip
import json
import shutil
import socket
import tarfile
import zipfile
from pathlib import Path

import lz4.frame
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import shared_data

from pipelines.inputs import HubUri, parse_hub_uri, pin_hub_input
from pipelines.parse_replays import ParseConfig, run
from shards_schema import storage
from tools.fault_proxy import FaultProxy, Faults

SLP = ("peppi__short_game_tbh10.slp", "slippijs__pal.slp", "peppi__netplay.slp")


def _inputs(source: str, root: Path) -> Path:
    """A small input folder of ``source`` made from the shared replays, with a sub-folder and an archive where
    the source reads archives."""
    if source == "metamon":
        files = sorted(shared_data("pokemon", "metamon_parsed").glob("*.json.lz4"))
        (root / "loose").mkdir(parents=True)
        for f in files[:2]:
            shutil.copy(f, root / "loose" / f.name)
        with tarfile.open(root / "gen9ou.tar.gz", "w:gz") as tar:
            for f in files[2:]:
                tar.add(f, arcname=f"gen9ou/{f.name}")
        (root / "notes.txt").write_text("not a replay: counted as filtered")
    elif source == "showdown-json":
        (root / "sub").mkdir(parents=True)
        for i, f in enumerate(sorted(shared_data("pokemon", "showdown_replays").glob("*.json"))):
            shutil.copy(f, (root / "sub" if i else root) / f.name)
    elif source == "hf-raw":
        root.mkdir(parents=True)
        rows = [json.loads(f.read_text()) for f in sorted(shared_data("pokemon", "showdown_replays").glob("*.json"))]
        table = pa.Table.from_pylist([{k: r.get(k) for k in ("id", "format", "players", "log", "uploadtime",
                                                               "formatid", "rating")} for r in rows])
        pq.write_table(table, root / "replays.parquet", row_group_size=1)
    elif source == "slp":
        slp = shared_data("melee", "slp")
        (root / "loose").mkdir(parents=True)
        for name in SLP[:2]:
            shutil.copy(slp / name, root / "loose" / name)
        with zipfile.ZipFile(root / "set.zip", "w", zipfile.ZIP_DEFLATED) as archive:
            archive.write(slp / SLP[2], arcname=f"games/{SLP[2]}")
            archive.writestr("games/readme.txt", "hi")
    return root


def _upload(local: Path, uri: str) -> None:
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        storage.write_bytes(storage.join(uri, path.relative_to(local).as_posix()), path.read_bytes())


def _contents(published) -> dict[str, str]:
    m = published.manifest
    return {e.path: e.sha256 for e in [*m.files, m.index_file, m.quarantine_file]}


@pytest.mark.parametrize("source, seed", [("metamon", 1), ("showdown-json", 2), ("hf-raw", 3), ("slp", 4)])
def test_inputs_and_output_in_s3_publish_the_local_version(ray_local, s3_server, s3_bucket, tmp_path, monkeypatch,
                                                           source, seed):
    """Inputs read from S3 and shards written to S3 by the workers, every request through a store that throttles,
    resets connections mid-body and stalls (seeded): retried until the version of a local run, byte for byte, is
    published. Archives are streamed, tables read by row group, loose files whole: each read path meets faults."""
    local = _inputs(source, tmp_path / "in")
    remote = f"{s3_bucket}/inputs/{source}"
    _upload(local, remote)
    extra = {"min_frames": 0} if source == "slp" else {}
    here = run(ParseConfig.tiny(source=source, input=str(local), out=str(tmp_path / "a"), **extra),
               log=lambda *_: None)
    with FaultProxy(s3_server, Faults(seed=seed, slow_down=0.15, reset=0.1, stall=0.03, stall_s=1.0)) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)  # the driver and, through the job, every worker
        there = run(ParseConfig.tiny(source=source, input=remote, out=f"{s3_bucket}/out/{source}", **extra),
                    log=lambda *_: None)
    monkeypatch.undo()
    injected = proxy.counts()
    assert injected["slow_down"] + injected["reset"] > 0, injected
    c = here.manifest.counts
    assert c.written >= 2 and c.reconciles()
    assert there.uri == f"{s3_bucket}/out/{source}/{here.manifest.dataset}/{here.path.name}"
    assert _contents(there) == _contents(here)
    assert {storage.relative(u, there.uri): storage.read_bytes(u) for u in storage.list_files(there.uri)} == {
        p.name: p.read_bytes() for p in here.path.iterdir()}
    assert there.manifest.counts == c
    ids = open_ids(there)
    assert ids == open_ids(here) and not any("s3:" in i or str(tmp_path) in i for i in ids)


def open_ids(published) -> list[str]:
    index = storage.join(str(published.path), published.manifest.index_file.path)
    fs, path = storage.resolve(index)
    return pq.read_table(path, filesystem=fs).column("input_id").to_pylist()


def test_a_missing_input_uri_says_what_to_check(s3_bucket):
    cfg = ParseConfig(source="metamon", input=f"{s3_bucket}/no/such/folder", out="unused")
    with pytest.raises(FileNotFoundError, match=r"--input s3://.*/no/such/folder does not exist.*AWS_ENDPOINT_URL"):
        cfg.make_source().plan()


def test_a_remote_input_is_kept_as_a_uri(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert ParseConfig(source="metamon", input="s3://bucket/in/", out="o").input == "s3://bucket/in/"
    with pytest.raises(ValueError, match="--download mirrors the hub into a local folder"):
        ParseConfig(source="metamon", input="s3://bucket/in", out="o", download=True, formats=["gen1ou"]
                    ).make_source().plan()


def test_other_fsspec_protocols_read_like_local_files(tmp_path):
    """``memory://`` goes the way ``hf://`` goes (fsspec, wrapped for pyarrow), with no network: a source's
    plan and reads give the local inputs' ids and bytes, archives included. In process: fsspec's memory
    filesystem is not shared with Ray's workers."""
    fsspec = pytest.importorskip("fsspec")
    memory = fsspec.filesystem("memory")
    for source in ("metamon", "slp"):
        local = _inputs(source, tmp_path / source)
        remote = f"memory://replayforge-test/{source}"
        _upload(local, remote)
        try:
            rows = {}
            for root in (str(local), remote):
                src = ParseConfig(source=source, input=root, out="unused").make_source()
                plan = src.plan()
                rows[root] = [(r["input_id"], r["payload"], r["read_error"], r["filter_reason"])
                              for item in plan.items for r in src.read(item)]
            assert rows[remote] == rows[str(local)]
            assert any("::" in r[0] for r in rows[remote])  # archive members were read
            assert all(r[2] is None for r in rows[remote])
        finally:
            memory.rm(f"/replayforge-test/{source}", recursive=True)


def test_bytes_are_written_and_read_as_stored(tmp_path):
    """A name ending in .gz or .lz4 is neither compressed nor decompressed on the way (pyarrow's streams do
    both by default, by extension)."""
    for name, data in (("x.json.lz4", lz4.frame.compress(b"{}")), ("y.tar.gz", gzip.compress(b"tar"))):
        (tmp_path / name).write_bytes(data)
        assert storage.read_bytes(str(tmp_path / name)) == data
        with storage.open_stream(str(tmp_path / name)) as stream:
            assert stream.read() == data
        storage.write_bytes(str(tmp_path / "copy" / name), data)
        assert (tmp_path / "copy" / name).read_bytes() == data
        with storage.open_output(str(tmp_path / "copy2" / name)) as out:
            out.write(data)
        assert (tmp_path / "copy2" / name).read_bytes() == data


def test_hub_uris_are_split_into_repo_revision_and_path():
    assert parse_hub_uri("hf://datasets/jakegrigsby/metamon-raw-replays@v1") == HubUri(
        "jakegrigsby/metamon-raw-replays", "v1", "")
    hub = parse_hub_uri("hf://datasets/o/n@refs%2Fconvert%2Fparquet/data/gen1/")
    assert hub == HubUri("o/n", "refs/convert/parquet", "data/gen1")
    assert hub.uri("abc123") == "hf://datasets/o/n@abc123/data/gen1"
    assert parse_hub_uri("hf://datasets/o/n").revision == ""
    for bad in ("hf://models/o/n", "hf://datasets/o", "s3://datasets/o/n"):
        with pytest.raises(ValueError, match="hf://datasets/<owner>/<name>"):
            parse_hub_uri(bad)
    with pytest.raises(ValueError, match="give one"):
        pin_hub_input("hf://datasets/o/n@v1", "v2", "main")


def test_a_hub_revision_is_pinned_to_its_commit():
    """Needs the hub: skipped where it cannot be reached (this machine has no network)."""
    try:
        socket.create_connection(("huggingface.co", 443), timeout=3).close()
    except OSError as err:
        pytest.skip(f"huggingface.co cannot be reached ({err}): pin_hub_input resolves revisions on the hub")
    uri, revision = pin_hub_input("hf://datasets/jakegrigsby/metamon-raw-replays@v1", "", "main")
    commit = revision.split("@", 1)[1]
    assert len(commit) == 40 and int(commit, 16) >= 0
    assert uri == f"hf://datasets/jakegrigsby/metamon-raw-replays@{commit}"
    assert revision == pin_hub_input(uri, "", "main")[1]  # a commit pins to itself


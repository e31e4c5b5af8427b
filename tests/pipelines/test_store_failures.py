"""A store that fails is not bad data: store operations are retried, a work item the store will not deliver is
re-read whole, and if it still fails the job stops without publishing, unless the user accepts N losses
(``--max-unreadable``), which then publish under a name of their own; a later run with every input readable
publishes the complete version, never a false conflict."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import pytest
from conftest import CutFile, shared_data

from pipelines import parse_replays, stages
from pipelines.job.config import version_spec
from pipelines.job.read import read_item
from pipelines.melee.source import SlpSource
from pipelines.parse_replays import ParseConfig, run, store_failure
from pipelines.pokemon.metamon import MetamonSource
from pipelines.writer.naming import VersionSpec
from pipelines.writer.publish import LostInputsError, VersionPublisher
from pipelines.writer.wire import GroupResult
from shards_schema import storage
from shards_schema.manifest import MANIFEST_NAME
from shards_schema.pokemon import CODE_VERSIONS as POKEMON_TURNS
from shards_schema.pokemon import INDEX_SCHEMA, TURNS_SCHEMA
from shards_schema.reader import open_version

NO_WAIT = storage.RetryPolicy(attempts=3, base_s=0.0, cap_s=0.0)


class Flaky(stages.Source):
    """A source whose store fails ``failures`` times, then delivers one input."""

    name, parser, shard_bytes_per_input_byte = "flaky", MetamonSource.parser, 1.0

    def __init__(self, failures: int):
        super().__init__(stages.SourceInputs())
        self.failures, self.calls = failures, 0

    def plan(self):
        raise NotImplementedError

    def read(self, item):
        self.calls += 1
        if self.calls <= self.failures:
            raise storage.StorageError("read", "s3://bucket/a.json.lz4", "OSError: AWS Error SLOW_DOWN", 6)
        return [stages.read_row(item["id"], b"bytes")]


def test_a_work_item_is_read_again_while_the_store_fails():
    source = Flaky(failures=2)
    rows = read_item(source, {"id": "a.json.lz4"}, max_unreadable=0, policy=NO_WAIT)
    assert source.calls == 3 and rows[0]["payload"] == b"bytes" and rows[0]["lost"] is None


def test_a_store_that_keeps_failing_stops_the_job_or_is_an_accepted_loss():
    with pytest.raises(storage.StorageError) as caught:
        read_item(Flaky(failures=99), {"id": "a.json.lz4"}, max_unreadable=0, policy=NO_WAIT)
    message = str(caught.value)
    assert "read of input a.json.lz4" in message and "SLOW_DOWN" in message and "read 3 times" in message
    rows = read_item(Flaky(failures=99), {"id": "a.json.lz4"}, max_unreadable=1, policy=NO_WAIT)
    assert [(r["input_id"], r["payload"], r["read_error"]) for r in rows] == [("a.json.lz4", None, None)]
    assert "SLOW_DOWN" in rows[0]["lost"]


def test_an_archive_cut_by_the_store_is_not_a_damaged_archive(tmp_path, monkeypatch):
    """The archive reader treats a cut gzip stream as damaged bytes of the rest of the archive; the same cut made
    by the store must raise ``StorageError`` instead (the read task then re-reads the whole archive)."""
    files = sorted(shared_data("pokemon", "metamon_parsed").glob("*.json.lz4"))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for f in files:
            tar.add(f, arcname=f.name)
    data = buffer.getvalue()
    archive = tmp_path / "gen1ou.tar.gz"
    archive.write_bytes(data)
    item = {"id": "gen1ou.tar.gz", "uri": str(archive), "root": str(tmp_path)}
    source = ParseConfig(source="metamon", input=str(tmp_path), out=str(tmp_path / "out")).make_source()
    monkeypatch.setattr(storage, "open_input", lambda uri: storage._Guarded(CutFile(data, 2000), uri, NO_WAIT))
    with pytest.raises(storage.StorageError, match="read .*gen1ou.tar.gz failed after 3 attempts: OSError: AWS Error"):
        source.read(item)
    monkeypatch.undo()
    archive.write_bytes(data[:2000])  # the same bytes, cut in the file itself: damaged, one quarantine row
    rows = source.read(item)
    assert rows and rows[-1]["read_error"] is not None and "gen1ou.tar.gz" in rows[-1]["input_id"]


class FlakyRanges:
    """A random-access store file whose ranged reads fail ``failures`` times each, after reading part of the range
    (what a reset mid-body does to the position)."""

    def __init__(self, data: bytes, failures: int):
        self.data, self.failures, self.at, self.failed = data, failures, 0, {}

    def read(self, size: int = -1) -> bytes:
        size = len(self.data) - self.at if size is None or size < 0 else size
        if self.failed.get(self.at, 0) < self.failures:
            self.failed[self.at] = self.failed.get(self.at, 0) + 1
            self.at += size // 2
            raise OSError("AWS Error INTERNAL_FAILURE during GetObject operation: Failed to flush response stream")
        chunk = self.data[self.at:self.at + size]
        self.at += len(chunk)
        return chunk

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        self.at = offset
        return offset

    def tell(self) -> int:
        return self.at

    def close(self) -> None:
        pass


def test_a_ranged_read_cut_by_the_store_is_read_again_from_its_offset():
    """A Parquet row group is many ranged reads; each is retried from its own offset, so a reset among them costs
    one request, not the work item. A range that keeps failing raises ``StorageError`` (never a decoder's
    ``OSError``)."""
    data = bytes(range(256)) * 40
    fh = storage._Guarded(FlakyRanges(data, failures=2), "s3://bucket/replays.parquet", NO_WAIT)
    assert fh.read(1000) + fh.read(3000) + fh.read() == data
    fh = storage._Guarded(FlakyRanges(data, failures=3), "s3://bucket/replays.parquet", NO_WAIT)
    with pytest.raises(storage.StorageError, match="read s3://bucket/replays.parquet failed after 3 attempts"):
        fh.read(1000)


def test_a_listed_input_the_workers_cannot_read(ray_local, tmp_path, monkeypatch):
    """The driver lists an input its workers then cannot read (a path on the driver's disk only, a file gone): the
    job stops and names it, nothing is published; with ``--max-unreadable 1`` a version without it is published
    under a name of its own; once it is readable again the complete version is published, under the name a clean
    run gives, with no conflict."""
    root = tmp_path / "inputs"
    shutil.copytree(shared_data("pokemon", "metamon_parsed"), root)
    hidden = sorted(root.glob("*.json.lz4"))[1]
    away = tmp_path / hidden.name
    plan = MetamonSource.plan

    def plan_then_hide(self):  # listed on the driver, gone before a read task opens it
        planned = plan(self)
        hidden.rename(away)
        return planned

    out = tmp_path / "out"
    cfg = ParseConfig.tiny(source="metamon", input=str(root), out=str(out))
    complete_name = version_spec(cfg, cfg.make_source().plan()).version
    monkeypatch.setattr(MetamonSource, "plan", plan_then_hide)
    with pytest.raises(Exception) as caught:
        run(cfg, log=lambda *_: None)
    failure = store_failure(caught.value)
    assert type(failure) is storage.StorageError  # the error itself, not Ray's wrapper with the remote traceback
    assert str(failure).startswith(f"read of input {hidden.name} from ") and "FileNotFoundError" in str(failure)
    assert not list(out.rglob(MANIFEST_NAME))

    away.rename(hidden)  # listed again, and hidden again once listed
    partial = run(ParseConfig.tiny(source="metamon", input=str(root), out=str(out), max_unreadable=1),
                  log=lambda *_: None)
    m = open_version(partial.path).manifest
    assert m.counts.quarantined == {"unreadable": 1} and m.counts.written == 3 and m.counts.reconciles()
    assert partial.path.name != complete_name
    [row] = open_version(partial.path).quarantine().to_pylist()
    assert (row["input_id"], row["error_type"], row["stage"]) == (hidden.name, "StorageError", "read")

    monkeypatch.undo()
    away.rename(hidden)
    complete = run(cfg, log=lambda *_: None)
    assert complete.path.name == complete_name and not complete.reused
    assert complete.manifest.counts.written == 4 and complete.manifest.counts.quarantined == {}
    assert open_version(complete.path).manifest.inputs_sha256 != m.inputs_sha256


def test_a_replay_the_parse_actor_cannot_read_stops_the_job_and_is_named(ray_local, tmp_path, monkeypatch):
    """A loose replay is read by its parse actor (``Source.read_by_parser``), not a read task; listed, then gone: the
    failure reaches the driver as the ``StorageError`` itself (``store_failure``), and nothing is published."""
    root = tmp_path / "in"
    root.mkdir()
    for name in ("peppi__netplay.slp", "peppi__short_game_tbh10.slp"):
        (root / name).write_bytes(shared_data("melee", "slp", name).read_bytes())
    plan = SlpSource.plan

    def plan_then_remove(self):
        planned = plan(self)
        (root / "peppi__netplay.slp").unlink()
        return planned

    monkeypatch.setattr(SlpSource, "plan", plan_then_remove)
    out = tmp_path / "out"
    with pytest.raises(Exception) as caught:
        run(ParseConfig.tiny(source="slp", input=str(root), out=str(out)), log=lambda *_: None)
    failure = store_failure(caught.value)
    assert type(failure) is storage.StorageError
    assert str(failure).startswith("read of input peppi__netplay.slp from ") and "FileNotFoundError" in str(failure)
    assert not list(out.rglob(MANIFEST_NAME))


def test_losses_past_the_limit_stop_the_publisher():
    lost = stages.InputRecord(input_id="a", source="metamon").dropped(
        "quarantined", stage="read", error_type=stages.LOST_ERROR_TYPE, reason=stages.UNREADABLE,
        message="read of input a from s3://b/a failed after 6 attempts: SlowDown")
    spec = VersionSpec(out_root="/nonexistent-out", dataset="d", code=POKEMON_TURNS, source="metamon",
                       source_revision=None, config={}, planned_inputs="x")
    publisher = VersionPublisher(spec, schema=TURNS_SCHEMA, index_schema=INDEX_SCHEMA, max_unreadable=1)
    try:
        publisher.add_group(GroupResult("00000-000", [lost], [None], []))
        assert publisher.published_spec().version != spec.version
        with pytest.raises(LostInputsError, match=r"2 input\(s\) could not be read .*--max-unreadable 1.*SlowDown"):
            publisher.add_group(GroupResult("00000-001", [lost], [None], []))
    finally:
        publisher.abort()
    assert Path("/nonexistent-out").exists() is False


def test_the_command_line_names_the_failure_and_publishes_nothing(monkeypatch, capsys, tmp_path):
    """However Ray wrapped it, the store failure is what the user reads, with what to do next; exit status 1."""
    failure = storage.StorageError("read of input a.json.lz4 from", "s3://b/a.json.lz4", "OSError: SlowDown", 6)
    wrapped = RuntimeError("MapBatches(read_groups) failed")
    wrapped.__cause__ = failure

    def fail(cfg):
        raise wrapped

    monkeypatch.setenv("REPLAYFORGE_RAW_OUTPUT", "1")
    monkeypatch.setattr(parse_replays, "run", fail)
    with pytest.raises(SystemExit) as caught:
        parse_replays.main(["--source", "metamon", "--input", str(tmp_path), "--out", str(tmp_path / "out")])
    assert caught.value.code == 1
    err = capsys.readouterr().err
    assert "[parse] failed: read of input a.json.lz4 from s3://b/a.json.lz4 failed after 6 attempts" in err
    assert "nothing was published" in err and "--max-unreadable" in err

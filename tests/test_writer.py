"""The shard writer without Ray: duplicates name their winner, names stay inside --out, dead writers' temporary
folders are removed (live ones never), and two identical jobs publishing at once both end with one version."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import pipelines.writer as writer_module
from pipelines.parse_replays import ParseConfig
from pipelines.stages import InputRecord
from pipelines.writer import ShardWriter, VersionConflictError, WrittenKeys, remove_stale_tmp
from shards_schema.versions import CodeVersions

REPO_ROOT = Path(__file__).resolve().parents[1]
SCHEMA = pa.schema([("game_id", pa.string()), ("value", pa.int64())], metadata={"replayforge.schema": "toy"})
INDEX_SCHEMA = pa.schema([("game_id", pa.string()), ("input_id", pa.string()), ("row_start", pa.int64()),
                          ("num_rows", pa.int64()), ("file", pa.string())])
CODE = CodeVersions(schema="1.0.0", parser="1.0.0", observation="0.0.0", reparse_command="x",
                    refeaturize_command=None)


def _writer(out: Path, **overrides) -> ShardWriter:
    return ShardWriter(**{"out_root": out, "dataset": "toy", "schema": SCHEMA, "index_schema": INDEX_SCHEMA,
                          "code": CODE, "shard_size_bytes": 1 << 20, **overrides})


def _input(input_id: str, key: str, value: int) -> tuple[InputRecord, pa.Table]:
    """One written input with one row."""
    record = InputRecord(input_id=input_id, source="toy", dedupe_key=key, num_rows=1,
                         index_rows=[{"game_id": key, "row_start": 0, "num_rows": 1}])
    return record, pa.table({"game_id": [key], "value": [value]}, schema=SCHEMA)


def _fill(writer: ShardWriter) -> ShardWriter:
    for i, (input_id, key) in enumerate([("a.slp", "g1"), ("b.slp", "g2"), ("c.zip::x.slp", "g1")]):
        writer.add_input(*_input(input_id, key, i))
    return writer


def _publish(writer: ShardWriter):
    return writer.publish(source="toy", source_revision=None, config={})


def test_a_duplicate_names_the_input_that_won(tmp_path):
    published = _publish(_fill(_writer(tmp_path)))
    assert published.manifest.counts.filtered == {"duplicate": 1}
    [row] = pq.read_table(published.path / "quarantine.parquet").to_pylist()
    assert row["input_id"] == "c.zip::x.slp" and row["reason"] == "duplicate"
    assert row["message"] == "g1 was already written by input a.slp"


def test_written_keys_agree_with_a_dict():
    """The open-addressing table against the plain reference, through many growths and probe chains."""
    keys, reference = WrittenKeys(capacity=4), {}
    rng = random.Random(0)
    for i in range(20_000):
        key = f"battle-{rng.randrange(12_000)}"
        assert keys.claim(key, f"input-{i}") == reference.get(key)
        reference.setdefault(key, f"input-{i}")
    assert len(keys) == len(reference)


def test_written_keys_memory_per_key():
    """Bounded: table, offsets and the ids' bytes, no Python object per key (a set of digests was ~70 B)."""
    n = 200_000
    ids = [f"gen9ou-{i:04d}.parquet::gen9ou-{2_000_000_000 + i}" for i in range(n)]
    id_bytes = sum(len(i) for i in ids)
    tracemalloc.start()
    keys = WrittenKeys()
    for i, input_id in enumerate(ids):
        keys.claim(str(i), input_id)
    current, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(keys) == n
    assert (current - id_bytes) / n < 60, f"{(current - id_bytes) / n:.0f} bytes per key beside the id"


@pytest.mark.parametrize("name", ["../x", "..", ".", "a/b", "/abs", "", ".hidden", "a\\b", "x\0y", "é"])
def test_names_must_be_one_path_component(tmp_path, name):
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="--dataset"):
        _writer(out, dataset=name)
    if name:  # an empty --dataset means the schema's name
        with pytest.raises(ValueError, match="--dataset"):
            ParseConfig(source="generated", out=str(out), dataset=name)
    with pytest.raises(ValueError, match="--formats"):
        ParseConfig(source="metamon", out=str(out), input=str(tmp_path), download=True, formats=["gen1ou", name])
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing was made, inside or outside --out


def test_plain_names_are_accepted(tmp_path):
    ParseConfig(source="generated", out=str(tmp_path), dataset="my-data_v2.1", formats=["gen9ou"])
    assert _writer(tmp_path, dataset="my-data_v2.1").dataset == "my-data_v2.1"


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_killed_writer_leaves_a_folder_the_next_run_removes(tmp_path):
    code = ("import os, signal, sys; sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[1] + '/tests');"
            "from pathlib import Path; import test_writer as t;"
            "w = t._writer(Path(sys.argv[2])); w.add_input(*t._input('a.slp', 'g1', 0)); w._flush();"
            "os.kill(os.getpid(), signal.SIGKILL)")
    proc = subprocess.run([sys.executable, "-c", code, str(REPO_ROOT), str(tmp_path)], capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    [left] = (tmp_path / "toy").glob(".tmp-*")
    assert (left / "part-00000.parquet").is_file()
    writer = _writer(tmp_path)
    assert writer.removed_tmp == [left] and not left.exists()
    assert [p.name for p in (tmp_path / "toy").iterdir()] == [writer._tmp.name]  # its own is kept
    writer.abort()


def test_only_this_hosts_dead_writers_are_removed(tmp_path):
    host, namespace, me = writer_module._host(), writer_module._pid_namespace(), os.getpid()
    start = writer_module._process_start(me)
    folder = tmp_path / "toy"
    names = {
        "dead": f".tmp-{host}-{namespace}-{_dead_pid()}-{start}-00000001",
        "reused_pid": f".tmp-{host}-{namespace}-{me}-{int(start) + 1}-00000002",
        "alive": f".tmp-{host}-{namespace}-{me}-{start}-00000003",
        "other_host": f".tmp-elsewhere-{namespace}-{_dead_pid()}-{start}-00000004",
        "other_namespace": f".tmp-{host}-1-{_dead_pid()}-{start}-00000005",
        "old_layout": f".tmp-{_dead_pid()}-00000006",
    }
    for name in names.values():
        (folder / name).mkdir(parents=True)
    (folder / f".tmp-{host}-{namespace}-{_dead_pid()}-{start}-file").write_text("not a folder")
    removed = {p.name for p in remove_stale_tmp(folder)}
    assert removed == {names["dead"], names["reused_pid"]}
    kept = {p.name for p in folder.iterdir()}
    assert kept >= {names["alive"], names["other_host"], names["other_namespace"], names["old_layout"]}
    assert not kept & removed


def _race(monkeypatch, winner: ShardWriter, loser: ShardWriter) -> None:
    """Make ``winner`` publish while ``loser`` is between its existence check and its rename."""
    real_rename = os.rename

    def rename(src, dst):
        if Path(src) == loser._tmp:
            _publish(winner)
        return real_rename(src, dst)

    monkeypatch.setattr(writer_module.os, "rename", rename)


def test_two_identical_jobs_publishing_at_once_share_one_version(tmp_path, monkeypatch):
    first, second = _fill(_writer(tmp_path)), _fill(_writer(tmp_path))
    _race(monkeypatch, first, second)
    published = _publish(second)
    assert published.reused
    assert [p.name for p in (tmp_path / "toy").iterdir()] == [published.path.name]  # both temporaries gone
    assert published.manifest == writer_module.Manifest.load(published.path)


def test_a_racing_job_with_other_contents_is_a_conflict(tmp_path, monkeypatch):
    first = _fill(_writer(tmp_path))
    second = _fill(_writer(tmp_path, parquet_options={"compression": "none"}))  # other bytes, same identity
    _race(monkeypatch, first, second)
    with pytest.raises(VersionConflictError, match="version bump"):
        _publish(second)

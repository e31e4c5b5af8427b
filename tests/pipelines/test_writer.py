"""The shard writer without Ray: groups written by workers and published by the driver give the same version as one
writer; duplicates name their winner; a version exists only once its manifest does; a killed run's files are
removed by the next run; two runs of one version publish one set of contents, on local disk and on S3, with and
without conditional writes."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.parse_replays import ParseConfig
from pipelines.stages import InputRecord
from pipelines.writer.groups import GroupWriter
from pipelines.writer.naming import VersionSpec
from pipelines.writer.publish import ShardWriter, VersionConflictError, VersionPublisher, WrittenKeys
from pipelines.writer.wire import GroupResult
from shards_schema import storage
from shards_schema.manifest import CARD_NAME, MANIFEST_NAME, Manifest
from shards_schema.reader import ShardIntegrityError, open_version, sha256_file
from shards_schema.versions import CodeVersions

REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMA = pa.schema([("game_id", pa.string()), ("value", pa.int64())], metadata={"replayforge.schema": "toy"})
INDEX_SCHEMA = pa.schema([("game_id", pa.string()), ("input_id", pa.string()), ("row_start", pa.int64()),
                          ("num_rows", pa.int64()), ("file", pa.string())])
CODE = CodeVersions(schema="1.0.0", parser="1.0.0", observation="0.0.0", reparse_command="x",
                    refeaturize_command=None)
INPUTS = [("a.slp", "g1"), ("b.slp", "g2"), ("c.zip::x.slp", "g1")]


def _spec(out, **overrides) -> VersionSpec:
    return VersionSpec(**{"out_root": str(out), "dataset": "toy", "code": CODE, "source": "toy",
                          "source_revision": None, "config": {}, "planned_inputs": "toy-inputs", **overrides})


def _writer(out, parquet_options=None, **overrides) -> ShardWriter:
    return ShardWriter(_spec(out, **overrides), schema=SCHEMA, index_schema=INDEX_SCHEMA, shard_size_bytes=1 << 20,
                       parquet_options=parquet_options)


def _input(input_id: str, key: str, value: int, num_rows: int = 1) -> tuple[InputRecord, pa.Table]:
    """One written input with ``num_rows`` rows."""
    record = InputRecord(input_id=input_id, source="toy", input_sha256=f"sha-{input_id}", dedupe_key=key,
                         num_rows=num_rows, index_rows=[{"game_id": key, "row_start": 0, "num_rows": num_rows}])
    return record, pa.table({"game_id": [key] * num_rows, "value": [value] * num_rows}, schema=SCHEMA)


def _fill(writer, inputs=INPUTS):
    for i, (input_id, key) in enumerate(inputs):
        writer.add_input(*_input(input_id, key, i))
    return writer


def _files(published) -> dict[str, bytes]:
    """The version's files by name, as stored."""
    return {storage.relative(u, published.uri): storage.read_bytes(u) for u in storage.list_files(published.uri)}


def _whole(uri: str) -> Manifest:
    """The version's manifest, after checking that every file it names is there with its sha256."""
    manifest = Manifest.load(uri)
    for entry in [*manifest.files, manifest.index_file, manifest.quarantine_file, manifest.card]:
        assert sha256_file(storage.join(uri, entry.path)) == entry.sha256, entry.path
    return manifest


def test_a_duplicate_names_the_input_that_won(tmp_path):
    published = _fill(_writer(tmp_path)).publish()
    assert published.manifest.counts.filtered == {"duplicate": 1}
    [row] = pq.read_table(published.path / published.manifest.quarantine_file.path).to_pylist()
    assert row["input_id"] == "c.zip::x.slp" and row["reason"] == "duplicate"
    assert row["message"] == "g1 was already written by input a.slp"


def test_plain_names_are_accepted(tmp_path):
    ParseConfig(source="generated", out=str(tmp_path), dataset="my-data_v2.1", formats=["gen9ou"])
    assert _writer(tmp_path, dataset="my-data_v2.1").spec.dataset == "my-data_v2.1"


def test_groups_published_by_the_driver_equal_one_writer(tmp_path):
    """Workers write groups; a duplicate of an earlier group's game is dropped by the driver, its shard rewritten
    without its rows and the index's row offsets moved: the rows, index and counts of one writer over all inputs."""
    inputs = [("a.slp", "g1", 2), ("b.slp", "g2", 3), ("c.slp", "g3", 1), ("d.slp", "g1", 4), ("e.slp", "g4", 2),
              ("f.slp", "g2", 1), ("g.slp", "g5", 3)]
    one = _writer(tmp_path / "one")
    for i, (input_id, key, n) in enumerate(inputs):
        one.add_input(*_input(input_id, key, i, n))
    reference = one.publish()

    spec = _spec(tmp_path / "groups")
    publisher = VersionPublisher(spec, schema=SCHEMA, index_schema=INDEX_SCHEMA)
    for name, members in (("00000-000", inputs[:3]), ("00000-001", inputs[3:])):
        group = GroupWriter(spec.uri, name, SCHEMA, shard_size_bytes=1 << 20)
        for input_id, key, n in members:
            i = inputs.index((input_id, key, n))
            group.add_input(*_input(input_id, key, i, n))
        result = group.close()
        assert GroupResult.from_arrow(result.to_arrow()) == [result]  # what crosses Ray is the same
        publisher.add_group(result)
    published = publisher.publish()

    m, r = published.manifest, reference.manifest
    assert m.counts == r.counts and m.inputs_sha256 == r.inputs_sha256
    assert m.counts.filtered == {"duplicate": 2}
    rows = pa.concat_tables(pq.read_table(published.path / f.path) for f in m.files)
    assert rows.equals(pa.concat_tables(pq.read_table(reference.path / f.path) for f in r.files))
    index = pq.read_table(published.path / m.index_file.path).to_pylist()
    for row in index:  # each index row points at its game's rows in its file
        part = pq.read_table(published.path / row["file"]).slice(row["row_start"], row["num_rows"])
        assert set(part.column("game_id").to_pylist()) == {row["game_id"]}
    assert [(r["input_id"], r["num_rows"]) for r in index] == [
        (i, n) for i, _, n in inputs if i not in ("d.slp", "f.slp")]
    # the rewritten shard replaced the worker's under a new content name; the worker's is gone
    assert sorted(_files(published)) == sorted(
        [MANIFEST_NAME, CARD_NAME, m.index_file.path, m.quarantine_file.path, *(f.path for f in m.files)])
    assert len(published.removed) == 1 and published.removed[0].startswith("part-00000-001-00-")


def _kill_after_first_shard(out: Path) -> None:
    code = ("import os, signal, sys; sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[1] + '/tests');"
            "sys.path.insert(0, sys.argv[1] + '/tests/pipelines');"
            "from pathlib import Path; import test_writer as t;"
            "w = t._writer(Path(sys.argv[2]), parquet_options={'compression': 'none'});"
            "w.add_input(*t._input('a.slp', 'g1', 0)); w._group._flush();"
            "os.kill(os.getpid(), signal.SIGKILL)")
    proc = subprocess.run([sys.executable, "-c", code, str(REPO_ROOT), str(out)], capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()


def test_a_killed_run_leaves_no_version_and_the_next_run_removes_its_files(tmp_path):
    _kill_after_first_shard(tmp_path)  # with other Parquet options than the run below: other bytes, other name
    folder = Path(_spec(tmp_path).uri)
    [left] = [p.name for p in folder.iterdir()]
    assert left.startswith("part-00000-000-00-")
    with pytest.raises(ShardIntegrityError, match=f"{folder} has no manifest.json"):
        open_version(folder)
    published = _fill(_writer(tmp_path)).publish()
    assert not published.reused and published.removed == [left]
    assert sorted(_files(published)) == sorted(
        [MANIFEST_NAME, CARD_NAME, *(f.path for f in published.manifest.files), published.manifest.index_file.path,
         published.manifest.quarantine_file.path])


def _race(monkeypatch, winner: ShardWriter, loser: ShardWriter) -> None:
    """Make ``winner`` publish while ``loser`` has written its files and not yet its manifest."""
    real, raced = storage.create_exclusive, []

    def create_exclusive(uri, data):
        if not raced:  # the loser's call: the winner publishes first (its own call goes straight through)
            raced.append(True)
            winner.publish()
        return real(uri, data)

    monkeypatch.setattr(storage, "create_exclusive", create_exclusive)


@pytest.fixture(params=["local", "s3"])
def out_root(request, tmp_path):
    if request.param == "local":
        return str(tmp_path)
    return request.getfixturevalue("s3_bucket") + "/out"


def test_two_identical_runs_publishing_at_once_share_one_version(out_root, monkeypatch):
    first, second = _fill(_writer(out_root)), _fill(_writer(out_root))
    _race(monkeypatch, first, second)
    published = second.publish()
    assert published.reused and published.removed == []
    assert _whole(published.uri) == published.manifest


def test_a_racing_run_with_other_contents_is_a_conflict_and_leaves_the_version_whole(out_root, monkeypatch):
    first = _fill(_writer(out_root))
    second = _fill(_writer(out_root, parquet_options={"compression": "none"}))  # other bytes, same version
    _race(monkeypatch, first, second)
    with pytest.raises(VersionConflictError, match="version bump"):
        second.publish()
    manifest = _whole(first.spec.uri)
    assert sorted(storage.relative(u, first.spec.uri) for u in storage.list_files(first.spec.uri)) == sorted(
        [MANIFEST_NAME, CARD_NAME, *(f.path for f in manifest.files), manifest.index_file.path,
         manifest.quarantine_file.path])


def test_inputs_changed_in_place_are_a_conflict_that_says_so(tmp_path):
    _fill(_writer(tmp_path)).publish()
    changed = _writer(tmp_path)
    record, rows = _input("a.slp", "g1", 0)
    changed.add_input(InputRecord(**{**record.__dict__, "input_sha256": "other bytes"}), rows)
    for i, (input_id, key) in enumerate(INPUTS[1:], 1):
        changed.add_input(*_input(input_id, key, i))
    with pytest.raises(VersionConflictError, match="changed in place"):
        changed.publish()


def test_without_conditional_writes_a_published_version_is_still_refused(s3_bucket, monkeypatch):
    """A store without conditional PUT (REPLAYFORGE_CONDITIONAL_WRITES=off): a run that finds the manifest published
    with other contents loses, as with them."""
    monkeypatch.setenv(storage.CONDITIONAL_WRITES_VAR, "off")
    _fill(_writer(s3_bucket)).publish()
    with pytest.raises(VersionConflictError):
        _fill(_writer(s3_bucket, parquet_options={"compression": "none"})).publish()


def test_without_conditional_writes_the_last_manifest_wins_whole(s3_bucket, monkeypatch):
    """What a store without conditional PUT cannot rule out: two runs that both find no manifest and both write
    one. The later manifest stays, the run that wrote it removes the other's files, and the version is whole (one
    run's files and manifest); the earlier run was told it published (docs/pipeline.md)."""
    monkeypatch.setenv(storage.CONDITIONAL_WRITES_VAR, "off")
    first = _fill(_writer(s3_bucket))
    second = _fill(_writer(s3_bucket, parquet_options={"compression": "none"}))
    real_exists = storage.exists
    monkeypatch.setattr(storage, "exists", lambda uri: False if uri.endswith(MANIFEST_NAME) else real_exists(uri))
    assert not first.publish().reused
    published = second.publish()
    assert not published.reused and published.removed  # the first run's shard, index and quarantine
    assert _whole(second.spec.uri) == published.manifest


def test_create_exclusive_creates_once(out_root):
    uri = storage.join(out_root, "x", "manifest.json")
    assert storage.create_exclusive(uri, b"first")
    assert not storage.create_exclusive(uri, b"second")
    assert storage.read_bytes(uri) == b"first"


def test_put_file_never_rewrites_an_existing_name(tmp_path):
    uri = str(tmp_path / "a" / "part-x.parquet")
    assert storage.put_file(uri, b"bytes")
    assert not storage.put_file(uri, b"other")
    assert storage.read_bytes(uri) == b"bytes" and [p.name for p in (tmp_path / "a").iterdir()] == ["part-x.parquet"]


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
    n = 50_000
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


# ---------------------------------------------------------------------------- rows that cannot be written
MON = pa.struct([("name", pa.string()), ("moves", pa.list_(pa.field("item", pa.string(), nullable=False)))])
MON_SCHEMA = pa.schema([("game_id", pa.string()), ("value", pa.int64()), ("mon", MON)],
                       metadata={"replayforge.schema": "toy"})


def _mon_input(input_id: str, key: str, num_rows: int, *, unencodable: bool = False):
    """A written input of ``MON_SCHEMA`` rows. ``unencodable`` (3 rows or more): its second row's ``mon`` is null
    over a non-empty moves list: Arrow builds and casts such rows, Parquet refuses them (pyarrow 21 writes a null at
    the first or last row; one between present rows fails), so they stand for any rows the encoder rejects."""
    record = InputRecord(input_id=input_id, source="toy", input_sha256=f"sha-{input_id}", dedupe_key=key,
                         num_rows=num_rows, index_rows=[{"game_id": key, "row_start": 0, "num_rows": num_rows}])
    moves = pa.ListArray.from_arrays(pa.array(range(0, 2 * num_rows + 1, 2), pa.int32()),
                                     pa.array([f"{key}-move"] * 2 * num_rows), type=MON.field("moves").type)
    mask = pa.array([unencodable and i == 1 for i in range(num_rows)])
    mon = pa.StructArray.from_arrays([pa.array([key] * num_rows), moves], fields=list(MON), mask=mask)
    return record, pa.Table.from_arrays([pa.array([key] * num_rows), pa.array(range(num_rows), pa.int64()), mon],
                                        schema=MON_SCHEMA)


def _publish_group(out, inputs, **writer_options):
    """One group of ``inputs`` written and published; the group's result and the published version."""
    spec = _spec(out)
    group = GroupWriter(spec.uri, "00000-000", MON_SCHEMA, shard_size_bytes=1 << 20, **writer_options)
    for record, rows in inputs:
        group.add_input(record, rows)
    result = group.close()
    assert GroupResult.from_arrow(result.to_arrow()) == [result]  # what crosses Ray is the same
    publisher = VersionPublisher(spec, schema=MON_SCHEMA, index_schema=INDEX_SCHEMA)
    publisher.add_group(result)
    return result, publisher.publish()


def _check_index(published, expected: list[tuple[str, int]]) -> None:
    """The index lists ``(input_id, num_rows)`` in order, each row pointing at its own game's rows in its shard."""
    index = pq.read_table(published.path / published.manifest.index_file.path).to_pylist()
    assert [(r["input_id"], r["num_rows"]) for r in index] == expected
    for row in index:
        part = pq.read_table(published.path / row["file"]).slice(row["row_start"], row["num_rows"])
        assert part.column("game_id").to_pylist() == [row["game_id"]] * row["num_rows"]
        assert part.column("value").to_pylist() == list(range(row["num_rows"]))


def test_an_input_whose_rows_cannot_be_encoded_is_quarantined_and_the_others_written(tmp_path):
    bad = _mon_input("b.slp", "g2", 3, unencodable=True)
    with pytest.raises(pa.ArrowNotImplementedError, match="non-zero length null"):  # the failure of issue 25
        pq.write_table(bad[1], pa.BufferOutputStream())
    good = [_mon_input("a.slp", "g1", 2), _mon_input("c.slp", "g3", 1), _mon_input("d.slp", "g4", 2)]
    duplicate = _mon_input("e.slp", "g2", 1)  # b's battle again: filtered before b's rows fail
    result, published = _publish_group(tmp_path / "v", [good[0], bad, good[1], good[2], duplicate])

    quarantined = [r for r in result.records if r.status == "quarantined"]
    assert [(r.input_id, r.stage, r.reason, r.error_type) for r in quarantined] == [
        ("b.slp", "encode", "unencodable_rows", "ArrowNotImplementedError")]
    assert "non-zero length null" in quarantined[0].message
    assert result.records[4].status == "filtered" and "b.slp, then quarantined" in result.records[4].message
    assert [p and p.row_start for p in result.placements] == [0, None, 2, 3, None]
    c = published.manifest.counts
    assert (c.inputs, c.written, c.rows, c.quarantined, c.filtered) == (
        5, 3, 5, {"unencodable_rows": 1}, {"duplicate": 1})
    assert c.reconciles()
    _check_index(published, [("a.slp", 2), ("c.slp", 1), ("d.slp", 2)])
    # the shard is the one a group of the good inputs alone writes, to the byte (its name is its contents' hash)
    _, alone = _publish_group(tmp_path / "alone", good)
    assert [f.path for f in published.manifest.files] == [f.path for f in alone.manifest.files]


def test_an_input_whose_rows_do_not_cast_is_quarantined_and_the_others_written(tmp_path):
    record, rows = _mon_input("b.slp", "g2", 2)
    uncastable = rows.set_column(1, "value", pa.array(["1", "two"]))  # a string column where int64 is declared
    duplicate = _mon_input("e.slp", "g2", 2)  # b never claimed its battle: this copy is written
    result, published = _publish_group(tmp_path, [_mon_input("a.slp", "g1", 1), (record, uncastable),
                                                  _mon_input("c.slp", "g3", 3), duplicate])
    [bad] = [r for r in result.records if r.status != "written"]
    assert (bad.input_id, bad.stage, bad.reason, bad.error_type) == (
        "b.slp", "validate", "schema_violation", "ArrowInvalid")
    c = published.manifest.counts
    assert (c.inputs, c.written, c.quarantined, c.filtered) == (4, 3, {"schema_violation": 1}, {})
    _check_index(published, [("a.slp", 1), ("c.slp", 3), ("e.slp", 2)])


def test_a_writer_fault_or_a_store_failure_is_not_charged_to_the_inputs(tmp_path, monkeypatch):
    """Parquet options it cannot use fail with no rows at all, and a store that refuses a shard is an outage
    (``shards_schema.storage``): both propagate instead of quarantining inputs."""
    inputs = [_mon_input("a.slp", "g1", 1), _mon_input("b.slp", "g2", 3, unencodable=True)]
    with pytest.raises(TypeError, match="bogus"):
        _publish_group(tmp_path / "options", inputs, parquet_options={"bogus": 1})

    def refuse(uri, data):
        raise storage.StorageError("put", uri, "store unavailable", 6)

    monkeypatch.setattr(storage, "put_file", refuse)
    with pytest.raises(storage.StorageError, match="store unavailable"):
        _publish_group(tmp_path / "store", inputs)

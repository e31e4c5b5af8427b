"""The publisher's column-wise path against its Python reference: a group's index, quarantine rows, counts and
inputs digest by Arrow kernels (``group_tables``) equal those of the record-by-record loop
(``group_tables_reference``), to the Parquet byte, and a version published either way is the same files; a group's
Arrow row (``GroupResult.to_arrow``) and its Python form agree; tasks-file rows of the format before ``index_rows``
(index rows as JSON) are still read."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_writer import INDEX_SCHEMA, SCHEMA, _files, _input, _spec

from pipelines.stages import LOST_ERROR_TYPE, UNREADABLE, InputRecord, record_table
from pipelines.writer import publish, wire
from pipelines.writer.files import PARQUET_OPTIONS
from pipelines.writer.groups import GroupWriter
from pipelines.writer.publish import Moved, VersionPublisher, group_tables, group_tables_reference
from pipelines.writer.reuse import EarlierVersion
from pipelines.writer.wire import _PLACEMENT, GroupResult, Placement, task_rows
from shards_schema.manifest import FileEntry
from shards_schema.melee import GAMES_SCHEMA

FILE = FileEntry(path="part-00000-000-00-abc.parquet", rows=9, bytes=100, sha256="abc")


def _written(input_id: str, key: str, row_start: int, num_rows: int, index_rows: list[dict], **fields):
    return (InputRecord(input_id=input_id, source="toy", input_sha256=f"sha-{input_id}", dedupe_key=key,
                        num_rows=num_rows, index_rows=index_rows, **fields),
            Placement(file=FILE.path, row_start=row_start, unknown_words=row_start % 3))


def _mixed_group(uniform: bool = False) -> GroupResult:
    """Every kind of record: written ones (one relabelled, one with two index rows, one whose index row lacks a
    field and has one the index does not: not with ``uniform``), filtered, quarantined (one without sha256, one with
    an empty one), a lost input."""
    odd = {"game_id": "g3"} if uniform else {"extra": "ignored"}
    rows = [_written("a.slp", "g1", 0, 2, [{"game_id": "g1", "row_start": 0, "num_rows": 2}]),
            _written("b.slp", "g2", 2, 3, [{"game_id": "g2", "row_start": 0, "num_rows": 1},
                                           {"game_id": "g2b", "row_start": 1, "num_rows": 2}], relabelled="ou→gen6ou"),
            _written("c.slp", "g3", 5, 1, [{**odd, "row_start": 0, "num_rows": 1}]),
            _written("d.slp", "g4", 6, 3, [{"game_id": "g4", "row_start": 0, "num_rows": 3}])]
    dropped = [InputRecord(input_id="e.slp", source="toy", input_sha256="sha-e", status="filtered", stage="filter",
                           error_type="filter", reason="not_ranked", message="unranked"),
               InputRecord(input_id="f.slp", source="toy", status="quarantined", stage="read",
                           error_type="CorruptInput", reason="corrupt_input", message="bad bytes"),
               InputRecord(input_id="g.slp", source="toy", input_sha256="", status="quarantined", stage="parse",
                           error_type="ParseError", reason="bad_log", message="no turn"),
               InputRecord(input_id="h.slp", source="toy", status="quarantined", stage="read",
                           error_type=LOST_ERROR_TYPE, reason=UNREADABLE, message="store gone")]
    records = [rows[0][0], dropped[0], rows[1][0], dropped[1], rows[2][0], dropped[2], rows[3][0], dropped[3]]
    placements = [rows[0][1], None, rows[1][1], None, rows[2][1], None, rows[3][1], None]
    return GroupResult("00000-000", records, placements, [FILE])


def _parquet(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, table.schema, **PARQUET_OPTIONS) as out:
        out.write_table(table)
    return sink.getvalue().to_pybytes()


def _assert_same(fast: publish.GroupTables, reference: publish.GroupTables) -> None:
    assert fast.index.equals(reference.index, check_metadata=True)
    assert fast.quarantine.equals(reference.quarantine, check_metadata=True)
    assert _parquet(fast.index) == _parquet(reference.index)
    assert _parquet(fast.quarantine) == _parquet(reference.quarantine)
    for name in ("digest_lines", "written", "rows", "trajectories", "unknown_words", "filtered", "quarantined",
                 "relabelled"):
        assert getattr(fast, name) == getattr(reference, name), name


@pytest.mark.parametrize("with_duplicates", [False, True, "whole file"])
def test_group_tables_equal_the_reference(with_duplicates):
    result = _mixed_group()
    duplicates, moved = {}, Moved({}, {})
    if with_duplicates:  # b and d lost their keys to an earlier group: their rows left the file, renamed
        duplicates = {2: "g2 was already written by input z.slp", 6: "g4 was already written by input y.slp"}
        moved = Moved({FILE.path: [(2, 3), (6, 3)]},
                      {FILE.path: FileEntry(path="part-00000-000-00-def.parquet", rows=3, bytes=50, sha256="def")})
    if with_duplicates == "whole file":  # d, alone in a second file, a duplicate: that file is gone
        other = "part-00000-000-01-abc.parquet"
        placements = list(result.placements)
        placements[6] = Placement(file=other, row_start=0)
        result = GroupResult(result.group, result.records, placements, [FILE, replace(FILE, path=other)])
        duplicates = {6: "g4 was already written by input y.slp"}
        moved = Moved({other: [(0, 3)]}, {other: None})
    args = (result.record_columns(), result.index_lists(), duplicates, moved, INDEX_SCHEMA)
    fast, reference = group_tables(*args), group_tables_reference(*args)
    _assert_same(fast, reference)
    if with_duplicates == "whole file":
        assert fast.index.column("input_id").to_pylist() == ["a.slp", "b.slp", "b.slp", "c.slp"]
        return
    assert fast.index.column("input_id").to_pylist() == (
        ["a.slp", "c.slp"] if with_duplicates else ["a.slp", "b.slp", "b.slp", "c.slp", "d.slp"])
    assert fast.index.column("row_start").to_pylist() == ([0, 2] if with_duplicates else [0, 2, 3, 5, 6])
    assert set(fast.index.column("file").to_pylist()) == {
        "part-00000-000-00-def.parquet" if with_duplicates else FILE.path}
    assert fast.quarantined == {"corrupt_input": 1, "bad_log": 1, UNREADABLE: 1}
    assert fast.filtered == ({"not_ranked": 1, "duplicate": 2} if with_duplicates else {"not_ranked": 1})


def test_group_tables_on_a_schema_with_lists_and_narrow_ints():
    """Index rows whose fields the worker's values type loosely (ints as int64, lists of int64, all-null fields)
    cast to a real index schema's narrower types as ``from_pylist`` converts them."""
    row = {"game_id": "x", "source": "slp", "slippi_version": "3.16.0", "stage": 31, "ports": [0, 1],
           "characters_external": [2, 20], "characters_internal": [1, 18], "player_types": [0, 0],
           "start_time": None, "end_method": 2, "winner_port": None, "complete": True, "repaired_events": 0,
           "repaired_codes": None, "first_frame": -123, "num_frames": 900, "rollback_frames": 0, "row_start": 0,
           "num_rows": 900}
    records = [InputRecord(input_id=f"{i}.slp", source="slp", input_sha256=f"s{i}", dedupe_key=f"k{i}",
                           num_rows=900, index_rows=[{**row, "game_id": f"k{i}"}]) for i in range(3)]
    result = GroupResult("00000-000", records, [Placement(file=FILE.path, row_start=900 * i) for i in range(3)],
                         [FILE])
    args = (result.record_columns(), result.index_lists(), {}, Moved({}, {}), GAMES_SCHEMA)
    _assert_same(group_tables(*args), group_tables_reference(*args))


def test_a_group_without_index_rows_or_inputs():
    records = [InputRecord(input_id="a", source="toy", status="filtered", stage="filter", error_type="filter",
                           reason="x", message="m")]
    for result in (GroupResult("00000-000", records, [None], []), GroupResult("00000-001", [], [], [])):
        args = (result.record_columns(), result.index_lists(), {}, Moved({}, {}), INDEX_SCHEMA)
        _assert_same(group_tables(*args), group_tables_reference(*args))


def test_a_version_published_column_wise_is_the_reference_version_to_the_byte(tmp_path, monkeypatch):
    """The same groups (a duplicate of an earlier group's game among them: a shard rewritten, index rows moved)
    published by the column-wise publisher and by the reference: the same files, tasks file included."""
    inputs = [("a.slp", "g1", 2), ("b.slp", "g2", 3), ("c.slp", "g3", 1), ("d.slp", "g1", 4), ("e.slp", "g4", 2)]

    def publish_version(out):
        spec = _spec(out)
        publisher = VersionPublisher(spec, schema=SCHEMA, index_schema=INDEX_SCHEMA, keep_tasks=True)
        for name, members in (("00000-000", inputs[:3]), ("00000-001", inputs[3:])):
            group = GroupWriter(spec.uri, name, SCHEMA, shard_size_bytes=1 << 20)
            for input_id, key, n in members:
                group.add_input(*_input(input_id, key, inputs.index((input_id, key, n)), n))
            [result] = GroupResult.from_arrow(group.close().to_arrow())  # as the driver gets it
            publisher.add_group(result)
        return publisher.publish()

    fast = publish_version(tmp_path / "fast")
    monkeypatch.setattr(publish, "group_tables", group_tables_reference)
    reference = publish_version(tmp_path / "reference")
    assert fast.manifest.counts.filtered == {"duplicate": 1}
    assert _files(fast) == _files(reference)


def test_a_group_row_and_its_records_agree():
    """Its Arrow row back in Python is the group (index rows of the same fields: a field only some have comes back
    as None in the others)."""
    result = _mixed_group(uniform=True)
    [back] = GroupResult.from_arrow(result.to_arrow())
    assert back == result and back.records == result.records and back.placements == result.placements
    assert (back.num_inputs, back.written_rows) == (8, 9) == (result.num_inputs, result.written_rows)
    joined = GroupResult.from_arrow(pa.concat_tables([result.to_arrow(), GroupResult("00000-001", [], [], [])
                                                      .to_arrow()]))
    assert [g.group for g in joined] == ["00000-000", "00000-001"] and joined[0] == result
    tasks = task_rows(back)
    assert tasks.column("task").to_pylist() == ["00000"] and tasks.column("lost").to_pylist() == [1]


def _json_format_row(result: GroupResult) -> pa.Table:
    """A group's row as workers made it before ``index_rows``: index rows as JSON text in the records."""
    records = record_table(result.records)  # index_json filled in
    records = records.append_column("placement", pa.array([p.__dict__ if p else None for p in result.placements],
                                                          _PLACEMENT))
    nested = pa.ListArray.from_arrays(pa.array([0, records.num_rows], pa.int32()),
                                      records.to_struct_array().combine_chunks())
    return pa.table({"group": [result.group], "records": nested,
                     "files": pa.array([[f.__dict__ for f in result.files]], pa.list_(wire._FILE))})


def test_a_tasks_file_row_of_the_json_format_is_still_read():
    result = _mixed_group(uniform=True)
    [back] = GroupResult.from_arrow(_json_format_row(result))
    assert back == result
    assert task_rows(back).equals(task_rows(result))


def test_an_earlier_versions_tasks_file_of_the_json_format_is_still_read(tmp_path):
    """``EarlierVersion.groups`` on a tasks file without ``index_rows``: its groups as they were handed over."""
    results = [_mixed_group(uniform=True), GroupResult("00001-000", [], [], [])]
    rows = [_json_format_row(r) for r in results]
    tasks = pa.concat_tables([pa.table({"task": [r.group.rsplit("-", 1)[0]], "lost": [1 if i == 0 else 0]})
                              for i, r in enumerate(results)])
    table = pa.concat_tables(rows)
    for name in table.column_names:
        tasks = tasks.append_column(name, table.column(name))
    pq.write_table(tasks, tmp_path / "tasks-old.parquet")
    earlier = EarlierVersion.__new__(EarlierVersion)  # its manifest checks are tested in test_incremental.py
    earlier._tasks_uri, earlier._rows = str(tmp_path / "tasks-old.parquet"), {"00000": (0, 0), "00001": (1, 1)}
    assert list(earlier.groups(["00000", "00001"])) == [("00000", [results[0]]), ("00001", [results[1]])]

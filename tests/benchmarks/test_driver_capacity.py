"""The driver-capacity benchmark's stand-in path (``benchmarks/driver_capacity.py``), in the shape of its quick run:
real groups recorded by the job's read and parse code, replayed under new names through the job's pipeline shape
and the real publisher. The published version must reconcile and hold exactly the replayed records, so the
benchmark cannot drift from the driver it measures."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import shared_data

from benchmarks.driver_capacity import job_config, loop_breakdown, make_inputs, record, renamed, replay
from pipelines.writer.files import PARQUET_OPTIONS
from pipelines.writer.publish import Moved, group_tables, group_tables_reference
from pipelines.writer.wire import GroupResult


@pytest.fixture(scope="module", params=["melee", "pokemon"])
def recording(request, tmp_path_factory):
    schema = request.param
    if schema == "pokemon":
        shared_data("pokemon", "bench_replays")
    work = tmp_path_factory.mktemp(f"driver-capacity-{schema}")
    # one input in 4 damaged: the groups carry quarantine or filter rows
    formats = make_inputs(schema, 24 if schema == "melee" else 120, work / "in", damaged_every=4)
    rec = record(schema, work / "in", formats, 0.25, 3, work / "rec", full_only=False)  # the first 3 groups
    assert len(rec.rows) == 3 and all(s > 0 for s in rec.parse_cpu_s)
    return rec


def test_a_renamed_group_is_new_inputs_in_new_files(recording):
    [old] = GroupResult.from_arrow(recording.rows[0])
    [new] = GroupResult.from_arrow(renamed(recording.rows[0], "00042-000", "~42"))
    assert new.group == "00042-000"
    assert [r.input_id for r in new.records] == [r.input_id + "~42" for r in old.records]
    assert [r.dedupe_key for r in new.records] == [r.dedupe_key and r.dedupe_key + "~42" for r in old.records]
    assert [r.status for r in new.records] == [r.status for r in old.records]
    assert [r.index_rows for r in new.records] == [r.index_rows for r in old.records]
    assert {f.path for f in new.files} == {f.path.replace(f"part-{old.group}-", "part-00042-000-") for f in old.files}
    assert {p.file for p in new.placements if p} <= {f.path for f in new.files}
    assert [p and p.row_start for p in new.placements] == [p and p.row_start for p in old.placements]


def _parquet(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, table.schema, **PARQUET_OPTIONS) as out:
        out.write_table(table)
    return sink.getvalue().to_pybytes()


def test_real_groups_give_the_reference_tables(recording):
    """On real groups of each schema (damaged inputs among them), the publisher's column-wise tables are the
    record-by-record reference's, to the Parquet byte; with a duplicate of an earlier group too."""
    index_schema = job_config(recording.schema, ".", [], 0.25, "unused").parser.index_schema
    for row in recording.rows:
        [group] = GroupResult.from_arrow(renamed(row, "00007-000", "~7"))
        written = [i for i, r in enumerate(group.records) if r.status == "written"]
        placement = group.placements[written[-1]]
        dropped = Moved({placement.file: [(placement.row_start, group.records[written[-1]].num_rows)]},
                        {placement.file: group.files[-1]})
        for duplicates, moved in (({}, Moved({}, {})), ({written[-1]: "k was already written by input x"}, dropped)):
            args = (group.record_columns(), group.index_lists(), duplicates, moved, index_schema)
            fast, reference = group_tables(*args), group_tables_reference(*args)
            for name in ("index", "quarantine"):
                assert _parquet(getattr(fast, name)) == _parquet(getattr(reference, name)), name
            assert fast.trajectories == fast.index.num_rows > (-1 if duplicates else 0)
            assert ({k: v for k, v in vars(fast).items() if k not in ("index", "quarantine")}
                    == {k: v for k, v in vars(reference).items() if k not in ("index", "quarantine")})
    assert all(us > 0 for us in loop_breakdown(recording).values())


def test_replayed_groups_publish_a_version_that_reconciles(recording, ray_local, tmp_path):
    groups = 8
    step = replay(recording, cores=200, groups=groups, out_root=str(tmp_path / "out"), num_actors=2,
                  actor_cpus=0.5, read_cpus=0.25)
    m = step.published.manifest
    c = m.counts
    assert c.reconciles() and c.inputs == c.written + sum(c.filtered.values()) + sum(c.quarantined.values())
    assert step.counts == step.expected == recording.totals(groups)
    assert step.counts["filtered"] + step.counts["quarantined"] > 0  # the damaged inputs came through
    files = [GroupResult.from_arrow(row)[0].files for row in recording.rows]
    assert len(m.files) == sum(len(files[k % len(files)]) for k in range(groups))
    index = pq.read_table(step.published.path / m.index_file.path)
    quarantine = pq.read_table(step.published.path / m.quarantine_file.path)
    assert index.num_rows == c.trajectories
    assert quarantine.num_rows == c.inputs - c.written
    assert len(set(index.column("input_id").to_pylist())) == c.written  # every replayed input is new
    assert step.achieved_groups_s > 0 and step.driver_cpu_s_per_group > 0

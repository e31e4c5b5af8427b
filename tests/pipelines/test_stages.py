"""The parse job's stages: the registry, the typed batch between parser and writer, and the config sections and
their flags."""

from __future__ import annotations

import dataclasses
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import registry, stages
from pipelines.cli import nest, parse_config, parser_for
from pipelines.parse_replays import ParseConfig
from pipelines.pokemon.generated import GeneratedConfig
from pipelines.stages import InputRecord, ParsedBatch
from pipelines.writer.naming import VersionSpec
from pipelines.writer.publish import ShardWriter
from shards_schema.versions import CodeVersions

SCHEMA = pa.schema([("game_id", pa.string()), ("value", pa.int64())],
                   metadata={b"replayforge.schema": b"toy", b"replayforge.schema_version": b"1.0.0"})
INDEX_SCHEMA = pa.schema([("game_id", pa.string()), ("input_id", pa.string()), ("row_start", pa.int64()),
                          ("num_rows", pa.int64()), ("file", pa.string())])


def _batch(offset: int = 0) -> ParsedBatch:
    records = [
        InputRecord(input_id=f"a{offset}.slp", source="toy", input_sha256="aa", num_rows=2, dedupe_key="g1",
                    index_rows=[{"game_id": "g1", "row_start": 0, "num_rows": 2}]),
        InputRecord(input_id=f"b{offset}.slp", source="toy").dropped(
            "quarantined", stage="read", error_type="ReadError", reason="corrupt_input", message="gone"),
        InputRecord(input_id=f"c{offset}.slp", source="toy", num_rows=1, dedupe_key="g2",
                    index_rows=[{"game_id": "g2", "row_start": 0, "num_rows": 1}]),
    ]
    rows = pa.table({"game_id": ["g1", "g1", "g2"], "value": [offset, offset + 1, offset + 2]}, schema=SCHEMA)
    return ParsedBatch(records, rows)


def test_a_batch_crosses_ray_as_one_arrow_block_and_comes_back_the_same():
    batch = _batch()
    block = batch.to_arrow()
    assert block.num_rows == 3 and block.schema.equals(stages.result_schema(SCHEMA))
    back = ParsedBatch.from_arrow(block, SCHEMA)
    assert back.records == batch.records
    assert back.rows.equals(batch.rows)
    assert back.rows.schema.metadata == SCHEMA.metadata  # shard files carry the schema's name and version
    # Ray Data may hand the driver several batches' blocks joined into one
    joined = ParsedBatch.from_arrow(pa.concat_tables([_batch(0).to_arrow(), _batch(10).to_arrow()]), SCHEMA)
    assert [r.input_id for r in joined.records] == ["a0.slp", "b0.slp", "c0.slp", "a10.slp", "b10.slp", "c10.slp"]
    assert joined.rows.column("value").to_pylist() == [0, 1, 2, 10, 11, 12]
    nothing = ParsedBatch([batch.records[1]], SCHEMA.empty_table())
    assert ParsedBatch.from_arrow(nothing.to_arrow(), SCHEMA).rows.num_rows == 0


def test_a_batch_whose_records_and_rows_disagree_is_refused():
    with pytest.raises(ValueError, match="announce 3 rows, the table holds 2"):
        ParsedBatch(_batch().records, _batch().rows.slice(0, 2))


def test_the_writer_takes_typed_batches(tmp_path):
    code = CodeVersions(schema="1.0.0", parser="1.0.0", observation="0.0.0", reparse_command="x",
                        refeaturize_command=None)
    spec = VersionSpec(out_root=str(tmp_path), dataset="toy", code=code, source="toy", source_revision=None,
                       config={}, planned_inputs="toy")
    writer = ShardWriter(spec, schema=SCHEMA, index_schema=INDEX_SCHEMA, shard_size_bytes=1 << 20)
    writer.add_batch(_batch(0))
    writer.add_batch(_batch(10))  # the same games again: duplicates, named after the inputs that won
    published = writer.publish()
    m = published.manifest
    c = published.manifest.counts
    assert (c.inputs, c.written, c.filtered, c.quarantined, c.rows) == (
        6, 2, {"duplicate": 2}, {"corrupt_input": 2}, 3)
    index = pq.read_table(published.path / m.index_file.path).to_pylist()
    assert [(r["input_id"], r["row_start"], r["num_rows"]) for r in index] == [("a0.slp", 0, 2), ("c0.slp", 2, 1)]
    quarantine = pq.read_table(published.path / m.quarantine_file.path).to_pylist()
    quarantine = {r["input_id"]: r["message"] for r in quarantine}
    assert quarantine["a10.slp"] == "g1 was already written by input a0.slp"
    assert pq.read_schema(published.path / m.files[0].path).metadata[b"replayforge.schema"] == b"toy"


def test_every_source_is_registered_with_its_parser_and_options():
    names = registry.source_names()
    assert names == ["generated", "hf-raw", "metamon", "pokechamp", "showdown-json", "showdown-server", "slp"]
    for name in names:
        source = registry.source_class(name)
        assert source.name == name
        assert issubclass(source.parser, stages.Parser)
        assert source.parser.schema_name() in ("pokemon_turns", "melee_frames")
        assert dataclasses.is_dataclass(source.options_class)
    with pytest.raises(ValueError, match="--source must be one of"):
        registry.source_class("nope")


def test_a_name_is_registered_once():
    class Other(stages.Source):
        name = "metamon"
        parser = registry.source_class("metamon").parser

        def plan(self):
            raise NotImplementedError

        def read(self, item):
            raise NotImplementedError

    with pytest.raises(ValueError, match="source 'metamon' is registered twice"):
        registry.register_source(Other)
    assert registry.register_source(registry.source_class("metamon")) is registry.source_class("metamon")


FLAGS = ["--allow-cpu", "--battles-per-chunk", "--cpus-per-actor", "--dataset", "--date-from", "--date-to",
         "--download", "--formats", "--hub-patterns", "--hub-repo", "--input", "--min-frames", "--min-rating",
         "--max-unreadable", "--num-battles", "--num-cpus", "--num-parse-actors", "--on-replay-mismatch", "--out",
         "--p1", "--p2",
         "--p1-teacher", "--p2-teacher", "--progress-every-s", "--reuse-from",
         "--revision", "--seed", "--shard-size-mb", "--source", "--inputs-per-batch", "--tiny"]


def test_flags_stay_as_they_were_and_fill_the_sections(tmp_path, capsys):
    flags = {f for action in parser_for(ParseConfig)._actions for f in action.option_strings
             if f.startswith("--") and not f.startswith("--no-") and f != "--help"}
    assert flags == set(FLAGS)
    helps = {a.dest: a.help for a in parser_for(ParseConfig)._actions}
    assert helps["source"].endswith("synthetic games when --input is empty).")  # continuation lines included
    assert helps["min_frames"] == "minimum unique frames of a game."
    cfg = parse_config(ParseConfig, ["--source", "slp", "--out", str(tmp_path), "--min-frames", "5", "--allow-cpu",
                                     "--seed", "3"])
    assert (cfg.options.min_frames, cfg.options.allow_cpu, cfg.options.seed, cfg.options.hub_repo) == (
        5, True, 3, "erickfm/melee-ranked-replays")
    assert ParseConfig.tiny(source="slp", min_frames=7).options.min_frames == 7
    assert ParseConfig.tiny(source="slp").options.num_battles == 6  # the options' own tiny()
    assert parse_config(ParseConfig, ["--source", "generated", "--out", "o", "--seed", "4"]).options.seed == 4
    with pytest.raises(SystemExit) as err:  # a flag of another source's options says whose it is
        parse_config(ParseConfig, ["--source", "generated", "--out", "o", "--min-frames", "5"])
    assert err.value.code == 2 and "--min-frames is an option of --source slp, not generated" in \
        capsys.readouterr().err
    with pytest.raises(ValueError, match="takes SlpConfig options"):
        ParseConfig(source="slp", out="o", options=GeneratedConfig())
    with pytest.raises(SystemExit) as err:  # a section's own check is a usage error with its reason
        parse_config(ParseConfig, ["--source", "hf-raw", "--input", "x", "--out", "o", "--date-from", "2024-1-1"])
    assert err.value.code == 2 and "dates are YYYY-MM-DD" in capsys.readouterr().err
    with pytest.raises(TypeError, match="has no field 'min_frame'"):
        nest(ParseConfig, {"min_frame": 1})


def test_output_config_is_what_it_was():
    """These dicts enter version names: the same keys and values as the flat config had, and the shard layout
    (``pipelines.writer.naming.SHARD_LAYOUT``: read tasks cut by their items since layout 2)."""
    assert ParseConfig(source="generated", out="o").output_config() == {
        "dataset": "", "formats": ["gen9randombattle", "gen1ou"], "num_battles": 100, "p1": "heuristic",
        "p2": "random", "seed": 0, "shard_layout": 2, "shard_size_mb": 128.0, "source": "generated"}
    assert ParseConfig(source="slp", out="o", input="x").output_config() == {
        "allow_cpu": False, "dataset": "", "formats": [], "min_frames": 1200, "shard_layout": 2,
        "shard_size_mb": 128.0, "source": "slp"}
    assert set(ParseConfig(source="slp", out="o").output_config()) >= {"num_battles", "seed"}
    assert ParseConfig(source="pokechamp", out="o", input="x").output_config() == {
        "dataset": "", "date_from": "", "date_to": "", "formats": [], "min_rating": None, "shard_layout": 2,
        "shard_size_mb": 128.0, "source": "pokechamp"}
    assert ParseConfig(source="metamon", out="o", input="x").output_config() == {
        "dataset": "", "formats": [], "shard_layout": 2, "shard_size_mb": 128.0, "source": "metamon"}


def test_a_group_sliced_from_a_larger_block_keeps_only_its_inputs():
    """What a parse actor and the driver get from Ray Data: one row of a block holding several groups."""
    from pipelines.job.read import group_row
    from pipelines.writer.wire import GroupResult

    def row(input_id):
        return stages.read_row(input_id, b"bytes")

    block = pa.concat_tables([group_row("a", [row("x1")]), group_row("b", [row("y1"), row("y2")])]).combine_chunks()
    for i, ids in enumerate([["x1"], ["y1", "y2"]]):
        inputs = stages.struct_table(block.slice(i, 1).column("inputs")[0].values)
        assert inputs.column("input_id").to_pylist() == ids
    results = [GroupResult(g, [InputRecord(input_id=f"{g}{k}", source="s") for k in range(n)], [None] * n, [])
               for g, n in (("a", 1), ("b", 2))]
    joined = pa.concat_tables([r.to_arrow() for r in results]).combine_chunks()
    assert [GroupResult.from_arrow(joined.slice(i, 1))[0] for i in range(2)] == results
    assert GroupResult.from_arrow(joined) == results


def test_read_tasks_tell_each_item_read_to_the_progress_counter():
    """The driver's progress line reads a counter the read tasks add each item to: its planned bytes once, and the
    inputs it held (none for an item that reads nothing), once however often it is read; the groups are cut as
    without it."""
    from types import SimpleNamespace

    from pipelines.job.read import ReadProgress, read_groups

    class Listed(stages.Source):
        parser = "none"

        def plan(self):
            raise NotImplementedError

        def read(self, item):
            return [stages.read_row(f"{item['id']}/{k}", b"x" * item["size"]) for k in range(item["inputs"])]

    counter = ReadProgress()
    progress = SimpleNamespace(add=SimpleNamespace(remote=counter.add))
    items = [{"id": "a", "bytes": 100, "size": 40, "inputs": 3},
             {"id": "b", "bytes": None, "estimate_bytes": 50, "size": 10, "inputs": 2},
             {"id": "c", "bytes": 30, "size": 1, "inputs": 0}]
    tasks = pa.table({"task": [0], "items": [json.dumps(items)]})
    groups = list(read_groups(tasks, source=Listed.__new__(Listed), group_bytes=60, progress=progress))
    assert [len(g.column("inputs")[0].values) for g in groups] == [2, 3]
    assert counter.snapshot() == (180.0, 5)
    list(read_groups(tasks, source=Listed.__new__(Listed), group_bytes=60, progress=progress))  # a retried read task
    assert counter.snapshot() == (180.0, 5)
    assert [len(g.column("inputs")[0].values) for g in read_groups(tasks, source=Listed.__new__(Listed),
                                                                    group_bytes=60)] == [2, 3]


def test_a_slow_group_sends_heartbeats_that_parse_to_nothing():
    """A read task whose group fills slowly yields empty ``HEARTBEAT`` rows between items (here after every item:
    ``heartbeat_s=0``) so Ray Data's no-progress guard sees it move; without them the groups are the same, and a
    parse actor turns a heartbeat into no group at all."""
    from pipelines.job.parse import ParseInputs
    from pipelines.job.read import HEARTBEAT, read_groups
    from pipelines.parse_replays import ParseConfig
    from pipelines.writer.wire import GroupResult

    class Listed(stages.Source):
        parser = "none"

        def plan(self):
            raise NotImplementedError

        def read(self, item):
            return [stages.read_row(f"{item['id']}/{k}", b"x" * 10) for k in range(item["inputs"])]

    items = [{"id": name, "bytes": 20, "inputs": 2} for name in "abc"]
    tasks = pa.table({"task": ["t"], "items": [json.dumps(items)]})
    source = Listed.__new__(Listed)
    beating = [g.column("group")[0].as_py() for g in read_groups(tasks, source=source, group_bytes=50,
                                                                  heartbeat_s=0.0)]
    assert beating == [HEARTBEAT, HEARTBEAT, "t-000", HEARTBEAT, "t-001"]
    with_beats = [g for g in read_groups(tasks, source=source, group_bytes=50, heartbeat_s=0.0)
                  if g.column("group")[0].as_py() != HEARTBEAT]
    assert [g.to_pylist() for g in with_beats] == [g.to_pylist() for g in read_groups(tasks, source=source,
                                                                                       group_bytes=50)]
    actor = ParseInputs(ParseConfig(source="metamon", input="unused", out="unused").make_source())
    heartbeat = next(g for g in read_groups(tasks, source=source, group_bytes=50, heartbeat_s=0.0))
    out = actor(heartbeat)
    assert out.num_rows == 0 and GroupResult.from_arrow(out) == []


def test_a_group_row_equals_the_rows_converted_value_by_value():
    """``group_row`` wraps one joined buffer of the payloads; it is the table ``pa.array`` makes of the row dicts,
    with missing payloads (read errors, lost items) and for no rows at all."""
    from pipelines.job.read import READ_ROW, group_row

    rows = [stages.read_row("a", b"first"), stages.read_row("b", read_error="unreadable"),
            stages.read_row("c", b""), stages.read_row("d", b"\x00" * 1000), stages.read_row("e", lost="gone")]
    for some in (rows, rows[:1], rows[1:2], []):
        reference = pa.table({"group": ["g"], "inputs": pa.array([some], pa.list_(READ_ROW))})
        assert group_row("g", some).equals(reference)
        assert group_row("g", some).to_pylist() == reference.to_pylist()

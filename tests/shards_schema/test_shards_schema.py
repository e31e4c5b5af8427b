"""Declared schemas, manifest round trip, and the reader's version and integrity gates (both directions)."""

from __future__ import annotations

import dataclasses
import json

import pyarrow as pa
import pytest
from conftest import older_minor_copy

from shards_schema.manifest import Manifest, major
from shards_schema.pokemon import CODE_VERSIONS as POKEMON_TURNS
from shards_schema.pokemon import INDEX_SCHEMA, NUM_ACTIONS, TURNS_SCHEMA
from shards_schema.reader import ShardIntegrityError, open_version
from shards_schema.versions import VersionMismatchError


def test_turns_schema_declares_the_contract():
    names = TURNS_SCHEMA.names
    for col in ("trajectory_id", "battle_id", "format", "player_side", "turn_index", "state", "obs_text",
                "obs_tokens", "obs_numeric", "action", "legal_mask", "reward", "done", "result", "rating"):
        assert col in names
    assert TURNS_SCHEMA.field("legal_mask").type.list_size == NUM_ACTIONS
    assert TURNS_SCHEMA.field("rating").nullable and not TURNS_SCHEMA.field("action").nullable
    state = TURNS_SCHEMA.field("state").type
    active = state.field("player_active").type
    assert {"hp_pct", "status", "types", "item", "ability", "moves", "atk_boost"} <= set(active.names)
    assert TURNS_SCHEMA.field("trajectory_id").metadata[b"doc"]
    assert INDEX_SCHEMA.names[:3] == ["trajectory_id", "battle_id", "format"]


def test_schema_refuses_wrong_types():
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError, TypeError, KeyError)):
        pa.Table.from_pylist([{"trajectory_id": 5}], schema=TURNS_SCHEMA)


def _rewrite_manifest(path, **changes):
    manifest = Manifest.load(path)
    (path / "manifest.json").write_text(dataclasses.replace(manifest, **changes).to_json())


@pytest.fixture
def version_copy(tiny_generated, tmp_path):
    import shutil

    _, published, _ = tiny_generated
    dest = tmp_path / published.path.name
    shutil.copytree(published.path, dest)
    return dest


def test_open_version_verifies(version_copy):
    version = open_version(version_copy)
    assert version.manifest.counts.reconciles()
    assert version.table().num_rows == version.manifest.counts.rows


@pytest.mark.parametrize("field,value,expect", [
    ("schema_version", f"{major(POKEMON_TURNS.schema) + 1}.0.0", "upgrade replayforge"),
    ("schema_version", f"{major(POKEMON_TURNS.schema) - 1}.9.0", "parse_replays.py"),
    ("parser_version", "0.1.0", "parse_replays.py"),
    ("observation_version", "0.3.0", "refeaturize.py"),
    ("observation_version", "7.0.0", "upgrade replayforge"),
])
def test_version_gating_both_ways(version_copy, field, value, expect):
    _rewrite_manifest(version_copy, **{field: value})
    with pytest.raises(VersionMismatchError, match=expect):
        open_version(version_copy)


def test_minor_version_difference_is_accepted(version_copy):
    _rewrite_manifest(version_copy, schema_version=f"{major(POKEMON_TURNS.schema)}.7.0",
                      observation_version=f"{major(POKEMON_TURNS.observation)}.2.3")
    open_version(version_copy)


def test_a_version_made_before_teacher_action_opens_without_it(version_copy, tmp_path):
    """Schema 2.1.0 added ``teacher_action``: a 2.0.0 version lacks it and opens with its other columns intact."""
    assert [(c.name, c.since) for c in POKEMON_TURNS.added_columns] == [("teacher_action", "2.1.0")]
    old = open_version(older_minor_copy(version_copy, tmp_path / "old", "2.0.0"))
    assert old.manifest.schema_version == "2.0.0"
    assert list(old.row_columns) == [n for n in TURNS_SCHEMA.names if n != "teacher_action"]
    assert old.table().equals(open_version(version_copy).table().drop_columns(["teacher_action"]))
    assert open_version(version_copy).row_columns == tuple(TURNS_SCHEMA.names)


def test_the_added_column_is_checked_both_ways(version_copy, tmp_path):
    """A 2.0.0 manifest over shards that have ``teacher_action``, and a 2.1.0 one over shards that lack it, are not
    what either code wrote: both are refused."""
    _rewrite_manifest(version_copy, schema_version="2.0.0")
    with pytest.raises(ShardIntegrityError, match="schema of version 2.0.0"):
        open_version(version_copy)
    _rewrite_manifest(version_copy, schema_version=POKEMON_TURNS.schema)
    lacking = older_minor_copy(version_copy, tmp_path / "lacking", "2.0.0")
    _rewrite_manifest(lacking, schema_version=POKEMON_TURNS.schema)
    with pytest.raises(ShardIntegrityError, match=f"schema of version {POKEMON_TURNS.schema}"):
        open_version(lacking)


def test_absent_columns_by_version():
    from shards_schema.versions import AddedColumn, CodeVersions, rows_schema_of, with_absent_columns

    code = CodeVersions(schema="1.3.0", parser="1.0.0", observation="0.0.0", reparse_command="x",
                        refeaturize_command=None,
                        added_columns=(AddedColumn(name="b", since="1.2.0", absent=-1),
                                       AddedColumn(name="c", since="1.10.0", absent="none")))
    declared = pa.schema([("a", pa.int8()), ("b", pa.int8()), ("c", pa.string())])
    assert [c.name for c in code.absent_columns("1.1.9")] == ["b", "c"]
    assert [c.name for c in code.absent_columns("1.2.0")] == ["c"]  # 1.10 is after 1.2: numbers, not text
    assert code.absent_columns("1.10.0") == () == code.absent_columns("1.11.0")
    assert rows_schema_of(declared, code, "1.2.5").names == ["a", "b"]
    old = pa.table({"a": pa.array([1, 2], pa.int8())})
    filled = with_absent_columns(old, declared, code, "1.0.0")
    assert filled.schema.equals(declared) and filled.to_pylist() == [{"a": 1, "b": -1, "c": "none"},
                                                                      {"a": 2, "b": -1, "c": "none"}]


def test_tampered_file_is_refused(version_copy):
    manifest = json.loads((version_copy / "manifest.json").read_text())
    part = version_copy / manifest["files"][0]["path"]
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))
    with pytest.raises(ShardIntegrityError, match="sha256"):
        open_version(version_copy)
    part.unlink()
    with pytest.raises(ShardIntegrityError, match="missing"):
        open_version(version_copy)


def test_to_table_matches_from_pylist_and_round_trips_parquet(tmp_path):
    import pyarrow.parquet as pq

    from shards_schema.declare import to_table

    move = {"name": "tackle", "move_type": "normal", "category": "physical", "base_power": 40, "accuracy": 1.0,
            "priority": 0, "current_pp": 56, "max_pp": 56}
    schema = pa.schema([pa.field("prev", TURNS_SCHEMA.field("state").type.field("player_prev_move").type),
                        pa.field("moves", pa.list_(pa.field("item", TURNS_SCHEMA.field("state").type
                                                           .field("player_prev_move").type, nullable=False)),
                                 nullable=False)])
    rows = [{"prev": None, "moves": [move]}, {"prev": move, "moves": [move, move]}, {"prev": None, "moves": []}]
    table = to_table(rows, schema)
    assert table.equals(pa.Table.from_pylist(rows, schema=schema))
    pq.write_table(table, tmp_path / "t.parquet")  # null structs keep valid child slots
    assert pq.read_table(tmp_path / "t.parquet").to_pylist() == rows
    with pytest.raises(ValueError, match="non-nullable"):
        to_table([{"prev": {**move, "name": None}, "moves": []}], schema)
    with pytest.raises(ValueError, match="non-nullable"):
        to_table([{"prev": None, "moves": [None]}], schema)


def test_to_table_children_of_one_struct_type_converted_together():
    """Children of the same nested struct type (alone or as list items) are converted together and sliced apart:
    nulls stay where their field allows them, and are refused in the list items that do not."""
    from shards_schema.declare import to_table

    mon_type = TURNS_SCHEMA.field("state").type.field("player_active").type
    schema = pa.schema([pa.field("s", pa.struct([
        pa.field("active", mon_type, nullable=True), pa.field("other", mon_type, nullable=True),
        pa.field("bench", pa.list_(pa.field("item", mon_type, nullable=False)), nullable=False)]), nullable=False)])
    move = {"name": "tackle", "move_type": "normal", "category": "physical", "base_power": 40, "accuracy": 1.0,
            "priority": 0, "current_pp": 56, "max_pp": 56}
    mon = {"name": "eevee", "base_species": "eevee", "hp_pct": 0.5, "types": ["normal"], "item": "noitem",
           "ability": "runaway", "level": 50, "status": "nostatus", "effects": [], "moves": [move],
           **dict.fromkeys(["atk_boost", "def_boost", "spa_boost", "spd_boost", "spe_boost", "accuracy_boost",
                            "evasion_boost"], 0),
           **dict.fromkeys(["base_hp", "base_atk", "base_def", "base_spa", "base_spd", "base_spe"], 55),
           "tera_type": "notype", "terastallized": False, "dynamax_turns": 0}
    other = {**mon, "name": "jolteon", "effects": ["confusion"], "moves": []}
    rows = [{"s": {"active": mon, "other": None, "bench": [other, mon]}},
            {"s": {"active": None, "other": other, "bench": []}},
            {"s": {"active": other, "other": mon, "bench": [mon]}}]
    assert to_table(rows, schema).equals(pa.Table.from_pylist(rows, schema=schema))
    with pytest.raises(ValueError, match="non-nullable"):
        to_table([{"s": {"active": mon, "other": None, "bench": [None]}}], schema)


def _raw_equal(got: pa.Array, want: pa.Array) -> bool:
    """Arrays compared down to the children of null slots, which ``Array.equals`` skips: a null struct whose
    children point at another row's values equals one whose children are empty, yet Parquet refuses the first
    when those children are lists."""
    if pa.types.is_struct(got.type):
        return (got.is_null().equals(want.is_null())
                and all(_raw_equal(got.field(i), want.field(i)) for i in range(got.type.num_fields)))
    if pa.types.is_list(got.type):
        return (got.is_null().equals(want.is_null()) and got.offsets.equals(want.offsets)
                and _raw_equal(got.values, want.values))
    return got.equals(want)


_NULL_LAYOUTS = {  # P: a Pokémon, -: null
    "between": "P-P", "first": "-PP", "last": "PP-", "several_in_a_row": "P---P-P", "all": "---", "alone": "-"}


@pytest.mark.parametrize("shared", [False, True], ids=["distinct", "shared"])
@pytest.mark.parametrize("layout", list(_NULL_LAYOUTS.values()), ids=list(_NULL_LAYOUTS))
def test_to_table_null_structs_holding_lists_encode(tmp_path, layout, shared):
    """A null struct whose fields include lists (a Pokémon's types, effects, moves), wherever it sits: as a column,
    as list items, and among the children of one struct type converted together. Its children are empty, as
    ``from_pylist`` builds them; a null between present rows whose child lists were not empty failed Parquet
    encoding ("Lists with non-zero length null components are not supported", pyarrow 21)."""
    import pyarrow.parquet as pq

    from shards_schema.declare import to_table

    mon_type = TURNS_SCHEMA.field("state").type.field("player_active").type
    schema = pa.schema([
        pa.field("active", mon_type, nullable=True),
        pa.field("party", pa.list_(pa.field("item", mon_type, nullable=True)), nullable=False),
        pa.field("s", pa.struct([pa.field("active", mon_type, nullable=True),
                                 pa.field("bench", pa.list_(pa.field("item", mon_type, nullable=True)),
                                          nullable=False)]), nullable=False)])
    move = {"name": "tackle", "move_type": "normal", "category": "physical", "base_power": 40, "accuracy": 1.0,
            "priority": 0, "current_pp": 56, "max_pp": 56}
    base = {"name": "eevee", "base_species": "eevee", "hp_pct": 0.5, "types": ["normal"], "item": "noitem",
            "ability": "runaway", "level": 50, "status": "nostatus", "effects": ["confusion"], "moves": [move],
            **dict.fromkeys(["atk_boost", "def_boost", "spa_boost", "spd_boost", "spe_boost", "accuracy_boost",
                             "evasion_boost"], 1),
            **dict.fromkeys(["base_hp", "base_atk", "base_def", "base_spa", "base_spd", "base_spe"], 55),
            "tera_type": "normal", "terastallized": True, "dynamax_turns": 0}
    shared_mon = base

    def mon(i: int) -> dict | None:  # shared: one object in every slot (converted once, repeated by take)
        if layout[i] == "-":
            return None
        return shared_mon if shared else {**base, "name": f"eevee{i}", "types": ["normal", "flying"][: i % 2 + 1]}

    slots = range(len(layout))
    rows = [{"active": mon(i), "party": [mon(j) for j in slots], "s": {"active": mon(i), "bench": [mon(i), mon(i)]}}
            for i in slots]
    table, want = to_table(rows, schema), pa.Table.from_pylist(rows, schema=schema)
    assert table.equals(want)
    for name in schema.names:
        assert _raw_equal(table.column(name).combine_chunks(), want.column(name).combine_chunks()), name
    pq.write_table(table, tmp_path / "t.parquet")
    assert pq.read_table(tmp_path / "t.parquet").equals(want)


def test_to_table_matches_from_pylist_on_parsed_rows():
    """``to_table`` (distinct sub-objects converted once, columns transposed in C) against its readable reference
    on real parser output: shared Pokémon dicts, null structs (no previous move yet), empty lists."""
    from conftest import shared_data

    from pipelines.pokemon.dex import load_dex
    from pipelines.pokemon.spectator import spectator_trajectories
    from pipelines.pokemon.trajectory import ROW_SCHEMA
    from shards_schema.declare import to_table

    rows = []
    for path in sorted(shared_data("pokemon", "showdown_replays").glob("*.json")):
        replay = json.loads(path.read_text())
        rows += spectator_trajectories(replay["log"].split("\n"), load_dex(int(replay["formatid"][3])),
                                       format_id=replay["formatid"], battle_id=replay["id"])
    assert any(r["state"]["player_prev_move"] is None for r in rows)
    actives = [r["state"]["player_active"] for r in rows]
    assert any(a is b for a, b in zip(actives[:-1], actives[1:], strict=True))  # shared between rows
    assert to_table(rows, ROW_SCHEMA).equals(pa.Table.from_pylist(rows, schema=ROW_SCHEMA))
    assert to_table(rows[:1], ROW_SCHEMA).equals(pa.Table.from_pylist(rows[:1], schema=ROW_SCHEMA))
    assert to_table([], ROW_SCHEMA).equals(ROW_SCHEMA.empty_table())


def _manifest_dir(tmp_path, text: str):
    version = tmp_path / "pokemon_turns" / "v1-p1-o1-0000"
    version.mkdir(parents=True)
    (version / "manifest.json").write_text(text)
    return version


def _manifest_json(**changes) -> dict:
    from shards_schema.manifest import Counts, FileEntry

    entry = FileEntry(path="index.parquet", rows=0, bytes=0, sha256="0" * 64)
    manifest = Manifest(manifest_format=1, dataset="pokemon_turns", version="v1-p1-o1-0000",
                        schema_name="pokemon_turns", schema_version="1.0.0", parser_version="1.0.0",
                        observation_version="1.0.0", source="generated", source_revision=None, inputs_sha256="0",
                        config={}, counts=Counts(inputs=0, written=0, filtered={}, quarantined={}, trajectories=0,
                                                 rows=0), files=[], index_file=entry, quarantine_file=entry,
                        git_commit="unknown")
    return {**json.loads(manifest.to_json()), **changes}


@pytest.mark.parametrize("layout,expect", [
    (2, "newer replayforge.*git pull"),
    (0, "corrupt or not a shard manifest.*parse_replays.py"),
    ("1", "corrupt or not a shard manifest"),
    (True, "corrupt or not a shard manifest"),
    (None, "manifest_format None"),
])
def test_unknown_manifest_format_is_refused(tmp_path, layout, expect):
    from shards_schema.manifest import ManifestError

    raw = _manifest_json(manifest_format=layout)
    if layout is None:
        del raw["manifest_format"]
    version = _manifest_dir(tmp_path, json.dumps(raw))
    with pytest.raises(ManifestError, match=expect) as err:
        open_version(version)
    assert str(version / "manifest.json") in str(err.value)


def test_current_manifest_format_is_read(tmp_path):
    version = _manifest_dir(tmp_path, json.dumps(_manifest_json()))
    assert Manifest.load(version).manifest_format == 1


@pytest.mark.parametrize("damage", ["truncated", "not_utf8", "missing_field", "not_an_object", "field_type"])
def test_corrupt_manifest_names_the_file(tmp_path, damage):
    from shards_schema.manifest import ManifestError

    text = json.dumps(_manifest_json())
    raw = _manifest_json()
    del raw["counts"]
    texts = {"truncated": text[: len(text) // 2], "not_utf8": text.replace("pokemon", "pok\udcffmon"),
             "missing_field": json.dumps(raw), "not_an_object": "[1, 2]",
             "field_type": json.dumps(_manifest_json(files=[["part-00000.parquet"]]))}
    version = tmp_path / "v"
    version.mkdir()
    (version / "manifest.json").write_bytes(texts[damage].encode("utf-8", "surrogateescape"))
    with pytest.raises(ManifestError, match="re-run the job") as err:
        open_version(version)
    assert str(version / "manifest.json") in str(err.value)


@pytest.fixture(scope="module")
def melee_version(synthetic_frames):
    """A melee_frames version of two synthetic games (the session's, tests/conftest.py; each test changes a copy):
    the gates tested where neither Node.js nor ../shared is."""
    return synthetic_frames


def _bump(version: str, major: int, minor: int = 0) -> str:
    parts = [int(p) for p in version.split(".")]
    return f"{parts[0] + major}.{parts[1] + minor}.{parts[2]}"


@pytest.mark.parametrize("field,major,minor,expect", [
    ("schema_version", 1, 0, "upgrade replayforge"),
    ("schema_version", -1, 0, "parse_replays.py"),
    ("parser_version", -1, 0, "parse_replays.py"),
    ("parser_version", 1, 0, "upgrade replayforge"),
    ("schema_version", 0, 3, None),  # a minor difference is accepted
])
def test_melee_version_gating_both_ways(melee_version, tmp_path, field, major, minor, expect):
    import shutil

    from shards_schema.melee import CODE_VERSIONS as MELEE_FRAMES

    copy = tmp_path / melee_version.name
    shutil.copytree(melee_version, copy)
    assert open_version(copy).manifest.counts.trajectories == 2
    current = {"schema_version": MELEE_FRAMES.schema, "parser_version": MELEE_FRAMES.parser}[field]
    _rewrite_manifest(copy, **{field: _bump(current, major, minor)})
    if expect is None:
        assert getattr(open_version(copy).manifest, field) == _bump(current, 0, minor)
    else:
        with pytest.raises(VersionMismatchError, match=expect):
            open_version(copy)

"""Hub-ready versions: every version folder carries a dataset card (README.md) whose ``configs`` name its Parquet
files, so the folder uploaded as it is loads in ``datasets`` with the rows replayforge's reader gives; the card
documents every field, states the counts, the source and its license, and is written again byte for byte."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import fsspec
import huggingface_hub
import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from conftest import shared_data
from fsspec.implementations.dirfs import DirFileSystem
from huggingface_hub import DatasetCard

from pipelines import registry
from pipelines.job.config import version_spec
from pipelines.job.parse import ParseInputs
from pipelines.parse_replays import ParseConfig
from pipelines.stages import InputRecord
from pipelines.writer.naming import VersionSpec
from pipelines.writer.publish import PublishResult, ShardWriter, VersionConflictError
from shards_schema import storage
from shards_schema.card import UNKNOWN_LICENSE, card_file
from shards_schema.manifest import CARD_NAME, MANIFEST_FORMAT, MANIFEST_NAME, Manifest
from shards_schema.quarantine import QUARANTINE_SCHEMA
from shards_schema.reader import open_version
from shards_schema.registry import dataset
from shards_schema.versions import CodeVersions

datasets = pytest.importorskip("datasets", reason="the dev extra's `datasets` reads the card as the hub does")

BAD_NAME = "gen1ou-91_Unrated_a b_vs_c_01-01-2024_WIN.json.lz4"


def _publish(inputs: Path, out: Path) -> PublishResult:
    """The Metamon inputs under ``inputs`` published as the parse job publishes them (its source, plan, parse
    actor class, version spec and writer), in process without Ray: gen1ou only, one shard per input."""
    cfg = ParseConfig(source="metamon", input=str(inputs), out=str(out), formats=["gen1ou"])
    source = cfg.make_source()
    plan = source.plan()
    batch = ParseInputs(source).parse_batch(pa.Table.from_pylist(
        [row for item in plan.items for row in source.read(item)]))
    parser = cfg.parser
    writer = ShardWriter(version_spec(cfg, plan), schema=parser.schema, index_schema=parser.index_schema,
                         shard_size_bytes=1, parquet_options=parser.parquet_options, index_rows=parser.index_rows,
                         unknown_words=parser.unknown_words, license=registry.source_license(cfg.source))
    writer.add_batch(batch)
    return writer.publish()


@pytest.fixture(scope="module")
def metamon_inputs(tmp_path_factory) -> Path:
    """The shared Metamon files (two gen1ou trajectories, two gen9ou ones, filtered) and a corrupt file
    (quarantined)."""
    samples = shared_data("pokemon", "metamon_parsed")
    root = tmp_path_factory.mktemp("metamon_in")
    for f in sorted(samples.glob("*.json.lz4")):
        shutil.copy(f, root / f.name)
    (root / BAD_NAME).write_bytes(b"\x04\x22\x4d\x18garbage")
    return root


@pytest.fixture(scope="module")
def published(metamon_inputs, tmp_path_factory) -> PublishResult:
    return _publish(metamon_inputs, tmp_path_factory.mktemp("out"))


def _card(path: Path) -> str:
    return (path / CARD_NAME).read_text(encoding="utf-8")


def _section(card: str, title: str) -> list[str]:
    """The lines of the card's section ``title`` (a Markdown heading line), up to the next heading."""
    lines = card.splitlines()
    start = lines.index(title) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("#")), len(lines))
    return lines[start:end]


def _table(lines: list[str]) -> dict[str, str]:
    """First column → second column of the Markdown table rows among ``lines`` (header and rule left out)."""
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines if line.startswith("|")]
    return {row[0]: row[1] for row in rows[2:]}


def _offline(monkeypatch, tmp_path: Path) -> None:
    """``datasets`` and the hub client without network, their caches under ``tmp_path``."""
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(var, "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # both read from the environment at import
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    datasets.disable_progress_bars()


def test_datasets_loads_the_folder_by_its_card_with_the_readers_rows(published, tmp_path, monkeypatch):
    _offline(monkeypatch, tmp_path)
    folder, m = str(published.path), published.manifest
    version = open_version(folder)
    assert len(m.files) == 2  # two shards: the card lists them in the manifest's order
    assert datasets.get_dataset_config_names(folder) == [m.schema_name, "index", "quarantine"]
    for config, expected in [(m.schema_name, version.table()), ("index", version.index()),
                             ("quarantine", version.quarantine())]:
        loaded = datasets.load_dataset(folder, config, split="train", cache_dir=str(tmp_path / "cache"))
        assert loaded.num_rows == expected.num_rows > 0
        # every column of every row, in order (the hub's features make every column nullable: values compared)
        assert loaded.column_names == expected.column_names
        assert loaded.data.table.to_pylist() == expected.to_pylist(), config
    rows = datasets.load_dataset(folder, m.schema_name, split="train", cache_dir=str(tmp_path / "cache"))
    assert list(rows["trajectory_id"]) == version.table().column("trajectory_id").to_pylist()
    assert len(set(rows["trajectory_id"])) == m.counts.trajectories == 2


def test_the_cards_configs_name_exactly_the_versions_files_and_its_license(published):
    m = published.manifest
    card = DatasetCard.load(published.path / CARD_NAME)  # the hub client's own parser of the front matter
    configs = {c["config_name"]: c for c in card.data.configs}
    assert list(configs) == [m.schema_name, "index", "quarantine"]
    assert configs[m.schema_name]["data_files"] == [{"split": "train", "path": [f.path for f in m.files]}]
    assert configs[m.schema_name]["default"] is True
    assert configs["index"]["data_files"] == [{"split": "train", "path": [m.index_file.path]}]
    assert configs["quarantine"]["data_files"] == [{"split": "train", "path": [m.quarantine_file.path]}]
    metamon = registry.source_class("metamon").license
    assert card.data.license == metamon.hub_id == "cc-by-nc-4.0"
    source = _table(_section(_card(published.path), "## Source"))
    assert source["source"] == "`metamon`" and source["license"] == "`cc-by-nc-4.0`"
    assert source["terms"] == metamon.terms and source["inputs"].endswith(f"`{m.inputs_sha256}`")
    assert source["revision"] == (f"`{m.source_revision}`" if m.source_revision else "none")


def _fields(schema: pa.Schema | pa.StructType, prefix: str = "") -> list[tuple[str, str]]:
    out = []
    for f in schema:
        out.append((prefix + f.name, (f.metadata or {})[b"doc"].decode()))
        inner, sep = f.type, "."
        if pa.types.is_list(inner):
            inner, sep = inner.value_type, "[]."
        if pa.types.is_struct(inner):
            out += _fields(inner, prefix + f.name + sep)
    return out


def test_the_card_names_every_field_of_the_schemas_with_its_doc(published):
    card = _card(published.path)
    spec = dataset(published.manifest.schema_name)
    assert len(_fields(spec.rows)) > len(spec.rows)  # nested fields have rows of their own
    for title, schema in [(f"### Rows (`{spec.name}`)", spec.rows), ("### Index (`index`)", spec.index),
                          ("### Quarantine (`quarantine`)", QUARANTINE_SCHEMA)]:
        rows = [line for line in _section(card, title) if line.startswith("| `")]
        fields = _fields(schema)
        assert len(rows) == len(fields)
        for row, (path, doc) in zip(rows, fields, strict=True):
            assert row.startswith(f"| `{path}` |") and row.endswith(f"| {doc.replace('|', chr(92) + '|')} |")


def test_the_cards_counts_are_the_manifests(published):
    card, c = _card(published.path), published.manifest.counts
    numbers = _table(_section(card, "## Counts"))
    assert {k: int(v) for k, v in numbers.items()} == {
        "inputs": c.inputs, "written": c.written, "trajectories": c.trajectories, "rows": c.rows,
        "unknown_words": c.unknown_words}
    assert (c.inputs, c.written, c.filtered, c.quarantined) == (5, 2, {"format_not_requested": 2}, {"corrupt_lz4": 1})
    for name, by_reason in [("filtered", c.filtered), ("quarantined", c.quarantined), ("relabelled", c.relabelled)]:
        section = _section(card, f"### {name}")
        assert {k: int(v) for k, v in _table(section).items()} == by_reason
        assert ("none" in section) == (not by_reason)
    rows = [line.split("|")[2:5] for line in _section(card, "## Files") if line.startswith("| `")]
    m = published.manifest
    assert [(p.strip(" `"), int(r), int(b)) for p, r, b in rows] == [
        (f.path, f.rows, f.bytes) for f in [*m.files, m.index_file, m.quarantine_file]]


def test_a_rerun_writes_the_same_card_and_the_manifest_names_it(published, metamon_inputs, tmp_path):
    again = _publish(metamon_inputs, tmp_path)
    assert again.path.name == published.path.name and not again.reused
    card = (published.path / CARD_NAME).read_bytes()
    assert published.manifest.card == again.manifest.card == card_file(card)
    files = {p.name: p.read_bytes() for p in published.path.iterdir()}
    assert {p.name: p.read_bytes() for p in again.path.iterdir() if p.name != MANIFEST_NAME} == {
        name: data for name, data in files.items() if name != MANIFEST_NAME}
    # the same version published again in place: found, nothing written or removed, the card kept
    before = {p.name: p.stat().st_mtime_ns for p in again.path.iterdir()}
    third = _publish(metamon_inputs, tmp_path)
    assert third.reused and third.removed == []
    assert {p.name: p.stat().st_mtime_ns for p in again.path.iterdir()} == before


# ---------------------------------------------------------------------------- the writer's card, on a toy version
TOY = pa.schema([("game_id", pa.string()), ("value", pa.int64())], metadata={"replayforge.schema": "toy"})
TOY_INDEX = pa.schema([("game_id", pa.string()), ("input_id", pa.string()), ("row_start", pa.int64()),
                       ("num_rows", pa.int64()), ("file", pa.string())])
CODE = CodeVersions(schema="1.0.0", parser="1.0.0", observation="0.0.0", reparse_command="x",
                    refeaturize_command=None)


def _toy_spec(out: Path) -> VersionSpec:
    return VersionSpec(out_root=str(out), dataset="toy", code=CODE, source="toy", source_revision=None, config={},
                       planned_inputs="toy-inputs")


def _toy(out: Path, **parquet_options) -> ShardWriter:
    """A toy version's writer holding two inputs, both written (the source is registered nowhere)."""
    writer = ShardWriter(_toy_spec(out), schema=TOY, index_schema=TOY_INDEX, shard_size_bytes=1 << 20,
                         parquet_options=parquet_options or None)
    for i, key in enumerate(["g1", "g2"]):
        record = InputRecord(input_id=f"{key}.slp", source="toy", input_sha256=key, dedupe_key=key, num_rows=1,
                             index_rows=[{"game_id": key, "row_start": 0, "num_rows": 1}])
        writer.add_input(record, pa.table({"game_id": [key], "value": [i]}, schema=TOY))
    return writer


def _names(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def _listed(m: Manifest) -> set[str]:
    return {MANIFEST_NAME, CARD_NAME, m.index_file.path, m.quarantine_file.path, *(f.path for f in m.files)}


def test_a_killed_runs_card_is_replaced_and_the_card_of_an_unlisted_source_says_unknown(tmp_path):
    folder = Path(_toy(tmp_path).spec.uri)
    folder.mkdir(parents=True)
    (folder / CARD_NAME).write_text("a killed run's card")
    published = _toy(tmp_path).publish()
    card = (folder / CARD_NAME).read_bytes()
    assert published.manifest.card == card_file(card) and _names(folder) == _listed(published.manifest)
    assert DatasetCard(card.decode()).data.license == UNKNOWN_LICENSE.hub_id == "unknown"
    assert f"| terms | {UNKNOWN_LICENSE.terms} |" in card.decode()


def test_a_conflicting_run_that_wrote_its_card_late_puts_the_published_card_back(tmp_path, monkeypatch):
    """A run with other contents that found no manifest, then lost the create to a run that published: its card
    (written after the winner's) is replaced by the published version's, and its other files are removed."""
    winner = _toy(tmp_path).publish()
    card = (winner.path / CARD_NAME).read_bytes()
    real_exists = storage.exists
    monkeypatch.setattr(storage, "exists", lambda uri: False if uri.endswith(MANIFEST_NAME) else real_exists(uri))
    with pytest.raises(VersionConflictError):
        _toy(tmp_path, compression="none").publish()  # other bytes, other card (its files' names and sizes)
    assert (winner.path / CARD_NAME).read_bytes() == card
    assert _names(winner.path) == _listed(winner.manifest)


def test_a_version_published_before_cards_is_read_and_reused_as_it_is(published, tmp_path):
    """Both directions of the manifest's layout: a version without a card (an older writer's) opens and a re-run
    keeps it as it is; a manifest with a card stays in ``manifest_format`` 1, its card in ``extra``, which readers of
    that format take as it comes."""
    raw = json.loads((published.path / MANIFEST_NAME).read_text())
    assert raw["manifest_format"] == MANIFEST_FORMAT == 1
    assert set(raw) == {f.name for f in dataclasses.fields(Manifest)} and set(raw["extra"]) == {"card"}
    older = tmp_path / "older" / published.path.name
    shutil.copytree(published.path, older)
    (older / CARD_NAME).unlink()
    (older / MANIFEST_NAME).write_text(Manifest.from_json(json.dumps({**raw, "extra": {}})).to_json())
    assert open_version(older).manifest.card is None
    assert open_version(older).table().equals(open_version(published.path).table())

    toy = _toy(tmp_path / "toy").publish()
    m = Manifest.load(toy.path)
    toy.path.joinpath(MANIFEST_NAME).write_text(dataclasses.replace(m, extra={}).to_json())
    toy.path.joinpath(CARD_NAME).unlink()
    again = _toy(tmp_path / "toy").publish()
    assert again.reused and again.removed == [] and CARD_NAME not in _names(toy.path)


def test_open_version_reads_the_uploaded_folder_from_an_hf_uri(published, tmp_path, monkeypatch):
    """The folder uploaded as it is becomes a hub dataset repository; ``hf://datasets/<owner>/<name>@<revision>``
    goes through fsspec (``storage._fsspec``) as on the hub, here to a local copy of the repository: the card does
    not disturb the reader, and a card edited on the hub does not make the version unreadable."""
    hub = tmp_path / "hub"
    repo = hub / "datasets" / "someone" / "replays@main"
    shutil.copytree(published.path, repo)
    local = fsspec.filesystem("file")
    monkeypatch.setattr(storage, "_fsspec", lambda protocol: pafs.PyFileSystem(pafs.FSSpecHandler(
        DirFileSystem(path=str(hub), fs=local))) if protocol == "hf" else pytest.fail(protocol))
    uri = "hf://datasets/someone/replays@main"
    version = open_version(uri)
    assert version.manifest == published.manifest
    assert version.table().equals(open_version(published.path).table())
    (repo / CARD_NAME).write_text(_card(repo) + "\nEdited on the hub.\n")
    assert open_version(uri).index().equals(open_version(published.path).index())


def test_a_kind_of_file_without_rows_has_no_config_and_the_others_load(tmp_path, monkeypatch):
    """``datasets`` refuses a split without rows: a version that dropped no input (an empty quarantine table) or
    wrote none (no shard, an empty index) names only the kinds that have rows."""
    _offline(monkeypatch, tmp_path)
    clean = _toy(tmp_path / "clean").publish()
    dropped = ShardWriter(_toy_spec(tmp_path / "dropped"), schema=TOY, index_schema=TOY_INDEX, shard_size_bytes=1)
    dropped.add_input(InputRecord(input_id="x.slp", source="toy").dropped(
        "quarantined", stage="read", error_type="ReadError", reason="corrupt_input", message="unreadable"))
    dropped = dropped.publish()
    for version, configs in [(clean, ["toy", "index"]), (dropped, ["quarantine"])]:
        folder, m = str(version.path), version.manifest
        assert datasets.get_dataset_config_names(folder) == configs
        rows = {"toy": sum(f.rows for f in m.files), "index": m.index_file.rows, "quarantine": m.quarantine_file.rows}
        for config in configs:
            loaded = datasets.load_dataset(folder, config, split="train", cache_dir=str(tmp_path / "cache"))
            assert loaded.num_rows == rows[config] > 0
        assert "none in this version, so no config" in _card(version.path)

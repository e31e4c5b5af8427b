"""Re-derive the observation columns of a shard version from its stored state, with this checkout's spec.

    python pipelines/pokemon/refeaturize.py --input OUT/pokemon_turns/<version> --out OUT

No raw replay is read: the structured ``state`` column holds everything the spec needs. The result is a new shard
version (same inputs, same trajectories, same quarantine) whose manifest carries the current observation version
and this checkout's schema version: columns an older minor lacks (``teacher_action`` before 2.1.0) are written with
the value their absence means (``shards_schema.versions.AddedColumn``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pyarrow as pa

from pipelines import registry
from pipelines.cli import parse_config
from pipelines.pokemon.observation import observation_columns
from pipelines.pokemon.parser import PokemonParser
from pipelines.stages import InputRecord
from pipelines.writer.naming import BYTES_PER_MIB, VersionSpec
from pipelines.writer.publish import ShardWriter
from shards_schema.pokemon import CODE_VERSIONS as POKEMON_TURNS
from shards_schema.pokemon import INDEX_SCHEMA, TURNS_SCHEMA
from shards_schema.reader import open_version
from shards_schema.versions import with_absent_columns


@dataclass(frozen=True, kw_only=True)
class RefeaturizeConfig:
    """Configuration of the re-featurizer.

    Attributes:
        input: the shard version folder to read.
        out: output root; the new version goes to OUT/<dataset>/<version>/.
        dataset: dataset name of the new version (default: the input's).
        shard_size_mb: target shard size of the new version, in MiB (2**20 bytes).
    """

    input: str
    out: str
    dataset: str = ""
    shard_size_mb: float = 128.0

    @classmethod
    def tiny(cls, *, input: str, out: str, **overrides) -> RefeaturizeConfig:
        return cls(input=input, out=out, **{"shard_size_mb": 0.5, **overrides})


def refeaturize_table(table: pa.Table) -> pa.Table:
    """Recompute obs_text, obs_tokens, obs_numeric and obs_unknown_words from the state column."""
    columns = observation_columns(table.column("state").to_pylist(), table.column("format").to_pylist())
    schema = table.schema
    for name, values in columns.items():
        i = schema.get_field_index(name)
        table = table.set_column(i, schema.field(i), values)
    return table


def run(cfg: RefeaturizeConfig, *, log=print):
    source = open_version(cfg.input, ignore_versions=("observation",))
    m = source.manifest
    config = {**m.config, "refeaturized_from": f"{m.dataset}/{m.version}"}
    # the inputs are those of the version read (its inputs_sha256 hashes their bytes), known before any row is read
    spec = VersionSpec(out_root=cfg.out, dataset=cfg.dataset or m.dataset, code=POKEMON_TURNS, source=m.source,
                       source_revision=m.source_revision, config=config, planned_inputs=m.inputs_sha256)
    writer = ShardWriter(spec, schema=TURNS_SCHEMA, index_schema=INDEX_SCHEMA,
                         shard_size_bytes=int(cfg.shard_size_mb * BYTES_PER_MIB),
                         index_rows=PokemonParser.index_rows, unknown_words=PokemonParser.unknown_words,
                         license=registry.source_license(m.source))
    start = time.monotonic()
    index = source.index().to_pylist()
    quarantine = source.quarantine().to_pylist()
    try:
        for file_entry in m.files:
            stored = source.read_table(file_entry.path)
            table = refeaturize_table(with_absent_columns(stored, TURNS_SCHEMA, POKEMON_TURNS, m.schema_version))
            rows_by_input: dict[str, list[tuple[int, int]]] = {}
            for entry in index:
                if entry["file"] == file_entry.path:
                    rows_by_input.setdefault(entry["input_id"], []).append((entry["row_start"], entry["num_rows"]))
            for input_id, spans in rows_by_input.items():
                first, last = spans[0][0], spans[-1][0] + spans[-1][1]
                part = table.slice(first, last - first)
                writer.add_input(InputRecord(input_id=input_id, source="", num_rows=part.num_rows), part)
        for row in quarantine:
            writer.add_input(InputRecord(
                input_id=row["input_id"], source=row["source"], input_sha256=row["input_sha256"], status=row["kind"],
                stage=row["stage"], error_type=row["error_type"], reason=row["reason"], message=row["message"]))
        published = writer.publish()
    except BaseException:
        writer.abort()
        raise
    log(f"[refeaturize] {published.manifest.counts.rows} rows re-derived with observation spec "
        f"{POKEMON_TURNS.observation} in {time.monotonic() - start:.1f}s")
    log(published.uri)
    return published


def main(argv: list[str] | None = None) -> None:
    run(parse_config(RefeaturizeConfig, argv))


if __name__ == "__main__":
    main()

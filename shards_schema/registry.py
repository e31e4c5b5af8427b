"""The datasets this checkout reads and writes, registered once: each game's declarations (``shards_schema/<game>.py``)
named here with explicit imports. The reader, the writer's callers and the version gate look a dataset up by the
schema name its manifest carries; nothing else in the core names a game.

A dataset defined elsewhere (a new game's package, a test's toy game) is added with ``register_dataset``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from shards_schema import melee, pokemon
from shards_schema.manifest import UPGRADE_COMMAND
from shards_schema.versions import CodeVersions, VersionMismatchError


@dataclass(frozen=True, kw_only=True)
class DatasetSpec:
    """One shard dataset's declarations.

    Attributes:
        name: the schema name manifests and Arrow metadata carry (``pokemon_turns``); the default folder under
            ``--out``.
        rows: the declared Arrow schema of its shards' rows.
        index: the declared Arrow schema of its index file (one row per trajectory or game).
        code: the versions this checkout writes and reads for it, and the commands that re-make old versions.
    """

    name: str
    rows: pa.Schema
    index: pa.Schema
    code: CodeVersions

    def __post_init__(self):
        declared = self.rows.metadata[b"replayforge.schema"].decode() if self.rows.metadata else None
        if declared != self.name:
            raise ValueError(f"dataset {self.name!r}: its row schema is declared as {declared!r}")


DATASETS: dict[str, DatasetSpec] = {}


def register_dataset(spec: DatasetSpec) -> DatasetSpec:
    """Make ``spec`` known to the reader and the version gate; registering another spec under a taken name is an
    error (one name, one meaning)."""
    if DATASETS.get(spec.name, spec) != spec:
        raise ValueError(f"dataset {spec.name!r} is registered twice with different declarations")
    DATASETS[spec.name] = spec
    return spec


def dataset(name: str) -> DatasetSpec:
    """The registered dataset of a schema name; a name this checkout does not know says how to get the code that
    does."""
    if name not in DATASETS:
        raise VersionMismatchError(f"unknown schema {name!r}; this checkout reads {sorted(DATASETS)}. If it was "
                                   f"written by a newer replayforge, upgrade: `{UPGRADE_COMMAND}`.")
    return DATASETS[name]


register_dataset(DatasetSpec(name=pokemon.SCHEMA_NAME, rows=pokemon.TURNS_SCHEMA, index=pokemon.INDEX_SCHEMA,
                             code=pokemon.CODE_VERSIONS))
register_dataset(DatasetSpec(name=melee.SCHEMA_NAME, rows=melee.FRAMES_SCHEMA, index=melee.GAMES_SCHEMA,
                             code=melee.CODE_VERSIONS))

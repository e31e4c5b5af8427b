"""Semantic versions of everything that shapes a shard version, and the rules readers apply to them.

Bump the major part when old shards can no longer be read as they were meant (a column's meaning, a parser fix
that changes rows, an observation layout change); the minor part for additions that old readers can ignore. A
column a minor version adds is declared (``AddedColumn``): the versions of the same major made before it lack it, and
the reader expects exactly that (``rows_schema_of``); what reads the column says what its absence means.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from shards_schema.manifest import UPGRADE_COMMAND, Manifest, major


@dataclass(frozen=True, kw_only=True)
class AddedColumn:
    """A row column that a minor schema version added.

    Attributes:
        name: the column.
        since: the schema version that added it; versions of its major made before it do not have the column.
        absent: the value its rows stand for in a version without it (what a reader that needs it fills in).
    """

    name: str
    since: str
    absent: int | float | str | bool | None


@dataclass(frozen=True, kw_only=True)
class CodeVersions:
    """The versions this checkout writes and reads for one schema.

    Attributes:
        schema: row schema version.
        parser: parser version.
        observation: observation spec version ("0.0.0" where the schema has no derived observation).
        reparse_command: the command that re-makes shards with this code from raw inputs.
        refeaturize_command: the command that re-derives observations from stored state (None: not applicable).
        added_columns: the row columns minor versions of this schema major added, oldest first.
    """

    schema: str
    parser: str
    observation: str
    reparse_command: str
    refeaturize_command: str | None
    added_columns: tuple[AddedColumn, ...] = ()

    def absent_columns(self, schema_version: str) -> tuple[AddedColumn, ...]:
        """The added columns that a version of ``schema_version`` (same major as ``schema``) lacks: those added by a
        later minor."""
        return tuple(c for c in self.added_columns if _minor_key(schema_version) < _minor_key(c.since))


def _minor_key(version: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in version.split("."))
    except ValueError as err:
        raise ValueError(f"not a semantic version: {version!r}") from err


def rows_schema_of(declared: pa.Schema, code: CodeVersions, schema_version: str) -> pa.Schema:
    """The row schema a version of ``schema_version`` was written with, by this checkout's declarations: ``declared``
    without the columns a later minor added (a version of the same or a newer minor has them all)."""
    absent = {c.name for c in code.absent_columns(schema_version)}
    return pa.schema([f for f in declared if f.name not in absent], metadata=declared.metadata)


def with_absent_columns(table: pa.Table, declared: pa.Schema, code: CodeVersions, schema_version: str) -> pa.Table:
    """Rows of a version of ``schema_version`` in the ``declared`` schema: the columns it lacks (``absent_columns``)
    filled with their ``absent`` value, every column in declared order."""
    for column in code.absent_columns(schema_version):
        if column.name not in table.column_names:
            field = declared.field(column.name)
            table = table.append_column(field, pa.array([column.absent] * table.num_rows, field.type))
    return table.select(declared.names)


class VersionMismatchError(RuntimeError):
    """A shard version was written by code whose major version differs from this checkout's."""


def check_versions(manifest: Manifest, code: CodeVersions, *, ignore: tuple[str, ...] = ()) -> None:
    """Refuse a shard version whose schema, parser or observation major differs from ``code``'s (this checkout's
    versions of the manifest's schema, from ``shards_schema.registry``).

    ``ignore`` names checks to skip: only the re-featurizer passes ``("observation",)``, since its job is to
    replace the observation columns."""
    for what, stored, ours in (
        ("schema", manifest.schema_version, code.schema),
        ("parser", manifest.parser_version, code.parser),
        ("observation", manifest.observation_version, code.observation),
    ):
        if what in ignore or major(stored) == major(ours):
            continue
        if major(stored) > major(ours):
            fix = f"upgrade replayforge to read it: `{UPGRADE_COMMAND}`"
        elif what == "observation" and code.refeaturize_command:
            fix = f"re-derive the observations from stored state: `{code.refeaturize_command}`"
        else:
            fix = f"re-parse the raw inputs with this code: `{code.reparse_command}`"
        raise VersionMismatchError(
            f"{manifest.dataset}/{manifest.version} has {what} version {stored}, this code reads major "
            f"{major(ours)} ({ours}); {fix}"
        )

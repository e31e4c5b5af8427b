"""Semantic versions of everything that shapes a shard version, and the rules readers apply to them.

Bump the major part when old shards can no longer be read as they were meant (a column's meaning, a parser fix
that changes rows, an observation layout change); the minor part for additions that old readers can ignore.
"""

from __future__ import annotations

from dataclasses import dataclass

from shards_schema.manifest import UPGRADE_COMMAND, Manifest, major


@dataclass(frozen=True, kw_only=True)
class CodeVersions:
    """The versions this checkout writes and reads for one schema.

    Attributes:
        schema: row schema version.
        parser: parser version.
        observation: observation spec version ("0.0.0" where the schema has no derived observation).
        reparse_command: the command that re-makes shards with this code from raw inputs.
        refeaturize_command: the command that re-derives observations from stored state (None: not applicable).
    """

    schema: str
    parser: str
    observation: str
    reparse_command: str
    refeaturize_command: str | None


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

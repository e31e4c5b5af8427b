"""The one way trainers, notebooks and tools open a shard version: verify, then read.

``open_version(path)`` checks the manifest, the code's major versions, each file's size and sha256 and each
shard's Arrow schema before returning anything, so a trainer never reads rows it would misinterpret.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from shards_schema.manifest import MANIFEST_NAME, FileEntry, Manifest, ManifestError  # noqa: F401 - re-exported
from shards_schema.versions import check_versions


class ShardIntegrityError(RuntimeError):
    """A shard version's files do not match its manifest."""


def sha256_file(path: Path, chunk_bytes: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


def _declared_schemas(schema_name: str) -> tuple[pa.Schema, pa.Schema]:
    from shards_schema.melee import FRAMES_SCHEMA, GAMES_SCHEMA
    from shards_schema.pokemon import INDEX_SCHEMA, TURNS_SCHEMA

    schemas = {"pokemon_turns": (TURNS_SCHEMA, INDEX_SCHEMA), "melee_frames": (FRAMES_SCHEMA, GAMES_SCHEMA)}
    return schemas[schema_name]


@dataclass(frozen=True)
class ShardVersion:
    """A verified shard version.

    Attributes:
        path: the version folder.
        manifest: its manifest.
    """

    path: Path
    manifest: Manifest

    @property
    def files(self) -> list[Path]:
        return [self.path / f.path for f in self.manifest.files]

    def table(self, columns: list[str] | None = None) -> pa.Table:
        """All rows in file order (small versions, tests, notebooks)."""
        schema, _ = _declared_schemas(self.manifest.schema_name)
        tables = [pq.read_table(f, columns=columns) for f in self.files]
        if not tables:
            return schema.empty_table() if columns is None else schema.empty_table().select(columns)
        return pa.concat_tables(tables)

    def iter_batches(self, columns: list[str], batch_size: int = 4096):
        """Stream record batches of some columns over all shards in order, in bounded memory."""
        for path in self.files:
            yield from pq.ParquetFile(path).iter_batches(batch_size=batch_size, columns=columns)

    def index(self) -> pa.Table:
        return pq.read_table(self.path / self.manifest.index_file.path)

    def quarantine(self) -> pa.Table:
        return pq.read_table(self.path / self.manifest.quarantine_file.path)

    def lazy(self):
        """A polars LazyFrame over the shards."""
        import polars as pl

        return pl.scan_parquet([str(f) for f in self.files])

    def ray_dataset(self, columns: list[str] | None = None):
        """A Ray Dataset over the shards, one read task per file, in file order."""
        import ray.data

        return ray.data.read_parquet([str(f) for f in self.files], columns=columns)

    def rows(self, file: str, start: int, count: int, columns: list[str] | None = None) -> pa.Table:
        """Rows ``start .. start+count`` of one shard, reading only the row groups that hold them."""
        parquet = pq.ParquetFile(self.path / file)
        groups, offset, first_offset = [], 0, None
        for g in range(parquet.metadata.num_row_groups):
            n = parquet.metadata.row_group(g).num_rows
            if offset + n > start and offset < start + count:
                groups.append(g)
                first_offset = offset if first_offset is None else first_offset
            offset += n
        if not groups:
            raise IndexError(f"rows {start}..{start + count} are not in {file}")
        return parquet.read_row_groups(groups, columns=columns).slice(start - first_offset, count)

    def _index_row(self, key: str, value: str) -> dict:
        import pyarrow.compute as pc

        index = self.index()
        hit = index.filter(pc.equal(index[key], value))
        if hit.num_rows != 1:
            raise KeyError(f"{key} {value!r} is not in {self.path}")
        return hit.to_pylist()[0]

    def trajectory(self, trajectory_id: str) -> pa.Table:
        """All rows of one trajectory, read through the index without scanning other files."""
        row = self._index_row("trajectory_id", trajectory_id)
        return self.rows(row["file"], row["row_start"], row["num_rows"])

    def window(self, game_id: str, first_frame: int, num_frames: int, columns: list[str] | None = None) -> pa.Table:
        """``num_frames`` consecutive frames of a Melee game from ``first_frame`` (a game's frames are stored
        contiguous and in order), read through the games index."""
        row = self._index_row("game_id", game_id)
        offset = first_frame - row["first_frame"]
        if offset < 0 or offset + num_frames > row["num_rows"]:
            raise IndexError(f"frames {first_frame}..{first_frame + num_frames - 1} are outside game {game_id}")
        return self.rows(row["file"], row["row_start"] + offset, num_frames, columns)


def _verify_file(version_dir: Path, entry: FileEntry, *, check_sha256: bool) -> None:
    path = version_dir / entry.path
    if not path.is_file():
        raise ShardIntegrityError(f"{path} is listed in the manifest but missing; re-run the job that made it")
    size = path.stat().st_size
    if size != entry.bytes:
        raise ShardIntegrityError(f"{path} has {size} bytes, the manifest says {entry.bytes}: the file was changed")
    if check_sha256 and sha256_file(path) != entry.sha256:
        raise ShardIntegrityError(f"{path} sha256 differs from the manifest: the file is corrupt or was changed")


def open_version(path: str | Path, *, check_sha256: bool = True, ignore_versions: tuple[str, ...] = ()) -> ShardVersion:
    """Open and verify a shard version folder (``DIR/<dataset>/<version>``).

    Raises ``ManifestError`` for a manifest.json that is corrupt or of another layout, ``VersionMismatchError``
    for rows made by code of another major version, ``ShardIntegrityError`` for files that differ from it; each
    names the file and the command that fixes it.

    ``ignore_versions`` is for tools that rewrite the mismatched part (``("observation",)`` for re-featurizing)."""
    version_dir = Path(path)
    if not (version_dir / MANIFEST_NAME).is_file():
        raise ShardIntegrityError(
            f"{version_dir} has no {MANIFEST_NAME}: it is not a published shard version "
            "(pass the folder printed last by pipelines/parse_replays.py)"
        )
    manifest = Manifest.load(version_dir)
    check_versions(manifest, ignore=ignore_versions)
    turns_schema, index_schema = _declared_schemas(manifest.schema_name)
    for entry in [*manifest.files, manifest.index_file, manifest.quarantine_file]:
        _verify_file(version_dir, entry, check_sha256=check_sha256)
    for entry, declared in [(f, turns_schema) for f in manifest.files] + [(manifest.index_file, index_schema)]:
        stored = pq.read_schema(version_dir / entry.path)
        if not stored.equals(declared, check_metadata=False):
            raise ShardIntegrityError(
                f"{version_dir / entry.path} does not have the declared {manifest.schema_name} schema; "
                "it was not written by this pipeline"
            )
    return ShardVersion(version_dir, manifest)

"""The one way trainers, notebooks and tools open a shard version: verify, then read.

``open_version(uri)`` checks the manifest, the code's major versions, each file's size and sha256 and each
shard's Arrow schema before returning anything, so a trainer never reads rows it would misinterpret. The version is
a local folder or an object-store URI (``s3://bucket/out/<dataset>/<version>``): every read goes through
``shards_schema.storage``, because a cluster's workers do not share the driver's disk.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shards_schema import storage
from shards_schema.manifest import MANIFEST_NAME, FileEntry, Manifest, ManifestError  # noqa: F401 - re-exported
from shards_schema.registry import dataset
from shards_schema.versions import check_versions, rows_schema_of


class ShardIntegrityError(RuntimeError):
    """A shard version's files do not match its manifest."""


def sha256_file(uri: str | Path, chunk_bytes: int = 1 << 22) -> str:
    """The sha256 of a file (local path or URI), streamed ``chunk_bytes`` at a time: shards are not held in memory."""
    digest = hashlib.sha256()
    with storage.open_input(str(uri)) as fh:
        while chunk := fh.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class ShardVersion:
    """A verified shard version.

    Attributes:
        path: the version folder as a URI (an absolute local path, or ``s3://...`` and the like).
        manifest: its manifest.
    """

    path: str
    manifest: Manifest

    @functools.cached_property
    def row_columns(self) -> tuple[str, ...]:
        """The columns of this version's rows: the declared ones, less those a later minor of its schema added
        (``shards_schema.versions.AddedColumn``; ``open_version`` checked every shard has exactly these)."""
        spec = dataset(self.manifest.schema_name)
        return tuple(rows_schema_of(spec.rows, spec.code, self.manifest.schema_version).names)

    def uri(self, file: str) -> str:
        """The URI of a file of this version (a name from its manifest)."""
        return storage.join(self.path, file)

    @property
    def files(self) -> list[str]:
        """The shards' URIs, in order."""
        return [self.uri(f.path) for f in self.manifest.files]

    def filesystem(self):
        """(pyarrow filesystem, the shards' paths inside it): what Arrow datasets, polars and Ray Data read with."""
        fs, _ = storage.resolve(self.path)
        return fs, [storage.resolve(f)[1] for f in self.files]

    def read_table(self, file: str, columns: list[str] | None = None) -> pa.Table:
        """One file of this version as a table."""
        fs, path = storage.resolve(self.uri(file))
        return pq.read_table(path, columns=columns, filesystem=fs)

    def table(self, columns: list[str] | None = None) -> pa.Table:
        """All rows in file order (small versions, tests, notebooks)."""
        schema = dataset(self.manifest.schema_name).rows
        tables = [self.read_table(f.path, columns) for f in self.manifest.files]
        if not tables:
            return schema.empty_table() if columns is None else schema.empty_table().select(columns)
        return pa.concat_tables(tables)

    def iter_batches(self, columns: list[str], batch_size: int = 4096):
        """Stream record batches of some columns over all shards in order, in bounded memory."""
        for uri in self.files:
            with storage.open_input(uri) as fh:
                yield from pq.ParquetFile(fh).iter_batches(batch_size=batch_size, columns=columns)

    def index(self) -> pa.Table:
        """The index table (one row per trajectory or game), read once per ``ShardVersion`` (a trainer cuts every
        epoch's windows from it; Arrow tables are immutable, so sharing it is safe)."""
        return self._index

    @functools.cached_property
    def _index(self) -> pa.Table:
        return self.read_table(self.manifest.index_file.path)

    def quarantine(self) -> pa.Table:
        return self.read_table(self.manifest.quarantine_file.path)

    def lazy(self):
        """A polars LazyFrame over the shards: polars' own scan for a local version, an Arrow dataset on the
        version's filesystem for a remote one (the same endpoint and credentials as every other read)."""
        # polars 0.10 s, pyarrow.dataset 0.21 s (importtime): paid only by lazy reads (the notebooks), not by every
        # command that reads shards through this module (refeaturize, training, self-play)
        import polars as pl

        if storage.is_local(self.path):
            return pl.scan_parquet(self.files)
        import pyarrow.dataset as ds

        fs, paths = self.filesystem()
        return pl.scan_pyarrow_dataset(ds.dataset(paths, filesystem=fs, format="parquet"))

    def ray_dataset(self, columns: list[str] | None = None):
        """A Ray Dataset over the shards, one read task per file, in file order. The filesystem is pickled to the
        read tasks; credentials are resolved where they run (environment, profile or instance role there)."""
        import ray.data  # not at the top: ray is imported only after pipelines.ray_start.start_ray

        fs, paths = self.filesystem()
        dataset = ray.data.read_parquet(paths, filesystem=fs)
        return dataset.select_columns(columns) if columns is not None else dataset  # projected into the read

    def rows(self, file: str, start: int, count: int, columns: list[str] | None = None) -> pa.Table:
        """Rows ``start .. start+count`` of one shard, reading only the row groups that hold them."""
        with storage.open_input(self.uri(file)) as fh:
            return self._rows(pq.ParquetFile(fh), file, start, count, columns)

    @staticmethod
    def _rows(parquet: pq.ParquetFile, file: str, start: int, count: int, columns: list[str] | None) -> pa.Table:
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


def _verify_file(version: str, entry: FileEntry, *, check_sha256: bool) -> None:
    uri = storage.join(version, entry.path)
    if not storage.is_file(uri):
        raise ShardIntegrityError(f"{uri} is listed in the manifest but missing; re-run the job that made it")
    size = storage.size(uri)
    if size != entry.bytes:
        raise ShardIntegrityError(f"{uri} has {size} bytes, the manifest says {entry.bytes}: the file was changed")
    if check_sha256 and sha256_file(uri) != entry.sha256:
        raise ShardIntegrityError(f"{uri} sha256 differs from the manifest: the file is corrupt or was changed")


def open_version(path: str | Path, *, check_sha256: bool = True, ignore_versions: tuple[str, ...] = ()) -> ShardVersion:
    """Open and verify a shard version folder (``DIR/<dataset>/<version>``, a local path or a URI).

    Raises ``ManifestError`` for a manifest.json that is corrupt or of another layout, ``VersionMismatchError``
    for rows made by code of another major version, ``ShardIntegrityError`` for a folder without a manifest and for
    files that differ from it; each names the file and the command that fixes it.

    ``ignore_versions`` is for tools that rewrite the mismatched part (``("observation",)`` for re-featurizing)."""
    version = storage.normalize(str(path))
    if not storage.is_file(storage.join(version, MANIFEST_NAME)):
        # object stores have no rename: the writer publishes by writing the manifest last, so a folder without one
        # is a run that has not finished (or crashed), never a version
        raise ShardIntegrityError(
            f"{version} has no {MANIFEST_NAME}: it is not a published shard version (a version exists once its "
            "manifest is written, last; pass the folder printed last by pipelines/parse_replays.py, or re-run the "
            "job that was writing this one)"
        )
    manifest = Manifest.load(version)
    spec = dataset(manifest.schema_name)
    check_versions(manifest, spec.code, ignore=ignore_versions)
    for entry in [*manifest.files, manifest.index_file, manifest.quarantine_file]:
        _verify_file(version, entry, check_sha256=check_sha256)
    # a version of an older minor lacks the columns later minors added (and has every other declared one)
    rows = rows_schema_of(spec.rows, spec.code, manifest.schema_version)
    for entry, declared in [(f, rows) for f in manifest.files] + [(manifest.index_file, spec.index)]:
        uri = storage.join(version, entry.path)
        fs, inner = storage.resolve(uri)
        stored = pq.read_schema(inner, filesystem=fs)
        if not stored.equals(declared, check_metadata=False):
            raise ShardIntegrityError(
                f"{uri} does not have the declared {manifest.schema_name} schema of version "
                f"{manifest.schema_version}; it was not written by this pipeline"
            )
    return ShardVersion(version, manifest)


def newest_local_version(out: str | Path, dataset: str = "*") -> Path:
    """The most recently published shard version under a local ``out`` folder (``out/<dataset>/<version>``; a
    version is published when its manifest is written, last): what a notebook opens when no version is named.
    Versions are named by content hashes, not dates, so the newest is the newest manifest, not the last name."""
    manifests = [p for p in Path(out).glob(f"{dataset}/*/{MANIFEST_NAME}") if p.is_file()]
    if not manifests:
        raise FileNotFoundError(f"no published shard version under {Path(out) / dataset}: make one with `make demo` "
                                "(or pipelines/parse_replays.py), or name one in REPLAYFORGE_VERSION")
    return max(manifests, key=lambda p: (p.stat().st_mtime_ns, str(p))).parent

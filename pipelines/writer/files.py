"""How every file of a version is encoded and stored: Parquet bytes written the same way for the same rows,
content-named files (``<stem>-<sha256[:12]>.parquet``, never overwritten with other bytes), and a shard rewritten
without some of its rows."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shards_schema import storage
from shards_schema.manifest import FileEntry

ROW_GROUP_ROWS = 16_384
"""Small enough that a reader fetches a trajectory or a window of frames by reading one or two row groups."""


PARQUET_OPTIONS = {"compression": "zstd", "compression_level": 3, "use_dictionary": True, "write_statistics": True}


def encode_parquet(table: pa.Table, options: dict | None, row_group_rows: int = ROW_GROUP_ROWS) -> bytes:
    """A table's Parquet bytes, as every file of a version is written (deterministic for the same rows)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=row_group_rows, **(options or PARQUET_OPTIONS))
    return sink.getvalue().to_pybytes()


def put_named(folder: str, stem: str, data: bytes, rows: int) -> FileEntry:
    """Write ``data`` as ``<stem>-<sha256[:12]>.parquet`` in ``folder`` unless a file of that name is there (it holds
    these bytes); its manifest entry."""
    sha = hashlib.sha256(data).hexdigest()
    name = f"{stem}-{sha[:12]}.parquet"
    storage.put_file(storage.join(folder, name), data)
    return FileEntry(path=name, rows=rows, bytes=len(data), sha256=sha)


def schema_name(schema: pa.Schema) -> str:
    return (schema.metadata or {}).get(b"replayforge.schema", b"declared").decode()


def drop_rows(version_uri: str, entry: FileEntry, ranges: list[tuple[int, int]], schema: pa.Schema,
              parquet_options: dict | None) -> FileEntry | None:
    """The shard ``entry`` without the rows ``(start, count)`` in ``ranges``, written under its new content name
    (None when no row is left). Duplicates found across groups are rare: this is their only cost."""
    uri = storage.join(version_uri, entry.path)
    fs, path = storage.resolve(uri)
    table = pq.read_table(path, filesystem=fs)
    keep = np.ones(table.num_rows, bool)
    for start, count in ranges:
        keep[start:start + count] = False
    if not keep.any():
        return None
    table = table.filter(pa.array(keep)).cast(schema)
    stem = entry.path.rsplit("-", 1)[0]
    return put_named(version_uri, stem, encode_parquet(table, parquet_options), table.num_rows)

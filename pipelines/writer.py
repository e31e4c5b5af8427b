"""The shard writer: the only code that writes into a shard version, on any store (local folder, s3://, gs://).

A version is ``OUT/<dataset>/<version>/``: ``part-*.parquet`` shards, ``index-*.parquet``, ``quarantine-*.parquet``
and ``manifest.json``. Its name is known before any input is read (``VersionSpec``: the planned inputs' names and
sizes, the code versions, the source, its revision and the output-shaping config), so the workers that parse inputs
write their shards straight into it (``GroupWriter``), one group of consecutive inputs at a time, and hand the driver
small per-input records (``GroupResult``). The driver (``VersionPublisher``) takes the groups in input order, drops
inputs whose dedupe key an earlier group wrote (rewriting the affected shards, through the same encoder), writes
index and quarantine, and publishes.

Object stores have no rename, so publishing is: every file named by its contents' hash and written whole (never
overwritten with other bytes), then the dataset card (``README.md``, the name the hub reads, ``shards_schema/card.py``:
written only while no manifest is there, and named in the manifest), then the manifest, last, with a conditional
create (``storage.create_exclusive``). A folder without a manifest is not a version: readers refuse it. A killed run
leaves files no manifest names; the next run of the same version writes the same names (same bytes), and deletes
what its published manifest does not name. Two runs of one version with different contents (code changed without a
version bump, an input changed in place) cannot mix: their files have other names, only one manifest is created,
the other run gets ``VersionConflictError`` and removes its own files.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from array import array
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.stages import (
    LOST_ERROR_TYPE,
    UNREADABLE,
    InputRecord,
    ParsedBatch,
    record_table,
    records_of,
    struct_table,
    task_of,
)
from shards_schema import storage
from shards_schema.card import UNKNOWN_LICENSE, SourceLicense, card_file, dataset_card
from shards_schema.manifest import CARD_NAME, MANIFEST_FORMAT, MANIFEST_NAME, Counts, FileEntry, Manifest
from shards_schema.quarantine import QUARANTINE_SCHEMA
from shards_schema.reader import sha256_file
from shards_schema.versions import CodeVersions

BYTES_PER_MIB = 1 << 20
"""``--shard-size-mb`` (``shard_size_mb``) and the sizes the jobs print are MiB: 2**20 bytes, not 10**6."""

SHARD_LAYOUT = 2
"""How the parse job cuts a version's inputs into read tasks, groups and shards; it enters the version's name through
the job's output config (``shard_layout``), so a change of the cut, which changes a version's files but not its rows
(no schema, parser or observation bump: ``shards_schema/versions.py``), gets a new name instead of conflicting with
a version the old cut published. 2: read tasks cut where their items say (``pipelines.stages.pack_tasks``), named by
their items (``task_key``); versions carry their tasks file (``Manifest.tasks``). Versions without the key were cut
by a running total (layout 1)."""

REPO_ROOT = Path(__file__).resolve().parents[1]
_ROW_GROUP_ROWS = 16_384
"""Small enough that a reader fetches a trajectory or a window of frames by reading one or two row groups."""
_PARQUET_OPTIONS = {"compression": "zstd", "compression_level": 3, "use_dictionary": True, "write_statistics": True}

def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")


def check_name(name: str, what: str) -> str:
    """``name`` when it is one plain path component, else a ValueError that says which option was wrong.

    User-given names become folder or file names (``OUT/<dataset>/``, a hub archive ``<format>.tar.gz`` in
    --input): ``../x`` or ``a/b`` would write outside the folder the user gave. Letters, digits, ``_ - .`` only,
    not starting with a dot (hidden, and the writer's own ``.tmp-*`` folders start with one): such names are
    the same on every filesystem and need no escaping in a URI or an object-store key."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"{what} must be a single folder or file name (letters, digits, '_', '-', '.', not "
                         f"starting with '.', at most 128 characters), got {name!r}")
    return name


class WrittenKeys:
    """The dedupe keys written so far, each with the input that wrote it, in bounded memory.

    An open-addressing table (linear probing, at most 2/3 full) of 8-byte blake2b digests of the keys in one
    numpy array, beside the ordinal of the winning input in another; the winners' input ids are one UTF-8 blob
    with offsets. Measured with tracemalloc over 1M keys (ids of 38 bytes, table 48% full): 36.6 bytes per key
    beside the id's UTF-8 bytes, 75 in all (108 at the peak of a growth), 3.5 µs per claim. A Python set of the
    8-byte digests took the same 75 bytes per key and could not name the winner; a dict from digest to the id
    string takes 76 bytes per key plus a 49-byte str header per id. Two keys sharing a digest (probability
    about n²/2⁶⁵: 4e-7 at 4M keys) count as one.
    """

    def __init__(self, capacity: int = 1024):
        if capacity & (capacity - 1):
            raise ValueError("capacity must be a power of two")
        self._digests = np.zeros(capacity, np.uint64)  # 0 marks a free slot (a digest of 0 is stored as 1)
        self._winners = np.zeros(capacity, np.uint32)
        self._ids = bytearray()
        self._offsets = array("Q", [0])

    def __len__(self) -> int:
        return len(self._offsets) - 1

    @staticmethod
    def _digest(key: str) -> int:
        return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little") or 1

    def claim(self, key: str, input_id: str) -> str | None:
        """None when ``key`` is new (``input_id`` now holds it), else the input id that holds it already."""
        digest = self._digest(key)
        mask = len(self._digests) - 1
        slot = digest & mask
        while (stored := int(self._digests[slot])) != 0:
            if stored == digest:
                winner = int(self._winners[slot])
                return self._ids[self._offsets[winner]:self._offsets[winner + 1]].decode()
            slot = (slot + 1) & mask
        self._digests[slot] = digest
        self._winners[slot] = len(self)
        self._ids += input_id.encode()
        self._offsets.append(len(self._ids))
        if 3 * len(self) > 2 * len(self._digests):
            self._grow()
        return None

    def _grow(self) -> None:
        """Double the table and re-insert every digest: all at once per probe step instead of one at a time."""
        used = self._digests != 0
        digests, winners = self._digests[used], self._winners[used]
        self._digests = np.zeros(2 * len(self._digests), np.uint64)
        self._winners = np.zeros(len(self._digests), np.uint32)
        mask = np.uint64(len(self._digests) - 1)
        slots = digests & mask
        while len(digests):
            # Of the digests aiming at a free slot, the first of each slot takes it; the rest probe onwards.
            free = self._digests[slots] == 0
            _, first = np.unique(slots[free], return_index=True)
            take = np.flatnonzero(free)[first]
            self._digests[slots[take]] = digests[take]
            self._winners[slots[take]] = winners[take]
            rest = np.ones(len(digests), bool)
            rest[take] = False
            digests, winners, slots = digests[rest], winners[rest], (slots[rest] + np.uint64(1)) & mask


# ---------------------------------------------------------------------------- what a version is
@dataclass(frozen=True, kw_only=True)
class VersionSpec:
    """Everything a version's name comes from, known before any input is read; picklable, handed to workers.

    Attributes:
        out_root: the job's ``--out`` (a local folder or a URI).
        dataset: dataset folder name.
        code: the code versions of its rows.
        source: source name.
        source_revision: what the inputs are pinned to (a hub commit, a generator version), or None.
        config: the config fields that shape the output.
        planned_inputs: the planned inputs' identity (``pipelines.stages.Plan.identity``; for in-process writers,
            whatever names their inputs: the version they were made from, a rollout's checkpoint and seeds).
        lost_inputs: ids of the planned inputs the store did not deliver, accepted by ``--max-unreadable``: a
            version that lacks inputs is named for what it holds, never with the complete version's name.
    """

    out_root: str
    dataset: str
    code: CodeVersions
    source: str
    source_revision: str | None
    config: dict
    planned_inputs: str
    lost_inputs: tuple[str, ...] = ()

    def __post_init__(self):
        check_name(self.dataset, "the dataset name (--dataset)")
        object.__setattr__(self, "out_root", storage.normalize(str(self.out_root)))

    @cached_property
    def version(self) -> str:
        c = self.code
        fields = {"inputs": self.planned_inputs, "schema": c.schema, "parser": c.parser,
                  "observation": c.observation, "source": self.source, "revision": self.source_revision,
                  "config": self.config}
        if self.lost_inputs:  # only then: a complete version's name stays what it always was
            fields["lost_inputs"] = sorted(self.lost_inputs)
        identity = json.dumps(fields, sort_keys=True)
        return f"v{c.schema}-p{c.parser}-o{c.observation}-{hashlib.sha256(identity.encode()).hexdigest()[:16]}"

    @property
    def uri(self) -> str:
        """The version folder: ``OUT/<dataset>/<version>``."""
        return storage.join(self.out_root, self.dataset, self.version)


def encode_parquet(table: pa.Table, options: dict | None, row_group_rows: int = _ROW_GROUP_ROWS) -> bytes:
    """A table's Parquet bytes, as every file of a version is written (deterministic for the same rows)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=row_group_rows, **(options or _PARQUET_OPTIONS))
    return sink.getvalue().to_pybytes()


def put_named(folder: str, stem: str, data: bytes, rows: int) -> FileEntry:
    """Write ``data`` as ``<stem>-<sha256[:12]>.parquet`` in ``folder`` unless a file of that name is there (it holds
    these bytes); its manifest entry."""
    sha = hashlib.sha256(data).hexdigest()
    name = f"{stem}-{sha[:12]}.parquet"
    storage.put_file(storage.join(folder, name), data)
    return FileEntry(path=name, rows=rows, bytes=len(data), sha256=sha)


# ---------------------------------------------------------------------------- worker side
@dataclass(frozen=True, kw_only=True)
class Placement:
    """Where a written input's rows went.

    Attributes:
        file: the shard file name.
        row_start: the input's first row in that file.
        unknown_words: observation words outside the vocabulary in its rows.
    """

    file: str
    row_start: int
    unknown_words: int = 0


_PLACEMENT = pa.struct([("file", pa.string()), ("row_start", pa.int64()), ("unknown_words", pa.int64())])
_FILE = pa.struct([("path", pa.string()), ("rows", pa.int64()), ("bytes", pa.int64()), ("sha256", pa.string())])
INDEX_COLUMN = "index_rows"
"""The column of a group's row that holds its records' index rows (``GroupResult.to_arrow``)."""


def _ipc_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as stream:
        stream.write_table(table)
    return sink.getvalue().to_pybytes()


class GroupResult:
    """What a worker hands the driver for one group of consecutive inputs: a record per input (index rows filled
    in, relative to the input), where each written one's rows are, and the shard files it wrote. Small: no rows.

    Two forms of one group. A worker builds it from Python records (``GroupWriter.close``) and sends its Arrow row
    (``to_arrow``); the driver takes that row as the worker made it (``from_arrow``, the Ray Data block's rows) and
    the publisher works on its columns (``record_columns``, ``index_lists``): no input becomes a Python object
    there. ``records`` and ``placements``, the Python form, are made from the columns only when asked for (tests,
    the reference publisher path ``group_tables_reference``).

    The row: ``group``; ``records``, a list of structs (the ``record_table`` columns, ``index_json`` left null, and
    ``placement``); ``files``, a list of ``FileEntry`` structs; and ``index_rows``: the records' index rows as one
    Arrow IPC stream of a one-column table, a list of index-row structs per record (null where it has none), their
    types inferred from the worker's values, since the row's own schema is the same for every parser (Ray Data
    blocks and the tasks file hold groups of any schema); the driver casts them to the index schema. Index rows as
    JSON text in ``index_json``, with every record made a Python object on the driver (``to_pylist``,
    ``json.loads``, a dict per index row, ``from_pylist``), cost ~46 µs per Melee input at 128 MiB shards
    (docs/results.md); tasks files of that form are still read (``from_arrow``).
    """

    def __init__(self, group: str, records: list[InputRecord], placements: list[Placement | None],
                 files: list[FileEntry]):
        self.group, self.files = group, list(files)
        self._records: list[InputRecord] | None = list(records)
        self._placements: list[Placement | None] | None = list(placements)
        self._row: pa.Table | None = None
        self._columns: pa.Table | None = None

    @classmethod
    def _of_row(cls, row: pa.Table, group: str, files: list[FileEntry]) -> GroupResult:
        result = cls.__new__(cls)
        result.group, result.files = group, files
        result._records = result._placements = result._columns = None
        result._row = row
        return result

    def __eq__(self, other) -> bool:
        if not isinstance(other, GroupResult):
            return NotImplemented
        return ((self.group, self.records, self.placements, self.files)
                == (other.group, other.records, other.placements, other.files))

    def __repr__(self) -> str:
        return f"GroupResult({self.group!r}, {self.num_inputs} inputs, {len(self.files)} files)"

    # ------------------------------------------------------------------ the columns (the driver's form)
    def to_arrow(self) -> pa.Table:
        """One row (what a Ray Data batch function returns)."""
        if self._row is None:
            records = record_table([replace(r, index_rows=None) for r in self._records])
            placements = pa.array([p.__dict__ if p else None for p in self._placements], _PLACEMENT)
            records = records.append_column("placement", placements)
            nested = pa.ListArray.from_arrays(pa.array([0, records.num_rows], pa.int32()),
                                              records.to_struct_array().combine_chunks())
            files = pa.array([[f.__dict__ for f in self.files]], pa.list_(_FILE))
            index = pa.table({INDEX_COLUMN: pa.array([r.index_rows for r in self._records])})
            self._row = pa.table({"group": [self.group], "records": nested, "files": files,
                                  INDEX_COLUMN: pa.array([_ipc_bytes(index)], pa.binary())})
        return self._row

    def record_columns(self) -> pa.Table:
        """The records as columns (``record_table``'s and ``placement``), one row per input."""
        if self._columns is None:
            self._columns = struct_table(self.to_arrow().column("records").combine_chunks()[0].values)
        return self._columns

    def index_lists(self) -> pa.Array:
        """The records' index rows: a list of structs per record (null where it has none; a ``NullArray`` when no
        record has any)."""
        data = self.to_arrow().column(INDEX_COLUMN).combine_chunks()[0].as_buffer()
        return pa.ipc.open_stream(data).read_all().column(0).combine_chunks()

    @property
    def num_inputs(self) -> int:
        return len(self._records) if self._records is not None else len(self.to_arrow().column("records")[0])

    @property
    def written_rows(self) -> int:
        """Rows of its written inputs."""
        if self._records is not None:
            return sum(r.num_rows for r in self._records if r.status == "written")
        table = self.record_columns()
        return pc.sum(table.column("num_rows").filter(pc.equal(table.column("status"), "written"))).as_py() or 0

    # ------------------------------------------------------------------ the Python form
    @property
    def records(self) -> list[InputRecord]:
        if self._records is None:
            index = self.index_lists()
            index = index.to_pylist() if pa.types.is_list(index.type) else [None] * len(index)
            self._records = [replace(r, index_rows=rows) for r, rows in
                             zip(records_of(self.record_columns()), index, strict=True)]
        return self._records

    @property
    def placements(self) -> list[Placement | None]:
        if self._placements is None:
            self._placements = [Placement(**p) if p else None
                                for p in self.record_columns().column("placement").to_pylist()]
        return self._placements

    @classmethod
    def from_arrow(cls, block: pa.Table) -> list[GroupResult]:
        """The groups of a block of ``to_arrow`` rows (Ray Data may join several), in order; each keeps its row of
        the block. A block of the format before ``index_rows`` (index rows as JSON in the records' ``index_json``:
        tasks files of earlier versions) is read through the Python form."""
        groups, files = block.column("group").to_pylist(), block.column("files").to_pylist()
        files = [[FileEntry(**f) for f in group_files] for group_files in files]
        if INDEX_COLUMN in block.column_names:
            return [cls._of_row(block.slice(i, 1), group, group_files)
                    for i, (group, group_files) in enumerate(zip(groups, files, strict=True))]
        out = []
        records = block.column("records")
        for i, (group, group_files) in enumerate(zip(groups, files, strict=True)):
            table = struct_table(records[i].values)
            placements = [Placement(**p) if p else None for p in table.column("placement").to_pylist()]
            out.append(cls(group, records_of(table), placements, group_files))
        return out


_GROUP_SCHEMA = GroupResult("", [], [], []).to_arrow().schema
TASKS_SCHEMA = pa.schema([("task", pa.string()), ("lost", pa.int64()), *_GROUP_SCHEMA])
"""A version's tasks file (``tasks-<sha256[:12]>.parquet``, named in its manifest's ``extra.tasks``): one row per
group, in input order, as its worker handed it to the driver, before the driver dropped duplicates of earlier groups:
its read task (``pipelines.stages.task_key``), how many of its inputs the store did not deliver (``lost``), and the
``GroupResult`` columns (a record and placement per input, the shard files it wrote, the index rows). A later job
over more inputs hands these rows to its publisher in place of parsing the task again (``EarlierVersion``). Files
without ``index_rows`` (index rows as JSON in ``records.index_json``) are read too."""


def _lost(records: pa.Table) -> pa.Array:
    """Which records are inputs the store did not deliver (``InputRecord.lost``), as a boolean column."""
    return pc.fill_null(pc.and_(pc.and_(pc.equal(records.column("status"), "quarantined"),
                                        pc.equal(records.column("reason"), UNREADABLE)),
                                pc.equal(records.column("error_type"), LOST_ERROR_TYPE)), False)


def task_rows(result: GroupResult) -> pa.Table:
    """A group's row of the tasks file: its row as the worker made it, after its task and lost inputs."""
    row = result.to_arrow()
    lost = pc.sum(_lost(result.record_columns())).as_py() or 0
    # a row read back from a tasks file names its lists' items as Parquet does ("element"): cast to the schema's
    columns = [row.column(f.name) if row.schema.field(f.name).type == f.type else row.column(f.name).cast(f.type)
               for f in _GROUP_SCHEMA]
    return pa.Table.from_arrays([pa.array([task_of(result.group)]), pa.array([lost], pa.int64()), *columns],
                                schema=TASKS_SCHEMA)


UNFIT_ROWS = (ValueError, TypeError, pa.ArrowNotImplementedError, pa.ArrowCapacityError, pa.ArrowIndexError,
              pa.ArrowKeyError)
"""What Arrow raises for rows it cannot cast to a schema or encode as Parquet (``ArrowInvalid`` is a ValueError,
``ArrowTypeError`` a TypeError): a fact about one input's rows, charged to that input. Never a store's failure to
take a shard (``storage.StorageError``, OSError): ``put_named`` runs outside these handlers, and such an outage
stops the job instead of quarantining data. Nor ``ArrowMemoryError`` or ``ArrowCancelled``: the worker's state, not
the rows'."""


class GroupWriter:
    """Writes the rows of one group of consecutive inputs into shards of about ``shard_size_bytes``, straight into
    the version folder, and keeps each input's record. Duplicates inside the group are dropped here (the first input
    wins, as everywhere); the driver drops those an earlier group wrote.

    An input whose rows do not cast to the schema is quarantined (stage ``validate``, reason ``schema_violation``,
    as when the parse stage cannot build its table); when a shard's rows cannot be encoded, each of its inputs'
    rows is encoded alone to find the ones at fault, which are quarantined (stage ``encode``, reason
    ``unencodable_rows``), and the others are written. Only the failure path pays for that search."""

    def __init__(self, version_uri: str, group: str, schema: pa.Schema, *, shard_size_bytes: int,
                 parquet_options: dict | None = None, index_rows: Callable[[pa.Table], list[dict]] | None = None,
                 unknown_words: Callable[[pa.Table], int] | None = None):
        """``index_rows``: the index rows of a written input's rows when its record carries none (a parser's
        ``index_rows``); ``unknown_words``: observation words outside the vocabulary in an input's rows."""
        self.version_uri, self.group, self.schema = version_uri, group, schema
        self.shard_size_bytes, self.parquet_options = shard_size_bytes, parquet_options
        self._index_rows, self._unknown_words = index_rows, unknown_words
        self._records: list[InputRecord] = []
        self._placements: list[Placement | None] = []
        self._files: list[FileEntry] = []
        self._pending: list[pa.Table] = []
        self._pending_at: list[int] = []  # the position in ``_records`` of each pending table's input
        self._pending_bytes = 0
        self._pending_rows = 0
        self._bytes_per_arrow_byte = 0.25
        self._seen: dict[str, str] = {}
        self._duplicates_of: dict[str, list[int]] = {}  # input id → positions of inputs filtered as its duplicates

    def add_batch(self, batch: ParsedBatch) -> None:
        offset = 0
        for record in batch.records:
            rows = None
            if record.status == "written":
                rows = batch.rows.slice(offset, record.num_rows)
                offset += record.num_rows
            self.add_input(record, rows)

    def add_input(self, record: InputRecord, rows: pa.Table | None = None) -> None:
        """One input's outcome, and its rows when it was written (``record.num_rows`` of them)."""
        if record.status == "written":
            if rows is None or rows.num_rows != record.num_rows:
                raise AssertionError(f"{record.input_id}: {record.num_rows} rows announced, "
                                     f"{0 if rows is None else rows.num_rows} received")
            if not rows.schema.equals(self.schema):
                try:
                    rows = rows.cast(self.schema)
                except UNFIT_ROWS as err:
                    record = record.dropped("quarantined", stage="validate", error_type=type(err).__name__,
                                            reason="schema_violation",
                                            message=f"its rows do not cast to the {_schema_name(self.schema)} "
                                                    f"schema: {err}"[:2000])
        if record.status == "written":  # its key is claimed only once its rows are known to fit
            key = record.dedupe_key
            winner = self._seen.setdefault(key, record.input_id) if key is not None else record.input_id
            if winner != record.input_id:
                record = record.dropped("filtered", stage="filter", error_type="filter", reason="duplicate",
                                        message=f"{key} was already written by input {winner}")
                self._duplicates_of.setdefault(winner, []).append(len(self._records))
        if record.status != "written":
            self._records.append(record)
            self._placements.append(None)
            return
        index_rows = record.index_rows
        if index_rows is None:
            if self._index_rows is None:
                raise ValueError(f"{record.input_id}: written without index rows, and this writer has no index "
                                 "builder (give GroupWriter the parser's index_rows)")
            index_rows = self._index_rows(rows)
        unknown = self._unknown_words(rows) if self._unknown_words is not None else 0
        self._pending_at.append(len(self._records))
        self._records.append(replace(record, index_rows=index_rows))
        self._placements.append(Placement(file="", row_start=self._pending_rows, unknown_words=unknown))
        self._pending.append(rows)
        self._pending_rows += rows.num_rows
        self._pending_bytes += rows.nbytes
        if self._pending_bytes * self._bytes_per_arrow_byte >= self.shard_size_bytes:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        try:
            table = pa.concat_tables(self._pending)
            data = encode_parquet(table, self.parquet_options)
        except UNFIT_ROWS:
            if not self._quarantine_unencodable():
                raise  # each input's rows encode alone: no input to charge, a fault of the writer
            if not self._pending:
                return
            table = pa.concat_tables(self._pending)
            data = encode_parquet(table, self.parquet_options)
        # Learn the compression ratio from this group's shards, so later ones land near the target size.
        self._bytes_per_arrow_byte = max(len(data) / max(self._pending_bytes, 1), 1e-3)
        entry = put_named(self.version_uri, f"part-{self.group}-{len(self._files):02d}", data, table.num_rows)
        self._files.append(entry)
        for at in self._pending_at:
            self._placements[at] = replace(self._placements[at], file=entry.path)
        self._pending, self._pending_at, self._pending_bytes, self._pending_rows = [], [], 0, 0

    def _quarantine_unencodable(self) -> bool:
        """Encode each pending input's rows alone; quarantine those that fail and take them out of the pending
        shard (the others' ``row_start`` moved up over them). Whether any input was at fault."""
        # A failure that needs no rows (Parquet options, the schema) is the writer's: it propagates from here
        # instead of quarantining every input.
        encode_parquet(self.schema.empty_table(), self.parquet_options)
        kept, kept_at, start, found = [], [], 0, False
        for at, rows in zip(self._pending_at, self._pending, strict=True):
            try:
                encode_parquet(rows, self.parquet_options)
            except UNFIT_ROWS as err:
                found = True
                record = self._records[at]
                if record.dedupe_key is not None and self._seen.get(record.dedupe_key) == record.input_id:
                    del self._seen[record.dedupe_key]  # a later input of the group may still write this key
                # Inputs already filtered as its duplicates stay filtered (their rows were not kept), their
                # message saying that the input they lost to was quarantined.
                for dup in self._duplicates_of.get(record.input_id, ()):
                    self._records[dup] = replace(
                        self._records[dup], message=f"{record.dedupe_key} was taken by input {record.input_id}, "
                                                    f"then quarantined: its rows cannot be encoded")
                self._records[at] = record.dropped(
                    "quarantined", stage="encode", error_type=type(err).__name__, reason="unencodable_rows",
                    message=f"its rows cannot be encoded as Parquet: {err}"[:2000])
                self._placements[at] = None
                continue
            self._placements[at] = replace(self._placements[at], row_start=start)
            start += rows.num_rows
            kept.append(rows)
            kept_at.append(at)
        self._pending, self._pending_at = kept, kept_at
        self._pending_rows, self._pending_bytes = start, sum(rows.nbytes for rows in kept)
        return found

    def close(self) -> GroupResult:
        self._flush()
        return GroupResult(self.group, self._records, self._placements, self._files)


def _schema_name(schema: pa.Schema) -> str:
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


# ---------------------------------------------------------------------------- driver side
class VersionConflictError(RuntimeError):
    """A version with this name is published with other contents."""


class LostInputsError(RuntimeError):
    """More inputs than ``--max-unreadable`` allows were not delivered by the store: nothing is published."""


@dataclass
class PublishResult:
    """Where the version went, whether this run wrote it or found it already published, and the leftovers of
    other runs it removed from the version folder (files no manifest names)."""

    uri: str
    manifest: Manifest
    reused: bool
    removed: list[str] = field(default_factory=list)

    @property
    def path(self) -> Path | str:
        """The version folder: a ``Path`` when it is local, else its URI."""
        return Path(self.uri) if storage.is_local(self.uri) else self.uri


@dataclass
class GroupTables:
    """What one group adds to a version once duplicates of earlier groups are dropped: its index and quarantine
    rows, the lines its inputs add to the inputs digest (``<input id>\\t<sha256 or ->\\n`` each), and its counts."""

    index: pa.Table
    quarantine: pa.Table
    digest_lines: bytes
    written: int
    rows: int
    trajectories: int
    unknown_words: int
    filtered: Counter
    quarantined: Counter
    relabelled: Counter


@dataclass(frozen=True)
class Moved:
    """The shards a group's duplicates of earlier groups were dropped from: ``drops`` (file → the dropped rows'
    ``(start, count)``, in input order) and each such file's new entry (None: no row left)."""

    drops: dict[str, list[tuple[int, int]]]
    renamed: dict[str, FileEntry | None]

    def place(self, file: str, row_start: int) -> tuple[str, int]:
        """Where a kept input's rows are once the dropped rows before them left their file."""
        if file not in self.drops:
            return file, row_start
        return self.renamed[file].path, row_start - sum(n for start, n in self.drops[file] if start < row_start)


def _duplicate(message: str) -> dict:
    return {"status": "filtered", "stage": "filter", "error_type": "filter", "reason": "duplicate", "message": message}


def _counter(values: pa.Array) -> Counter:
    counts = pc.value_counts(values)
    return Counter(dict(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True)))


def _cast(values: pa.Array, to: pa.DataType) -> pa.Array:
    return values if values.type == to else values.cast(to)


def _string_bytes(strings: pa.Array) -> bytes:
    """The UTF-8 bytes of a string array's values, one after another."""
    offsets = np.frombuffer(strings.buffers()[1], np.int32)[strings.offset:strings.offset + len(strings) + 1]
    return memoryview(strings.buffers()[2])[offsets[0]:offsets[-1]].tobytes() if len(strings) else b""


def group_tables(records: pa.Table, index_lists: pa.Array, duplicates: dict[int, str], moved: Moved,
                 index_schema: pa.Schema) -> GroupTables:
    """A group's ``GroupTables`` from its columns (``GroupResult.record_columns`` and ``index_lists``), with Arrow
    kernels: ``duplicates`` (record position → message) are filtered as duplicates, their rows left ``moved``.
    ``group_tables_reference`` is the same record by record in Python; a test compares them."""
    n = records.num_rows
    columns = {name: records.column(name).combine_chunks() for name in records.column_names}
    if duplicates:  # rare: the few records turned into duplicates' drops, column by column
        mask = np.zeros(n, bool)
        mask[list(duplicates)] = True
        for name, value in _duplicate("").items():
            values = [duplicates[at] for at in sorted(duplicates)] if name == "message" else [value] * len(duplicates)
            columns[name] = pc.replace_with_mask(columns[name], pa.array(mask), pa.array(values, pa.string()))
    status, placement = columns["status"], columns["placement"]
    written = pc.fill_null(pc.equal(status, "written"), False)
    filtered = pc.fill_null(pc.equal(status, "filtered"), False)
    dropped = pc.invert(written)
    quarantined = pc.and_(dropped, pc.invert(filtered))
    sha = columns["input_sha256"]
    sha = pc.fill_null(pc.if_else(pc.equal(sha, ""), pa.scalar("-"), sha), "-")  # `sha or '-'`
    lines = pc.binary_join_element_wise(pc.binary_join_element_wise(columns["input_id"], sha, "\t"), "", "\n")
    quarantine = pa.Table.from_arrays(
        [columns["input_id"].filter(dropped), columns["source"].filter(dropped), status.filter(dropped),
         *(columns[name].filter(dropped) for name in ("stage", "error_type", "reason", "message", "input_sha256"))],
        schema=QUARANTINE_SCHEMA)
    relabelled = columns["relabelled"]
    relabelled = relabelled.filter(pc.and_(written, pc.fill_null(pc.not_equal(relabelled, ""), False)))

    if pa.types.is_list(index_lists.type):
        parents = pc.list_parent_indices(index_lists)
        keep = pc.take(written, parents)
        parents = parents.filter(keep)
        values = index_lists.flatten().filter(keep)
    else:  # no record has index rows
        parents, values = pa.array([], pa.int64()), None
    index_columns = {}
    if len(parents):
        index_columns = dict(zip([f.name for f in values.type], values.flatten(), strict=True))
        if moved.drops:  # rare: the kept inputs' places in the rewritten files, in Python
            places = [moved.place(f, s) if kept else (None, None) for f, s, kept in zip(
                placement.field("file").to_pylist(), placement.field("row_start").to_pylist(), written.to_pylist(),
                strict=True)]
            files = pa.array([f for f, _ in places], pa.string())
            starts = pa.array([s for _, s in places], pa.int64())
        else:
            files, starts = placement.field("file"), placement.field("row_start")
        index_columns["input_id"] = columns["input_id"].take(parents)
        index_columns["file"] = files.take(parents)
        index_columns["row_start"] = pc.add(starts.take(parents), index_columns["row_start"].cast(pa.int64()))
    index = pa.Table.from_arrays(
        [_cast(index_columns[f.name], f.type) if f.name in index_columns else pa.nulls(len(parents), f.type)
         for f in index_schema], schema=index_schema)
    return GroupTables(
        index=index, quarantine=quarantine, digest_lines=_string_bytes(lines), written=pc.sum(written).as_py() or 0,
        rows=pc.sum(columns["num_rows"].filter(written)).as_py() or 0, trajectories=len(parents),
        unknown_words=pc.sum(placement.field("unknown_words").filter(written)).as_py() or 0,
        filtered=_counter(columns["reason"].filter(filtered)),
        quarantined=_counter(columns["reason"].filter(quarantined)), relabelled=_counter(relabelled))


def group_tables_reference(records: pa.Table, index_lists: pa.Array, duplicates: dict[int, str], moved: Moved,
                           index_schema: pa.Schema) -> GroupTables:
    """``group_tables`` record by record in Python (the readable reference)."""
    index_rows = index_lists.to_pylist() if pa.types.is_list(index_lists.type) else [None] * records.num_rows
    placements = records.column("placement").to_pylist()
    index, quarantine, lines = [], [], []
    out = GroupTables(index=None, quarantine=None, digest_lines=b"", written=0, rows=0, trajectories=0,
                      unknown_words=0, filtered=Counter(), quarantined=Counter(), relabelled=Counter())
    for at, (record, rows, placement) in enumerate(zip(records_of(records), index_rows, placements, strict=True)):
        if at in duplicates:
            record = record.dropped(**_duplicate(duplicates[at]))
        lines.append(f"{record.input_id}\t{record.input_sha256 or '-'}\n")
        if record.status != "written":
            (out.filtered if record.status == "filtered" else out.quarantined)[record.reason] += 1
            quarantine.append({
                "input_id": record.input_id, "source": record.source, "kind": record.status, "stage": record.stage,
                "error_type": record.error_type, "reason": record.reason, "message": record.message,
                "input_sha256": record.input_sha256})
            continue
        file, row_start = moved.place(placement["file"], placement["row_start"])
        for row in rows or ():
            index.append({**row, "input_id": record.input_id, "file": file, "row_start": row_start + row["row_start"]})
        out.written += 1
        if record.relabelled:
            out.relabelled[record.relabelled] += 1
        out.trajectories += len(rows or ())
        out.rows += record.num_rows
        out.unknown_words += placement["unknown_words"]
    out.index = pa.Table.from_pylist(index, schema=index_schema)
    out.quarantine = pa.Table.from_pylist(quarantine, schema=QUARANTINE_SCHEMA)
    out.digest_lines = "".join(lines).encode()
    return out


class VersionPublisher:
    """The driver's part: takes each group's ``GroupResult`` in input order, keeps the counts, the index and the
    quarantine table (streamed to a local temporary folder: memory stays bounded however many inputs), and
    publishes the version.

    ``rewrite`` runs ``drop_rows`` (the job hands it to a Ray task, so the driver never encodes shards).
    ``license``: the terms of the source's inputs, stated on the version's dataset card (``Source.license``).
    ``keep_tasks``: also write the tasks file (``TASKS_SCHEMA``) from the groups as they come, before duplicates of
    earlier groups are dropped (the parse job's versions: a later job over more inputs reuses their shards).

    Inputs the store did not deliver (``InputRecord.lost``) are counted against ``max_unreadable``: one more stops
    the job at once (``LostInputsError``). Accepted ones make the version's name include them
    (``VersionSpec.lost_inputs``), and its files are copied there from the planned version's folder at publish."""

    def __init__(self, spec: VersionSpec, *, schema: pa.Schema, index_schema: pa.Schema,
                 parquet_options: dict | None = None, max_unreadable: int = 0,
                 rewrite: Callable[..., FileEntry | None] | None = None, license: SourceLicense = UNKNOWN_LICENSE,
                 keep_tasks: bool = False):
        self.spec, self.schema, self.index_schema, self.parquet_options = spec, schema, index_schema, parquet_options
        self.license, self.keep_tasks = license, keep_tasks
        self.max_unreadable = max_unreadable
        self.lost: list[InputRecord] = []
        self._rewrite = rewrite or drop_rows
        self._local = Path(tempfile.mkdtemp(prefix="replayforge-publish-"))
        self._writers: dict[str, pq.ParquetWriter] = {}
        self._files: list[FileEntry] = []
        self._digest = hashlib.sha256()
        self._seen = WrittenKeys()
        self.inputs = self.written = self.trajectories = self.rows = self.unknown_words = 0
        self.filtered: Counter = Counter()
        self.quarantined: Counter = Counter()
        self.relabelled: Counter = Counter()

    def add_group(self, result: GroupResult) -> None:
        """One group, in input order: its columns as the worker made them (``GroupResult``), duplicates of earlier
        groups dropped (a Python ``claim`` per written input, the one part that must be Python), the index and
        quarantine rows and counts by Arrow kernels (``group_tables``)."""
        records = result.record_columns()
        if self.keep_tasks:
            self._append_table("tasks", task_rows(result))
        keyed = pc.and_(pc.fill_null(pc.equal(records.column("status"), "written"), False),
                        pc.is_valid(records.column("dedupe_key")))
        at = np.flatnonzero(keyed.to_numpy(zero_copy_only=False))
        duplicates: dict[int, str] = {}
        for i, key, input_id in zip(at.tolist(), records.column("dedupe_key").take(at).to_pylist(),
                                    records.column("input_id").take(at).to_pylist(), strict=True):
            winner = self._seen.claim(key, input_id)
            if winner is not None:
                duplicates[i] = f"{key} was already written by input {winner}"
        drops: dict[str, list[tuple[int, int]]] = {}
        for i in duplicates:
            placement, num_rows = records.column("placement")[i].as_py(), records.column("num_rows")[i].as_py()
            drops.setdefault(placement["file"], []).append((placement["row_start"], num_rows))
        renamed = {path: self._rewrite(self.spec.uri, entry, drops[path], self.schema, self.parquet_options)
                   for entry in result.files if (path := entry.path) in drops}
        self._files.extend(renamed.get(f.path, f) for f in result.files if renamed.get(f.path, f) is not None)
        lost = np.flatnonzero(_lost(records).to_numpy(zero_copy_only=False))
        if len(lost):
            self.lost.extend(records_of(records.take(lost)))
            if len(self.lost) > self.max_unreadable:
                del self.lost[self.max_unreadable + 1:]
                raise LostInputsError(
                    f"{len(self.lost)} input(s) could not be read from the store (--max-unreadable "
                    f"{self.max_unreadable}): " + "; ".join(r.message or r.input_id for r in self.lost[:5]))
        tables = group_tables(records, result.index_lists(), duplicates, Moved(drops, renamed), self.index_schema)
        self.inputs += records.num_rows
        self._digest.update(tables.digest_lines)
        self.written += tables.written
        self.rows += tables.rows
        self.trajectories += tables.trajectories
        self.unknown_words += tables.unknown_words
        self.filtered.update(tables.filtered)
        self.quarantined.update(tables.quarantined)
        self.relabelled.update(tables.relabelled)
        self._append_table("index", tables.index)
        self._append_table("quarantine", tables.quarantine)

    def _append(self, name: str, rows: list[dict], schema: pa.Schema) -> None:
        self._append_table(name, pa.Table.from_pylist(rows, schema=schema))

    def _append_table(self, name: str, table: pa.Table) -> None:
        writer = self._writers.get(name)
        if writer is None:
            writer = self._writers[name] = pq.ParquetWriter(self._local / name, table.schema, **_PARQUET_OPTIONS)
        if table.num_rows:
            writer.write_table(table)

    def counts(self) -> Counts:
        return Counts(inputs=self.inputs, written=self.written, filtered=dict(sorted(self.filtered.items())),
                      quarantined=dict(sorted(self.quarantined.items())), trajectories=self.trajectories,
                      rows=self.rows, unknown_words=self.unknown_words,
                      relabelled=dict(sorted(self.relabelled.items())))

    def _seal(self, folder: str, name: str, schema: pa.Schema) -> FileEntry:
        self._append(name, [], schema)
        self._writers.pop(name).close()
        path = self._local / name
        return put_named(folder, name, path.read_bytes(), pq.ParquetFile(path).metadata.num_rows)

    def published_spec(self) -> VersionSpec:
        """The version this publisher's inputs make: the planned one, or, with accepted losses, the one named for
        the inputs it lacks."""
        if not self.lost:
            return self.spec
        return replace(self.spec, lost_inputs=tuple(sorted(r.input_id for r in self.lost)))

    def card(self, manifest: Manifest) -> bytes:
        """The dataset card of the version ``manifest`` describes (its ``git_commit`` and ``extra`` aside)."""
        return dataset_card(manifest, rows=self.schema, index=self.index_schema, license=self.license).encode()

    def publish(self) -> PublishResult:
        """Index, quarantine and the dataset card, then the manifest with a conditional create; then remove the
        files the published manifest does not name (a killed run's, or a conflicting run's)."""
        counts = self.counts()
        if not counts.reconciles():
            raise AssertionError(f"counts do not reconcile: {counts}")
        spec, code = self.published_spec(), self.spec.code
        if spec.uri != self.spec.uri:  # the shards were written into the planned version's folder
            for entry in self._files:
                if not storage.exists(storage.join(spec.uri, entry.path)):
                    storage.copy(storage.join(self.spec.uri, entry.path), storage.join(spec.uri, entry.path))
        index_entry = self._seal(spec.uri, "index", self.index_schema)
        quarantine_entry = self._seal(spec.uri, "quarantine", QUARANTINE_SCHEMA)
        tasks_entry = self._seal(spec.uri, "tasks", TASKS_SCHEMA) if self.keep_tasks else None
        shutil.rmtree(self._local, ignore_errors=True)
        manifest = Manifest(
            manifest_format=MANIFEST_FORMAT, dataset=spec.dataset, version=spec.version,
            schema_name=self.schema.metadata[b"replayforge.schema"].decode(), schema_version=code.schema,
            parser_version=code.parser, observation_version=code.observation, source=spec.source,
            source_revision=spec.source_revision, inputs_sha256=self._digest.hexdigest(), config=spec.config,
            counts=counts, files=self._files, index_file=index_entry, quarantine_file=quarantine_entry,
            git_commit=git_commit(),
        )
        card = self.card(manifest)
        extra = {"card": dataclasses.asdict(card_file(card))}
        if tasks_entry is not None:
            extra["tasks"] = dataclasses.asdict(tasks_entry)
        manifest = replace(manifest, extra=extra)
        manifest_uri, card_uri = storage.join(spec.uri, MANIFEST_NAME), storage.join(spec.uri, CARD_NAME)
        # The card's name is the hub's, not a content name: it is written only while the version is unpublished
        # (a card there then is a killed run's), so a published version's card is never replaced by a re-run's.
        wrote_card = not storage.exists(manifest_uri)
        if wrote_card:
            storage.write_bytes(card_uri, card)
        if storage.create_exclusive(manifest_uri, manifest.to_json().encode()):
            return PublishResult(spec.uri, manifest, reused=False, removed=remove_unlisted(spec.uri, manifest))
        existing = Manifest.load(spec.uri)
        if wrote_card and existing.card is not None and existing.card.sha256 != card_file(card).sha256:
            # another run published between this run's check and its create, and this run's card may have
            # replaced that run's: the published version's card goes back
            storage.write_bytes(card_uri, self.card(existing))
        if _contents(existing) != _contents(manifest):
            remove_unlisted(spec.uri, existing, only=_names(manifest))
            if existing.inputs_sha256 != manifest.inputs_sha256:
                why = ("its inputs had other bytes under the same names and sizes (an input changed in place): "
                       "publish under another --dataset, or delete the old version first")
            else:
                why = ("the same inputs gave other rows: the parser or observation code changed without a version "
                       "bump (bump it in shards_schema/versions.py)")
            raise VersionConflictError(f"{spec.uri} is published with other contents: {why}")
        return PublishResult(spec.uri, existing, reused=True, removed=remove_unlisted(spec.uri, existing))

    def abort(self) -> None:
        """Drop the local index and quarantine; files already in the version folder stay for the next run (which
        writes the same names, or removes them once it publishes)."""
        for writer in self._writers.values():
            writer.close()
        shutil.rmtree(self._local, ignore_errors=True)


def _contents(m: Manifest) -> tuple:
    return m.inputs_sha256, m.counts, m.files, m.index_file, m.quarantine_file


def _names(m: Manifest) -> set[str]:
    extra = [e.path for e in (m.card, m.tasks) if e is not None]
    return {MANIFEST_NAME, m.index_file.path, m.quarantine_file.path, *(f.path for f in m.files), *extra}


def remove_unlisted(version_uri: str, manifest: Manifest, *, only: set[str] | None = None) -> list[str]:
    """Delete the files under the version folder that ``manifest`` does not name (restricted to ``only`` when
    given); returns their paths relative to the folder."""
    keep = _names(manifest)
    removed = []
    for uri in storage.list_files(version_uri):
        rel = storage.relative(uri, version_uri)
        if rel in keep or (only is not None and rel not in only):
            continue
        try:
            storage.delete(uri)
        except FileNotFoundError:  # another run removed it first
            continue
        removed.append(rel)
    return removed


# ---------------------------------------------------------------------------- reusing an earlier version
class ReuseError(ValueError):
    """An earlier version (``--reuse-from``) whose shards this job cannot reuse, or whose files do not match its
    manifest; nothing is published."""


_HUB_COMMIT = re.compile(r"[^@\s]+/[^@\s]+@[0-9a-f]{40}")


def _same_inputs_revision(earlier: str | None, ours: str | None) -> bool:
    """Whether inputs pinned to ``earlier`` and to ``ours`` are the same inputs where their ids and sizes are: the
    same revision, or two commits of one hub dataset (``owner/name@<commit>``: a dataset that grew on the hub is
    a new commit). A generator's revision (``pokemon-showdown@<version>+generator-<hash>``) must be equal."""
    if earlier == ours:
        return True
    return (earlier is not None and ours is not None and bool(_HUB_COMMIT.fullmatch(earlier))
            and bool(_HUB_COMMIT.fullmatch(ours)) and earlier.split("@")[0] == ours.split("@")[0])


def reuse_differences(manifest: Manifest, spec: VersionSpec) -> list[str]:
    """What keeps the version ``manifest`` describes from giving its shards to a job writing ``spec`` (empty: it
    can): the code versions must be equal (not only their majors: a minor bump may add columns), and so must the
    source, the dataset, the output config and the inputs' revision (up to a hub dataset's newer commit)."""
    c = spec.code
    out = []
    for what, theirs, ours in (("dataset", manifest.dataset, spec.dataset), ("source", manifest.source, spec.source),
                               ("schema version", manifest.schema_version, c.schema),
                               ("parser version", manifest.parser_version, c.parser),
                               ("observation version", manifest.observation_version, c.observation)):
        if theirs != ours:
            out.append(f"{what} {theirs} (this job: {ours})")
    if not _same_inputs_revision(manifest.source_revision, spec.source_revision):
        out.append(f"inputs revision {manifest.source_revision} (this job: {spec.source_revision})")
    for key in sorted(set(manifest.config) | set(spec.config)):
        theirs, ours = manifest.config.get(key, "<absent>"), spec.config.get(key, "<absent>")
        if theirs != ours:
            out.append(f"config {key}={json.dumps(theirs)} (this job: {json.dumps(ours)})")
    return out


class EarlierVersion:
    """A published version of the same code and config whose read tasks a job over more inputs reuses.

    A task is reused when the earlier version holds a task of the same key (the same items, ids and sizes:
    ``pipelines.stages.task_key``), whose groups lost no input to the store and whose shards the earlier version
    published as its workers wrote them: a shard the earlier driver rewrote to drop a duplicate of an earlier group
    no longer holds the rows the task's records place in it, so that task is parsed again (duplicates across
    groups are rare). The publisher is handed the task's groups exactly as its workers handed them to the earlier
    driver, so it drops duplicates, counts and indexes them as a run from scratch would: the result is the same
    bytes. The tasks file is checked against the sha256 its manifest gives before it is read; each reused shard is
    checked after it is copied (``copy_reused``)."""

    def __init__(self, uri: str, spec: VersionSpec):
        self.uri = storage.normalize(str(uri))
        if storage.scheme(self.uri) != storage.scheme(spec.out_root):
            raise ReuseError(f"--reuse-from {self.uri} is on another store than --out {spec.out_root}: its shards are "
                             "copied within one store; copy the version next to --out first, or run without "
                             "--reuse-from")
        if not storage.exists(storage.join(self.uri, MANIFEST_NAME)):
            raise ReuseError(f"--reuse-from {self.uri} is not a published version (no {MANIFEST_NAME}): give the "
                             "folder of one (the last line a parse job prints)")
        self.manifest = Manifest.load(self.uri)
        if differences := reuse_differences(self.manifest, spec):
            raise ReuseError(f"--reuse-from {self.uri} was made by other code or config, so its shards are not this "
                             f"job's: " + "; ".join(differences) + ". Run without --reuse-from (every input is "
                             "parsed), or with the command and code that made it")
        if self.manifest.tasks is None:
            raise ReuseError(f"--reuse-from {self.uri} has no tasks file (published before shard layout "
                             f"{SHARD_LAYOUT}, or not by the parse job): run once without --reuse-from")
        self._tasks_uri = storage.join(self.uri, self.manifest.tasks.path)
        self._rows: dict[str, tuple[int, int]] = {}

    def reusable(self, keys: list[str]) -> dict[str, list[FileEntry]]:
        """Of the job's read tasks (``keys``, in input order), those this version gives, each with the shard files
        its groups wrote. Reads the tasks file's small columns only."""
        entry = self.manifest.tasks
        digest, size = hashlib.sha256(), 0
        with storage.open_stream(self._tasks_uri) as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
        if (digest.hexdigest(), size) != (entry.sha256, entry.bytes):
            raise ReuseError(f"{self._tasks_uri} does not match the sha256 and size its manifest gives: the earlier "
                             "version is damaged; run without --reuse-from")
        fs, path = storage.resolve(self._tasks_uri)
        table = storage.retrying("read", self._tasks_uri,
                                 lambda: pq.read_table(path, filesystem=fs, columns=["task", "lost", "files"]))
        published = {f.path: f for f in self.manifest.files}
        found: dict[str, list] = {}  # task → [first row, last row, files, whole]
        for row, (task, lost, files) in enumerate(zip(*(table.column(c).to_pylist() for c in table.column_names),
                                                      strict=True)):
            entries = [FileEntry(**f) for f in files]
            whole = lost == 0 and all(published.get(f.path) == f for f in entries)
            if task in found:
                found[task][1] = row
                found[task][2].extend(entries)
                found[task][3] = found[task][3] and whole
            else:
                found[task] = [row, row, entries, whole]
        out, after = {}, -1
        for key in keys:
            first, last, entries, whole = found.get(key, (None, None, None, False))
            if whole and first > after:  # in the earlier version's order too: its rows are read as one pass
                out[key] = entries
                self._rows[key] = (first, last)
                after = last
        return out

    def groups(self, keys: list[str]):
        """``(task, [GroupResult])`` of each key of ``reusable`` asked for, in that order, read from the tasks file in
        one pass (memory: a batch of its rows)."""
        wanted = iter(keys)
        key = next(wanted, None)
        current: list[GroupResult] = []
        row = 0
        with storage.open_input(self._tasks_uri) as fh:
            tasks = pq.ParquetFile(fh)
            # a tasks file of the format before ``index_rows`` has none: ``from_arrow`` reads its index_json
            columns = [name for name in _GROUP_SCHEMA.names if name in tasks.schema_arrow.names]
            for batch in tasks.iter_batches(batch_size=256, columns=columns):
                table = pa.Table.from_batches([batch])
                results = GroupResult.from_arrow(table)
                for result in results:
                    while key is not None and row > self._rows[key][1]:
                        yield key, current
                        current, key = [], next(wanted, None)
                    if key is not None and self._rows[key][0] <= row <= self._rows[key][1]:
                        current.append(result)
                    row += 1
        while key is not None:
            if row <= self._rows[key][1]:
                raise ReuseError(f"{self._tasks_uri} ended before task {key}'s groups: the earlier version is "
                                 "damaged; run without --reuse-from")
            yield key, current
            current, key = [], next(wanted, None)


def _matches(uri: str, entry: FileEntry) -> bool:
    """The file has the manifest entry's size and sha256 (streamed: a shard is not held in memory)."""
    return storage.size(uri) == entry.bytes and sha256_file(uri) == entry.sha256


def _copy_whole(src: str, dst: str) -> None:
    """``src`` to ``dst`` on one store, never visible half-written: on S3 a server-side copy (an object appears
    whole); on local disk a hard link (no bytes copied: a version's files are never written in place), else a copy
    under a hidden temporary name, renamed."""
    if not storage.is_local(dst):
        storage.copy(src, dst)
        return
    source, target = storage.local_path(src), storage.local_path(dst)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    tmp = os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.tmp-{os.urandom(6).hex()}")
    try:
        try:
            os.link(source, tmp)
        except OSError:  # another filesystem, or one without hard links
            shutil.copyfile(source, tmp)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def copy_reused(earlier_uri: str, version_uri: str, entries: list[FileEntry]) -> int:
    """Copy an earlier version's shards into this version's folder (a Ray task: the bytes never reach the driver),
    each read back and checked against the sha256 and size the earlier manifest gives; a mismatch is copied once
    more (a killed run's partial copy), then stops the job. Returns the bytes checked."""
    checked = 0
    for entry in entries:
        src, dst = storage.join(earlier_uri, entry.path), storage.join(version_uri, entry.path)
        if src != dst and not storage.exists(dst):
            _copy_whole(src, dst)
        if not _matches(dst, entry):
            if src != dst:
                storage.delete(dst)
                _copy_whole(src, dst)
            if not _matches(dst, entry):
                raise ReuseError(f"{src} does not match the sha256 and size the manifest of {earlier_uri} gives: "
                                 "the earlier version is damaged; run without --reuse-from")
        checked += entry.bytes
    return checked


# ---------------------------------------------------------------------------- in one process
class ShardWriter:
    """A group writer and the publisher in one process, for writers without a parse job: rollouts, re-featurized
    versions, tests. The same files, names and manifest as the job's."""

    def __init__(self, spec: VersionSpec, *, schema: pa.Schema, index_schema: pa.Schema, shard_size_bytes: int,
                 parquet_options: dict | None = None, index_rows: Callable[[pa.Table], list[dict]] | None = None,
                 unknown_words: Callable[[pa.Table], int] | None = None, license: SourceLicense = UNKNOWN_LICENSE):
        self.spec = spec
        self._group = GroupWriter(spec.uri, "00000-000", schema, shard_size_bytes=shard_size_bytes,
                                  parquet_options=parquet_options, index_rows=index_rows, unknown_words=unknown_words)
        self.publisher = VersionPublisher(spec, schema=schema, index_schema=index_schema,
                                          parquet_options=parquet_options, license=license)

    def add_batch(self, batch: ParsedBatch) -> None:
        self._group.add_batch(batch)

    def add_input(self, record: InputRecord, rows: pa.Table | None = None) -> None:
        self._group.add_input(record, rows)

    def publish(self) -> PublishResult:
        self.publisher.add_group(self._group.close())
        return self.publisher.publish()

    def abort(self) -> None:
        self.publisher.abort()

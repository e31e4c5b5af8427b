"""What a worker hands the driver for one group of inputs (``GroupResult``: a record and placement per input, the
shard files it wrote, the index rows) as one Arrow row, and a version's tasks file made of those rows
(``TASKS_SCHEMA``), which a later job over more inputs reuses."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.stages import (
    LOST_ERROR_TYPE,
    UNREADABLE,
    InputRecord,
    record_table,
    records_of,
    struct_table,
    task_of,
)
from shards_schema.manifest import FileEntry


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


GROUP_SCHEMA = GroupResult("", [], [], []).to_arrow().schema


TASKS_SCHEMA = pa.schema([("task", pa.string()), ("lost", pa.int64()), *GROUP_SCHEMA])
"""A version's tasks file (``tasks-<sha256[:12]>.parquet``, named in its manifest's ``extra.tasks``): one row per
group, in input order, as its worker handed it to the driver, before the driver dropped duplicates of earlier groups:
its read task (``pipelines.stages.task_key``), how many of its inputs the store did not deliver (``lost``), and the
``GroupResult`` columns (a record and placement per input, the shard files it wrote, the index rows). A later job
over more inputs hands these rows to its publisher in place of parsing the task again (``EarlierVersion``). Files
without ``index_rows`` (index rows as JSON in ``records.index_json``) are read too."""


def lost_inputs(records: pa.Table) -> pa.Array:
    """Which records are inputs the store did not deliver (``InputRecord.lost``), as a boolean column."""
    return pc.fill_null(pc.and_(pc.and_(pc.equal(records.column("status"), "quarantined"),
                                        pc.equal(records.column("reason"), UNREADABLE)),
                                pc.equal(records.column("error_type"), LOST_ERROR_TYPE)), False)


def task_rows(result: GroupResult) -> pa.Table:
    """A group's row of the tasks file: its row as the worker made it, after its task and lost inputs."""
    row = result.to_arrow()
    lost = pc.sum(lost_inputs(result.record_columns())).as_py() or 0
    # a row read back from a tasks file names its lists' items as Parquet does ("element"): cast to the schema's
    columns = [row.column(f.name) if row.schema.field(f.name).type == f.type else row.column(f.name).cast(f.type)
               for f in GROUP_SCHEMA]
    return pa.Table.from_arrays([pa.array([task_of(result.group)]), pa.array([lost], pa.int64()), *columns],
                                schema=TASKS_SCHEMA)

"""The worker's part: ``GroupWriter`` writes the rows of one group of consecutive inputs into shards straight into
the version folder and keeps each input's record; rows Arrow cannot cast or encode are charged to their input."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pyarrow as pa

from pipelines.stages import (
    InputRecord,
    ParsedBatch,
)
from pipelines.writer.files import encode_parquet, put_named, schema_name
from pipelines.writer.wire import GroupResult, Placement
from shards_schema.manifest import FileEntry

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
                                            message=f"its rows do not cast to the {schema_name(self.schema)} "
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

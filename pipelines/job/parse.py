"""The parse stage: ``ParseInputs`` runs the source's parser on each group's inputs (reading the group's deferred
work items itself, ahead of the parse), writes the group's shards into the version folder and returns its
``GroupResult``. A plain callable class: Ray Data runs it in an actor pool (``pipelines/job/ray_data.py``)."""

from __future__ import annotations

import gc
import hashlib
import json
import traceback
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow as pa

from pipelines import stages
from pipelines.errors import InputError, ReadError
from pipelines.job.read import HEARTBEAT, read_item
from pipelines.stages import InputRecord, ParsedBatch
from pipelines.writer.groups import GroupWriter
from pipelines.writer.naming import BYTES_PER_MIB
from pipelines.writer.wire import GroupResult

INPUTS_PER_PARSE_BATCH = 16
"""Inputs a parse actor parses and tables at once within a group. Part of the shard layout (``SHARD_LAYOUT``): the
writer cuts shards by each batch's bytes, so another value can move a shard boundary by an input."""


READ_FIELDS = ("input_id", "payload", "read_error", "filter_reason", "facts_json", "lost")
"""What ``ParseInputs.parse_rows`` takes of each ``read_row``, in this order."""


READ_THREADS = 4
"""Threads in which a parse actor reads its deferred work items (``Source.read_by_parser``): reads wait on the
store and release the GIL, so they run beside the parse."""


READ_AHEAD = 2 * INPUTS_PER_PARSE_BATCH
"""Deferred work items a parse actor has read or in flight ahead of the input it parses: one batch being parsed
and the next one being read. Memory: about this many inputs' bytes (~100 MB of ranked Melee games)."""


_NO_GROUPS = GroupResult("", [], [], []).to_arrow().slice(0, 0)
"""What a batch of heartbeats alone returns (``read_groups``): a block with no group."""


class ParseInputs:
    """Runs the source's parser on raw inputs (``read_row`` rows); the parser's expensive set-up (dex, vocabulary)
    happens once per actor. As a Ray Data actor it takes groups (``read_groups`` rows), reads the group's deferred
    work items itself (``Source.read_by_parser``), writes the group's shards into the version folder and returns
    its ``GroupResult``."""

    def __init__(self, source: stages.Source, version_uri: str = "", shard_size_mb: float = 128.0, *,
                 max_unreadable: int = 0, progress=None):
        self.source = source.name
        self.reader = source
        self.parser = source.make_parser()
        self.version_uri = version_uri
        self.shard_size_bytes = int(shard_size_mb * BYTES_PER_MIB)
        self.max_unreadable, self.progress = max_unreadable, progress
        self.reads = ThreadPoolExecutor(max_workers=READ_THREADS, thread_name_prefix="parse-read")

    def __call__(self, groups: pa.Table) -> pa.Table:
        results = [_NO_GROUPS]
        for i, group in enumerate(groups.column("group").to_pylist()):
            if group == HEARTBEAT:
                continue
            inputs = stages.struct_table(groups.column("inputs")[i].values)
            writer = GroupWriter(self.version_uri, group, self.parser.schema, shard_size_bytes=self.shard_size_bytes,
                                 parquet_options=self.parser.parquet_options, index_rows=self.parser.index_rows,
                                 unknown_words=self.parser.unknown_words)
            # A group is about a shard of inputs (~9,000 battles at 128 MiB): parsed in one batch, all its rows are
            # Python dicts at once and its Arrow table is built in one call, which took 1.7x the CPU of the same rows
            # 16 inputs at a time (cache misses; benchmarks/job_overhead.py) and held GBs per actor
            for batch in self.read_rows(inputs):
                writer.add_batch(self.parse_rows(batch))
            results.append(writer.close().to_arrow())
        return pa.concat_tables(results)

    def read_rows(self, inputs: pa.Table) -> Iterator[list[tuple]]:
        """A group's read rows (``READ_FIELDS`` tuples) in order, ``INPUTS_PER_PARSE_BATCH`` at a time, its
        deferred work items read here (``read_item``: retried, a loss accepted or raised as in a read task), up to
        ``READ_AHEAD`` items ahead in ``READ_THREADS`` threads, so the store's latency overlaps the parse. The
        deferred items read are told to ``progress`` (``ReadProgress``) once per batch: a call per item cost the
        counter actor 2.2 CPU s for 3,040 games (benchmarks/job_overhead.py)."""
        columns = [inputs[name].to_pylist() if name != "payload" else None for name in READ_FIELDS]
        deferred = inputs["item_json"].to_pylist() if "item_json" in inputs.column_names else [None] * len(inputs)
        items = {i: json.loads(item) for i, item in enumerate(deferred) if item is not None}
        order = iter(items.items())
        ahead: dict[int, Future] = {}
        rows: list[tuple] = []
        told: list[tuple[str, float, int]] = []  # deferred items read since the last batch
        try:
            for i in range(len(inputs)):
                while len(ahead) < READ_AHEAD and (nxt := next(order, None)) is not None:
                    ahead[nxt[0]] = self.reads.submit(read_item, self.reader, nxt[1],
                                                      max_unreadable=self.max_unreadable)
                if i in items:
                    read = ahead.pop(i).result()
                    rows.extend(tuple(row[name] for name in READ_FIELDS) for row in read)
                    told.append((items[i]["id"], float(items[i]["bytes"]), len(read)))
                else:  # payloads one input at a time: the group's bytes are never all Python objects at once
                    payload = inputs["payload"][i].as_py()
                    rows.append(tuple(payload if c is None else c[i] for c in columns))
                if len(rows) >= INPUTS_PER_PARSE_BATCH:
                    told = self._tell(told)
                    yield rows[:INPUTS_PER_PARSE_BATCH]
                    rows = rows[INPUTS_PER_PARSE_BATCH:]
            self._tell(told)
            if rows:
                yield rows
        finally:
            for future in ahead.values():
                future.cancel()

    def _tell(self, items: list[tuple[str, float, int]]) -> list:
        if items and self.progress is not None:
            self.progress.add_items.remote(items)
        return []

    def parse_batch(self, batch: pa.Table) -> ParsedBatch:
        """The parse of a table of read rows (``read_row`` dicts as Arrow)."""
        return self.parse_rows(list(zip(*(batch[name].to_pylist() for name in READ_FIELDS), strict=True)))

    def parse_rows(self, batch: list[tuple]) -> ParsedBatch:
        """The parse of read rows given as ``READ_FIELDS`` tuples."""
        records, parsed = [], []
        # The parsers allocate many small objects and free them by reference counting; the cyclic collector
        # would run hundreds of times per batch for nothing (measured: a third of parse time).
        gc.disable()
        try:
            for input_id, payload, read_error, source_filter, facts_json, lost in batch:
                sha = hashlib.sha256(payload).hexdigest() if payload is not None else None
                record = InputRecord(input_id=input_id, source=self.source, input_sha256=sha)
                try:
                    if lost is not None:
                        records.append(record.dropped("quarantined", stage="read", error_type=stages.LOST_ERROR_TYPE,
                                                      reason=stages.UNREADABLE, message=lost[:2000]))
                        continue
                    if source_filter is not None:
                        records.append(record.dropped("filtered", stage="read", error_type="filter",
                                                      reason=source_filter,
                                                      message=f"excluded by the source: {source_filter}"))
                        continue
                    if read_error is not None or payload is None:
                        raise ReadError(read_error or "input could not be read")
                    result = self.parser.parse(input_id, payload, sha, json.loads(facts_json) if facts_json else {})
                    if result.filter_reason is not None:
                        record = record.dropped("filtered", stage="filter", error_type="filter",
                                                reason=result.filter_reason,
                                                message=f"excluded by filter {result.filter_reason}")
                    elif result.rows is None or len(result.rows) == 0:
                        record = record.dropped("filtered", stage="filter", error_type="filter",
                                                reason="no_decisions", message="the input holds no decision point")
                    else:
                        record = InputRecord(input_id=input_id, source=self.source, input_sha256=sha,
                                             num_rows=len(result.rows), dedupe_key=self.parser.dedupe_key(result),
                                             index_rows=result.index_rows, relabelled=result.relabelled)
                        parsed.append((len(records), result.rows))
                except InputError as err:
                    record = record.dropped("quarantined", stage=err.stage, error_type=type(err).__name__,
                                            reason=err.reason, message=str(err)[:2000])
                except Exception as err:  # noqa: BLE001 - a parser bug must not kill the job; it is recorded loudly
                    record = record.dropped("quarantined", stage="parse", error_type=type(err).__name__,
                                            reason="parser_bug", message=traceback.format_exc(limit=6)[-2000:])
                records.append(record)
            table = self._to_table(parsed, records) if parsed else self.parser.schema.empty_table()
        finally:
            gc.enable()
        return ParsedBatch(records, table)

    def _to_table(self, parsed: list[tuple[int, list[dict] | pa.Table]], records: list[InputRecord]) -> pa.Table:
        """One conversion for the batch; if a value does not fit the declared schema, convert input by input so
        only the offending inputs are quarantined (their records replaced in ``records``)."""
        schema = self.parser.schema
        if isinstance(parsed[0][1], pa.Table):  # columnar parsers (Melee) build their tables themselves
            return pa.concat_tables([rows for _, rows in parsed])
        try:
            return self.parser.table([r for _, rows in parsed for r in rows])
        except (ValueError, TypeError, KeyError, pa.ArrowException):
            pass
        tables = []
        for at, rows in parsed:
            try:
                tables.append(self.parser.table(rows))
            except (ValueError, TypeError, KeyError, pa.ArrowException) as err:
                records[at] = records[at].dropped("quarantined", stage="validate", error_type=type(err).__name__,
                                                  reason="schema_violation",
                                                  message=f"rows do not fit {schema.metadata}: {err}")
        return pa.concat_tables(tables) if tables else schema.empty_table()

"""Parse replays into a versioned shard version, on Ray Data: the dataset is the one the source's parser writes
(``pokemon_turns``, ``melee_frames``, or a registered game's).

    python pipelines/parse_replays.py --source generated --out out/            # the built-in default
    python pipelines/parse_replays.py --source metamon --input DIR --out out/ --formats gen1ou
    python pipelines/parse_replays.py --source hf-raw --input hf://datasets/jakegrigsby/metamon-raw-replays@v1 ...
    ray job submit --working-dir . -- python pipelines/parse_replays.py --source slp --input s3://b/slp --out s3://b/shards

Stages (``pipelines/stages.py``): the ``Source`` named by ``--source`` (``pipelines/registry.py``) plans work
items on the driver, packed into
read tasks of about one shard each; read tasks read raw inputs by URI (``--input`` is a local path, ``s3://``,
``gs://`` or ``hf://``) and cut them into groups of consecutive inputs → an actor pool runs the source's ``Parser``
on each group's inputs and writes the group's shards straight into ``OUT/<dataset>/<version>/`` (``--out`` is a
local path or a URI) → the driver takes each group's small per-input records in input order and writes index,
quarantine and, last, the manifest (``pipelines/writer/``). The last line printed is the published version.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import os
import shlex
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from pipelines import registry, stages
from pipelines.cli import chosen_section, command_config, nest
from pipelines.console import Ticker, eta_s, progress_line
from pipelines.errors import InputError, ReadError
from pipelines.ray_start import start_ray
from pipelines.stages import InputRecord, ParsedBatch
from pipelines.writer.files import drop_rows
from pipelines.writer.groups import GroupWriter
from pipelines.writer.naming import BYTES_PER_MIB, SHARD_LAYOUT, VersionSpec, check_name
from pipelines.writer.publish import LostInputsError, VersionPublisher
from pipelines.writer.reuse import EarlierVersion, ReuseError, copy_reused
from pipelines.writer.wire import GroupResult
from shards_schema import storage
from shards_schema.storage import RetryPolicy, StorageError


@dataclass(frozen=True, kw_only=True)
class ParseConfig:
    """Configuration of the replay-parsing job.

    Attributes:
        source: where inputs come from (``pipelines/registry.py``): ``generated`` (simulator battles),
            ``metamon`` (parsed .json.lz4), ``showdown-json`` (replay JSON files), ``hf-raw`` or ``pokechamp``
            (replay tables, Parquet), ``slp`` (Melee replays and their .zip/.7z/.tar/.tar.gz archives; synthetic
            games when --input is empty).
        out: output root; the version is published under OUT/<dataset>/<version>/.
        input: input folder, file or URI (``s3://``, ``gs://``, ``hf://datasets/<owner>/<name>@<revision>``);
            with --download, the local folder hub files are put in.
        formats: formats to keep (generated: formats to play); empty keeps all.
        dataset: dataset folder name under OUT (default: the schema's name).
        download: mirror the source's hub dataset into the local --input first (resumable).
        revision: hub revision to read or download (default: the source's pinned one).
        shard_size_mb: target size of each Parquet shard in MiB (2**20 bytes).
        num_parse_actors: parse actors in the pool.
        cpus_per_actor: CPUs each parse or generate actor reserves (fractional, so Ray Data is not starved).
        inputs_per_batch: inputs handed to a parse actor at once.
        num_cpus: CPUs of the local Ray instance (plain-script runs; ignored under ray job submit).
        progress_every_s: seconds between progress lines (inputs read of the total, parsed, rows/s, quarantined,
            ETA: ``ParseProgress``).
        max_unreadable: work items the store may fail to deliver, after every retry, before the job stops without
            publishing (default 0: any lost input stops it). Accepted losses are quarantined ``unreadable``, and
            the version's name says which inputs it lacks, so it never takes the name of the complete version.
        reuse_from: an earlier version (its folder's URI, on the same store as --out) made by the same code and
            config from some of these inputs: the read tasks it already parsed are not read or parsed again, their
            shards are copied (server-side on S3, hard-linked on local disk) and checked against its sha256s, and
            only the other tasks are parsed. The version published is the one a run from scratch makes, byte for
            byte. Default: parse everything.
        options: the source's own options (its dataclass is the source's ``options_class``: flags of another
            source's options are refused); default: that dataclass's defaults.
    """

    source: str
    out: str
    input: str = ""
    formats: list[str] = field(default_factory=list)
    dataset: str = ""
    download: bool = False
    revision: str = ""
    shard_size_mb: float = 128.0
    num_parse_actors: int = 2
    cpus_per_actor: float = 0.5
    inputs_per_batch: int = 16
    num_cpus: int = 2
    progress_every_s: float = 10.0
    max_unreadable: int = 0
    reuse_from: str = ""
    options: object = chosen_section("source", registry.options_classes)

    def __post_init__(self):
        source = registry.source_class(self.source)
        if self.options is None:
            object.__setattr__(self, "options", source.options_class())
        elif not isinstance(self.options, source.options_class):
            raise ValueError(f"--source {self.source} takes {source.options_class.__name__} options, got "
                             f"{type(self.options).__name__}")
        source.check(self.inputs, self.options)
        if self.shard_size_mb <= 0 or self.num_parse_actors < 1 or not 0 < self.cpus_per_actor <= 1:
            raise ValueError("need shard_size_mb > 0, num_parse_actors >= 1 and 0 < cpus_per_actor <= 1")
        if self.max_unreadable < 0:
            raise ValueError(f"--max-unreadable must be >= 0, got {self.max_unreadable}")
        if self.dataset:  # the folder under --out
            check_name(self.dataset, "--dataset")
        for fmt in self.formats:  # hub archives are fetched as <format>.tar.gz into --input
            check_name(fmt, "--formats")

    @classmethod
    def tiny(cls, *, source: str = "generated", out: str = "out", **overrides) -> ParseConfig:
        """A few inputs, small shards: tests and the demo (the source's options from their own ``tiny()`` where
        they have one). Keyword overrides win; an option may be given by name (``min_frames=100``), as on the
        command line."""
        flat = {"shard_size_mb": 0.5, "inputs_per_batch": 4, "progress_every_s": 5.0, **overrides}
        given = nest(cls, {"source": source, **flat})
        options_class = registry.source_class(source).options_class
        if "options" not in flat and hasattr(options_class, "tiny"):
            given["options"] = options_class.tiny(**(dataclasses.asdict(given["options"]) if "options" in given
                                                     else {}))
        return cls(out=out, **given)

    @property
    def inputs(self) -> stages.SourceInputs:
        return stages.SourceInputs(input=self.input, formats=tuple(self.formats), download=self.download,
                                   revision=self.revision)

    def make_source(self) -> stages.Source:
        return registry.source_class(self.source)(self.inputs, self.options)

    @property
    def parser(self) -> type[stages.Parser]:
        return registry.source_class(self.source).parser

    @property
    def schema_name(self) -> str:
        return self.parser.schema_name()

    @property
    def effective_formats(self) -> list[str]:
        return list(self.make_source().formats)

    def output_config(self) -> dict:
        """The fields that shape the output (they enter the version's identity): the common ones and the
        source's own."""
        out = {"source": self.source, "formats": self.effective_formats, "dataset": self.dataset,
               "shard_size_mb": self.shard_size_mb, "shard_layout": SHARD_LAYOUT, **self.make_source().output_config()}
        return dict(sorted(out.items()))


# ---------------------------------------------------------------------------- parse stage (runs in actors)
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


# ---------------------------------------------------------------------------- read stage (the source's)
MAX_GROUP_INPUT_BYTES = 512 << 20
"""A group's raw inputs travel as one Ray object and are held by its parse actor beside their rows: bounded, so a
node's actors fit in memory. Melee inputs shrink ~16x (``SlpSource.shard_bytes_per_input_byte``): their shards come
out at ~32 MiB at most, whatever --shard-size-mb above that."""
_READ_ROW = pa.struct([("input_id", pa.string()), ("payload", pa.large_binary()), ("read_error", pa.string()),
                       ("filter_reason", pa.string()), ("facts_json", pa.string()), ("lost", pa.string()),
                       ("item_json", pa.string())])
ITEM_RETRY = RetryPolicy(attempts=3, base_s=1.0, cap_s=10.0)
"""Re-reads of a whole work item after a ``StorageError`` (each store operation inside is already retried): a
stream cut mid-body, which no decoder can resume, is read again from its start."""


def read_item(source: stages.Source, item: dict, *, max_unreadable: int,
              policy: RetryPolicy = ITEM_RETRY) -> list[dict]:
    """The ``read_row`` of each input of one work item, the item re-read whole while the store fails. When it keeps
    failing: one row marked ``lost`` under the item's id if the job accepts losses (``max_unreadable > 0``: the
    driver counts them against the limit), else the ``StorageError`` itself, naming the item, which fails the read
    task and so the job, before anything is published."""
    for attempt in range(1, policy.attempts + 1):
        try:
            return source.read(item)
        except StorageError as err:
            failure = err
            if attempt < policy.attempts:
                time.sleep(policy.wait_s(attempt))
    lost = StorageError(f"read of input {item['id']} from", failure.uri,
                        f"{failure.why} (the work item read {policy.attempts} times)", failure.attempts)
    if max_unreadable > 0:
        return [stages.read_row(item["id"], lost=str(lost))]
    raise lost from failure


def read_groups(tasks: pa.Table, *, source: stages.Source, group_bytes: float, progress=None,
                max_unreadable: int = 0, heartbeat_s: float | None = None):
    """A read task: reads its work items in order and yields their inputs in groups of consecutive inputs of about
    ``group_bytes`` input bytes (an input is never split; a group never spans tasks), one row per group named
    ``<task>-<group>`` (the task's ``stages.task_key``). Cut by the bytes read, the groups are the same on every run
    and in every plan that holds the task: shard boundaries and names follow. A work item the parse actor reads
    itself (``Source.read_by_parser``) is not read here: it is passed on as one deferred row and counts its listed
    bytes, which are the bytes it holds.

    Each item read is told to ``progress`` (a ``ReadProgress`` actor), for the driver's progress line: reads go on
    while a group fills, so the line moves before the first group is parsed. A work item the store will not deliver
    is ``read_item``'s.

    With ``heartbeat_s``, a group that has taken that long so far is announced by an empty row (``HEARTBEAT``)
    after each further item, so Ray Data's no-progress guard sees the task move: a group of generated battles takes
    as long as its simulator does (3,000 search battles in one 128 MiB group ran past the guard's 30 minutes on a
    loaded machine while every work item was read in turn)."""
    last = time.monotonic()
    for task, items_json in zip(tasks.column("task").to_pylist(), tasks.column("items").to_pylist(), strict=True):
        rows, size, number = [], 0, 0
        for item in json.loads(items_json):
            if source.read_by_parser(item):  # its bytes are its listed size, read by the parse actor
                read = [(stages.read_row(item["id"], deferred=item), item["bytes"])]  # progress: the actor's
            else:
                read = ((row, len(row["payload"] or b"")) for row in read_item(source, item,
                                                                                 max_unreadable=max_unreadable))
            count = 0
            for row, num_bytes in read:
                rows.append(row)
                count += 1
                size += num_bytes
                if size >= group_bytes:
                    yield _group_row(f"{task}-{number:03d}", rows)
                    rows, size, number, last = [], 0, number + 1, time.monotonic()
            if progress is not None and not source.read_by_parser(item):
                progress.add.remote(item["id"], stages.planned_bytes(item, group_bytes), count)
            if heartbeat_s is not None and time.monotonic() - last >= heartbeat_s:
                yield _group_row(HEARTBEAT, [])
                last = time.monotonic()
        if rows:
            yield _group_row(f"{task}-{number:03d}", rows)
            last = time.monotonic()


class ReadProgress:
    """What the read tasks have read so far (a Ray actor the driver polls): planned bytes of the items read and the
    inputs they held. An item read again (its read task retried after a node was lost) counts once."""

    def __init__(self):
        self.planned_bytes, self.inputs = 0.0, 0
        self.items: set[str] = set()

    def add_items(self, items: list[tuple[str, float, int]]) -> None:
        """``add`` of each ``(item_id, planned_bytes, inputs)``."""
        for item in items:
            self.add(*item)

    def add(self, item_id: str, planned_bytes: float, inputs: int) -> None:
        if item_id in self.items:
            return
        self.items.add(item_id)
        self.planned_bytes += planned_bytes
        self.inputs += inputs

    def snapshot(self) -> tuple[float, int]:
        return self.planned_bytes, self.inputs


HEARTBEAT = ""
"""The name of ``read_groups``' empty rows that only tell Ray Data a read task is alive; no group has it (a group's
name starts with its task's key)."""


def _group_row(group: str, rows: list[dict]) -> pa.Table:
    """The group's inputs as one Arrow row. The payloads are joined into one buffer (one copy) and wrapped:
    ``pa.array`` over the row dicts converted them value by value, 3.1 ms of CPU per MB of .slp against 0.7
    (benchmarks/job_overhead.py; the same table)."""
    payloads = [row["payload"] for row in rows]
    present = [p is not None for p in payloads]
    offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum([len(p) if p is not None else 0 for p in payloads], out=offsets[1:])
    validity = None if all(present) else pa.array(present, pa.bool_()).buffers()[1]
    payload = pa.Array.from_buffers(pa.large_binary(), len(rows), [validity, pa.py_buffer(offsets),
                                    pa.py_buffer(b"".join(p for p in payloads if p is not None))],
                                    null_count=present.count(False))
    columns = [payload if f.name == "payload" else pa.array([row.get(f.name) for row in rows], f.type)
               for f in _READ_ROW]
    inputs = pa.ListArray.from_arrays(pa.array([0, len(rows)], pa.int32()),
                                      pa.StructArray.from_arrays(columns, fields=list(_READ_ROW)))
    return pa.table({"group": [group], "inputs": inputs})


def _storage_env() -> dict[str, str]:
    """Where the object store is, for the tasks of a local Ray instance: one started before these were set hands
    its workers the environment of its start. Never the keys (see ``storage.LOCATION_VARS``); on a cluster
    (``RAY_ADDRESS``) each node keeps its own settings."""
    return {} if os.environ.get("RAY_ADDRESS") else storage.location_env()


def version_spec(cfg: ParseConfig, plan: stages.Plan):
    """The version this job writes, named before any input is read."""
    return VersionSpec(out_root=cfg.out, dataset=cfg.dataset or cfg.schema_name, code=cfg.parser.versions,
                       source=cfg.source, source_revision=plan.revision, config=cfg.output_config(),
                       planned_inputs=plan.identity())


# ---------------------------------------------------------------------------- reuse (--reuse-from)
COPY_BATCH_FILES = 64
"""Reused shards copied (and checked) per Ray task: a task's start costs about what checking one shard does."""
COPIES_IN_FLIGHT = 4
"""Copy tasks running at once. They ask for no CPU (they wait on the store; a sha256 reads ~1 GB/s), so that they
never hold back the parse actors and read tasks, whose CPUs Ray Data plans with (a copy task at a quarter CPU held
an incremental job's one read task back for a minute on 2 cores); the window bounds them instead."""


class ReusedCopies:
    """The reused tasks' shards copied into the version in input order (``copy``: ``writer.copy_reused`` as a Ray
    task), ``COPY_BATCH_FILES`` to a task, ``COPIES_IN_FLIGHT`` tasks at a time, running ahead of the driver, which
    waits (``ready``) only for the copies of the task it is about to hand the publisher."""

    def __init__(self, copy, earlier_uri: str, version_uri: str, keys: list[str], reused: dict[str, list]):
        self.copy, self.earlier_uri, self.version_uri = copy, earlier_uri, version_uri
        self.batches: list[list] = [[]]
        self.last_batch: dict[str, int] = {}  # task → the batch holding its last shard
        for key in keys:
            for entry in reused.get(key, ()):
                if len(self.batches[-1]) == COPY_BATCH_FILES:
                    self.batches.append([])
                self.batches[-1].append(entry)
                self.last_batch[key] = len(self.batches) - 1
        self.refs: list = []
        self.done = 0  # batches known to be copied
        self._launch(COPIES_IN_FLIGHT)

    def _launch(self, upto: int) -> None:
        while len(self.refs) < min(upto, len(self.batches)) and self.batches[len(self.refs)]:
            self.refs.append(self.copy.remote(self.earlier_uri, self.version_uri, self.batches[len(self.refs)]))

    def ready(self, key: str) -> None:
        """Return once every shard of task ``key`` is copied and checked (raises what a copy raised)."""
        import ray

        if key not in self.last_batch:
            return
        need = self.last_batch[key] + 1
        self._launch(need + COPIES_IN_FLIGHT)
        if need > self.done:
            ray.get(self.refs[self.done:need])
            self.done = need
        self._launch(self.done + COPIES_IN_FLIGHT)


def in_plan_order(keys: list[str], reused: dict, stored, parsed, ready):
    """``(GroupResult, reused)`` of every group in the plan's order: a reused task's groups from the earlier version
    (``stored``: ``(task, groups)`` of the reused tasks, in order) once ``ready(task)`` returns (its shards are
    copied), every other task's from ``parsed`` (the job's groups, in order) as they come. The first parsed group
    is waited for first, so the copies and the parsing run at once."""
    pending = next(parsed, None)
    for key in keys:
        if key in reused:
            task, groups = next(stored)
            if task != key:
                raise AssertionError(f"the earlier version gave task {task} where {key} was expected")
            ready(key)
            for group in groups:
                yield group, True
            continue
        while pending is not None and stages.task_of(pending.group) == key:
            yield pending, False
            pending = next(parsed, None)
    if pending is not None:
        raise AssertionError(f"group {pending.group} is of no planned read task, or out of order")


# ---------------------------------------------------------------------------- driver
def init_ray(cfg: ParseConfig) -> None:
    """The job's cluster under ``ray job submit``, else a local Ray on 127.0.0.1; token auth on for both."""
    start_ray(num_cpus=cfg.num_cpus, log_to_driver=False)


def group_input_bytes(shard_size_mb: float, source: stages.Source) -> float:
    """Input bytes of a group, and so a read task's budget: what makes a shard of ``shard_size_mb`` of this source's
    rows, at most ``MAX_GROUP_INPUT_BYTES``."""
    return min(shard_size_mb * BYTES_PER_MIB / source.shard_bytes_per_input_byte, MAX_GROUP_INPUT_BYTES)


def configure_data_context(ctx) -> float | None:
    """The job's Ray Data settings on ``ctx`` (a ``DataContext``); returns the read tasks' heartbeat interval in
    seconds (``read_groups``), None where Ray Data's no-progress guard is off."""
    ctx.execution_options.preserve_order = True  # groups reach the driver in input order
    ctx.enable_progress_bars = False  # the job's own progress line instead: plain lines under ray job submit
    # Ray Data warns when an actor pool is larger than its operator's input blocks; the parse actors' inputs are the
    # groups a read task yields, many per task, which its count of blocks (one per read task) does not see
    warnings.filterwarnings("ignore", category=UserWarning,
                            message=r"The minimum number of concurrent actors for 'MapBatches\(ParseInputs\)'")
    # Ray Data holds a task's outputs until they fill a block of this size: at the default 128 MiB the groups of a
    # read task reached the driver all at once as it ended, and the progress line stood still until then. At one
    # byte every group, and every heartbeat of a read task (read_groups), leaves the task as its own block when
    # yielded; a block of one row is never sliced.
    ctx.target_max_block_size = 1
    # A store failure raised in a parse actor (a deferred work item it reads, Source.read_by_parser) reaches the
    # driver as itself inside Ray's RayTaskError, as a read task's does; wrapped in Ray Data's UserCodeException it
    # lost its cause on the way (exceptions pickle without __cause__), and store_failure could not name it
    ctx.raise_original_map_exception = True
    # a read task that fills a group slowly announces itself at a quarter of the guard's timeout (read_groups)
    return ctx.execution_no_progress_timeout_s / 4 if ctx.execution_no_progress_timeout_s > 0 else None


def run(cfg: ParseConfig, *, log=print):
    """Run the job; returns the writer's ``PublishResult``."""
    init_ray(cfg)  # before the first `import ray`: a local instance then binds 127.0.0.1 only (pipelines/ray_start.py)
    import ray.data
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    heartbeat_s = configure_data_context(ray.data.DataContext.get_current())
    source, parser = cfg.make_source(), cfg.parser
    plan = source.plan()
    spec = version_spec(cfg, plan)
    # Groups (and so shards) are cut from the inputs and --shard-size-mb alone, never from the resources: the same
    # inputs and config give the same files, whatever --num-parse-actors. A plan smaller than a group is one group,
    # so a small job's progress line moves once, at its end.
    group_bytes = group_input_bytes(cfg.shard_size_mb, source)
    tasks = stages.pack_tasks(plan.items, group_bytes)
    keys = [stages.task_key(t) for t in tasks]
    earlier = EarlierVersion(cfg.reuse_from, spec) if cfg.reuse_from else None
    reused = earlier.reusable(keys) if earlier is not None else {}
    if len(set(keys)) != len(keys):  # items with the same ids twice: their tasks cannot be told apart
        reused = {}
    todo = [(key, task) for key, task in zip(keys, tasks, strict=True) if key not in reused]
    log(f"[parse] source={cfg.source} formats={cfg.effective_formats or 'all'} work items={len(plan.items)} "
        f"read tasks={len(tasks)} → {spec.uri}")
    if earlier is not None:
        log(f"[parse] reusing {len(reused)} of {len(tasks)} read tasks ({sum(map(len, reused.values()))} shards) "
            f"from {earlier.uri}; reading and parsing {len(todo)}")
    need, have = (cfg.num_parse_actors + 0.5) * cfg.cpus_per_actor, ray.cluster_resources().get("CPU", 0)
    if todo and need > have:  # the actors hold their CPUs for the whole job: without room for a read task nothing moves
        log(f"[parse] warning: {cfg.num_parse_actors} parse actors x {cfg.cpus_per_actor} CPU and a read task need "
            f"{need:g} CPUs, the cluster has {have:g}: the job waits until nodes are added (lower --num-parse-actors "
            "or --cpus-per-actor otherwise)")
    env = _storage_env()
    runtime_env = {"runtime_env": {"env_vars": env}} if env else {}
    # on the driver's node: the job ends with that node anyway, and on a lost node the progress line, polled until
    # the end, would fail a job whose every group was parsed
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    reader = ray.remote(num_cpus=0, scheduling_strategy=here)(ReadProgress).remote()
    parsed = iter(())
    if todo:
        ds = ray.data.from_items([{"task": key, "items": json.dumps(task)} for key, task in todo],
                                 override_num_blocks=len(todo))
        # Reads wait on storage and decompress; they ask for half an actor's CPU. A request unlike the actors' also
        # keeps Ray Data from fusing the read into the parse actors, which would then parse every group of a read
        # task (a whole archive) on one actor instead of spreading its groups over all of them.
        reads = ray.data.TaskPoolStrategy(size=min(cfg.num_parse_actors, len(todo))) if source.bounded_reads else None
        ds = ds.map_batches(read_groups, batch_size=1, batch_format="pyarrow", num_cpus=cfg.cpus_per_actor / 2,
                            fn_kwargs={"source": source, "group_bytes": group_bytes, "progress": reader,
                                       "max_unreadable": cfg.max_unreadable, "heartbeat_s": heartbeat_s},
                            compute=reads,
                            **runtime_env)
        ds = ds.map_batches(ParseInputs, batch_format="pyarrow", batch_size=1,
                            compute=ray.data.ActorPoolStrategy(size=cfg.num_parse_actors),
                            num_cpus=cfg.cpus_per_actor,
                            fn_constructor_kwargs={"source": source, "version_uri": spec.uri,
                                                   "shard_size_mb": cfg.shard_size_mb,
                                                   "max_unreadable": cfg.max_unreadable, "progress": reader},
                            **runtime_env)
        parsed = (result for block in ds.iter_batches(batch_format="pyarrow", batch_size=None)
                  for result in GroupResult.from_arrow(block))
    copies = ReusedCopies(ray.remote(num_cpus=0, **runtime_env)(copy_reused), earlier.uri, spec.uri, keys,
                          reused) if reused else None
    rewrite = ray.remote(num_cpus=cfg.cpus_per_actor, **runtime_env)(drop_rows)
    publisher = VersionPublisher(spec, schema=parser.schema, index_schema=parser.index_schema,
                                 parquet_options=parser.parquet_options, max_unreadable=cfg.max_unreadable,
                                 rewrite=lambda *args: ray.get(rewrite.remote(*args)),
                                 license=registry.source_license(cfg.source), keep_tasks=True)
    progress = ParseProgress(stages.Plan([item for _, task in todo for item in task], plan.revision), group_bytes,
                             reader, publisher, Ticker(cfg.progress_every_s, log))
    stored = earlier.groups([key for key in keys if key in reused]) if reused else iter(())
    try:
        with progress:
            for result, was_reused in in_plan_order(keys, reused, stored, parsed,
                                                    copies.ready if copies is not None else None):
                publisher.add_group(result)
                if was_reused:
                    progress.reused_inputs += result.num_inputs  # from its columns: no record in Python
                    progress.reused_rows += result.written_rows
        published = publisher.publish()
    except BaseException:
        publisher.abort()
        raise
    for name in published.removed:
        log(f"[parse] removed {name}: a file of a run that was killed or had other contents")
    _summary(published, parser, time.monotonic() - progress.start, log, reused_rows=progress.reused_rows)
    return published


class ParseProgress:
    """The job's progress line, from a thread while the job runs and once at its end: inputs read of the plan's
    total (where every work item says how many it holds; else the share of the plan's input bytes read), inputs
    parsed and written, rows, rows/s, quarantined so far and an ETA from the share read (reading runs ahead of
    parsing only as far as Ray Data's buffers let it)."""

    def __init__(self, plan: stages.Plan, group_bytes: float, reader, publisher, ticker):
        self.total_inputs = plan.num_inputs()
        self.total_bytes = sum(stages.planned_bytes(item, group_bytes) for item in plan.items)
        self.reader, self.publisher, self.ticker = reader, publisher, ticker
        self.reused_inputs = self.reused_rows = 0  # of reused tasks (--reuse-from): not parsed by this job
        self.start = time.monotonic()
        self.stop = None

    def line(self) -> str:
        import ray

        read_bytes, read_inputs = ray.get(self.reader.snapshot.remote())
        share = min(read_bytes / self.total_bytes, 1.0) if self.total_bytes else 1.0
        elapsed_s = time.monotonic() - self.start
        p = self.publisher
        inputs, rows = p.inputs - self.reused_inputs, p.rows - self.reused_rows
        parsed = f"{inputs:,} parsed"
        if self.total_inputs:
            read_inputs = min(read_inputs, self.total_inputs)
            fields = {"": parsed}
        else:  # archives and row groups hold an unknown number of inputs until read: their bytes tell the share
            fields = {"": f"{100.0 * share:.0f}% of the input bytes", "parsed": f"{inputs:,}"}
        fields |= {"rows": f"{rows:,}", "rows/s": f"{rows / max(elapsed_s, 1e-9):,.0f}",
                   "quarantined": f"{sum(p.quarantined.values()):,}"}
        if self.reused_inputs:
            fields["reused"] = f"{self.reused_inputs:,} inputs"
        return progress_line("parse", read_inputs, self.total_inputs, "inputs read", fields,
                             eta_s(share, 1.0, elapsed_s))

    def __enter__(self):
        self.stop = threading.Event()

        def every():
            while not self.stop.wait(max(self.ticker.every_s, 0.2)):
                self.ticker.show(self.line())

        self.thread = threading.Thread(target=every, daemon=True, name="parse-progress")
        self.thread.start()
        return self

    def __exit__(self, kind, value, traceback):
        self.stop.set()
        self.thread.join()
        if kind is None:
            self.ticker.show(self.line(), final=True)
        else:
            self.ticker.end()


def next_steps(parser: type[stages.Parser], uri: str) -> list[str]:
    """The summary's closing lines: each next command of the parser's dataset (``Parser.next_steps``), runnable as
    printed."""
    try:
        cwd = os.getcwd()
    except FileNotFoundError:  # under `ray job submit` the job's working folder may be gone once the job is done
        cwd = None
    python = os.path.relpath(sys.executable, cwd) if cwd and sys.executable.startswith(cwd + os.sep) \
        else sys.executable
    lines = []
    for what, command in parser.next_steps:
        lines.append(f"[parse] {what + ':':21s} " + command.format(uri=shlex.quote(uri), python=shlex.quote(python)))
    return lines


def _summary(published, parser: type[stages.Parser], elapsed_s: float, log, *, reused_rows: int = 0) -> None:
    m = published.manifest
    c = m.counts
    total_mib = sum(f.bytes for f in m.files) / BYTES_PER_MIB
    log(f"[parse] inputs {c.inputs} = written {c.written} + filtered {sum(c.filtered.values())} "
        f"+ quarantined {sum(c.quarantined.values())}")
    for kind, reasons in (("filtered", c.filtered), ("quarantined", c.quarantined)):
        for reason, n in reasons.items():
            log(f"[parse]   {kind} {reason}: {n}")
    reused = f" ({reused_rows} rows reused, not counted)" if reused_rows else ""
    log(f"[parse] {parser.describe(c)} in {len(m.files)} shards ({total_mib:.1f} MiB), "
        f"{(c.rows - reused_rows) / max(elapsed_s, 1e-9):.0f} rows/s over {elapsed_s:.1f}s{reused}")
    log("[parse] " + ("already published with identical contents: " if published.reused else "published: ")
        + f"{m.dataset}/{m.version}")
    for line in next_steps(parser, published.uri):
        log(line)
    log(published.uri)


def store_failure(err: BaseException, kinds: tuple[type, ...] = (StorageError, LostInputsError)):
    """The store failure behind a job's exception (or the error of one of ``kinds``), however Ray wrapped it (a read
    task's ``RayTaskError``, Ray Data's ``UserCodeException``), or None when the job failed for another reason. The
    innermost one: Ray's wrapper is an instance of the error it wraps too, but its message is the remote
    traceback."""
    found, seen = None, set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, kinds):
            found = err
        wrapped = getattr(err, "cause", None)  # RayTaskError's
        err = (wrapped if isinstance(wrapped, BaseException) else None) or err.__cause__ or err.__context__
    return found


def main(argv: list[str] | None = None) -> None:
    cfg = command_config(ParseConfig, argv)
    try:
        run(cfg)
    except Exception as err:
        if (unusable := store_failure(err, (ReuseError,))) is not None:
            print(f"[parse] failed: {unusable}\n[parse] nothing was published.", file=sys.stderr)
            sys.exit(1)
        failure = store_failure(err)
        if failure is None:
            raise
        # An outage is not bad data: say what failed and what to do, without the Ray task's traceback around it.
        print(f"[parse] failed: {failure}\n[parse] nothing was published. The store did not deliver these inputs "
              "(an outage, not bad data): re-run the same command once it is reachable (shards already written are "
              "reused), or accept the loss with --max-unreadable N (the version is then named for what it lacks).",
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()

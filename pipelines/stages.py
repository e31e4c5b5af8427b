"""The parse job's stages and what passes between them: ``Source`` → ``Parser`` → shard writing.

A ``Source`` plans work items on the driver (small picklable records: URIs, archive names, generation chunks),
reads raw inputs in read tasks (``read_row`` per input: its bytes, or why it could not be read or is not parsed),
and names its revision. A ``Parser`` turns one input's bytes into rows of its declared schema, or a filter reason,
or raises a typed ``InputError``; one parser serves a family of sources (the three public-replay sources share
one). Each takes only its own arguments: what every source is told about its inputs (``SourceInputs``) and its
own options section. A game's sources and parsers live in its package (``pipelines/<game>/``) and are registered
once in ``pipelines/registry.py``; this module names no game.

What the parse stage hands the writer is typed: one ``InputRecord`` per input, in input order, and the rows of
the batch's written inputs as one Arrow table (``ParsedBatch``). Between Ray tasks a batch travels as one Arrow
block (``ParsedBatch.to_arrow``): the records' columns plus a ``rows`` column holding each input's rows as a list
of structs of the row schema, so no bytes are re-encoded on the way.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, fields
from typing import ClassVar, NamedTuple

import pyarrow as pa

from shards_schema.card import UNKNOWN_LICENSE, SourceLicense
from shards_schema.declare import to_table
from shards_schema.manifest import Counts
from shards_schema.versions import CodeVersions


# ---------------------------------------------------------------------------- source → parser
def read_row(input_id: str, payload: bytes | None = None, *, read_error: str | None = None,
             filter_reason: str | None = None, facts: dict | None = None, lost: str | None = None,
             deferred: dict | None = None) -> dict:
    """One raw input as a read task hands it to the parse stage; every source builds its rows here.

    Args:
        input_id: the input's stable id (a path relative to --input, ``archive::member``, ``table::battle``).
        payload: the input's bytes (None when they are damaged, lost or not parsed).
        read_error: why its bytes cannot be decoded (a damaged archive member or Parquet page): quarantined with
            stage ``read``, reason ``corrupt_input``.
        filter_reason: why the source excludes this input without parsing it (e.g. ``not_a_replay``); counted
            as filtered under that reason.
        facts: what the source knows about the input that its bytes do not say (JSON-able), handed to the
            parser.
        lost: the store failure that kept a work item from being read after every retry, when the job accepts
            such losses (``--max-unreadable``); the job's read stage sets it, never a source. Quarantined as
            ``UNREADABLE`` and counted against the limit.
        deferred: the work item itself, in place of its inputs, when the parse actor reads it
            (``Source.read_by_parser``); the job's read stage sets it, never a source.
    """
    return {"input_id": input_id, "payload": payload, "read_error": read_error, "filter_reason": filter_reason,
            "facts_json": json.dumps(facts, sort_keys=True) if facts else None, "lost": lost,
            "item_json": json.dumps(deferred) if deferred is not None else None}


UNREADABLE = "unreadable"
"""The quarantine reason of an input the store kept failing to deliver (error type ``StorageError``), accepted by
``--max-unreadable``: an outage, recorded apart from every reason that means bad bytes."""
LOST_ERROR_TYPE = "StorageError"


def work_item(item_id: str, num_bytes: int | None, **fields) -> dict:
    """One planned work item: ``id`` names it the same wherever the inputs are (a path relative to --input, a
    generation chunk), ``bytes`` is its size as listed (None: nothing listed; an ``estimate_bytes`` field then
    packs it), ``fields`` what its read needs (URIs...). Values are JSON-able: items travel to read tasks as JSON."""
    return {"id": item_id, "bytes": num_bytes, **fields}


@dataclass(frozen=True)
class Plan:
    """What a source's driver-side planning found.

    Attributes:
        items: one small picklable ``work_item`` per unit of reading, in the order inputs are written; an item that
            knows how many inputs it holds says so in ``inputs`` (the progress line's total).
        revision: what the inputs' bytes are pinned to (a hub commit, a generator version), or None.
    """

    items: list[dict]
    revision: str | None

    def num_inputs(self) -> int | None:
        """Inputs the plan holds when every work item says (``inputs``: generated battles, synthetic games), else
        None (files and archives hold an unknown number until read)."""
        counts = [item.get("inputs") for item in self.items]
        return sum(counts) if counts and None not in counts else None

    def identity(self) -> str:
        """sha256 over the items' ids and sizes, in order: the planned inputs' part of a version's name, known
        before any input is read (workers write into the version as they go). The bytes read are hashed into the
        manifest's ``inputs_sha256``; an input changed in place under the same name and size is caught when the
        version is published (``pipelines.writer.publish.VersionConflictError``)."""
        digest = hashlib.sha256()
        for item in self.items:
            digest.update(f"{item['id']}\t{item.get('bytes')}\n".encode())
        return digest.hexdigest()


def planned_bytes(item: dict, budget_bytes: float) -> float:
    """What a work item weighs in the plan: its listed bytes, else its ``estimate_bytes``, else a whole budget."""
    return item["bytes"] if item.get("bytes") is not None else item.get("estimate_bytes") or budget_bytes


def _boundary_draw(item_id: str) -> float:
    """A number in [0, 1) fixed by a work item's id alone (sha256): where ``pack_tasks`` cuts."""
    return int.from_bytes(hashlib.sha256(item_id.encode()).digest()[:8], "big") / 2.0 ** 64


def pack_tasks(items: list[dict], budget_bytes: float) -> list[list[dict]]:
    """Consecutive work items in read tasks of about ``budget_bytes`` bytes on average, cut where the items
    themselves say, never where a running total reaches the budget: a new task starts at an item when its id's
    draw (``_boundary_draw``) falls under its share of a budget (its ``planned_bytes`` / ``budget_bytes``), when
    it weighs a whole budget or more, or when the item before it does (a large item is a task alone).

    Every cut depends only on the item at it and the one before, so inserting, appending or removing an item
    changes the task that holds it (and at most the one beside it) and no other: every other task has the same
    items, so the same groups, shard bytes and names (``task_key``) as before. That is what lets a job over more
    inputs reuse an earlier version's shards (``pipelines.writer.reuse.EarlierVersion``); a running total would
    shift every task after an inserted item. Task sizes vary about the budget (roughly
    exponentially: a read task cuts its groups by the bytes read, so shards are at most about the budget)."""
    tasks: list[list[dict]] = []
    previous_weight = 0.0
    for item in items:
        weight = planned_bytes(item, budget_bytes)
        cut = (not tasks or previous_weight >= budget_bytes or weight >= budget_bytes
               or _boundary_draw(item["id"]) < weight / budget_bytes)
        if cut:
            tasks.append([])
        tasks[-1].append(item)
        previous_weight = weight
    return tasks


def task_key(task: list[dict]) -> str:
    """A read task's name: sha256 over its items' ids and planned sizes, in order (16 hex digits). Its groups are
    ``<key>-<n>`` and its shards ``part-<key>-<n>-<k>-<sha>``: the same task gives the same names in any plan,
    wherever it stands in it."""
    digest = hashlib.sha256()
    for item in task:
        digest.update(f"{item['id']}\t{item.get('bytes')}\t{item.get('estimate_bytes')}\n".encode())
    return digest.hexdigest()[:16]


def task_of(group: str) -> str:
    """The read task (``task_key``) of a group name ``<key>-<n>``."""
    return group.rsplit("-", 1)[0]


@dataclass(frozen=True, kw_only=True)
class SourceInputs:
    """What the job tells every source about its inputs.

    Attributes:
        input: the input folder, file or URI ("" where the source needs none).
        formats: the formats asked for (empty: the source's ``default_formats``, else every format).
        download: mirror the source's hub dataset into the local ``input`` first.
        revision: the hub revision to read or download ("" for the source's pinned one).
    """

    input: str = ""
    formats: tuple[str, ...] = ()
    download: bool = False
    revision: str = ""


@dataclass(frozen=True, kw_only=True)
class NoOptions:
    """A source without options of its own."""


class Source(ABC):
    """Where raw inputs come from. Planned on the driver, read in Ray tasks (the instance is pickled into them, so
    it holds only its inputs, its options and small values), never parses.

    Class attributes:
        name: the ``--source`` value.
        parser: the ``Parser`` of its inputs.
        options_class: the typed dataclass of its own options (its section of the command line).
        shard_bytes_per_input_byte: about how many shard bytes one byte of its inputs becomes (measured; see each
            source): inputs are grouped so that a group makes about one shard of ``--shard-size-mb``.
        bounded_reads: at most ``--num-parse-actors`` read tasks at once (else Ray Data decides), for reads that
            start processes of their own (the simulator).
        needs_input: whether ``--input`` is required.
        default_formats: formats used when ``--formats`` is empty (empty: every format).
        license: the terms its inputs come under, stated on the dataset card of every version made from them
            (``shards_schema/card.py``); unknown unless the source declares them.
    """

    name: ClassVar[str]
    parser: ClassVar[type[Parser]]
    options_class: ClassVar[type] = NoOptions
    shard_bytes_per_input_byte: ClassVar[float]
    bounded_reads: ClassVar[bool] = False
    needs_input: ClassVar[bool] = True
    default_formats: ClassVar[tuple[str, ...]] = ()
    license: ClassVar[SourceLicense] = UNKNOWN_LICENSE

    def __init__(self, inputs: SourceInputs, options=None):
        self.inputs = inputs
        self.options = self.options_class() if options is None else options
        if not isinstance(self.options, self.options_class):
            raise TypeError(f"--source {self.name} takes {self.options_class.__name__} options, got "
                            f"{type(self.options).__name__}")

    @property
    def formats(self) -> tuple[str, ...]:
        """The formats this run reads: the asked ones, else the source's defaults (empty: every format)."""
        return tuple(self.inputs.formats) or tuple(self.default_formats)

    @abstractmethod
    def plan(self) -> Plan:
        """On the driver: list the inputs (downloading first with ``--download``) into work items."""

    @abstractmethod
    def read(self, item: dict) -> list[dict]:
        """In a read task (or a parse actor, for ``read_by_parser`` items): the ``read_row`` of each input of one
        work item."""

    def read_by_parser(self, item: dict) -> bool:
        """Whether the parse actor reads this work item itself, just before parsing it, instead of a read task
        (False unless a source says). Only for an item that is exactly one input whose bytes are its listed
        ``bytes`` (a loose replay file): its read task then cuts groups by the listed bytes, which is the cut the
        bytes read would give, and hands the actor the item instead of its bytes. The bytes then go from the
        store to the actor once, never through a read task and Ray's object store, and the actor starts parsing
        without waiting for a whole group to be read (``benchmarks/job_overhead.py``: for loose ``.slp`` files
        the read tasks took 33 CPU s of the job's 165 core-seconds, and an actor waited 36 s for its first group
        of 512 MiB)."""
        return False

    def output_config(self) -> dict:
        """The option values that shape this source's output, beyond the common ones (they enter the version
        name): each source names its own."""
        return {}

    @classmethod
    def check(cls, inputs: SourceInputs, options) -> None:
        """Cross-field checks of a job's inputs and options for this source; ValueError with the fix."""
        if cls.needs_input and not inputs.input:
            raise ValueError(f"--source {cls.name} needs --input (a folder, file or URI of inputs)")

    def make_parser(self) -> Parser:
        """This source's parser, with what it needs of the source's options and formats (in each parse actor)."""
        return self.parser(options=self.options, formats=self.formats, source=self.name)


class Parsed(NamedTuple):
    """One input's parse: its rows (dicts, or a table for columnar parsers), or the reason a filter dropped it;
    ``index_rows`` are index rows the rows cannot tell (a Melee game's metadata, row offsets within the input);
    ``relabelled``: ``<source id>→<written id>`` where the input's format id was not the one its rows carry (an
    older replay's ``ou`` written as ``gen6ou``)."""

    rows: list[dict] | pa.Table | None
    filter_reason: str | None = None
    index_rows: list[dict] | None = None
    relabelled: str | None = None


class Parser(ABC):
    """Raw bytes of one input → rows of a declared schema. Constructed once per parse actor (expensive set-up
    goes in ``__init__``); ``parse`` is a plain method, testable without Ray.

    Class attributes:
        schema, index_schema: the declared row and index schemas of its shard versions.
        versions: the code versions written into the manifest.
        parquet_options: pyarrow Parquet options of its shards (None: the writer's default).
        next_steps: (what, command) pairs the job's summary ends with: ``{uri}`` is the published version,
            ``{python}`` the interpreter.
    """

    schema: ClassVar[pa.Schema]
    index_schema: ClassVar[pa.Schema]
    versions: ClassVar[CodeVersions]
    parquet_options: ClassVar[dict | None] = None
    next_steps: ClassVar[tuple[tuple[str, str], ...]] = ()

    def __init__(self, *, options, formats: tuple[str, ...], source: str):
        self.options, self.source = options, source
        self.formats = frozenset(formats) if formats else None

    @classmethod
    def schema_name(cls) -> str:
        return cls.schema.metadata[b"replayforge.schema"].decode()

    @abstractmethod
    def parse(self, input_id: str, payload: bytes, sha256: str, facts: dict) -> Parsed:
        """One input. Raises a typed ``pipelines.errors.InputError`` for bad input."""

    @abstractmethod
    def dedupe_key(self, parsed: Parsed) -> str | None:
        """What must be unique among written inputs (a battle, a trajectory, a game's bytes), or None."""

    def table(self, rows: list[dict]) -> pa.Table:
        """Rows of ``parse`` (from any number of inputs) → a table of ``schema``. Raises ``ValueError``,
        ``TypeError``, ``KeyError`` or an ``ArrowException`` when a value does not fit the schema."""
        return to_table(rows, self.schema)

    @staticmethod
    def index_rows(rows: pa.Table) -> list[dict]:
        """The index rows of one written input's rows, for parsers whose ``Parsed`` leaves ``index_rows`` None
        (the writer calls it in the worker)."""
        raise NotImplementedError("this parser's Parsed results must carry index_rows")

    @staticmethod
    def unknown_words(rows: pa.Table) -> int:
        """Observation words outside the vocabulary in one input's rows (the manifest's ``unknown_words``)."""
        return 0

    @classmethod
    def describe(cls, counts: Counts) -> str:
        """What a version holds, for the job's summary line."""
        return f"{counts.trajectories} trajectories, {counts.rows} rows"


# ---------------------------------------------------------------------------- parser → writer
@dataclass(frozen=True, kw_only=True)
class InputRecord:
    """The outcome of one input, as the parse stage hands it to the writer.

    Attributes:
        input_id: the input's stable id.
        source: the source that read it.
        input_sha256: sha256 of its bytes when they were read.
        status: ``written``, ``filtered`` or ``quarantined``.
        stage: where a dropped input stopped (``read``, ``decode``, ``generate``, ``parse``, ``validate``,
            ``filter``, or ``encode``: the writer's Parquet encoding of its rows).
        error_type: the typed error's class name, or ``filter``.
        reason: the reason key counted in the manifest.
        message: the human-readable reason.
        dedupe_key: what must be unique among written inputs (None: nothing).
        num_rows: rows of a written input.
        index_rows: index rows its rows cannot tell (row offsets relative to the input), or None.
        relabelled: ``<source id>→<written id>`` of a written input whose format id was relabelled (``Parsed``).
    """

    input_id: str
    source: str
    input_sha256: str | None = None
    status: str = "written"
    stage: str | None = None
    error_type: str | None = None
    reason: str | None = None
    message: str | None = None
    dedupe_key: str | None = None
    num_rows: int = 0
    index_rows: list[dict] | None = None
    relabelled: str | None = None

    @property
    def lost(self) -> bool:
        """Whether the store failed to deliver this input (not its bytes' fault; ``UNREADABLE``)."""
        return self.status == "quarantined" and self.reason == UNREADABLE and self.error_type == LOST_ERROR_TYPE

    def dropped(self, status: str, *, stage: str, error_type: str, reason: str, message: str) -> InputRecord:
        """This input filtered or quarantined instead of written."""
        return InputRecord(input_id=self.input_id, source=self.source, input_sha256=self.input_sha256,
                           status=status, stage=stage, error_type=error_type, reason=reason, message=message)


_RECORD_COLUMNS = [
    ("input_id", pa.string()), ("source", pa.string()), ("input_sha256", pa.string()), ("status", pa.string()),
    ("stage", pa.string()), ("error_type", pa.string()), ("reason", pa.string()), ("message", pa.string()),
    ("dedupe_key", pa.string()), ("num_rows", pa.int64()), ("index_json", pa.string()), ("relabelled", pa.string()),
]
assert [name for name, _ in _RECORD_COLUMNS] == [
    "index_json" if f.name == "index_rows" else f.name for f in fields(InputRecord)]


def struct_table(structs: pa.StructArray) -> pa.Table:
    """The table of a struct array's fields, honouring a slice: ``pa.Table.from_struct_array`` (pyarrow 21) keeps a
    slice's length but not its offset, so the list element of a batch sliced from a larger block came back with the
    block's other elements in its columns (tests/pipelines/test_stages.py)."""
    return pa.Table.from_arrays(structs.flatten(), names=[f.name for f in structs.type])


def record_table(records: list[InputRecord]) -> pa.Table:
    """Records as Arrow columns (index rows as JSON: their fields depend on the schema)."""
    rows = [asdict(r) for r in records]
    for r in rows:
        index_rows = r.pop("index_rows")
        r["index_json"] = json.dumps(index_rows) if index_rows else None
    return pa.Table.from_pylist(rows, schema=pa.schema(_RECORD_COLUMNS))


def records_of(table: pa.Table) -> list[InputRecord]:
    """The records of a ``record_table`` (extra columns are ignored)."""
    out = []
    for row in table.select([name for name, _ in _RECORD_COLUMNS]).to_pylist():
        index_json = row.pop("index_json")
        out.append(InputRecord(**row, index_rows=json.loads(index_json) if index_json else None))
    return out


def result_schema(row_schema: pa.Schema) -> pa.Schema:
    """The Arrow block of a ``ParsedBatch``: one row per input, its rows nested as a list of row structs."""
    return pa.schema([*_RECORD_COLUMNS, ("rows", pa.list_(pa.struct(list(row_schema))))])


@dataclass(frozen=True)
class ParsedBatch:
    """The parse of consecutive inputs: their records in input order, and the rows of the written ones
    concatenated in the same order (each written record's ``num_rows`` of them)."""

    records: list[InputRecord]
    rows: pa.Table

    def __post_init__(self):
        announced = sum(r.num_rows for r in self.records if r.status == "written")
        if announced != self.rows.num_rows:
            raise ValueError(f"records announce {announced} rows, the table holds {self.rows.num_rows}")

    def to_arrow(self) -> pa.Table:
        """One Arrow block: what a Ray Data batch function returns (the rows are nested, not copied)."""
        offsets, at = [0], 0
        for record in self.records:
            at += record.num_rows if record.status == "written" else 0
            offsets.append(at)
        nested = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()),
                                          self.rows.to_struct_array().combine_chunks())
        return record_table(self.records).append_column(pa.field("rows", nested.type), nested)

    @classmethod
    def from_arrow(cls, block: pa.Table, row_schema: pa.Schema) -> ParsedBatch:
        """The batch of a block made by ``to_arrow`` (Ray Data may have joined several into one)."""
        records = records_of(block.drop_columns(["rows"]))
        tables = [struct_table(chunk.flatten()) for chunk in block.column("rows").chunks]
        rows = pa.concat_tables(tables) if tables else row_schema.empty_table()
        # The struct drops the schema's metadata (schema name and version, which every shard file carries):
        # the declared schema is put back, without copying the columns.
        return cls(records, pa.Table.from_arrays(rows.columns, schema=row_schema))

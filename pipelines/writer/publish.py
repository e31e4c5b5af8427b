"""The driver's part: ``VersionPublisher`` takes the groups in input order, drops inputs whose dedupe key an
earlier group wrote (rewriting the affected shards through the same encoder), writes index and quarantine, and
publishes; ``ShardWriter`` is a group writer and the publisher in one process.

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
import shutil
import tempfile
from array import array
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.stages import (
    InputRecord,
    ParsedBatch,
    records_of,
)
from pipelines.writer.files import PARQUET_OPTIONS, drop_rows, put_named
from pipelines.writer.groups import GroupWriter
from pipelines.writer.naming import VersionSpec, git_commit
from pipelines.writer.wire import TASKS_SCHEMA, GroupResult, lost_inputs, task_rows
from shards_schema import storage
from shards_schema.card import UNKNOWN_LICENSE, SourceLicense, card_file, dataset_card
from shards_schema.manifest import CARD_NAME, MANIFEST_FORMAT, MANIFEST_NAME, Counts, FileEntry, Manifest
from shards_schema.quarantine import QUARANTINE_SCHEMA


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
        lost = np.flatnonzero(lost_inputs(records).to_numpy(zero_copy_only=False))
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
            writer = self._writers[name] = pq.ParquetWriter(self._local / name, table.schema, **PARQUET_OPTIONS)
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

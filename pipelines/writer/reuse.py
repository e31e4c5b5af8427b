"""An earlier version's read tasks reused by a job over more inputs (``--reuse-from``): which earlier versions may
be reused (``reuse_differences``), which of their tasks (``EarlierVersion``), and their shards copied within one
store and checked (``copy_reused``)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.writer.naming import SHARD_LAYOUT, VersionSpec
from pipelines.writer.wire import GROUP_SCHEMA, GroupResult
from shards_schema import storage
from shards_schema.manifest import MANIFEST_NAME, FileEntry, Manifest
from shards_schema.reader import sha256_file


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
            columns = [name for name in GROUP_SCHEMA.names if name in tasks.schema_arrow.names]
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

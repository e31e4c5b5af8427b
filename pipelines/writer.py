"""The shard writer: the only code that writes into a shard version.

It receives parsed inputs in a deterministic order, packs whole trajectories into ``part-NNNNN.parquet`` files of a
target size, keeps the per-trajectory index and the quarantine table, and publishes the version folder with one
atomic rename after the manifest is written. The version name is derived from the inputs, the code versions and
the output-shaping config, so a re-run on the same inputs yields the same bytes under the same name.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
from array import array
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.stages import InputRecord, ParsedBatch
from shards_schema.manifest import MANIFEST_FORMAT, Counts, FileEntry, Manifest
from shards_schema.quarantine import QUARANTINE_SCHEMA
from shards_schema.reader import sha256_file
from shards_schema.versions import CodeVersions

REPO_ROOT = Path(__file__).resolve().parents[1]
_ROW_GROUP_ROWS = 16_384
"""Small enough that a reader fetches a trajectory or a window of frames by reading one or two row groups."""
_PARQUET_OPTIONS = {"compression": "zstd", "compression_level": 3, "use_dictionary": True, "write_statistics": True}
FRAME_PARQUET_OPTIONS = {"compression": "zstd", "compression_level": 1, "use_dictionary": ["game_id"],
                         "write_statistics": ["game_id", "frame"]}
"""Per-frame numeric shards: dictionaries on float columns cost time and bytes (measured on the shared replays:
0.93 vs 1.37 µs/frame to write, 15.6 vs 21.5 bytes/frame)."""


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


def _trajectory_index(table: pa.Table) -> list[dict]:
    """Index rows of ``pokemon_turns`` rows: the trajectories of one input are contiguous."""
    ids = table.column("trajectory_id").to_pylist()
    meta = {k: table.column(k).to_pylist() for k in ("battle_id", "format", "player_side", "result", "rating")}
    out, start = [], 0
    while start < len(ids):
        end = start
        while end < len(ids) and ids[end] == ids[start]:
            end += 1
        out.append({"trajectory_id": ids[start], **{k: v[start] for k, v in meta.items()}, "row_start": start,
                    "num_rows": end - start})
        start = end
    return out


class VersionConflictError(RuntimeError):
    """A version folder with this name exists with other contents: the code changed without a version bump."""


@dataclass
class PublishResult:
    """Where the version went and whether this run wrote it or found it already published."""

    path: Path
    manifest: Manifest
    reused: bool


@dataclass
class ShardWriter:
    """Streams parsed inputs into shards.

    Attributes:
        out_root: the job's ``--out`` folder.
        dataset: dataset folder name.
        schema: the declared row schema.
        index_schema: the declared index schema.
        code: the code versions written into the manifest.
        shard_size_bytes: target Parquet file size.
        parquet_options: pyarrow Parquet options of the shards (default: zstd 3 with dictionaries).
    """

    out_root: Path
    dataset: str
    schema: pa.Schema
    index_schema: pa.Schema
    code: CodeVersions
    shard_size_bytes: int
    parquet_options: dict | None = None
    _tmp: Path = field(init=False)
    _pending: list[pa.Table] = field(init=False, default_factory=list)
    _pending_index: list[dict] = field(init=False, default_factory=list)
    _pending_bytes: int = field(init=False, default=0)
    _pending_rows: int = field(init=False, default=0)
    _bytes_per_arrow_byte: float = field(init=False, default=0.25)
    _files: list[FileEntry] = field(init=False, default_factory=list)
    _quarantine: list[dict] = field(init=False, default_factory=list)
    _side_writers: dict = field(init=False, default_factory=dict)
    """Streaming writers of index.parquet and quarantine.parquet: memory stays bounded however many inputs."""
    _inputs_digest: hashlib._Hash = field(init=False, default_factory=hashlib.sha256)
    _seen: WrittenKeys = field(init=False, default_factory=WrittenKeys)
    """Dedupe keys written so far and the input that wrote each (see ``WrittenKeys`` for the memory per key)."""
    removed_tmp: list[Path] = field(init=False, default_factory=list)
    """Temporary folders of dead writers this writer removed when it started (see ``remove_stale_tmp``)."""
    inputs: int = field(init=False, default=0)
    written: int = field(init=False, default=0)
    filtered: Counter = field(init=False, default_factory=Counter)
    quarantined: Counter = field(init=False, default_factory=Counter)
    trajectories: int = field(init=False, default=0)
    rows: int = field(init=False, default=0)
    unknown_words: int = field(init=False, default=0)

    def __post_init__(self):
        check_name(self.dataset, "the dataset name (--dataset)")
        dataset_dir = self.out_root / self.dataset
        dataset_dir.mkdir(parents=True, exist_ok=True)
        self.removed_tmp = remove_stale_tmp(dataset_dir)
        self._tmp = dataset_dir / _tmp_name()
        self._tmp.mkdir()

    # -------------------------------------------------------------- inputs
    def add_batch(self, batch: ParsedBatch) -> None:
        """The parse of consecutive inputs (``pipelines.stages.ParsedBatch``), in deterministic order."""
        offset = 0
        for record in batch.records:
            rows = None
            if record.status == "written":
                rows = batch.rows.slice(offset, record.num_rows)
                offset += record.num_rows
            self.add_input(record, rows)

    def add_input(self, record: InputRecord, rows: pa.Table | None = None) -> None:
        """One input's outcome, and its rows when it was written (``record.num_rows`` of them)."""
        self.inputs += 1
        self._inputs_digest.update(f"{record.input_id}\t{record.input_sha256 or '-'}\n".encode())
        if record.status == "written":
            if rows is None or rows.num_rows != record.num_rows:
                raise AssertionError(f"{record.input_id}: {record.num_rows} rows announced, "
                                     f"{0 if rows is None else rows.num_rows} received")
            key = record.dedupe_key
            winner = self._seen.claim(key, record.input_id) if key is not None else None
            if winner is not None:
                record = record.dropped("filtered", stage="filter", error_type="filter", reason="duplicate",
                                        message=f"{key} was already written by input {winner}")
        if record.status == "written":
            self._add_table(record.input_id, rows, record.index_rows)
            self.written += 1
            return
        counter = self.filtered if record.status == "filtered" else self.quarantined
        counter[record.reason] += 1
        self._quarantine.append({
            "input_id": record.input_id, "source": record.source, "kind": record.status, "stage": record.stage,
            "error_type": record.error_type, "reason": record.reason, "message": record.message,
            "input_sha256": record.input_sha256,
        })
        if len(self._quarantine) >= 10_000:
            self._append("quarantine.parquet", self._quarantine, QUARANTINE_SCHEMA)
            self._quarantine = []

    def _add_table(self, input_id: str, table: pa.Table, index_rows: list[dict] | None = None) -> None:
        """Queue one input's rows. ``index_rows`` (row offsets relative to the input) come from parsers whose
        index is not derivable from the rows (Melee games); Pokémon trajectories are found from the rows."""
        table = table.cast(self.schema) if not table.schema.equals(self.schema) else table
        pending_rows = self._pending_rows
        if index_rows is None:
            index_rows = _trajectory_index(table)
        for row in index_rows:
            self._pending_index.append({**row, "input_id": input_id, "row_start": pending_rows + row["row_start"]})
        self.trajectories += len(index_rows)
        self.rows += table.num_rows
        if "obs_unknown_words" in table.column_names:
            self.unknown_words += pc.sum(table.column("obs_unknown_words")).as_py() or 0
        self._pending.append(table)
        self._pending_rows += table.num_rows
        self._pending_bytes += table.nbytes
        if self._pending_bytes * self._bytes_per_arrow_byte >= self.shard_size_bytes:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        name = f"part-{len(self._files):05d}.parquet"
        table = pa.concat_tables(self._pending)
        path = self._tmp / name
        pq.write_table(table, path, row_group_size=_ROW_GROUP_ROWS, **(self.parquet_options or _PARQUET_OPTIONS))
        size = path.stat().st_size
        # Learn the compression ratio from real shards so later shards land near the target size.
        self._bytes_per_arrow_byte = max(size / max(self._pending_bytes, 1), 1e-3)
        self._files.append(FileEntry(path=name, rows=table.num_rows, bytes=size, sha256=sha256_file(path)))
        self._append("index.parquet", [{**entry, "file": name} for entry in self._pending_index], self.index_schema)
        self._pending, self._pending_index, self._pending_bytes, self._pending_rows = [], [], 0, 0

    def _append(self, name: str, rows: list[dict], schema: pa.Schema) -> None:
        writer = self._side_writers.get(name)
        if writer is None:
            writer = self._side_writers[name] = pq.ParquetWriter(self._tmp / name, schema, **_PARQUET_OPTIONS)
        if rows:
            writer.write_table(pa.Table.from_pylist(rows, schema=schema))

    # -------------------------------------------------------------- publish
    def counts(self) -> Counts:
        return Counts(inputs=self.inputs, written=self.written, filtered=dict(sorted(self.filtered.items())),
                      quarantined=dict(sorted(self.quarantined.items())), trajectories=self.trajectories,
                      rows=self.rows, unknown_words=self.unknown_words)

    def _close(self, name: str, schema: pa.Schema) -> FileEntry:
        self._append(name, [], schema)
        self._side_writers.pop(name).close()
        path = self._tmp / name
        rows = pq.ParquetFile(path).metadata.num_rows
        return FileEntry(path=name, rows=rows, bytes=path.stat().st_size, sha256=sha256_file(path))

    def publish(self, *, source: str, source_revision: str | None, config: dict) -> PublishResult:
        """Write index, quarantine and manifest, then rename the folder into place (or reuse an identical one)."""
        self._flush()
        counts = self.counts()
        if not counts.reconciles():
            raise AssertionError(f"counts do not reconcile: {counts}")
        self._append("quarantine.parquet", self._quarantine, QUARANTINE_SCHEMA)
        self._quarantine = []
        index_entry = self._close("index.parquet", self.index_schema)
        quarantine_entry = self._close("quarantine.parquet", QUARANTINE_SCHEMA)
        inputs_sha256 = self._inputs_digest.hexdigest()
        identity = json.dumps({"inputs": inputs_sha256, "schema": self.code.schema, "parser": self.code.parser,
                               "observation": self.code.observation, "source": source,
                               "revision": source_revision, "config": config}, sort_keys=True)
        version = (f"v{self.code.schema}-p{self.code.parser}-o{self.code.observation}-"
                   f"{hashlib.sha256(identity.encode()).hexdigest()[:16]}")
        manifest = Manifest(
            manifest_format=MANIFEST_FORMAT, dataset=self.dataset, version=version,
            schema_name=self.schema.metadata[b"replayforge.schema"].decode(), schema_version=self.code.schema,
            parser_version=self.code.parser, observation_version=self.code.observation, source=source,
            source_revision=source_revision, inputs_sha256=inputs_sha256, config=config, counts=counts,
            files=self._files, index_file=index_entry, quarantine_file=quarantine_entry, git_commit=git_commit(),
        )
        (self._tmp / "manifest.json").write_text(manifest.to_json())
        final = self.out_root / self.dataset / version
        if final.exists():
            return self._reuse(final, manifest)
        try:
            os.rename(self._tmp, final)
        except OSError as err:
            # An identical job published the same version between the check above and this rename (POSIX
            # rename onto a non-empty folder fails with ENOTEMPTY or EEXIST): its manifest is already there,
            # since the folder appears complete with one rename.
            if err.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not final.exists():
                raise
            return self._reuse(final, manifest)
        return PublishResult(final, manifest, reused=False)

    def _reuse(self, final: Path, manifest: Manifest) -> PublishResult:
        """The version is already published: reuse it if its files are ours, byte for byte."""
        existing = Manifest.load(final)
        same = (existing.files, existing.index_file, existing.quarantine_file) == (
            manifest.files, manifest.index_file, manifest.quarantine_file)
        shutil.rmtree(self._tmp)
        if not same:
            raise VersionConflictError(
                f"{final} exists with different contents for the same inputs and code versions: the parser or "
                "observation code changed without a version bump (bump it in shards_schema/versions.py)"
            )
        return PublishResult(final, existing, reused=True)

    def abort(self) -> None:
        for writer in self._side_writers.values():
            writer.close()
        shutil.rmtree(self._tmp, ignore_errors=True)


# ---------------------------------------------------------------------------- temporary folders
_TMP_PREFIX = ".tmp-"


def _host() -> str:
    """This machine's name, as it goes into a temporary folder's name (no '-' inside, so the name splits)."""
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname())[:64] or "unknown"


def _pid_namespace() -> str:
    """The pid namespace's inode: containers sharing a hostname with the host still have their own pids."""
    try:
        return os.readlink("/proc/self/ns/pid").split("[", 1)[1].rstrip("]")
    except (OSError, IndexError):
        return "x"


def _process_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, from /proc), "x" where /proc does not tell (no /proc,
    or another user's process hidden by ``hidepid``), or None when no process ``pid`` runs. With the pid it
    names one process: a pid reused later has another start."""
    import psutil

    if not psutil.pid_exists(pid):  # kill(pid, 0): a live process of another user exists too
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "x"
    return stat.rsplit(")", 1)[1].split()[19]  # field 22 of proc(5); the name in (...) may hold spaces


def _tmp_name() -> str:
    """``.tmp-<host>-<pid namespace>-<pid>-<process start>-<random>``: made with the folder in one mkdir, so
    a folder never exists without its writer's identity."""
    pid = os.getpid()
    return f"{_TMP_PREFIX}{_host()}-{_pid_namespace()}-{pid}-{_process_start(pid)}-{os.urandom(4).hex()}"


def remove_stale_tmp(dataset_dir: Path) -> list[Path]:
    """Remove the temporary folders of writers that died (killed runs) from ``dataset_dir``; returns them.

    The rule: a ``.tmp-*`` folder is removed only when its name says it was made on this host, in this pid
    namespace, and its process is gone: no process has its pid, or the process with that pid started at
    another time (the pid was reused). A folder made on another machine writing to the same shared folder is
    never removed, whatever its state, nor one whose name does not say who made it (older replayforge
    versions named them ``.tmp-<pid>-<random>``): remove those by hand once no job writes there. Machines
    sharing an output folder must have distinct host names. Where the start time cannot be read (no /proc) a
    reused pid keeps a dead writer's folder: the rule errs towards keeping.
    """
    removed = []
    host, namespace = _host(), _pid_namespace()
    for path in sorted(dataset_dir.glob(f"{_TMP_PREFIX}*")):
        parts = path.name[len(_TMP_PREFIX):].rsplit("-", 4)
        if not path.is_dir() or len(parts) != 5 or not parts[2].isdigit() or parts[:2] != [host, namespace]:
            continue
        running_start = _process_start(int(parts[2]))
        if running_start is not None and (running_start == parts[3] or "x" in (running_start, parts[3])):
            continue
        shutil.rmtree(path, onerror=_ignore_vanished)  # another new run may be removing it too
        removed.append(path)
    return removed


def _ignore_vanished(function, path, exc_info) -> None:
    if not issubclass(exc_info[0], FileNotFoundError):
        raise exc_info[1]

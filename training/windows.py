"""Shard rows cut into training windows, one scheme for every trainer: ``cut_windows`` lists the windows of an
epoch from a version's index alone (a trajectory or game per index row), shuffled with a seed; ``window_stream``
lays epochs back to back and cuts the run's stream at its resume step on the driver; ``window_batches`` turns the
stream into padded arrays in each training worker with a dataset's loader (a ``LoadWindows``:
``training/pokemon/windows.LoadTurnWindows`` for turns, ``training/melee_windows.LoadFrameWindows`` for frames).
The order of batches is a pure function of (shard version, window length, seed, batch size): what makes resuming
exact.

Several versions of one dataset and feature spec train as one (``--extra-shards``): a ``VersionUnion`` lays their
indexes end to end, in the order given, with a ``version_number`` column (0 for ``--shards``), so the windows of
every version are cut and shuffled together (the order then a pure function of the versions in order, window length,
seed and batch size), each window keeps its version's number, and the loader reads it from that version. One version
is read as itself, with no such column: its windows and batches are what they were before versions could be joined.

Windows at a trajectory's end are right-padded, and padded steps carry ``valid = False``: they never reach a loss,
and since padding only follows valid steps, causal attention never lets a valid step see one.

Ray Data streams the window specs (file, first row, length: a few bytes each) into every training worker, which
gathers the padded arrays itself from the shards' decoded columns (``window_batches``). Shipping the padded arrays
through the object store instead (a map_batches actor) capped the loader at about 300 batches of 32 × 32 turns per
second on 2 cores, under 5× what the tiny model trains on; the specs stream with the gather here ran at about 880
(benchmarks/policy_loader_vs_trainer.py).
"""

from __future__ import annotations

import functools
import hashlib
from collections import OrderedDict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shards_schema.reader import ShardVersion, open_version

UNLABELLED = -1
"""What a padded step holds in the ``ACTION_KEYS`` arrays: no action (every other array pads with 0)."""
ACTION_KEYS = ("action", "teacher_action")
"""Decoded arrays of action ids, where 0 is an action and padding must not look like one."""

VERSION_COLUMN = "version_number"
"""The index and window column of a ``VersionUnion``: the position of the row's version in the union (0: ``--shards``,
then ``--extra-shards`` in order)."""


class VersionUnion:
    """Several verified shard versions of one dataset and feature spec (the trainer checked them:
    ``training/checkpoints.shard_identity``) read as one by what cuts windows: ``index()`` is their indexes end to end
    with a ``VERSION_COLUMN``; ``manifest`` is the first one's (the feature spec they share)."""

    def __init__(self, versions: list[ShardVersion]):
        if len(versions) < 2:
            raise ValueError("a VersionUnion joins two versions or more (one version is read as itself)")
        self.versions = list(versions)
        self.manifest = self.versions[0].manifest

    def index(self) -> pa.Table:
        """The versions' indexes end to end, in order, each row with its version's number (read once)."""
        return self._index

    @functools.cached_property
    def _index(self) -> pa.Table:
        parts = [index.append_column(VERSION_COLUMN, pa.array(np.full(index.num_rows, number, np.int32)))
                 for number, index in enumerate(v.index() for v in self.versions)]
        # one schema major (the reader refused others); columns a newer minor added come back null where absent
        return pa.concat_tables(parts, promote_options="default")


def open_shards(paths: str | list[str], *, check_sha256: bool = True) -> ShardVersion | VersionUnion:
    """The data of ``paths`` (``--shards``, then ``--extra-shards``): one version as itself, several as a
    ``VersionUnion`` (each verified by ``open_version``)."""
    paths = [paths] if isinstance(paths, str) else paths
    versions = [open_version(path, check_sha256=check_sha256) for path in paths]
    return versions[0] if len(versions) == 1 else VersionUnion(versions)


def index_columns(index: pa.Table, names: list[str]) -> pa.Table:
    """``index`` with the columns ``names``, and its ``VERSION_COLUMN`` where it has one (a union's)."""
    return index.select(names + [VERSION_COLUMN] * (VERSION_COLUMN in index.column_names))


def cut_windows(index: pa.Table, length: int, stride: int, seed: int, phase: int = 0) -> pa.Table:
    """Windows of up to ``length`` rows, one every ``stride`` rows of each trajectory (or game) of ``index``
    (columns ``file``, ``row_start``, ``num_rows``, plus any others, which each window keeps), in an order shuffled
    with ``seed``: columns ``file``, ``row_start``, ``num_rows`` (rows in the window, less than ``length`` at a
    trajectory's end, where the loader pads) and the extra columns.

    With ``length = stride`` (the policy) the windows tile each trajectory. With ``length = stride + 1`` (the world
    model: K inputs and their K next-frame targets) consecutive windows share a frame, and a trajectory yields windows
    up to its second-to-last frame. ``phase`` rows are skipped at each start where the trajectory is longer than
    ``phase + length - stride`` (epochs after the first start elsewhere in each game)."""
    index = index.filter(pc.greater(index.column("num_rows"), 0))
    num_rows = index.column("num_rows").to_numpy().astype(np.int64)
    overlap = length - stride
    first = np.where(num_rows > phase + overlap, phase, 0)
    end = np.maximum(first + 1, num_rows - overlap)
    counts = (end - first + stride - 1) // stride  # windows per trajectory
    owner = np.repeat(np.arange(len(num_rows)), counts)  # (W,): the trajectory of each window
    k = np.arange(len(owner)) - np.repeat(np.cumsum(counts) - counts, counts)  # (W,): position inside it
    offset = first[owner] + k * stride
    order = np.random.default_rng(seed).permutation(len(owner))
    owner, offset = owner[order], offset[order]
    row_start = index.column("row_start").to_numpy().astype(np.int64)[owner] + offset
    columns = {"file": index.column("file").take(owner), "row_start": row_start,
               "num_rows": np.minimum(length, num_rows[owner] - offset)}
    for name in index.column_names:
        if name not in columns:
            columns[name] = index.column(name).take(owner)
    return pa.table(columns)


def window_stream(epoch_windows, start: int, count: int) -> pa.Table:
    """Windows ``start .. start + count`` of a training run's stream: the epochs' windows back to back, epoch
    ``e`` given by ``epoch_windows(e)`` (a ``cut_windows`` table); a ``window`` column numbers them from the stream's
    start. A pure function of its arguments, so a run resumed at step s asks for ``start = s × batch_size`` and
    reads exactly what the uninterrupted run would have read, without reading the batches before it."""
    parts, position, epoch, taken = [], 0, 0, 0
    while taken < count:
        windows = epoch_windows(epoch)
        if windows.num_rows == 0:
            raise ValueError("no windows to train on: the shards hold no trajectories of the requested kind")
        if position + windows.num_rows > start:
            lo = max(0, start - position)
            part = windows.slice(lo, count - taken)
            parts.append(part)
            taken += part.num_rows
        position += windows.num_rows
        epoch += 1
    if not parts:
        return pa.table({"window": pa.array([], pa.int64())})
    table = pa.concat_tables(parts).combine_chunks()
    return table.append_column("window", pa.array(np.arange(start, start + count, dtype=np.int64)))


def held_out(battle_ids: list[str], share: float, seed: int | str) -> np.ndarray:
    """(n,) bool: whether each battle is in the validation split. A battle is held out when a seeded hash of its id
    falls below ``share``, so both sides of a battle land on the same side of the split, and the split needs no list
    of ids (a battle keeps its side as the data grows). With another seed it draws an independent share (the
    training share of a scaling sweep), and a smaller share is a subset of a larger one under the same seed."""
    threshold = share * 2.0 ** 64
    return np.fromiter((point < threshold for point in split_points(battle_ids, seed)), dtype=bool,
                       count=len(battle_ids))


def split_points(ids: list[str], seed: int | str) -> list[int]:
    """The seeded 64-bit hash of each id that ``held_out`` compares with ``share * 2**64``: an id is held out at
    every share above its point over 2**64."""
    return [int.from_bytes(hashlib.blake2b(f"{seed}:{i}".encode(), digest_size=8).digest(), "little") for i in ids]


def gather_windows(arrays: dict[str, np.ndarray], starts: np.ndarray, counts: np.ndarray,
                   context: int) -> dict[str, np.ndarray]:
    """Windows (first row, length) of one decoded shard → right-padded (n, context, ...) arrays, in one gather.

    Padded steps are zero (``ACTION_KEYS`` -1) with ``valid = False``, exactly as ``load_window_reference`` builds
    them."""
    steps = np.arange(context)
    valid = steps[None, :] < counts[:, None]  # (n, T)
    rows = np.where(valid, starts[:, None] + steps[None, :], 0)  # (n, T): a padded step reads row 0, then is zeroed
    out = {}
    for key, array in arrays.items():
        taken = array[rows]  # (n, T, ...)
        fill = UNLABELLED if key in ACTION_KEYS else 0
        out[key] = np.where(valid.reshape(valid.shape + (1,) * (taken.ndim - 2)), taken, np.array(fill, taken.dtype))
    out["valid"] = valid
    return out


class LoadWindows:
    """Window specs → padded numpy arrays (one row per window), in the process that trains; a dataset's loader says
    how one shard decodes (``_decode``), this class does the rest.

    Each shard's training columns are decoded to numpy on first use and kept (windows are shuffled across the whole
    version, so any batch touches any shard): the whole version per worker up to ``max_cached_bytes`` (least
    recently used shards go first). A batch is then one fancy-index gather per shard it touches; a Python loop with
    Arrow calls per window (one shard cached) was the loader's cost before (benchmarks/policy_loader_vs_trainer.py).

    ``version_paths``: the version (a path or URI), or the versions of a ``VersionUnion`` in its order; a window
    is read from the version its ``VERSION_COLUMN`` names (the first without one)."""

    def __init__(self, version_paths: str | list[str], context: int, max_cached_bytes: int = 4 << 30):
        paths = [version_paths] if isinstance(version_paths, str) else list(version_paths)
        self.versions = [open_version(p, check_sha256=False) for p in paths]  # verified once by the driver
        self.context = context
        self.window_length = context  # rows per window (subclasses that also need the next row's targets add one)
        self.max_cached_bytes = max_cached_bytes
        self._shards: OrderedDict[tuple[int, str], dict[str, np.ndarray]] = OrderedDict()
        self._cached_bytes = 0

    def _shard(self, file: str, number: int = 0) -> dict[str, np.ndarray]:
        """A decoded shard (``file`` of version ``number``), kept least-recently-used first; memory stays under
        ``max_cached_bytes`` (beyond one shard): versions larger than that are re-decoded as batches come back to
        their shards, slower but bounded."""
        key = (number, file)
        arrays = self._shards.get(key)
        if arrays is not None:
            self._shards.move_to_end(key)
            return arrays
        arrays = self._decode(file, number)
        size = sum(a.nbytes for a in arrays.values())
        while self._shards and self._cached_bytes + size > self.max_cached_bytes:
            _, evicted = self._shards.popitem(last=False)
            self._cached_bytes -= sum(a.nbytes for a in evicted.values())
        self._shards[key] = arrays
        self._cached_bytes += size
        return arrays

    def _decode(self, file: str, number: int = 0) -> dict[str, np.ndarray]:
        """One shard's training columns of version ``number`` (``self.versions[number]``) as row-aligned numpy
        arrays (the dataset's loader)."""
        raise NotImplementedError

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        files = batch["file"].astype(str)
        starts, counts = batch["row_start"].astype(np.int64), batch["num_rows"].astype(np.int64)
        numbers = (batch[VERSION_COLUMN].astype(np.int64) if VERSION_COLUMN in batch
                   else np.zeros(len(files), np.int64))
        out = None
        for number in np.unique(numbers):
            for file in np.unique(files[numbers == number]):
                where = np.flatnonzero((numbers == number) & (files == file))
                part = gather_windows(self._shard(str(file), int(number)), starts[where], counts[where],
                                      self.window_length)
                if out is None:
                    out = {k: np.empty((len(files),) + v.shape[1:], v.dtype) for k, v in part.items()}
                for key, value in part.items():
                    out[key][where] = value
        out["window"] = batch["window"].astype(np.int64)
        return out


def first_windows(specs: pa.Table, limit: int, loader) -> dict[str, np.ndarray]:
    """The first ``limit`` windows of ``specs`` in version, file and row order, gathered by ``loader``: a validation
    set that is the same at every step and on resume (no randomness); empty without windows."""
    order = [(VERSION_COLUMN, "ascending")] * (VERSION_COLUMN in specs.column_names)
    specs = specs.sort_by(order + [("file", "ascending"), ("row_start", "ascending")]).slice(0, limit)
    if not specs.num_rows:
        return {}
    columns = {name: specs.column(name).to_numpy() for name in specs.column_names}
    columns["window"] = np.arange(specs.num_rows)
    return loader(columns)


def window_batches(specs, loader, batch_size: int, *, first_batch: int = 0, rows: slice | None = None):
    """Padded numpy batches from a stream of window specs (a ``Dataset`` or a worker's ``DataIterator``), gathered
    by ``loader`` (a ``LoadWindows``) in this process.

    ``first_batch`` skips batches without loading them (resume); ``rows`` keeps one worker's slice of each global
    batch."""
    for index, batch in enumerate(specs.iter_batches(batch_size=batch_size, batch_format="numpy", drop_last=True)):
        if index < first_batch:
            continue
        yield loader(batch if rows is None else {k: v[rows] for k, v in batch.items()})

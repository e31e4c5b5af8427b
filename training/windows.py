"""Trajectories of a ``pokemon_turns`` shard version cut into fixed context windows for training, on Ray Data.

Each trajectory is cut into consecutive windows of ``context`` turns; the last one is right-padded, and padded steps
carry ``valid = False`` so they never reach a loss (the model also masks them out of attention). The window list is
built from the index alone and shuffled once with the seed, so the order of batches is a pure function of
(shard version, context, seed): what makes resuming exact.

Ray Data streams the window specs (file, first row, length: a few bytes each) into every training worker, which
gathers the padded arrays itself from the shards' decoded columns (``window_batches``). Shipping the padded arrays
through the object store instead (a map_batches actor) capped the loader at about 300 batches of 32 × 32 turns per
second on 2 cores, under 5× what the tiny model trains on; the specs stream with the gather here ran at about 880
(benchmarks/policy_loader_vs_trainer.py).
"""

from __future__ import annotations

import random
from collections import OrderedDict

import numpy as np
import pyarrow as pa

from shards_schema.pokemon import NUM_ACTIONS, NUM_MOVES, NUM_SWITCHES, OBS_NUMERIC, OBS_WORDS
from shards_schema.reader import ShardVersion, open_version

COLUMNS = ["obs_tokens", "obs_numeric", "legal_mask", "action", "reward", "done"]


def window_specs(version: ShardVersion, context: int, seed: int, sides: list[str] | None = None) -> list[dict]:
    """(file, first row, length) of every window, in a seeded shuffled order (only the given player sides)."""
    specs = []
    for row in version.index().select(["file", "row_start", "num_rows", "player_side"]).to_pylist():
        if sides and row["player_side"] not in sides:
            continue
        for offset in range(0, row["num_rows"], context):
            specs.append({"file": row["file"], "row_start": row["row_start"] + offset,
                          "num_rows": min(context, row["num_rows"] - offset)})
    random.Random(seed).shuffle(specs)
    return [{**spec, "window": i} for i, spec in enumerate(specs)]


def _fold(mask13: np.ndarray) -> np.ndarray:
    moves = mask13[:, :NUM_MOVES] | mask13[:, NUM_MOVES + NUM_SWITCHES:]
    return np.concatenate([moves, mask13[:, NUM_MOVES:NUM_MOVES + NUM_SWITCHES]], axis=1)


def _fixed_list(column: pa.ChunkedArray, width: int, dtype) -> np.ndarray:
    """A fixed-size list column → (rows, width) numpy array."""
    flat = column.combine_chunks().flatten().to_numpy(zero_copy_only=False)
    return flat.astype(dtype, copy=False).reshape(-1, width)


def decode_shard(table: pa.Table) -> dict[str, np.ndarray]:
    """A shard's training columns as row-aligned numpy arrays, in the dtypes the trainer consumes."""
    action = table.column("action").to_numpy().astype(np.int64)
    return {
        "tokens": _fixed_list(table.column("obs_tokens"), OBS_WORDS, np.int32),  # (N, 87); embeddings take int32
        "numeric": _fixed_list(table.column("obs_numeric"), OBS_NUMERIC, np.float32),  # (N, 48)
        "legal": _fold(_fixed_list(table.column("legal_mask"), NUM_ACTIONS, bool)),  # (N, 9)
        "action": np.where(action >= NUM_MOVES + NUM_SWITCHES, action - NUM_MOVES - NUM_SWITCHES, action),  # (N,)
        "reward": table.column("reward").to_numpy().astype(np.float32),
        "done": table.column("done").to_numpy(zero_copy_only=False).astype(bool),
    }


def gather_windows(arrays: dict[str, np.ndarray], starts: np.ndarray, counts: np.ndarray,
                   context: int) -> dict[str, np.ndarray]:
    """Windows (first row, length) of one decoded shard → right-padded (n, context, ...) arrays, in one gather.

    Padded steps are zero (action -1) with ``valid = False``, exactly as ``load_window_reference`` builds them."""
    steps = np.arange(context)
    valid = steps[None, :] < counts[:, None]  # (n, T)
    rows = np.where(valid, starts[:, None] + steps[None, :], 0)  # (n, T): a padded step reads row 0, then is zeroed
    out = {}
    for key, array in arrays.items():
        taken = array[rows]  # (n, T, ...)
        fill = -1 if key == "action" else 0
        out[key] = np.where(valid.reshape(valid.shape + (1,) * (taken.ndim - 2)), taken, np.array(fill, taken.dtype))
    out["valid"] = valid
    return out


def load_window_reference(table: pa.Table, start: int, count: int, context: int) -> dict[str, np.ndarray]:
    """Readable reference of one padded window, straight from the Arrow rows (tests compare the fast path to it)."""
    rows = table.slice(start, count)
    k = rows.num_rows
    out = {"tokens": np.zeros((context, OBS_WORDS), np.int32),
           "numeric": np.zeros((context, OBS_NUMERIC), np.float32),
           "legal": np.zeros((context, NUM_MOVES + NUM_SWITCHES), bool), "action": np.full(context, -1, np.int64),
           "reward": np.zeros(context, np.float32), "done": np.zeros(context, bool), "valid": np.zeros(context, bool)}
    out["tokens"][:k] = rows.column("obs_tokens").combine_chunks().flatten().to_numpy().reshape(k, -1)
    out["numeric"][:k] = rows.column("obs_numeric").combine_chunks().flatten().to_numpy().reshape(k, -1)
    mask13 = rows.column("legal_mask").combine_chunks().flatten().to_numpy(zero_copy_only=False).reshape(k, -1)
    out["legal"][:k] = _fold(mask13)
    action = rows.column("action").to_numpy().astype(np.int64)
    out["action"][:k] = np.where(action >= NUM_MOVES + NUM_SWITCHES, action - NUM_MOVES - NUM_SWITCHES, action)
    out["reward"][:k] = rows.column("reward").to_numpy()
    out["done"][:k] = rows.column("done").to_numpy(zero_copy_only=False)
    out["valid"][:k] = True
    return out


class LoadWindows:
    """Window specs → padded numpy arrays (one row per window), in the process that trains.

    Each shard's training columns are decoded to numpy on first use and kept (windows are shuffled across the whole
    version, so any batch touches any shard): about 390 bytes per turn, the whole version per worker up to
    ``max_cached_bytes`` (least recently used shards go first). A batch is then one fancy-index gather per shard it
    touches; a Python loop with Arrow calls per window (one shard cached) was
    the loader's cost before (benchmarks/policy_loader_vs_trainer.py)."""

    def __init__(self, version_path: str, context: int, max_cached_bytes: int = 4 << 30):
        self.version = open_version(version_path, check_sha256=False)  # verified once by the driver
        self.context = context
        self.window_length = context  # rows per window (subclasses that also need the next row's targets add one)
        self.max_cached_bytes = max_cached_bytes
        self._shards: OrderedDict[str, dict[str, np.ndarray]] = OrderedDict()
        self._cached_bytes = 0

    def _shard(self, file: str) -> dict[str, np.ndarray]:
        """A decoded shard, kept least-recently-used first; memory stays under ``max_cached_bytes`` (beyond one
        shard): a version larger than that is re-decoded as batches come back to its shards, slower but bounded."""
        arrays = self._shards.get(file)
        if arrays is not None:
            self._shards.move_to_end(file)
            return arrays
        arrays = self._decode(file)
        size = sum(a.nbytes for a in arrays.values())
        while self._shards and self._cached_bytes + size > self.max_cached_bytes:
            _, evicted = self._shards.popitem(last=False)
            self._cached_bytes -= sum(a.nbytes for a in evicted.values())
        self._shards[file] = arrays
        self._cached_bytes += size
        return arrays

    def _decode(self, file: str) -> dict[str, np.ndarray]:

        return decode_shard(self.version.read_table(file, COLUMNS))

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        files = batch["file"].astype(str)
        starts, counts = batch["row_start"].astype(np.int64), batch["num_rows"].astype(np.int64)
        out = None
        for file in np.unique(files):
            where = np.flatnonzero(files == file)
            part = gather_windows(self._shard(str(file)), starts[where], counts[where], self.window_length)
            if out is None:
                out = {k: np.empty((len(files),) + v.shape[1:], v.dtype) for k, v in part.items()}
            for key, value in part.items():
                out[key][where] = value
        out["window"] = batch["window"].astype(np.int64)
        return out


def windows_dataset(version_path: str, context: int, seed: int, sides: list[str] | None = None, *,
                    batch_size: int = 1, min_batches: int = 0):
    """The Ray Dataset of window specs in the seeded order (order is preserved when read), and windows per epoch.

    With ``min_batches`` the one dataset holds as many epochs back to back as give that many ``batch_size``
    batches, each epoch the whole batches of the same seeded order: the batches of re-reading a one-epoch dataset
    with ``drop_last``, without starting the stream again every epoch. ``window_batches`` turns it into arrays."""
    import ray.data

    version = open_version(version_path)
    specs = window_specs(version, context, seed, sides)
    num_windows = len(specs)
    if num_windows < batch_size:
        raise ValueError(f"{version_path} has {num_windows} windows of {context} turns, fewer than one batch")
    batches_per_epoch = num_windows // batch_size
    epochs = max(1, -(-min_batches // batches_per_epoch))
    if epochs > 1:
        specs = specs[:batches_per_epoch * batch_size] * epochs
    return ray.data.from_items(specs, override_num_blocks=max(1, min(len(specs) // 1024, 1000))), num_windows


def window_batches(specs, loader, batch_size: int, *, first_batch: int = 0, rows: slice | None = None):
    """Padded numpy batches from a stream of window specs (a ``Dataset`` or a worker's ``DataIterator``), gathered
    by ``loader`` (a ``LoadWindows``) in this process.

    ``first_batch`` skips batches without loading them (resume); ``rows`` keeps one worker's slice of each global
    batch."""
    for index, batch in enumerate(specs.iter_batches(batch_size=batch_size, batch_format="numpy", drop_last=True)):
        if index < first_batch:
            continue
        yield loader(batch if rows is None else {k: v[rows] for k, v in batch.items()})

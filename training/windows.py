"""Trajectories of a ``pokemon_turns`` shard version cut into fixed context windows for training, on Ray Data.

Each trajectory is cut into consecutive windows of ``context`` turns; the last one is right-padded, and padded steps
carry ``valid = False`` so they never reach a loss (the model also masks them out of attention). The window list is
built from the index alone and shuffled once with the seed, so the order of batches is a pure function of
(shard version, context, seed): what makes resuming exact.
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa

from shards_schema.pokemon import NUM_ACTIONS, NUM_MOVES, NUM_SWITCHES, OBS_NUMERIC, OBS_WORDS
from shards_schema.reader import ShardVersion, open_version

TOKEN_DTYPE = np.int16
"""Word ids travel as int16 (the vocabulary has a few thousand words; checked on decode): tokens are most of a
window's bytes through the object store. The trainer widens them on its device."""

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
    tokens = _fixed_list(table.column("obs_tokens"), OBS_WORDS, np.int32)  # (N, 87)
    if tokens.size and int(tokens.max()) > np.iinfo(TOKEN_DTYPE).max:
        raise ValueError(f"word id {int(tokens.max())} does not fit {np.dtype(TOKEN_DTYPE).name}; widen TOKEN_DTYPE")
    return {
        "tokens": tokens.astype(TOKEN_DTYPE),
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
    out = {"tokens": np.zeros((context, OBS_WORDS), TOKEN_DTYPE),
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
    """Ray Data batch function: window specs → padded numpy arrays (one row per window).

    Each shard's training columns are decoded to numpy once per actor and kept (windows are shuffled across the
    whole version, so a batch touches any shard); a batch is then one fancy-index gather per shard it touches.
    Measured by ``benchmarks/policy_loader_vs_trainer.py``: a Python loop over windows with Arrow calls per window
    (and one shard cached) was the loader's cost, not Ray."""

    def __init__(self, version_path: str, context: int):
        self.version = open_version(version_path, check_sha256=False)  # verified once by the driver
        self.context = context
        self._shards: dict[str, dict[str, np.ndarray]] = {}

    def _shard(self, file: str) -> dict[str, np.ndarray]:
        arrays = self._shards.get(file)
        if arrays is None:
            import pyarrow.parquet as pq

            arrays = self._shards[file] = decode_shard(pq.read_table(self.version.path / file, columns=COLUMNS))
        return arrays

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        files = batch["file"].astype(str)
        starts, counts = batch["row_start"].astype(np.int64), batch["num_rows"].astype(np.int64)
        out = None
        for file in np.unique(files):
            where = np.flatnonzero(files == file)
            part = gather_windows(self._shard(str(file)), starts[where], counts[where], self.context)
            if out is None:
                out = {k: np.empty((len(files),) + v.shape[1:], v.dtype) for k, v in part.items()}
            for key, value in part.items():
                out[key][where] = value
        out["window"] = batch["window"].astype(np.int64)
        return out


WINDOWS_PER_BLOCK = 256
"""Windows per Ray Data block (one map task each): the pipeline costs per block, not per window; at 64 windows the
loader streamed about 70 batches of 32 per second, at 256 about 300 (2 shared cores)."""


def windows_dataset(version_path: str, context: int, seed: int, sides: list[str] | None = None, *,
                    batch_size: int = 1, min_batches: int = 0):
    """The Ray Dataset of padded windows in the seeded order (order is preserved when read), and windows per epoch.

    With ``min_batches`` the one dataset holds as many epochs back to back as give that many ``batch_size``
    batches, each epoch the whole batches of the same seeded order: the batches of re-reading a one-epoch dataset
    with ``drop_last``, without starting the pipeline (its actor, its shard decode) again every epoch."""
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
    ds = ray.data.from_items(specs, override_num_blocks=max(1, min(len(specs) // WINDOWS_PER_BLOCK, 1000)))
    dataset = ds.map_batches(LoadWindows, fn_constructor_kwargs={"version_path": version_path, "context": context},
                             batch_format="numpy", batch_size=WINDOWS_PER_BLOCK,
                             compute=ray.data.ActorPoolStrategy(size=1), num_cpus=0.25)
    return dataset, num_windows

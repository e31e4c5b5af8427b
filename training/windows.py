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

from shards_schema.pokemon import NUM_MOVES, NUM_SWITCHES, OBS_NUMERIC, OBS_WORDS
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


class LoadWindows:
    """Ray Data batch function: window specs → padded numpy arrays (one row per window)."""

    def __init__(self, version_path: str, context: int):
        self.version = open_version(version_path, check_sha256=False)  # verified once by the driver
        self.context = context
        self._cache: dict[str, pa.Table] = {}

    def _rows(self, file: str, start: int, count: int) -> pa.Table:
        table = self._cache.get(file)
        if table is None:  # keep one shard's training columns in memory (windows of a shard come together)
            import pyarrow.parquet as pq

            table = pq.read_table(self.version.path / file, columns=COLUMNS)
            self._cache = {file: table}
        return table.slice(start, count)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        n, t = len(batch["file"]), self.context
        out = {
            "window": batch["window"].astype(np.int64),
            "tokens": np.zeros((n, t, OBS_WORDS), np.int64), "numeric": np.zeros((n, t, OBS_NUMERIC), np.float32),
            "legal": np.zeros((n, t, NUM_MOVES + NUM_SWITCHES), bool), "action": np.full((n, t), -1, np.int64),
            "reward": np.zeros((n, t), np.float32), "done": np.zeros((n, t), bool), "valid": np.zeros((n, t), bool),
        }
        for i, (file, start, count) in enumerate(zip(batch["file"], batch["row_start"], batch["num_rows"],
                                                     strict=True)):
            rows = self._rows(str(file), int(start), int(count))
            k = rows.num_rows
            out["tokens"][i, :k] = rows.column("obs_tokens").combine_chunks().flatten().to_numpy().reshape(k, -1)
            out["numeric"][i, :k] = rows.column("obs_numeric").combine_chunks().flatten().to_numpy().reshape(k, -1)
            mask13 = rows.column("legal_mask").combine_chunks().flatten().to_numpy(zero_copy_only=False).reshape(k, -1)
            out["legal"][i, :k] = _fold(mask13)
            action = rows.column("action").to_numpy().astype(np.int64)
            out["action"][i, :k] = np.where(action >= NUM_MOVES + NUM_SWITCHES, action - NUM_MOVES - NUM_SWITCHES,
                                            action)
            out["reward"][i, :k] = rows.column("reward").to_numpy()
            out["done"][i, :k] = rows.column("done").to_numpy(zero_copy_only=False)
            out["valid"][i, :k] = True
        return out


def windows_dataset(version_path: str, context: int, seed: int, sides: list[str] | None = None):
    """The Ray Dataset of padded windows, in the seeded order (order is preserved when read)."""
    import ray.data

    version = open_version(version_path)
    specs = window_specs(version, context, seed, sides)
    ds = ray.data.from_items(specs, override_num_blocks=max(1, min(len(specs) // 64, 200)))
    return ds.map_batches(LoadWindows, fn_constructor_kwargs={"version_path": version_path, "context": context},
                          batch_format="numpy", batch_size=64, compute=ray.data.ActorPoolStrategy(size=1),
                          num_cpus=0.25), len(specs)

"""Windows of K+1 frames of a ``melee_frames`` version, fetched through the games index and featurized with the
world model's feature spec (``pipelines/melee/features.py``).

Windows are cut from each game's frames with a stride of K (K inputs and their K next-frame targets share K+1
frames), listed from the games index alone and shuffled with the seed (``training/windows.cut_windows``), so the
batch order is a pure function of (version, K, seed): what makes resuming exact. Windows at a game's end are
right-padded and marked invalid there.
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.melee.features import STAGES, featurize
from shards_schema.reader import ShardVersion
from training.windows import LoadWindows, VersionUnion, cut_windows, index_columns


def window_specs(version: ShardVersion | VersionUnion, context: int, seed: int, *, games: list[str] | None = None,
                 exclude: list[str] | None = None, phase: int = 0) -> pa.Table:
    """The windows of ``context`` + 1 frames (``file``, ``row_start``, ``num_rows``, ``stage``) of every game, one
    every ``context`` frames, shuffled with ``seed`` (``training/windows.cut_windows``); of a ``VersionUnion``, the
    games of all its versions, each window with its version's number.

    ``games``: only these game ids; ``exclude``: all but these (a train/validation split); ``phase``: frames
    skipped at each game's start before the first window (epochs use different phases so windows do not always
    start at the same frames)."""
    index = index_columns(version.index(), ["game_id", "file", "row_start", "num_rows", "stage"])
    if games is not None:
        index = index.filter(pc.is_in(index.column("game_id"), pa.array(games, pa.string())))
    if exclude:
        index = index.filter(pc.invert(pc.is_in(index.column("game_id"), pa.array(exclude, pa.string()))))
    return cut_windows(index.drop_columns(["game_id"]), context + 1, context, seed, phase)


def split_games(version: ShardVersion | VersionUnion, validation_share: float,
                seed: int) -> tuple[list[str], list[str]]:
    """(train game ids, validation game ids): a seeded split by game, never by window (no leak across the split);
    a game in two versions of a ``VersionUnion`` counts once, on one side."""
    games = sorted(set(version.index().column("game_id").to_pylist()))
    random.Random(seed).shuffle(games)
    n_val = int(round(len(games) * validation_share)) if len(games) > 1 else 0
    n_val = min(max(n_val, 1 if validation_share > 0 and len(games) > 1 else 0), len(games) - 1)
    return sorted(games[n_val:]), sorted(games[:n_val])


class LoadFrameWindows(LoadWindows):
    """Window specs → padded arrays of K+1 frames (one row per window), in the process that trains: the Pokémon
    loader's mechanism (decoded shards in a bounded LRU, one gather per shard) over featurized frame shards."""

    def __init__(self, version_paths: str | list[str], context: int, max_cached_bytes: int = 4 << 30):
        super().__init__(version_paths, context, max_cached_bytes)
        self.window_length = context + 1  # K inputs and their K next-frame targets

    def _decode(self, file: str, number: int = 0) -> dict[str, np.ndarray]:
        return featurize(self.versions[number].read_table(file))

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = super().__call__(batch)
        stage = np.minimum(batch["stage"].astype(np.int64), STAGES - 1)  # (n,): one stage per game
        out["stage"] = np.repeat(stage[:, None], self.window_length, axis=1)  # (n, K+1)
        return out


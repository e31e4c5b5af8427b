"""Windows of K+1 frames of a ``melee_frames`` version, fetched through the games index and featurized with the
world model's feature spec (``pipelines/melee/features.py``).

Windows are cut from each game's frames with a stride of K (K inputs and their K next-frame targets share K+1
frames), listed from the games index alone and shuffled with the seed (``training/windows.cut_windows``), so the
batch order is a pure function of (version, K, seed): what makes resuming exact. Windows at a game's end are
right-padded and marked invalid there.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.melee.features import featurize
from shards_schema.melee_features import STAGES
from shards_schema.reader import ShardVersion
from training.windows import LoadWindows, VersionUnion, cut_windows, held_out, index_columns, split_points


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
    """(train game ids, validation game ids), split by game, never by window (no leak across the split), with the
    split of the Pokémon battles (``training.windows.held_out``): a game is held out when the seeded hash of its id
    falls below the share, so each game keeps its side as the data grows. A game in two versions of a
    ``VersionUnion`` counts once, on one side. With two games or more and a share above 0 each side keeps at least
    one: the game of the lowest hash is held out when none falls below the share, the highest kept when all do; a lone
    game is trained on."""
    games = sorted(set(version.index().column("game_id").to_pylist()))
    if len(games) < 2:
        return games, []
    val = held_out(games, validation_share, seed)
    if validation_share > 0:
        points = split_points(games, seed)
        if not val.any():
            val[points.index(min(points))] = True
        elif val.all():
            val[points.index(max(points))] = False
    return [g for g, v in zip(games, val, strict=True) if not v], [g for g, v in zip(games, val, strict=True) if v]


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


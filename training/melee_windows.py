"""Melee frame shards → the world model's arrays, and windows of K+1 frames fetched through the games index.

``featurize`` maps a ``melee_frames`` table onto the feature spec of ``models/world_model.py`` (scaled continuous
values with validity, flags, categorical ids + 1 with 0 for null, controller bits and axes). Windows are cut from each
game's frames with a stride of K (K inputs and their K next-frame targets share K+1 frames), listed from the games
index alone and shuffled once with the seed, so the batch order is a pure function of (version, K, seed): what makes
resuming exact. Windows at a game's end are right-padded and marked invalid there.
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from models.world_model import (
    BINARY_FIELDS,
    BUTTON_BITS,
    CAT_FIELDS,
    CONT_FIELDS,
    CTRL_ANALOG,
    CTRL_FEATURES,
    PLAYERS,
    PROJECTILE_SLOTS,
    STAGES,
)
from shards_schema.reader import ShardVersion
from training.windows import LoadWindows, cut_windows

# where each feature lives in a melee_frames row (per player fields relative to p0/p1)
_PLAYER_PATHS = {
    "x": ("leader", "x"), "y": ("leader", "y"), "percent": ("leader", "percent"), "shield": ("leader", "shield"),
    "state_age": ("leader", "state_age"), "hitlag": ("leader", "hitlag"),
    "vel_self_x_air": ("leader", "vel_self_x_air"), "vel_self_y": ("leader", "vel_self_y"),
    "vel_attack_x": ("leader", "vel_attack_x"), "vel_attack_y": ("leader", "vel_attack_y"),
    "vel_self_x_ground": ("leader", "vel_self_x_ground"), "nearest_dx": ("nearest_projectile_dx",),
    "nearest_dy": ("nearest_projectile_dy",), "airborne": ("leader", "airborne"), "facing_right": ("leader", "facing"),
    "nearest_present": ("nearest_projectile_type",), "action": ("leader", "action_state"),
    "character": ("leader", "character"), "jumps": ("leader", "jumps_left"), "l_cancel": ("leader", "l_cancel"),
    "hurtbox": ("leader", "hurtbox_state"), "ground": ("leader", "ground_id"),
    "last_attack": ("leader", "last_attack_landed"), "stocks": ("leader", "stocks"), "combo": ("leader", "combo_count"),
    "nearest_type": ("nearest_projectile_type",),
}
_SLOT_PATHS = {"x": ("x",), "y": ("y",), "vx": ("vx",), "vy": ("vy",), "type": ("type",), "state": ("state",),
               "owner": ("owner",), "present": ("type",)}
NO_GROUND = 65535
"""ground_id while airborne; it maps to class 1 (the first real class)."""


def column_path(name: str) -> tuple[str, ...]:
    """A feature name (``p0.x``, ``proj2.type``, ``num_projectiles``) → its column path in ``melee_frames``."""
    if name == "num_projectiles":
        return ("num_projectiles",)
    owner, field = name.split(".")
    if owner in PLAYERS:
        return (owner, *_PLAYER_PATHS[field])
    return ("projectiles", f"slot{owner[len('proj'):]}", *_SLOT_PATHS[field])


def _column(table: pa.Table, path: tuple[str, ...]) -> pa.ChunkedArray:
    col = table.column(path[0])
    return pc.struct_field(col, list(path[1:])) if len(path) > 1 else col


def _values(array: pa.ChunkedArray | pa.Array, dtype) -> tuple[np.ndarray, np.ndarray]:
    """(values with nulls as 0, validity)."""
    valid = pc.is_valid(array).to_numpy(zero_copy_only=False) if array.null_count else np.ones(len(array), bool)
    zero = False if pa.types.is_boolean(array.type) else 0
    values = pc.fill_null(array, zero).to_numpy(zero_copy_only=False) if array.null_count else \
        array.to_numpy(zero_copy_only=False)
    return values.astype(dtype), valid


def featurize(table: pa.Table) -> dict[str, np.ndarray]:
    """A ``melee_frames`` table (frames of one game, in order) → cont/cont_valid (T, Nc), binary/binary_valid
    (T, Nb), cat (T, Nk) (0 = null), ctrl (T, CTRL_FEATURES)."""
    n = table.num_rows
    cont, cont_valid = np.zeros((n, len(CONT_FIELDS)), np.float32), np.zeros((n, len(CONT_FIELDS)), bool)
    for i, (name, scale, _) in enumerate(CONT_FIELDS):
        values, valid = _values(_column(table, column_path(name)), np.float32)
        cont[:, i], cont_valid[:, i] = np.where(valid, values / scale, 0.0), valid
    binary, binary_valid = np.zeros((n, len(BINARY_FIELDS)), np.float32), np.zeros((n, len(BINARY_FIELDS)), bool)
    for i, name in enumerate(BINARY_FIELDS):
        array = _column(table, column_path(name))
        if name.endswith(("present",)):  # a slot or nearest projectile exists: known wherever items are recorded
            values, valid = pc.is_valid(array).to_numpy(zero_copy_only=False), np.ones(n, bool)
            if name.endswith("nearest_present"):
                valid = _column(table, ("num_projectiles",)).is_valid().to_numpy(zero_copy_only=False)
            else:
                valid = _column(table, ("projectiles",)).is_valid().to_numpy(zero_copy_only=False)
        elif name.endswith("facing_right"):
            raw, valid = _values(array, np.float32)
            values = raw > 0
        else:
            values, valid = _values(array, np.float32)
        binary[:, i], binary_valid[:, i] = values, valid
    cat = np.zeros((n, len(CAT_FIELDS)), np.int64)
    for i, (name, classes) in enumerate(CAT_FIELDS):
        values, valid = _values(_column(table, column_path(name)), np.int64)
        if name.endswith(".ground"):
            values = np.where(values == NO_GROUND, 0, values + 1)  # 0 = no ground (airborne) before the +1 below
        if name.endswith(".owner"):
            values = np.where(values < 0, 4, values)  # -1 in the file: no owner
        cat[:, i] = np.where(valid, np.clip(values + 1, 1, classes - 1), 0)
    ctrl = np.zeros((n, CTRL_FEATURES), np.float32)
    k = 0
    for player in PLAYERS:
        buttons, _ = _values(_column(table, (player, "controller", "buttons")), np.int64)
        for bit in BUTTON_BITS:
            ctrl[:, k] = (buttons & bit) != 0
            k += 1
        for axis in CTRL_ANALOG:
            ctrl[:, k] = _values(_column(table, (player, "controller", axis)), np.float32)[0]
            k += 1
    return {"cont": cont, "cont_valid": cont_valid, "binary": binary, "binary_valid": binary_valid, "cat": cat,
            "ctrl": ctrl}


def window_specs(version: ShardVersion, context: int, seed: int, *, games: list[str] | None = None,
                 exclude: list[str] | None = None, phase: int = 0) -> pa.Table:
    """The windows of ``context`` + 1 frames (``file``, ``row_start``, ``num_rows``, ``stage``) of every game, one
    every ``context`` frames, shuffled with ``seed`` (``training/windows.cut_windows``).

    ``games``: only these game ids; ``exclude``: all but these (a train/validation split); ``phase``: frames
    skipped at each game's start before the first window (epochs use different phases so windows do not always
    start at the same frames)."""
    index = version.index().select(["game_id", "file", "row_start", "num_rows", "stage"])
    if games is not None:
        index = index.filter(pc.is_in(index.column("game_id"), pa.array(games, pa.string())))
    if exclude:
        index = index.filter(pc.invert(pc.is_in(index.column("game_id"), pa.array(exclude, pa.string()))))
    return cut_windows(index.drop_columns(["game_id"]), context + 1, context, seed, phase)


def split_games(version: ShardVersion, validation_share: float, seed: int) -> tuple[list[str], list[str]]:
    """(train game ids, validation game ids): a seeded split by game, never by window (no leak across the split)."""
    games = sorted(version.index().column("game_id").to_pylist())
    random.Random(seed).shuffle(games)
    n_val = int(round(len(games) * validation_share)) if len(games) > 1 else 0
    n_val = min(max(n_val, 1 if validation_share > 0 and len(games) > 1 else 0), len(games) - 1)
    return sorted(games[n_val:]), sorted(games[:n_val])


class LoadFrameWindows(LoadWindows):
    """Window specs → padded arrays of K+1 frames (one row per window), in the process that trains: the Pokémon
    loader's mechanism (decoded shards in a bounded LRU, one gather per shard) over featurized frame shards."""

    def __init__(self, version_path: str, context: int, max_cached_bytes: int = 4 << 30):
        super().__init__(version_path, context, max_cached_bytes)
        self.window_length = context + 1  # K inputs and their K next-frame targets

    def _decode(self, file: str) -> dict[str, np.ndarray]:

        return featurize(self.version.read_table(file))

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = super().__call__(batch)
        stage = np.minimum(batch["stage"].astype(np.int64), STAGES - 1)  # (n,): one stage per game
        out["stage"] = np.repeat(stage[:, None], self.window_length, axis=1)  # (n, K+1)
        return out


assert PROJECTILE_SLOTS == sum(1 for name, _ in CAT_FIELDS if name.endswith(".owner"))

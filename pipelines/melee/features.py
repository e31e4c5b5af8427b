"""The Melee world model's features derived from frames and back: ``featurize`` (``melee_frames`` rows → arrays) and
``unfeaturize`` (arrays → ``melee_frames`` rows), over the field layout and its ``FEATURES_VERSION`` declared in
``shards_schema/melee_features.py``.

Every field the model reads it also predicts (continuous fields as deltas of their scaled value, flags as logits,
categorical fields as classes), so nothing goes stale when predictions are fed back. Per player: position, percent,
shield, state age, hitlag, five velocities and the nearest opponent projectile's offset (continuous); airborne,
facing and whether an opponent projectile exists (flags); action state, character, jumps, l-cancel, hurtbox, ground,
last attack, stocks, combo and the nearest projectile's type (classes). Four projectile slots (presence; type, state,
owner; position and velocity) and the projectile count. Controllers: 12 buttons and 7 axes per player.

Continuous values are stored scaled (value / scale); categorical values as ``id + 1`` with class 0 = null (a field
the replay's version does not record, never a target); ids beyond a field's table clamp to its last class.
Version-absent fields are masked (``*_valid``), never read as zero. Features are derived from stored frames when
training reads them, so shards never need re-parsing when the spec changes: bump ``FEATURES_VERSION``
(checkpoints record it; play and fine-tuning refuse another major). Nana (Ice Climbers' follower)
and a projectile's spawn id are not carried.

``featurize`` and ``unfeaturize`` import pyarrow when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from shards_schema.melee_features import (
    BINARY_FIELDS,
    BUTTON_BITS,
    CAT_FIELDS,
    CAT_INDEX,
    CONT_FIELDS,
    CTRL_ANALOG,
    CTRL_FEATURES,
    CTRL_PER_PLAYER,
    PLAYERS,
    PROJECTILE_SLOTS,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["featurize", "unfeaturize"]

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
    import pyarrow.compute as pc  # when called: the layout imports with numpy only (module docstring)

    col = table.column(path[0])
    return pc.struct_field(col, list(path[1:])) if len(path) > 1 else col


def _values(array: pa.ChunkedArray | pa.Array, dtype) -> tuple[np.ndarray, np.ndarray]:
    """(values with nulls as 0, validity)."""
    import pyarrow as pa  # when called: the layout imports with numpy only (module docstring)
    import pyarrow.compute as pc

    valid = pc.is_valid(array).to_numpy(zero_copy_only=False) if array.null_count else np.ones(len(array), bool)
    zero = False if pa.types.is_boolean(array.type) else 0
    values = pc.fill_null(array, zero).to_numpy(zero_copy_only=False) if array.null_count else \
        array.to_numpy(zero_copy_only=False)
    return values.astype(dtype), valid


def featurize(table: pa.Table) -> dict[str, np.ndarray]:
    """A ``melee_frames`` table (frames of one game, in order) → cont/cont_valid (T, Nc), binary/binary_valid
    (T, Nb), cat (T, Nk) (0 = null), ctrl (T, CTRL_FEATURES)."""
    import pyarrow.compute as pc  # when called: the layout imports with numpy only (module docstring)

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



def _ids(classes: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Categorical classes → (stored ids, validity): the inverse of ``featurize``'s id + 1."""
    valid = classes > 0
    ids = classes - 1
    if name.endswith(".ground"):
        ids = np.where(classes == 1, NO_GROUND, classes - 2)
    elif name.endswith(".owner"):
        ids = np.where(ids == 4, -1, ids)  # featurize maps -1 (no owner) to 4
    return np.where(valid, ids, 0), valid


def _null_struct(n: int, arrow_type: pa.StructType) -> pa.StructArray:
    """n null structs whose children hold zeros (Parquet rejects nulls in non-nullable children)."""
    import pyarrow as pa  # when called: the layout imports with numpy only (module docstring)

    children = [_null_struct(n, f.type) if pa.types.is_struct(f.type) else
                pa.array(np.zeros(n, f.type.to_pandas_dtype())).cast(f.type) for f in arrow_type]
    return pa.StructArray.from_arrays(children, fields=list(arrow_type), mask=pa.array(np.ones(n, bool)))


def _build(f: pa.Field, path: tuple[str, ...], leaves: dict, structs: dict, n: int) -> pa.Array:
    """One column of ``FRAMES_SCHEMA`` from leaf (values, validity) arrays and struct validities, by path."""
    import pyarrow as pa  # when called: the layout imports with numpy only (module docstring)

    if pa.types.is_struct(f.type):
        valid = structs.get(path)
        if valid is not None and not valid.any() and not any(k[:len(path)] == path for k in leaves):
            return _null_struct(n, f.type)
        children = [_build(child, (*path, child.name), leaves, structs, n) for child in f.type]
        return pa.StructArray.from_arrays(children, fields=list(f.type),
                                          mask=None if valid is None else pa.array(~valid))
    values, valid = leaves[path]
    if values.dtype.kind == "U":
        return pa.array(values.tolist(), f.type)
    # a non-nullable child of a null struct (an absent projectile slot) holds its value (0), never a null
    mask = None if valid is None or valid.all() or not f.nullable else ~valid
    return pa.array(values.astype(f.type.to_pandas_dtype()), f.type, mask=mask)


def unfeaturize(features: dict[str, np.ndarray], *, game_id: str, first_frame: int,
                ports: tuple[int, int] = (0, 1)) -> pa.Table:
    """``featurize`` arrays of one game's frames → ``melee_frames`` rows (``FRAMES_SCHEMA``), so that ``featurize``
    of the rows gives back the arrays for every field the model carries. Not carried: Nana (null) and a projectile's
    spawn id (its slot index). Nullable columns are null where the arrays say not recorded; a projectile slot is null
    where its presence flag is 0, the projectiles column where ``num_projectiles`` is null."""
    import pyarrow as pa  # when called: the layout imports with numpy only (module docstring)

    from shards_schema.melee import FRAMES_SCHEMA

    n = len(features["cat"])
    leaves: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray | None]] = {
        ("game_id",): (np.array([game_id] * n), None),
        ("frame",): (np.arange(first_frame, first_frame + n, dtype=np.int32), None),
    }
    structs: dict[tuple[str, ...], np.ndarray] = {}
    for i, (name, scale, _) in enumerate(CONT_FIELDS):
        leaves[column_path(name)] = (features["cont"][:, i] * scale, features["cont_valid"][:, i])
    for i, name in enumerate(BINARY_FIELDS):
        values, valid = features["binary"][:, i] > 0.5, features["binary_valid"][:, i]
        if name.endswith(".facing_right"):
            leaves[column_path(name)] = (np.where(values, 1.0, -1.0), None)
        elif name.startswith("proj"):
            structs[column_path(name)[:-1]] = values  # the slot exists
        elif not name.endswith(".nearest_present"):  # the nearest projectile exists ⇔ its type is not null
            leaves[column_path(name)] = (values, valid)
    for i, (name, _) in enumerate(CAT_FIELDS):
        leaves[column_path(name)] = _ids(features["cat"][:, i], name)
    structs[("projectiles",)] = features["cat"][:, CAT_INDEX["num_projectiles"]] > 0
    for k in range(PROJECTILE_SLOTS):
        leaves[("projectiles", f"slot{k}", "spawn_id")] = (np.full(n, k), None)
    for p, player in enumerate(PLAYERS):
        leaves[(player, "port")] = (np.full(n, ports[p]), None)
        ctrl = features["ctrl"][:, p * CTRL_PER_PLAYER:(p + 1) * CTRL_PER_PLAYER]
        buttons = sum((ctrl[:, b] > 0.5).astype(np.int64) * bit for b, bit in enumerate(BUTTON_BITS))
        leaves[(player, "controller", "buttons")] = (np.asarray(buttons), None)
        for a, axis in enumerate(CTRL_ANALOG):
            leaves[(player, "controller", axis)] = (ctrl[:, len(BUTTON_BITS) + a], None)
        structs[(player, "nana")] = np.zeros(n, bool)
    columns = [_build(f, (f.name,), leaves, structs, n) for f in FRAMES_SCHEMA]
    return pa.Table.from_arrays(columns, schema=FRAMES_SCHEMA)


assert PROJECTILE_SLOTS == sum(1 for name, _ in CAT_FIELDS if name.endswith(".owner"))

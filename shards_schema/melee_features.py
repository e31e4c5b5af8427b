"""The layout of the Melee world model's features: which fields, in which order, with their scales and class counts,
and the controller and stage features, versioned as ``FEATURES_VERSION``. A declaration that imports nothing (the
model runs where Arrow is not installed), below both the model (``models/world_model.py``) and the code that derives
the features from ``melee_frames`` rows (``pipelines/melee/features.py``: ``featurize``, ``unfeaturize``)."""

from __future__ import annotations

__all__ = ["FEATURES_VERSION", "PLAYERS", "PROJECTILE_SLOTS", "ACTION_STATES", "CONT_FIELDS", "BINARY_FIELDS",
           "CAT_FIELDS", "BUTTON_BITS", "CTRL_ANALOG", "CTRL_PER_PLAYER", "CTRL_FEATURES", "STAGES", "CONT_INDEX",
           "BINARY_INDEX", "CAT_INDEX"]

FEATURES_VERSION = "1.0.0"
"""Version of this feature spec (the field layout, ``featurize`` and ``unfeaturize``). Features are derived from
stored frames when training reads them, so shards do not carry it; checkpoints do, and play, evaluation and
fine-tuning refuse a checkpoint whose major differs from this code's. Bump the major when a field's position, scale
or class count changes."""

PLAYERS = ("p0", "p1")
PROJECTILE_SLOTS = 4
"""Projectile slots of a ``melee_frames`` row, in order (the schema's ``shards_schema.melee.PROJECTILE_SLOTS``)."""
ACTION_STATES = 1024
"""Action-state classes (ranked data holds ids up to ~525; character-specific states start at 341)."""

_PLAYER_CONT = (("x", 100.0, 2.0), ("y", 100.0, 2.0), ("percent", 100.0, 10.0), ("shield", 60.0, 1.0),
                ("state_age", 100.0, 1.0), ("hitlag", 10.0, 1.0), ("vel_self_x_air", 5.0, 0.5),
                ("vel_self_y", 5.0, 0.5), ("vel_attack_x", 5.0, 0.5), ("vel_attack_y", 5.0, 0.5),
                ("vel_self_x_ground", 5.0, 0.5), ("nearest_dx", 100.0, 5.0), ("nearest_dy", 100.0, 5.0))
_SLOT_CONT = (("x", 100.0, 5.0), ("y", 100.0, 5.0), ("vx", 5.0, 0.5), ("vy", 5.0, 0.5))
CONT_FIELDS: tuple[tuple[str, float, float], ...] = (
    *((f"{p}.{name}", scale, step) for p in PLAYERS for name, scale, step in _PLAYER_CONT),
    *((f"proj{k}.{name}", scale, step) for k in range(PROJECTILE_SLOTS) for name, scale, step in _SLOT_CONT),
)
"""(name, value scale, change scale) in game units: the model reads value / value scale and predicts the next
frame's change / change scale (a frame moves a character ~1 unit; a value scale of 100 would make that 0.01)."""

BINARY_FIELDS: tuple[str, ...] = (
    *(f"{p}.{name}" for p in PLAYERS for name in ("airborne", "facing_right", "nearest_present")),
    *(f"proj{k}.present" for k in range(PROJECTILE_SLOTS)),
)

_PLAYER_CAT = (("action", ACTION_STATES), ("character", 40), ("jumps", 9), ("l_cancel", 4), ("hurtbox", 4),
               ("ground", 256), ("last_attack", 256), ("stocks", 9), ("combo", 33), ("nearest_type", 257))
_SLOT_CAT = (("type", 257), ("state", 257), ("owner", 6))
CAT_FIELDS: tuple[tuple[str, int], ...] = (
    *((f"{p}.{name}", classes) for p in PLAYERS for name, classes in _PLAYER_CAT),
    *((f"proj{k}.{name}", classes) for k in range(PROJECTILE_SLOTS) for name, classes in _SLOT_CAT),
    ("num_projectiles", 17),
)
"""(name, classes) including class 0 = null."""

BUTTON_BITS = (0x1, 0x2, 0x4, 0x8, 0x10, 0x20, 0x40, 0x100, 0x200, 0x400, 0x800, 0x1000)
"""D-left, D-right, D-down, D-up, Z, R, L, A, B, X, Y, Start."""
CTRL_ANALOG = ("main_x", "main_y", "c_x", "c_y", "trigger", "trigger_l", "trigger_r")
CTRL_PER_PLAYER = len(BUTTON_BITS) + len(CTRL_ANALOG)
"""Controller features of one player: 12 buttons in {0, 1}, then main_x, main_y, c_x, c_y in [-1, 1] and trigger,
trigger_l, trigger_r in [0, 1] (the layout of ``featurize``'s ``ctrl``, p0's half then p1's)."""
CTRL_FEATURES = len(PLAYERS) * CTRL_PER_PLAYER
STAGES = 64

CONT_INDEX = {name: i for i, (name, _, _) in enumerate(CONT_FIELDS)}
BINARY_INDEX = {name: i for i, name in enumerate(BINARY_FIELDS)}
CAT_INDEX = {name: i for i, (name, _) in enumerate(CAT_FIELDS)}

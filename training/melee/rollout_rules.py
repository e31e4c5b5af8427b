"""The rollout rules: what makes a frame the model proposes one the game could hold and the shard schema can store,
before it is fed back (``apply_rules``), and the frame type the rollout and the environment pass around.

State age advances by rule, positions stay inside the stage's blast zones, stocks 0-4 and never rising (percent back
to 0 on a lost stock), percent 0-999, shield 0-60, hitlag >= 0, fields the replay's version records are never null
and fields it does not record stay null, projectile slots and the nearest projectile are consistent with their
presence flags. Controllers are held to the ranges the shards store (``normalize_controller``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from models.world_model import FrameState
from shards_schema.melee_features import (
    BINARY_INDEX,
    BUTTON_BITS,
    CAT_FIELDS,
    CAT_INDEX,
    CONT_FIELDS,
    CONT_INDEX,
    CTRL_FEATURES,
    CTRL_PER_PLAYER,
    PLAYERS,
    PROJECTILE_SLOTS,
)

CTRL_LOW = np.array([0.0] * len(BUTTON_BITS) + [-1.0] * 4 + [0.0] * 3, np.float32)
CTRL_HIGH = np.ones(CTRL_PER_PLAYER, np.float32)

BLAST_ZONES: dict[int, tuple[float, float, float, float]] = {
    2: (-198.75, 198.75, 202.5, -146.25),  # Fountain of Dreams
    3: (-230.0, 230.0, 180.0, -111.0),  # Pokémon Stadium
    8: (-175.7, 173.6, 168.0, -91.0),  # Yoshi's Story
    28: (-255.0, 255.0, 250.0, -123.0),  # Dream Land N64
    31: (-224.0, 224.0, 200.0, -108.8),  # Battlefield
    32: (-246.0, 246.0, 188.0, -140.0),  # Final Destination
}
"""(left x, right x, top y, bottom y) in game units per Slippi stage id, for the legal stages: Magus420's measurements
as libmelee's ``melee/stages.py`` ``BLASTZONES`` lists them. Real replays hold a few frames just past a zone (the KO
frame: peppi's v0.1 game reaches x = 265 on Dream Land); a rollout's positions are held inside it."""
DEFAULT_BLAST_ZONE = (-1000.0, 1000.0, 1000.0, -1000.0)
"""Other stages: a generous box (about four times the legal stages' zones) that only stops runaway positions."""
MAX_STOCKS = 4
MAX_PERCENT = 999.0
MAX_SHIELD = 60.0


def blast_zone(stage: int) -> tuple[float, float, float, float]:
    """(left, right, top, bottom) of a Slippi stage id; ``DEFAULT_BLAST_ZONE`` for stages without a measured one."""
    return BLAST_ZONES.get(int(stage), DEFAULT_BLAST_ZONE)


# ---------------------------------------------------------------------------- feature indices the rules use
SCALE = np.array([scale for _, scale, _ in CONT_FIELDS], np.float32)
CLASSES = np.array([classes for _, classes in CAT_FIELDS], np.int64)
_POS_X = np.array([CONT_INDEX[f"{p}.x"] for p in PLAYERS] + [CONT_INDEX[f"proj{k}.x"]
                                                              for k in range(PROJECTILE_SLOTS)])
_POS_Y = np.array([CONT_INDEX[f"{p}.y"] for p in PLAYERS] + [CONT_INDEX[f"proj{k}.y"]
                                                              for k in range(PROJECTILE_SLOTS)])
_SLOT_CONT = [[CONT_INDEX[f"proj{k}.{n}"] for n in ("x", "y", "vx", "vy")] for k in range(PROJECTILE_SLOTS)]
_SLOT_CAT = [[CAT_INDEX[f"proj{k}.{n}"] for n in ("type", "state", "owner")] for k in range(PROJECTILE_SLOTS)]
SLOT_PRESENT = [BINARY_INDEX[f"proj{k}.present"] for k in range(PROJECTILE_SLOTS)]
_NEAR_PRESENT = [BINARY_INDEX[f"{p}.nearest_present"] for p in PLAYERS]
_NEAR_TYPE = [CAT_INDEX[f"{p}.nearest_type"] for p in PLAYERS]
_NEAR_CONT = [[CONT_INDEX[f"{p}.nearest_dx"], CONT_INDEX[f"{p}.nearest_dy"]] for p in PLAYERS]
_STEADY_CAT = np.array([i for i, (name, _) in enumerate(CAT_FIELDS)
                        if name == "num_projectiles" or (name.split(".")[0] in PLAYERS
                                                         and not name.endswith(".nearest_type"))])
"""Categorical fields recorded on every frame or on none (by the replay's version): never null where recorded."""
_BOUNDS = {"percent": (0.0, MAX_PERCENT), "shield": (0.0, MAX_SHIELD), "hitlag": (0.0, np.inf)}
_BOUNDED = np.array([CONT_INDEX[f"{p}.{name}"] for p in PLAYERS for name in _BOUNDS])
_BOUND_LOW = np.array([_BOUNDS[name][0] for _ in PLAYERS for name in _BOUNDS], np.float32)
_BOUND_HIGH = np.array([_BOUNDS[name][1] for _ in PLAYERS for name in _BOUNDS], np.float32)
_CAT_OFFSETS = np.concatenate([[0], np.cumsum(CLASSES)[:-1]])
_NON_NULL = torch.from_numpy(np.where(np.arange(CLASSES.max() - 1) < CLASSES[:, None] - 1,
                                      _CAT_OFFSETS[:, None] + 1 + np.arange(CLASSES.max() - 1), CLASSES.sum()))
"""(Nk, max classes - 1) positions of each field's non-null classes in the concatenated logits (padding points at
one -inf past the end)."""


def non_null_argmax(cat_logits: list[torch.Tensor]) -> torch.Tensor:
    """Each categorical field's most likely non-null class, from one frame's (1, 1, classes) logits → (Nk,)."""
    flat = torch.cat([logits.reshape(-1) for logits in cat_logits] + [cat_logits[0].new_full((1,), -torch.inf)])
    return flat[_NON_NULL.to(flat.device)].argmax(-1) + 1


@dataclass
class Frame:
    """One frame in model units (the layout of ``featurize``, one row): cont (Nc,) scaled values, cont_valid (Nc,),
    binary (Nb,) in {0, 1}, binary_valid (Nb,), cat (Nk,) classes (0 = null)."""

    cont: np.ndarray
    cont_valid: np.ndarray
    binary: np.ndarray
    binary_valid: np.ndarray
    cat: np.ndarray

    @classmethod
    def at(cls, features: dict[str, np.ndarray], t: int) -> Frame:
        return cls(**{k: np.array(features[k][t]) for k in ("cont", "cont_valid", "binary", "binary_valid", "cat")})

    def state(self, device=None) -> FrameState:
        """The frame as a (1, 1, ...) ``FrameState``."""
        return FrameState(cont=torch.as_tensor(self.cont, device=device)[None, None],
                          binary=torch.as_tensor(self.binary, device=device)[None, None],
                          cat=torch.as_tensor(self.cat, device=device)[None, None],
                          cont_valid=torch.as_tensor(self.cont_valid, device=device)[None, None])

    def value(self, name: str) -> float:
        """A continuous field in game units (``p0.percent``)."""
        i = CONT_INDEX[name]
        return float(self.cont[i] * SCALE[i])

    def stocks(self, player: int) -> int:
        return int(self.cat[CAT_INDEX[f"{PLAYERS[player]}.stocks"]]) - 1


def stack_frames(frames: list[Frame]) -> dict[str, np.ndarray]:
    return {k: np.stack([getattr(f, k) for f in frames]) for k in ("cont", "cont_valid", "binary", "binary_valid",
                                                                   "cat")}


@dataclass(frozen=True, kw_only=True)
class RolloutRules:
    """What the rollout holds fixed, read from the seed.

    Attributes:
        zone: (left, right, top, bottom) blast zone in game units.
        cont_valid: which continuous fields the replay's version records (presence-bound fields aside).
        binary_valid: which flags it records.
        cat_recorded: which steady categorical fields it records (class > 0 on the seed's last frame).
        projectiles: whether it records projectiles (Slippi 3.0+).
        owners: whether it records projectile owners, hence the nearest opponent projectile (Slippi 3.6+).
    """

    zone: tuple[float, float, float, float]
    cont_valid: np.ndarray
    binary_valid: np.ndarray
    cat_recorded: np.ndarray
    projectiles: bool
    owners: bool

    @classmethod
    def from_seed(cls, seed: dict) -> RolloutRules:
        last = Frame.at(seed, -1)
        projectiles = bool(last.binary_valid[SLOT_PRESENT[0]])
        version = (seed.get("game") or {}).get("slippi_version")
        if version:
            owners = projectiles and tuple(int(v) for v in version.split(".")[:2]) >= (3, 6)
        else:  # no version at hand: owners are recorded if any seed frame shows one
            owners = projectiles and bool((seed["cat"][:, [ids[2] for ids in _SLOT_CAT]] > 0).any()
                                          or (seed["binary"][:, _NEAR_PRESENT] > 0).any())
        recorded = np.zeros(len(CAT_FIELDS), bool)
        recorded[_STEADY_CAT] = last.cat[_STEADY_CAT] > 0
        return cls(zone=blast_zone(seed["stage"]), cont_valid=last.cont_valid.copy(),
                   binary_valid=last.binary_valid.copy(), cat_recorded=recorded, projectiles=projectiles,
                   owners=owners)


def apply_rules(prev: Frame, proposed: Frame, fallback_cat: np.ndarray, rules: RolloutRules) -> Frame:
    """The frame fed back and written: ``proposed`` (the model's most likely next frame) made legal.

    ``prev`` is the frame before (already legal), ``fallback_cat`` (Nk,) each field's most likely non-null class.
    Pure: no argument is changed."""
    cont, cat, binary = proposed.cont.astype(np.float32), proposed.cat.astype(np.int64), proposed.binary.copy()
    # a non-finite prediction keeps the previous value (the model never saw one; it must not spread)
    bad = ~np.isfinite(cont)
    cont[bad] = prev.cont[bad]
    # what the replay's version records stays recorded, what it does not stays null
    cont_valid = rules.cont_valid.copy()
    binary_valid = rules.binary_valid.copy()
    binary = np.where(binary_valid, (binary > 0.5).astype(np.float32), 0.0).astype(np.float32)
    steady = np.zeros(len(CAT_FIELDS), bool)
    steady[_STEADY_CAT] = True
    cat = np.where(steady & ~rules.cat_recorded, 0, cat)
    cat = np.where(rules.cat_recorded & (cat == 0), fallback_cat, cat)
    # projectile slots and the nearest projectile: present ⇔ non-null classes and recorded positions
    for k in range(PROJECTILE_SLOTS):
        present = rules.projectiles and binary[SLOT_PRESENT[k]] > 0.5
        binary[SLOT_PRESENT[k]] = float(present)
        kind, state, owner = _SLOT_CAT[k]
        if present:
            for i in (kind, state):
                cat[i] = cat[i] if cat[i] > 0 else fallback_cat[i]
            cat[owner] = cat[owner] if rules.owners else 0
        else:
            cat[[kind, state, owner]] = 0
            cont[_SLOT_CONT[k]] = 0.0
        cont_valid[_SLOT_CONT[k]] = present
    for p in range(len(PLAYERS)):
        present = rules.owners and binary[_NEAR_PRESENT[p]] > 0.5
        binary[_NEAR_PRESENT[p]] = float(present)
        t = _NEAR_TYPE[p]
        cat[t] = (cat[t] if cat[t] > 0 else fallback_cat[t]) if present else 0
        if not present:
            cont[_NEAR_CONT[p]] = 0.0
        cont_valid[_NEAR_CONT[p]] = present
    # bounds, in game units
    left, right, top, bottom = rules.zone
    cont[_POS_X] = np.clip(cont[_POS_X] * SCALE[_POS_X], left, right) / SCALE[_POS_X]
    cont[_POS_Y] = np.clip(cont[_POS_Y] * SCALE[_POS_Y], bottom, top) / SCALE[_POS_Y]
    cont[_BOUNDED] = np.clip(cont[_BOUNDED] * SCALE[_BOUNDED], _BOUND_LOW, _BOUND_HIGH) / SCALE[_BOUNDED]
    for player in PLAYERS:
        s = CAT_INDEX[f"{player}.stocks"]  # class = stocks + 1; stocks never rise during a game
        cat[s] = np.clip(min(cat[s], prev.cat[s]), 1, MAX_STOCKS + 1) if rules.cat_recorded[s] else 0
        if rules.cat_recorded[s] and cat[s] < prev.cat[s]:  # a stock lost: the next one starts at 0%
            cont[CONT_INDEX[f"{player}.percent"]] = 0.0
        # state age by rule: +1 frame in the same action, 0 in a new one (the value of 54% of the action changes
        # in the shared replays; 1 is 35%, -1 6%)
        a, age = CAT_INDEX[f"{player}.action"], CONT_INDEX[f"{player}.state_age"]
        cont[age] = (prev.cont[age] + 1.0 / SCALE[age]) if cat[a] == prev.cat[a] else 0.0
    cont = np.where(cont_valid, cont, 0.0).astype(np.float32)
    cat = np.clip(cat, 0, CLASSES - 1)
    return Frame(cont=cont, cont_valid=cont_valid, binary=binary, binary_valid=binary_valid, cat=cat)


def normalize_controller(ctrl: np.ndarray) -> np.ndarray:
    """Controller features as the shards store them: buttons pressed or not, axes inside their ranges."""
    ctrl = np.asarray(ctrl, np.float32).reshape(len(PLAYERS), CTRL_PER_PLAYER)
    ctrl = np.nan_to_num(ctrl, nan=0.0)
    buttons = (ctrl[:, :len(BUTTON_BITS)] > 0.5).astype(np.float32)
    analog = np.clip(ctrl[:, len(BUTTON_BITS):], CTRL_LOW[len(BUTTON_BITS):], CTRL_HIGH[len(BUTTON_BITS):])
    return np.concatenate([buttons, analog], axis=1).reshape(CTRL_FEATURES)



"""Play the Melee world model: roll it out from real seed frames, write the rollout as frame shards, measure its drift
against the real replay, and a two-player environment on top.

    python training/world_model_play.py --checkpoint RUN/.../state.pt --shards OUT/melee_frames/<version> \\
        --game-id first --seed-frames 60 --frames 300 --out runs/play
    python training/world_model_play.py --tiny --shards OUT/melee_frames/<version> --out runs/play   # untrained tiny

A rollout primes the model on S real frames with ``forward`` (keeping the backbone cache), then generates one frame
at a time with ``step``, feeding every prediction back. Before a generated frame is fed back, the rollout rules
(``apply_rules``) make it a frame the game could hold and the shard schema can store: state age advances by rule,
positions stay inside the stage's blast zones, stocks 0-4 and never rising (percent back to 0 on a lost stock),
percent 0-999, shield 0-60, hitlag >= 0, fields the replay's version records are never null and fields it does not
record stay null, projectile slots and the nearest projectile are consistent with their presence flags. Controllers
come from an array (the replay's own) or from one ``Policy`` per player.

The rollout is written as a ``melee_frames`` shard version (the seed frames, then the generated ones) through the
parse job's ``ShardWriter``; ``unfeaturize`` is the inverse of ``training.melee_windows.featurize`` for every field
the model carries (Nana and projectile spawn ids are not carried: Nana is null, a slot's spawn id is its slot index).
The CLI prints the drift table (position MAE, percent MAE, action and stocks accuracy over the first 60 and 300
generated frames, beside the copy-last-frame baseline) and, last, the published folder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # runs as a plain script and under `ray job submit --working-dir .`
    sys.path.insert(0, str(REPO_ROOT))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import torch  # noqa: E402

from models.world_model import (  # noqa: E402
    BINARY_FIELDS,
    BINARY_INDEX,
    BUTTON_BITS,
    CAT_FIELDS,
    CAT_INDEX,
    CONT_FIELDS,
    CONT_INDEX,
    CTRL_ANALOG,
    CTRL_FEATURES,
    PLAYERS,
    PROJECTILE_SLOTS,
    STAGES,
    FrameState,
    WorldModel,
)
from training.melee_windows import NO_GROUND, column_path, featurize  # noqa: E402

CTRL_PER_PLAYER = len(BUTTON_BITS) + len(CTRL_ANALOG)
"""Controller features of one player: 12 buttons in {0, 1}, then main_x, main_y, c_x, c_y in [-1, 1] and trigger,
trigger_l, trigger_r in [0, 1] (the layout of ``featurize``'s ``ctrl``, p0's half then p1's)."""
_CTRL_LOW = np.array([0.0] * len(BUTTON_BITS) + [-1.0] * 4 + [0.0] * 3, np.float32)
_CTRL_HIGH = np.ones(CTRL_PER_PLAYER, np.float32)

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
_SCALE = np.array([scale for _, scale, _ in CONT_FIELDS], np.float32)
_CLASSES = np.array([classes for _, classes in CAT_FIELDS], np.int64)
_POS_X = np.array([CONT_INDEX[f"{p}.x"] for p in PLAYERS] + [CONT_INDEX[f"proj{k}.x"]
                                                              for k in range(PROJECTILE_SLOTS)])
_POS_Y = np.array([CONT_INDEX[f"{p}.y"] for p in PLAYERS] + [CONT_INDEX[f"proj{k}.y"]
                                                              for k in range(PROJECTILE_SLOTS)])
_SLOT_CONT = [[CONT_INDEX[f"proj{k}.{n}"] for n in ("x", "y", "vx", "vy")] for k in range(PROJECTILE_SLOTS)]
_SLOT_CAT = [[CAT_INDEX[f"proj{k}.{n}"] for n in ("type", "state", "owner")] for k in range(PROJECTILE_SLOTS)]
_SLOT_PRESENT = [BINARY_INDEX[f"proj{k}.present"] for k in range(PROJECTILE_SLOTS)]
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
_CAT_OFFSETS = np.concatenate([[0], np.cumsum(_CLASSES)[:-1]])
_NON_NULL = torch.from_numpy(np.where(np.arange(_CLASSES.max() - 1) < _CLASSES[:, None] - 1,
                                      _CAT_OFFSETS[:, None] + 1 + np.arange(_CLASSES.max() - 1), _CLASSES.sum()))
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
        return float(self.cont[i] * _SCALE[i])

    def stocks(self, player: int) -> int:
        return int(self.cat[CAT_INDEX[f"{PLAYERS[player]}.stocks"]]) - 1


def _stack(frames: list[Frame]) -> dict[str, np.ndarray]:
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
        projectiles = bool(last.binary_valid[_SLOT_PRESENT[0]])
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
        present = rules.projectiles and binary[_SLOT_PRESENT[k]] > 0.5
        binary[_SLOT_PRESENT[k]] = float(present)
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
    cont[_POS_X] = np.clip(cont[_POS_X] * _SCALE[_POS_X], left, right) / _SCALE[_POS_X]
    cont[_POS_Y] = np.clip(cont[_POS_Y] * _SCALE[_POS_Y], bottom, top) / _SCALE[_POS_Y]
    cont[_BOUNDED] = np.clip(cont[_BOUNDED] * _SCALE[_BOUNDED], _BOUND_LOW, _BOUND_HIGH) / _SCALE[_BOUNDED]
    for player in PLAYERS:
        s = CAT_INDEX[f"{player}.stocks"]  # class = stocks + 1; stocks never rise during a game
        cat[s] = np.clip(min(cat[s], prev.cat[s]), 1, MAX_STOCKS + 1) if rules.cat_recorded[s] else 0
        if rules.cat_recorded[s] and cat[s] < prev.cat[s]:  # a stock lost: the next one starts at 0%
            cont[CONT_INDEX[f"{player}.percent"]] = 0.0
        # state age by rule: +1 frame in the same action, 0 in a new one (the value of 54% of the action changes
        # in the shared replays; 1 is 35%, -1 6%)
        a, age = CAT_INDEX[f"{player}.action"], CONT_INDEX[f"{player}.state_age"]
        cont[age] = (prev.cont[age] + 1.0 / _SCALE[age]) if cat[a] == prev.cat[a] else 0.0
    cont = np.where(cont_valid, cont, 0.0).astype(np.float32)
    cat = np.clip(cat, 0, _CLASSES - 1)
    return Frame(cont=cont, cont_valid=cont_valid, binary=binary, binary_valid=binary_valid, cat=cat)


def normalize_controller(ctrl: np.ndarray) -> np.ndarray:
    """Controller features as the shards store them: buttons pressed or not, axes inside their ranges."""
    ctrl = np.asarray(ctrl, np.float32).reshape(len(PLAYERS), CTRL_PER_PLAYER)
    ctrl = np.nan_to_num(ctrl, nan=0.0)
    buttons = (ctrl[:, :len(BUTTON_BITS)] > 0.5).astype(np.float32)
    analog = np.clip(ctrl[:, len(BUTTON_BITS):], _CTRL_LOW[len(BUTTON_BITS):], _CTRL_HIGH[len(BUTTON_BITS):])
    return np.concatenate([buttons, analog], axis=1).reshape(CTRL_FEATURES)


# ---------------------------------------------------------------------------- controllers
class Policy(Protocol):
    """Plays one port of a rollout."""

    def act(self, frame: Frame, player: int) -> np.ndarray:
        """Controller features (``CTRL_PER_PLAYER``,) of ``player`` (0 = p0, 1 = p1) for the next frame, seeing the
        current one."""
        ...


class RandomPolicy:
    """Random inputs held for a few frames (a human holds a stick or button for several frames, not one).

    Each frame, with probability 1 / ``hold_frames``, draws new inputs: each button pressed with ``press_prob``
    (Start never), the main stick uniform in the square, the c-stick pushed with ``press_prob``, triggers released.
    """

    def __init__(self, seed: int = 0, *, press_prob: float = 0.08, hold_frames: int = 6):
        self.rng = np.random.default_rng(seed)
        self.press_prob, self.hold_frames = press_prob, hold_frames
        self.held = np.zeros(CTRL_PER_PLAYER, np.float32)

    def act(self, frame: Frame, player: int) -> np.ndarray:
        if self.rng.random() < 1.0 / self.hold_frames:
            buttons = (self.rng.random(len(BUTTON_BITS)) < self.press_prob).astype(np.float32)
            buttons[BUTTON_BITS.index(0x1000)] = 0.0  # Start pauses the game
            main = self.rng.uniform(-1.0, 1.0, 2)
            c_stick = self.rng.uniform(-1.0, 1.0, 2) * (self.rng.random() < self.press_prob)
            self.held = np.concatenate([buttons, main, c_stick, np.zeros(3)]).astype(np.float32)
        return self.held.copy()


# ---------------------------------------------------------------------------- the model, one frame at a time
class WorldModelSim:
    """A world model primed on real seed frames, advanced one frame at a time under the rollout rules.

    Priming runs ``forward`` over seed frames 0..S-2 with their next controllers (the recorded ones) and keeps the
    cache; the last seed frame is the current frame, whose next controllers are the first ones ``advance`` is given
    (a policy chooses them seeing that frame). Each ``advance`` is one ``step``."""

    def __init__(self, model: WorldModel, seed: dict):
        self.model = model.eval()
        self.device = next(model.parameters()).device
        self.rules = RolloutRules.from_seed(seed)
        self.frame = Frame.at(seed, -1)
        self.stage = torch.full((1, 1), min(int(seed["stage"]), STAGES - 1), dtype=torch.long, device=self.device)
        n = len(seed["cat"])
        with torch.no_grad():
            if n > 1:
                states = FrameState(**{k: torch.as_tensor(seed[k][:-1], device=self.device)[None]
                                       for k in ("cont", "binary", "cat", "cont_valid")})  # (1, S-1, ...)
                ctrl = torch.as_tensor(seed["ctrl"][1:], device=self.device)[None]  # (1, S-1, CTRL_FEATURES)
                _, self.cache = model(states, ctrl, self.stage.expand(1, n - 1))
            else:
                self.cache = model.empty_cache(1, self.device)

    def advance(self, ctrl_next: np.ndarray) -> Frame:
        """The next frame, given both controllers' features (``CTRL_FEATURES``,) for it."""
        ctrl = torch.as_tensor(normalize_controller(ctrl_next), device=self.device)[None, None]  # (1, 1, C)
        current = self.frame.state(self.device)
        with torch.no_grad():
            pred, self.cache = self.model.step(current, ctrl, self.stage, self.cache)
            guess = pred.next_state(current)
            fallback = non_null_argmax(pred.cat_logits)
        proposed = Frame(cont=guess.cont[0, 0].cpu().numpy(), cont_valid=self.frame.cont_valid,
                         binary=guess.binary[0, 0].cpu().numpy(), binary_valid=self.frame.binary_valid,
                         cat=guess.cat[0, 0].cpu().numpy())
        self.frame = apply_rules(self.frame, proposed, fallback.cpu().numpy(), self.rules)
        return self.frame


@dataclass
class Rollout:
    """Seed frames then generated frames of one rollout.

    Attributes:
        features: ``featurize`` layout over all S + N frames (cont, cont_valid, binary, binary_valid, cat, ctrl).
        seed_frames: S.
        stage: Slippi stage id.
        game: the seed game's index row (what the written games index copies), possibly empty.
        seed_start: frame number of the first seed frame.
    """

    features: dict[str, np.ndarray]
    seed_frames: int
    stage: int
    game: dict = field(default_factory=dict)
    seed_start: int = -123

    @property
    def generated(self) -> dict[str, np.ndarray]:
        return {k: v[self.seed_frames:] for k, v in self.features.items()}


def rollout(model: WorldModel, seed: dict, controllers: np.ndarray | tuple[Policy, Policy], num_frames: int) -> Rollout:
    """Generate ``num_frames`` frames after the seed, feeding every prediction back under the rollout rules.

    ``seed``: ``featurize`` arrays of frames 0..S-1 of one game and ``stage`` (optional: ``game``, its index row, and
    ``seed_start``, the first seed frame's number). ``controllers``: (N >= num_frames, CTRL_FEATURES) inputs of the
    generated frames (row i produces generated frame i), or one ``Policy`` per player."""
    if isinstance(controllers, np.ndarray) and (controllers.ndim != 2 or controllers.shape[1] != CTRL_FEATURES
                                                or len(controllers) < num_frames):
        raise ValueError(f"controllers must be ({num_frames}, {CTRL_FEATURES}), got {controllers.shape}")
    sim = WorldModelSim(model, seed)
    frames, ctrls = [], []
    for i in range(num_frames):
        if isinstance(controllers, np.ndarray):
            ctrl = controllers[i]
        else:
            ctrl = np.concatenate([controllers[p].act(sim.frame, p) for p in range(len(PLAYERS))])
        ctrl = normalize_controller(ctrl)
        frames.append(sim.advance(ctrl))
        ctrls.append(ctrl)
    generated = _stack(frames) if frames else {k: seed[k][:0] for k in ("cont", "cont_valid", "binary",
                                                                        "binary_valid", "cat")}
    generated["ctrl"] = np.stack(ctrls) if ctrls else seed["ctrl"][:0]
    features = {k: np.concatenate([seed[k], generated[k].astype(seed[k].dtype)]) for k in generated}
    return Rollout(features=features, seed_frames=len(seed["cat"]), stage=int(seed["stage"]),
                   game=dict(seed.get("game") or {}), seed_start=int(seed.get("seed_start", -123)))


def load_seed(version, game_id: str, seed_start: int | None, seed_frames: int) -> dict:
    """Seed arrays of ``seed_frames`` frames of a game from a shard version (``seed_start``: a frame number, None:
    the game's first frame), with its stage and index row."""
    game = game_row(version, game_id)
    start = game["first_frame"] if seed_start is None else seed_start
    features = featurize(version.window(game["game_id"], start, seed_frames))
    return {**features, "stage": int(game["stage"]), "game": game, "seed_start": int(start)}


def game_row(version, game_id: str) -> dict:
    """The index row of ``game_id`` (``first``: the first game of the index)."""
    index = version.index().to_pylist()
    if not index:
        raise ValueError(f"{version.path} holds no games")
    if game_id == "first":
        return index[0]
    for row in index:
        if row["game_id"] == game_id:
            return row
    raise KeyError(f"game {game_id!r} is not in {version.path}; list them with `open_version(path).index()`")


# ---------------------------------------------------------------------------- rollout → melee_frames rows
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
    children = [_null_struct(n, f.type) if pa.types.is_struct(f.type) else
                pa.array(np.zeros(n, f.type.to_pandas_dtype())).cast(f.type) for f in arrow_type]
    return pa.StructArray.from_arrays(children, fields=list(arrow_type), mask=pa.array(np.ones(n, bool)))


def _build(f: pa.Field, path: tuple[str, ...], leaves: dict, structs: dict, n: int) -> pa.Array:
    """One column of ``FRAMES_SCHEMA`` from leaf (values, validity) arrays and struct validities, by path."""
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


def rollout_game_id(seed_game_id: str, config: dict) -> str:
    """``rollout-<sha256 of the seed game id and the rollout's config>``: the same rollout gets the same id."""
    identity = json.dumps({"seed_game_id": seed_game_id, **config}, sort_keys=True, default=str)
    return "rollout-" + hashlib.sha256(identity.encode()).hexdigest()


def _index_row(r: Rollout, game_id: str, table: pa.Table) -> dict:
    g = r.game
    stocks = [int(r.features["cat"][-1, CAT_INDEX[f"{p}.stocks"]]) - 1 for p in PLAYERS]
    ports = list(g.get("ports") or [0, 1])
    winner = ports[0] if stocks[0] > 0 and stocks[1] == 0 else ports[1] if stocks[1] > 0 and stocks[0] == 0 else None
    characters = [int(r.features["cat"][0, CAT_INDEX[f"{p}.character"]]) - 1 for p in PLAYERS]
    return {
        "game_id": game_id, "source": "world-model-rollout",
        "input_id": f"{g.get('game_id', 'seed')}@{r.seed_start}+{r.seed_frames}",
        "slippi_version": g.get("slippi_version", "0.0.0"), "stage": r.stage, "ports": ports,
        "characters_external": list(g.get("characters_external") or characters), "characters_internal": characters,
        "player_types": list(g.get("player_types") or [0, 0]), "start_time": None, "end_method": None,
        "winner_port": winner, "first_frame": r.seed_start, "num_frames": table.num_rows, "rollback_frames": 0,
        "row_start": 0, "num_rows": table.num_rows,
    }


def write_rollouts(rollouts: list[tuple[Rollout, str]], out: str | Path, *, dataset: str, source_revision: str,
                   config: dict):
    """Publish (rollout, game id) pairs as one ``melee_frames`` shard version under ``OUT/<dataset>/`` with the parse
    job's ``ShardWriter`` (games index, empty quarantine, manifest last). Returns its ``PublishResult``."""
    import hashlib

    from pipelines.stages import InputRecord
    from pipelines.writer import FRAME_PARQUET_OPTIONS, ShardWriter, VersionSpec
    from shards_schema.melee import FRAMES_SCHEMA, GAMES_SCHEMA
    from shards_schema.versions import MELEE_FRAMES

    seeds = "".join(f"{game_id}@{r.seed_start}+{r.seed_frames}\n" for r, game_id in rollouts)
    spec = VersionSpec(out_root=str(out), dataset=dataset, code=MELEE_FRAMES, source="world-model-rollout",
                       source_revision=source_revision, config=config,
                       planned_inputs=hashlib.sha256(seeds.encode()).hexdigest())
    writer = ShardWriter(spec, schema=FRAMES_SCHEMA, index_schema=GAMES_SCHEMA, shard_size_bytes=128 << 20,
                         parquet_options=FRAME_PARQUET_OPTIONS)
    try:
        for r, game_id in rollouts:
            ports = tuple(r.game.get("ports") or (0, 1))
            table = unfeaturize(r.features, game_id=game_id, first_frame=r.seed_start, ports=ports)
            index_row = _index_row(r, game_id, table)
            writer.add_input(InputRecord(input_id=index_row["input_id"], source="world-model-rollout",
                                         dedupe_key=game_id, num_rows=table.num_rows, index_rows=[index_row]), table)
        return writer.publish()
    except BaseException:
        writer.abort()
        raise


# ---------------------------------------------------------------------------- drift against the real replay
@dataclass(frozen=True, kw_only=True)
class DriftRow:
    """Errors of a rollout against the real frames, over the first ``frames`` generated frames.

    Attributes:
        predictor: ``world model`` or ``copy last frame``.
        horizon: frames asked for.
        frames: frames compared (fewer than ``horizon`` where the game or the rollout ends first).
        position_mae: mean |error| of x and y of both players, game units.
        percent_mae: mean |error| of both players' percent.
        action_acc: share of (frame, player) with the right action state.
        stocks_acc: share of (frame, player) with the right stocks.
    """

    predictor: str
    horizon: int
    frames: int
    position_mae: float
    percent_mae: float
    action_acc: float
    stocks_acc: float


def drift(generated: dict[str, np.ndarray], real: dict[str, np.ndarray], horizon: int,
          predictor: str = "world model") -> DriftRow:
    """Drift of generated frames against the real frames at the same frame numbers (both ``featurize`` arrays
    starting at the first generated frame)."""
    n = min(horizon, len(generated["cat"]), len(real["cat"]))
    if n == 0:
        nan = float("nan")
        return DriftRow(predictor=predictor, horizon=horizon, frames=0, position_mae=nan, percent_mae=nan,
                        action_acc=nan, stocks_acc=nan)

    def game_units(features, names):
        idx = [CONT_INDEX[name] for name in names]
        return features["cont"][:n, idx] * _SCALE[idx]

    positions = [f"{p}.{axis}" for p in PLAYERS for axis in ("x", "y")]
    percents = [f"{p}.percent" for p in PLAYERS]
    actions = [CAT_INDEX[f"{p}.action"] for p in PLAYERS]
    stocks = [CAT_INDEX[f"{p}.stocks"] for p in PLAYERS]
    return DriftRow(
        predictor=predictor, horizon=horizon, frames=n,
        position_mae=float(np.abs(game_units(generated, positions) - game_units(real, positions)).mean()),
        percent_mae=float(np.abs(game_units(generated, percents) - game_units(real, percents)).mean()),
        action_acc=float((generated["cat"][:n, actions] == real["cat"][:n, actions]).mean()),
        stocks_acc=float((generated["cat"][:n, stocks] == real["cat"][:n, stocks]).mean()),
    )


def copy_last_frame(seed: dict, num_frames: int) -> dict[str, np.ndarray]:
    """The baseline: the seed's last frame held for ``num_frames`` frames."""
    return {k: np.repeat(seed[k][-1:], num_frames, axis=0) for k in ("cont", "cont_valid", "binary", "binary_valid",
                                                                     "cat", "ctrl")}


def drift_table(r: Rollout, seed: dict, real: dict[str, np.ndarray], horizons: list[int]) -> list[DriftRow]:
    """The rollout's and the copy-last-frame baseline's drift at each horizon."""
    generated = r.generated
    copy = copy_last_frame(seed, len(generated["cat"]))
    return [row for h in horizons for row in (drift(generated, real, h), drift(copy, real, h, "copy last frame"))]


def format_drift(rows: list[DriftRow]) -> str:
    lines = [f"{'predictor':<16} {'horizon':>7} {'frames':>6} {'position MAE':>12} {'percent MAE':>11} "
             f"{'action acc':>10} {'stocks acc':>10}"]
    for r in rows:
        lines.append(f"{r.predictor:<16} {r.horizon:>7} {r.frames:>6} {r.position_mae:>12.2f} {r.percent_mae:>11.2f} "
                     f"{r.action_acc:>10.3f} {r.stocks_acc:>10.3f}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- the command
@dataclass(frozen=True, kw_only=True)
class PlayConfig:
    """Configuration of a world-model rollout against a real game.

    Attributes:
        checkpoint: the world model's state.pt (training/world_model.py; a local path or a URI), or ``untrained``
            for a freshly initialized model of --preset (tests, demo).
        shards: the melee_frames shard version holding the seed game.
        out: output root; the rollout is published under OUT/<dataset>/<version>/.
        game_id: the seed game's id, or ``first`` (the first game of the version's index).
        seed_start: frame number of the first seed frame (default: the game's first frame, -123).
        seed_frames: real frames the model is primed on (S).
        frames: frames to generate (N).
        controllers: ``replay`` (the game's recorded inputs; neutral past its end) or ``random`` (RandomPolicy).
        horizons: generated-frame horizons of the drift table.
        preset: model size of an ``untrained`` checkpoint (tiny or base).
        seed: seed of an untrained model and of random controllers.
        dataset: dataset folder name under OUT.
        torch_threads: intra-op threads (0: torch's default). Stepping one game is latency-bound: on the shared
            2-core machine one GELU over a (1, 1, 64) frame took 15.6 ms with 2 OpenMP threads and 0.035 ms with 1.
    """

    checkpoint: str
    shards: str
    out: str
    game_id: str = "first"
    seed_start: int | None = None
    seed_frames: int = 60
    frames: int = 300
    controllers: str = "replay"
    horizons: list[int] = field(default_factory=lambda: [60, 300])
    preset: str = "base"
    seed: int = 0
    dataset: str = "melee_rollouts"
    torch_threads: int = 1

    def __post_init__(self):
        if self.seed_frames < 1 or self.frames < 1:
            raise ValueError("--seed-frames and --frames must be at least 1")
        if self.controllers not in ("replay", "random"):
            raise ValueError("--controllers must be replay or random")
        if not self.horizons or min(self.horizons) < 1:
            raise ValueError("--horizons must be positive frame counts")

    @classmethod
    def tiny(cls, *, shards: str, out: str, **overrides) -> PlayConfig:
        """An untrained tiny model: tests and the demo."""
        return cls(shards=shards, out=out, **{"checkpoint": "untrained", "preset": "tiny", **overrides})

    def output_config(self) -> dict:
        """The fields that shape the rollout (they enter its game id and version)."""
        keep = {"seed_start", "seed_frames", "frames", "controllers", "preset", "seed"}
        return {k: v for k, v in dataclasses.asdict(self).items() if k in keep}


def load_play_model(cfg: PlayConfig) -> tuple[WorldModel, str]:
    """(model, identity): a checkpoint's model and its sha256, or an untrained one of ``cfg.preset``."""
    from models.world_model import WorldModelConfig
    from shards_schema.reader import sha256_file
    from training.world_model import load_model

    if cfg.checkpoint == "untrained":
        torch.manual_seed(cfg.seed)
        return WorldModel(WorldModelConfig.preset(cfg.preset)).eval(), f"untrained-{cfg.preset}-seed{cfg.seed}"
    return load_model(cfg.checkpoint), f"sha256:{sha256_file(cfg.checkpoint)}"


def replay_controllers(version, game: dict, first_frame: int, num_frames: int) -> np.ndarray:
    """The game's recorded controller features of ``num_frames`` frames from ``first_frame``; neutral past its end."""
    available = max(0, min(num_frames, game["first_frame"] + game["num_rows"] - first_frame))
    out = np.zeros((num_frames, CTRL_FEATURES), np.float32)
    if available:
        out[:available] = featurize(version.window(game["game_id"], first_frame, available))["ctrl"]
    return out


def real_frames(version, game: dict, first_frame: int, num_frames: int) -> dict[str, np.ndarray]:
    """The real game's ``featurize`` arrays of up to ``num_frames`` frames from ``first_frame``."""
    available = max(0, min(num_frames, game["first_frame"] + game["num_rows"] - first_frame))
    return featurize(version.window(game["game_id"], first_frame, available))


def run(cfg: PlayConfig, *, log=print):
    """Seed, roll out, publish and measure; returns (PublishResult, drift rows)."""
    from shards_schema.reader import open_version

    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    version = open_version(cfg.shards)
    model, model_id = load_play_model(cfg)
    game = game_row(version, cfg.game_id)
    seed = load_seed(version, game["game_id"], cfg.seed_start, cfg.seed_frames)
    first_generated = seed["seed_start"] + cfg.seed_frames
    if cfg.controllers == "replay":
        controllers = replay_controllers(version, game, first_generated, cfg.frames)
    else:
        controllers = (RandomPolicy(cfg.seed), RandomPolicy(cfg.seed + 1))
    r = rollout(model, seed, controllers, cfg.frames)
    config = {**cfg.output_config(), "seed_start": seed["seed_start"], "model": model_id,
              "seed_version": version.manifest.version}
    game_id = rollout_game_id(game["game_id"], config)
    published = write_rollouts([(r, game_id)], cfg.out, dataset=cfg.dataset, source_revision=model_id,
                               config={**config, "seed_game_id": game["game_id"]})
    rows = drift_table(r, seed, real_frames(version, game, first_generated, cfg.frames), cfg.horizons)
    log(f"[play] {model_id}: seed {game['input_id']} ({game['game_id'][:12]}…) frames {seed['seed_start']}.."
        f"{first_generated - 1}, stage {game['stage']}; {cfg.frames} frames generated with {cfg.controllers} "
        "controllers")
    log(format_drift(rows))
    log(str(published.path))
    return published, rows


# ---------------------------------------------------------------------------- a two-player environment
class MeleeWorldEnv:
    """Two players on the world model, in the shape of the gymnasium API.

    Not a ``gymnasium.Env`` subclass: a two-player step returns a pair of rewards, which the single-agent API (and
    its checker and wrappers) would read as one. ``reset(seed=...)`` → (obs, info); ``step((ctrl_p0, ctrl_p1))`` →
    (obs, (reward_p0, reward_p1), terminated, truncated, info); ``action_space`` and ``observation_space`` are
    gymnasium spaces.

    ``reset`` picks a game of the shard version and a window of ``seed_frames`` real frames (both with the
    environment's RNG), primes the model on it; each ``step`` generates one frame. Reward of p0 =
    ``reward_per_percent`` × (damage dealt − damage taken, in percent) + stocks taken − stocks lost; p1's is its
    negative (zero-sum). Terminated when a player's stocks reach 0; truncated after ``max_frames`` steps. The
    observation is the frame in model units, the same for both players (Melee hides nothing). One step is one
    batch-1 model step: ``torch.set_num_threads(1)`` makes it fastest on CPU (see ``PlayConfig.torch_threads``).
    """

    metadata = {"render_modes": []}

    def __init__(self, model: WorldModel, shards, *, seed_frames: int = 60, max_frames: int = 3600,
                 reward_per_percent: float = 0.01, games: list[str] | None = None):
        from gymnasium import spaces

        from shards_schema.reader import ShardVersion, open_version

        self.model = model.eval()
        self.version = shards if isinstance(shards, ShardVersion) else open_version(shards)
        self.seed_frames, self.max_frames, self.reward_per_percent = seed_frames, max_frames, reward_per_percent
        keep = set(games) if games is not None else None
        self.games = [g for g in self.version.index().to_pylist()
                      if g["num_rows"] >= seed_frames and (keep is None or g["game_id"] in keep)]
        if not self.games:
            raise ValueError(f"no game of {self.version.path} has {seed_frames} frames to seed from")
        player = spaces.Box(_CTRL_LOW, _CTRL_HIGH, dtype=np.float32)
        self.action_space = spaces.Tuple((player, player))
        self.observation_space = spaces.Dict({
            "cont": spaces.Box(-np.inf, np.inf, (len(CONT_FIELDS),), np.float32),
            "cont_valid": spaces.MultiBinary(len(CONT_FIELDS)),
            "binary": spaces.MultiBinary(len(BINARY_FIELDS)),
            "binary_valid": spaces.MultiBinary(len(BINARY_FIELDS)),
            "cat": spaces.MultiDiscrete(_CLASSES),
        })
        self.np_random = np.random.default_rng()
        self._sim: WorldModelSim | None = None
        self._frames = 0
        self._done = True
        self._info: dict = {}

    @staticmethod
    def _obs(frame: Frame) -> dict[str, np.ndarray]:
        return {"cont": frame.cont.astype(np.float32), "cont_valid": frame.cont_valid.astype(np.int8),
                "binary": frame.binary.astype(np.int8), "binary_valid": frame.binary_valid.astype(np.int8),
                "cat": frame.cat.astype(np.int64)}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        """``options``: ``game_id`` and ``seed_start`` (a frame number) pin the seed window."""
        from gymnasium.utils import seeding

        if seed is not None or self._sim is None:
            self.np_random, _ = seeding.np_random(seed)
        options = options or {}
        for _ in range(16):  # a window where both players still have stocks
            game = (game_row(self.version, options["game_id"]) if "game_id" in options
                    else self.games[int(self.np_random.integers(len(self.games)))])
            start = options.get("seed_start")
            if start is None:
                start = game["first_frame"] + int(self.np_random.integers(game["num_rows"] - self.seed_frames + 1))
            seed_arrays = load_seed(self.version, game["game_id"], start, self.seed_frames)
            last = Frame.at(seed_arrays, -1)
            if min(last.stocks(0), last.stocks(1)) > 0 or "seed_start" in options:
                break
        self._sim = WorldModelSim(self.model, seed_arrays)
        self._frames, self._done = 0, False
        self._info = {"game_id": game["game_id"], "seed_start": start, "stage": int(game["stage"])}
        return self._obs(self._sim.frame), self._frame_info(self._sim.frame)

    def _frame_info(self, frame: Frame) -> dict:
        return {**self._info, "frame": self._info["seed_start"] + self.seed_frames - 1 + self._frames,
                "percent": (frame.value("p0.percent"), frame.value("p1.percent")),
                "stocks": (frame.stocks(0), frame.stocks(1))}

    def step(self, action) -> tuple[dict, tuple[float, float], bool, bool, dict]:
        if self._sim is None or self._done:
            raise RuntimeError("call reset() before step() (the episode ended or never started)")
        before = self._sim.frame
        after = self._sim.advance(np.concatenate([np.asarray(a, np.float32).reshape(CTRL_PER_PLAYER)
                                                  for a in action]))
        self._frames += 1
        reward = self.reward(before, after)
        terminated = min(after.stocks(0), after.stocks(1)) <= 0
        truncated = not terminated and self._frames >= self.max_frames
        self._done = terminated or truncated
        return self._obs(after), (reward, -reward), terminated, truncated, self._frame_info(after)

    def reward(self, before: Frame, after: Frame) -> float:
        """p0's reward for one frame (p1's is its negative)."""
        damage = [max(0.0, after.value(f"{p}.percent") - before.value(f"{p}.percent")) for p in PLAYERS]
        lost = [max(0, before.stocks(i) - after.stocks(i)) for i in range(len(PLAYERS))]
        return float(self.reward_per_percent * (damage[1] - damage[0]) + (lost[1] - lost[0]))

    def close(self) -> None:
        self._sim = None


def main(argv: list[str] | None = None) -> None:
    from pipelines.cli import parse_config

    run(parse_config(PlayConfig, argv))


if __name__ == "__main__":
    main()

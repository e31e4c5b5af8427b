"""Roll the Melee world model out from real seed frames, write the rollout as frame shards, and measure its drift
against the real replay.

A rollout primes the model on S real frames with ``forward`` (keeping the backbone cache), then generates one frame
at a time with ``step``, feeding every prediction back after the rollout rules
(``training/melee/rollout_rules.py``) have made it legal. Controllers come from an array (the replay's own) or from
one ``Policy`` per player. The rollout is written as a ``melee_frames`` shard version (the seed frames, then the
generated ones) through the parse job's ``ShardWriter`` with ``unfeaturize`` (``pipelines/melee/features.py``). Drift:
position MAE, percent MAE, action and stocks accuracy over the first frames generated, beside the copy-last-frame
baseline.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch

from models.world_model import FrameState, WorldModel
from pipelines.melee.features import featurize, unfeaturize
from pipelines.melee.slp import FRAME_PARQUET_OPTIONS
from pipelines.stages import InputRecord
from pipelines.writer.naming import VersionSpec
from pipelines.writer.publish import ShardWriter
from shards_schema.melee import CODE_VERSIONS as MELEE_FRAMES
from shards_schema.melee import FRAMES_SCHEMA, GAMES_SCHEMA
from shards_schema.melee_features import (
    BUTTON_BITS,
    CAT_INDEX,
    CONT_INDEX,
    CTRL_FEATURES,
    CTRL_PER_PLAYER,
    PLAYERS,
    STAGES,
)
from training.melee.rollout_rules import (
    SCALE,
    Frame,
    RolloutRules,
    apply_rules,
    non_null_argmax,
    normalize_controller,
    stack_frames,
)

if TYPE_CHECKING:
    import pyarrow as pa


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
    generated = stack_frames(frames) if frames else {k: seed[k][:0] for k in ("cont", "cont_valid", "binary",
                                                                        "binary_valid", "cat")}
    generated["ctrl"] = np.stack(ctrls) if ctrls else seed["ctrl"][:0]
    features = {k: np.concatenate([seed[k], generated[k].astype(seed[k].dtype)]) for k in generated}
    return Rollout(features=features, seed_frames=len(seed["cat"]), stage=int(seed["stage"]),
                   game=dict(seed.get("game") or {}), seed_start=int(seed.get("seed_start", -123)))


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
        return features["cont"][:n, idx] * SCALE[idx]

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

"""A two-player environment on the Melee world model (``MeleeWorldEnv``), in the shape of the gymnasium API."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding

from models.world_model import WorldModel
from shards_schema.melee_features import BINARY_FIELDS, CONT_FIELDS, CTRL_PER_PLAYER, PLAYERS
from shards_schema.reader import ShardVersion, open_version
from training.melee.rollout_rules import CLASSES, CTRL_HIGH, CTRL_LOW, Frame
from training.melee.world_model_rollout import WorldModelSim, game_row, load_seed


@dataclass(frozen=True)
class FrameOutcome:
    """What one frame did to each player (index 0 is p0).

    Attributes:
        damage: percent each player took, counted above the highest percent it had reached in its current stock.
        stocks_lost: stocks each player lost.
        highs: each player's highest percent in its current stock after the frame (the next frame's baseline).
    """

    damage: tuple[float, float]
    stocks_lost: tuple[int, int]
    highs: tuple[float, float]


def frame_outcome(highs: tuple[float, float], before: Frame, after: Frame) -> FrameOutcome:
    """One frame's damage and lost stocks, from the previous highs (a reset's are the seed frame's percents).

    Damage counts only a rise above the player's highest percent in its current stock. In the game percent never
    falls within a stock (items off, as in competitive play), but a world model's percent wobbles from frame to
    frame, and counting every rise would pay for each dip and recovery as a new hit. A lost stock resets the
    player's high to its new percent and counts no damage on that frame."""
    damage, lost, new_highs = [], [], []
    for i, p in enumerate(PLAYERS):
        percent = after.value(f"{p}.percent")
        stocks_lost = max(0, before.stocks(i) - after.stocks(i))
        lost.append(stocks_lost)
        if stocks_lost:
            damage.append(0.0)
            new_highs.append(percent)
        else:
            damage.append(max(0.0, percent - highs[i]))
            new_highs.append(max(highs[i], percent))
    return FrameOutcome(damage=(damage[0], damage[1]), stocks_lost=(lost[0], lost[1]),
                        highs=(new_highs[0], new_highs[1]))


def zero_sum_reward(outcome: FrameOutcome, reward_per_percent: float) -> float:
    """p0's reward for a frame (p1's is its negative): ``reward_per_percent`` × (damage dealt − damage taken) +
    stocks taken − stocks lost."""
    return float(reward_per_percent * (outcome.damage[1] - outcome.damage[0])
                 + outcome.stocks_lost[1] - outcome.stocks_lost[0])


class MeleeWorldEnv:
    """Two players on the world model, in the shape of the gymnasium API.

    Not a ``gymnasium.Env`` subclass: a two-player step returns a pair of rewards, which the single-agent API (and
    its checker and wrappers) would read as one. ``reset(seed=...)`` → (obs, info); ``step((ctrl_p0, ctrl_p1))`` →
    (obs, (reward_p0, reward_p1), terminated, truncated, info); ``action_space`` and ``observation_space`` are
    gymnasium spaces.

    ``reset`` picks a game of the shard version and a window of ``seed_frames`` real frames (both with the
    environment's RNG), primes the model on it; each ``step`` generates one frame. Reward of p0 =
    ``reward_per_percent`` × (damage dealt − damage taken, in percent) + stocks taken − stocks lost; p1's is its
    negative (zero-sum); damage counts only new highs of a player's percent in its current stock
    (``frame_outcome``), and ``info["outcome"]`` holds the frame's ``FrameOutcome``. Terminated when a player's
    stocks reach 0; truncated after ``max_frames`` steps. The observation is the frame in model units, the same
    for both players (Melee hides nothing). One step is one batch-1 model step: ``torch.set_num_threads(1)``
    makes it fastest on CPU (see ``PlayConfig.torch_threads``).
    """

    metadata = {"render_modes": []}

    def __init__(self, model: WorldModel, shards, *, seed_frames: int = 60, max_frames: int = 3600,
                 reward_per_percent: float = 0.01, games: list[str] | None = None):
        self.model = model.eval()
        self.version = shards if isinstance(shards, ShardVersion) else open_version(shards)
        self.seed_frames, self.max_frames, self.reward_per_percent = seed_frames, max_frames, reward_per_percent
        keep = set(games) if games is not None else None
        self.games = [g for g in self.version.index().to_pylist()
                      if g["num_rows"] >= seed_frames and (keep is None or g["game_id"] in keep)]
        if not self.games:
            raise ValueError(f"no game of {self.version.path} has {seed_frames} frames to seed from")
        player = spaces.Box(CTRL_LOW, CTRL_HIGH, dtype=np.float32)
        self.action_space = spaces.Tuple((player, player))
        self.observation_space = spaces.Dict({
            "cont": spaces.Box(-np.inf, np.inf, (len(CONT_FIELDS),), np.float32),
            "cont_valid": spaces.MultiBinary(len(CONT_FIELDS)),
            "binary": spaces.MultiBinary(len(BINARY_FIELDS)),
            "binary_valid": spaces.MultiBinary(len(BINARY_FIELDS)),
            "cat": spaces.MultiDiscrete(CLASSES),
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
        self._highs = (self._sim.frame.value("p0.percent"), self._sim.frame.value("p1.percent"))
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
        outcome = frame_outcome(self._highs, before, after)
        self._highs = outcome.highs
        reward = zero_sum_reward(outcome, self.reward_per_percent)
        terminated = min(after.stocks(0), after.stocks(1)) <= 0
        truncated = not terminated and self._frames >= self.max_frames
        self._done = terminated or truncated
        return self._obs(after), (reward, -reward), terminated, truncated, {**self._frame_info(after),
                                                                            "outcome": outcome}

    @property
    def frame(self) -> Frame:
        """The current frame (model units), as the rollout rules left it."""
        if self._sim is None:
            raise RuntimeError("call reset() first")
        return self._sim.frame

    def close(self) -> None:
        self._sim = None

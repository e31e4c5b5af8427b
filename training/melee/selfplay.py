"""Self-play in the Melee world model: a discrete set of controller inputs, what one player sees (the frame from its
own side), reward terms one by one, and the opponents a league draws (snapshots of the policy, a random controller,
the replay's recorded controller).

Both players see the same frame (Melee hides nothing), but a policy shared by both sides must see itself first:
``frame_vector`` swaps p0's and p1's fields for player 1. The reward is zero-sum per frame and kept as its terms
(damage dealt, damage taken, stocks taken, stocks lost), so metrics can show each; the total is
``reward_per_percent`` × (dealt − taken) + stocks taken − stocks lost, as ``training/melee_env.zero_sum_reward``
(damage counted only above each player's highest percent in its stock: ``frame_outcome``).

    python training/selfplay.py --env melee --shards OUT/melee_frames/<v> \\
        --world-model RUN/ray/.../checkpoint_000010 --out runs/selfplay-melee --preset full
    python training/selfplay.py --tiny --shards OUT/melee_frames/<v> --out runs/sp     # untrained world model
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from models.ppo_policy import RecurrentPolicy, RecurrentPolicyConfig
from models.world_model import WorldModel, WorldModelConfig
from shards_schema import storage
from shards_schema.melee_features import BINARY_FIELDS, BUTTON_BITS, CAT_FIELDS, CONT_FIELDS, CTRL_PER_PLAYER, PLAYERS
from shards_schema.reader import open_version
from training.checkpoints import shard_identity
from training.melee.env import FrameOutcome, MeleeWorldEnv
from training.melee.rollout_rules import CLASSES, Frame
from training.melee.world_model import load_model
from training.melee.world_model_rollout import RandomPolicy, game_row, replay_controllers
from training.ppo import RolloutBuffer, concat_rollouts, sample_actions
from training.selfplay_base import Episode, Runner, SelfPlayEnvironment, SelfPlayOptions

A, B, X, Z, L, R = 0x100, 0x200, 0x400, 0x10, 0x40, 0x20
CONTROLLER_ACTIONS: tuple[tuple[str, tuple[int, ...], float, float, float, float, float], ...] = (
    # (name, buttons, main_x, main_y, c_x, c_y, trigger)
    ("neutral", (), 0.0, 0.0, 0.0, 0.0, 0.0),
    ("left", (), -1.0, 0.0, 0.0, 0.0, 0.0),
    ("right", (), 1.0, 0.0, 0.0, 0.0, 0.0),
    ("crouch", (), 0.0, -1.0, 0.0, 0.0, 0.0),
    ("jump", (X,), 0.0, 0.0, 0.0, 0.0, 0.0),
    ("jump left", (X,), -1.0, 0.0, 0.0, 0.0, 0.0),
    ("jump right", (X,), 1.0, 0.0, 0.0, 0.0, 0.0),
    ("jab", (A,), 0.0, 0.0, 0.0, 0.0, 0.0),
    ("forward tilt left", (A,), -0.5, 0.0, 0.0, 0.0, 0.0),
    ("forward tilt right", (A,), 0.5, 0.0, 0.0, 0.0, 0.0),
    ("up tilt", (A,), 0.0, 0.5, 0.0, 0.0, 0.0),
    ("down tilt", (A,), 0.0, -0.5, 0.0, 0.0, 0.0),
    ("smash left", (), 0.0, 0.0, -1.0, 0.0, 0.0),
    ("smash right", (), 0.0, 0.0, 1.0, 0.0, 0.0),
    ("up smash", (), 0.0, 0.0, 0.0, 1.0, 0.0),
    ("down smash", (), 0.0, 0.0, 0.0, -1.0, 0.0),
    ("neutral special", (B,), 0.0, 0.0, 0.0, 0.0, 0.0),
    ("side special left", (B,), -1.0, 0.0, 0.0, 0.0, 0.0),
    ("side special right", (B,), 1.0, 0.0, 0.0, 0.0, 0.0),
    ("up special", (B,), 0.0, 1.0, 0.0, 0.0, 0.0),
    ("down special", (B,), 0.0, -1.0, 0.0, 0.0, 0.0),
    ("shield", (R,), 0.0, 0.0, 0.0, 0.0, 1.0),
    ("grab", (Z,), 0.0, 0.0, 0.0, 0.0, 0.0),
    ("roll left", (R,), -1.0, 0.0, 0.0, 0.0, 1.0),
    ("roll right", (R,), 1.0, 0.0, 0.0, 0.0, 1.0),
)
"""The agent's discrete choices, each held for one frame: movement, jumps, the A attacks (tilts at half a stick),
smashes on the c-stick, specials, shield, grab and rolls. Triggers press fully (digital R plus analog 1.0)."""
NUM_ACTIONS = len(CONTROLLER_ACTIONS)


def controller(action: int) -> np.ndarray:
    """Controller features (``CTRL_PER_PLAYER``,) of a discrete action, in ``featurize``'s layout: 12 buttons,
    main x/y, c x/y, trigger (the larger of L and R), physical L, physical R."""
    _, buttons, main_x, main_y, c_x, c_y, trigger = CONTROLLER_ACTIONS[action]
    out = np.zeros(CTRL_PER_PLAYER, np.float32)
    for bit in buttons:
        out[BUTTON_BITS.index(bit)] = 1.0
    n = len(BUTTON_BITS)
    out[n:n + 7] = (main_x, main_y, c_x, c_y, trigger, 0.0, trigger)  # physical R carries the shield press
    return out


def _swap(names: list[str]) -> np.ndarray:
    """The permutation that puts p1's fields where p0's are and back (other fields stay)."""
    other = {"p0": "p1", "p1": "p0"}
    where = {name: i for i, name in enumerate(names)}
    return np.array([where.get(other.get(n.split(".")[0], "") + n[2:], i) if n.split(".")[0] in other else i
                     for i, n in enumerate(names)])


_CONT_SWAP = _swap([name for name, _, _ in CONT_FIELDS])
_BINARY_SWAP = _swap(list(BINARY_FIELDS))
_CAT_SWAP = _swap([name for name, _ in CAT_FIELDS])
OBS_DIM = 2 * len(CONT_FIELDS) + 2 * len(BINARY_FIELDS) + len(CAT_FIELDS)
"""Per frame: continuous values and their validity, flags and theirs, categorical ids scaled to [0, 1]."""
OBS_PAD = (-OBS_DIM) % 8  # a multiple of 8, so the policy's attention heads divide it
OBS_WIDTH = OBS_DIM + OBS_PAD


def frame_vector(frame: Frame, player: int) -> np.ndarray:
    """(OBS_WIDTH,) features of a frame as ``player`` (0 = p0, 1 = p1) sees it: its own fields first."""
    cont, cont_valid, binary, binary_valid, cat = (frame.cont, frame.cont_valid, frame.binary, frame.binary_valid,
                                                   frame.cat)
    if player == 1:
        cont, cont_valid = cont[_CONT_SWAP], cont_valid[_CONT_SWAP]
        binary, binary_valid, cat = binary[_BINARY_SWAP], binary_valid[_BINARY_SWAP], cat[_CAT_SWAP]
    scaled = cat / (CLASSES - 1)
    return np.concatenate([np.where(cont_valid, cont, 0.0), cont_valid, binary * binary_valid, binary_valid, scaled,
                           np.zeros(OBS_PAD)]).astype(np.float32)


@dataclass(frozen=True)
class RewardTerms:
    """One frame's reward terms for one player (damage in percent, stocks as counts)."""

    damage_dealt: float
    damage_taken: float
    stocks_taken: int
    stocks_lost: int

    def total(self, reward_per_percent: float) -> float:
        return reward_per_percent * (self.damage_dealt - self.damage_taken) + self.stocks_taken - self.stocks_lost


def reward_terms(outcome: FrameOutcome, player: int) -> RewardTerms:
    """The terms of ``MeleeWorldEnv``'s reward for ``player`` from a frame's ``FrameOutcome`` (damage counted above
    each player's highest percent in its stock)."""
    me, them = player, 1 - player
    return RewardTerms(damage_dealt=outcome.damage[them], damage_taken=outcome.damage[me],
                       stocks_taken=outcome.stocks_lost[them], stocks_lost=outcome.stocks_lost[me])


# ---------------------------------------------------------------------------- opponents
class RecordedController:
    """The ``strong`` scripted opponent: the seed game's recorded inputs of the opponent's port, continuing from the
    seed window (neutral past the game's end): what the human did in that spot."""

    def __init__(self, version, info: dict, player: int, frames: int, seed_frames: int):
        game = game_row(version, info["game_id"])
        first = info["seed_start"] + seed_frames
        self.ctrl = replay_controllers(version, game, first, frames)[:, player * CTRL_PER_PLAYER:
                                                                       (player + 1) * CTRL_PER_PLAYER]
        self.t = 0

    def act(self, frame: Frame, player: int) -> np.ndarray:
        out = self.ctrl[self.t] if self.t < len(self.ctrl) else np.zeros(CTRL_PER_PLAYER, np.float32)
        self.t += 1
        return out


class PolicyController:
    """A snapshot of the policy playing one side, with its own memory and its own view of its opponent."""

    def __init__(self, policy, window: int, temperature: float = 1.0):
        self.policy, self.window, self.temperature = policy, window, temperature
        self.state = policy.initial_state(1)
        self.history: list[np.ndarray] = []  # its opponent's (the learner's) recent frames, from that side
        self.start = True
        self.generator = torch.Generator().manual_seed(0)

    def act(self, frame: Frame, player: int) -> np.ndarray:
        obs = torch.from_numpy(frame_vector(frame, player))[None]
        self.history = (self.history + [frame_vector(frame, 1 - player)])[-self.window:]
        opponent, valid = window_arrays(self.history, self.window)
        with torch.no_grad():
            out = self.policy.step(obs, torch.from_numpy(opponent)[None], torch.from_numpy(valid)[None],
                                   torch.tensor([self.start]), torch.ones(1, NUM_ACTIONS, dtype=torch.bool),
                                   self.state)
        self.state, self.start = out.state, False
        return controller(int(sample_actions(out.logits[:, 0], self.generator, self.temperature)[0][0]))


def window_arrays(history: list[np.ndarray], window: int) -> tuple[np.ndarray, np.ndarray]:
    """The last ``window`` frame vectors (oldest first, zero-padded at the front) and their validity."""
    out = np.zeros((window, OBS_WIDTH), np.float32)
    valid = np.zeros(window, bool)
    if history:
        out[window - len(history):] = np.stack(history)
        valid[window - len(history):] = True
    return out, valid


def _score(frame: Frame, side: int) -> float:
    """The learner's ``Episode.score``: 1 a win (the opponent's stocks ran out, or more stocks, then less damage, at
    the time limit), 0.5 a draw, 0 a loss."""
    mine, theirs = frame.stocks(side), frame.stocks(1 - side)
    if mine != theirs:
        return 1.0 if mine > theirs else 0.0
    my_damage = frame.value(f"{PLAYERS[side]}.percent")
    their_damage = frame.value(f"{PLAYERS[1 - side]}.percent")
    return 0.5 if abs(my_damage - their_damage) < 1e-6 else float(my_damage < their_damage)


class MeleeRunner(Runner):
    """Plays ``num_envs`` world-model games for the learner against league opponents and returns the learner's side
    only (``training/ppo.Rollout``): its observations, actions, rewards and memory states. The learner's side is
    drawn per game; weak = random controller, strong = the replay's recorded controller."""

    def __init__(self, world_model, shards, policy_cfg, *, num_envs: int, seed_frames: int = 60,
                 max_frames: int = 600, reward_per_percent: float = 0.01, torch_threads: int = 1, **common):
        super().__init__(**common)
        if torch_threads:
            torch.set_num_threads(torch_threads)  # batch-1 model steps: one thread is fastest on CPU
        self.policy_cfg, self.reward_per_percent = policy_cfg, reward_per_percent
        self.policy = RecurrentPolicy(policy_cfg).eval()
        self.envs = [MeleeWorldEnv(world_model, shards, seed_frames=seed_frames, max_frames=max_frames,
                                   reward_per_percent=reward_per_percent) for _ in range(num_envs)]
        self.rng = np.random.default_rng(self.seed)
        self.generator = torch.Generator().manual_seed(self.seed)
        self.seed_frames, self.max_frames = seed_frames, max_frames
        self._snapshots: dict[str, object] = {}
        self.games = [self._new_game(i) for i in range(num_envs)]
        self.state = self.policy.initial_state(num_envs)

    def _opponent_controller(self, opponent, env, info: dict, side: int):
        if opponent.kind == "snapshot":
            policy = self._snapshots.get(opponent.name)
            if policy is None:
                policy = RecurrentPolicy(self.policy_cfg).eval()
                policy.load_state_dict(self.snapshot_weights(opponent.name))
                self._snapshots = {opponent.name: policy}  # one cached: snapshots change as the league grows
            return PolicyController(policy, self.policy_cfg.opponent_window, self.temperature)
        if opponent.kind == "strong":
            return RecordedController(env.version, info, 1 - side, self.max_frames, self.seed_frames)
        return RandomPolicy(int(self.rng.integers(1 << 31)))

    def _new_game(self, i: int) -> dict:
        env = self.envs[i]
        _, info = env.reset(seed=int(self.rng.integers(1 << 31)))
        side = int(self.rng.integers(2))
        opponent = self.draw_opponent()
        return {"side": side, "opponent": opponent, "ctrl": self._opponent_controller(opponent, env, info, side),
                "history": [], "start": True, "terms": {k: 0.0 for k in RewardTerms.__dataclass_fields__},
                "reward": 0.0, "frames": 0}

    def _view(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Game i's learner observation, the opponent's window (its earlier frames plus the current one, from its
        side) and the window's validity, without recording the current frame."""
        env, game = self.envs[i], self.games[i]
        history = (game["history"] + [frame_vector(env.frame, 1 - game["side"])])[-self.policy_cfg.opponent_window:]
        window, valid = window_arrays(history, self.policy_cfg.opponent_window)
        return frame_vector(env.frame, game["side"]), window, valid

    def _views(self, record: bool):
        """Every game's ``_view`` stacked; ``record`` keeps the current frames in the opponents' histories (once
        per step, when the learner acts on them)."""
        views = [self._view(i) for i in range(len(self.envs))]
        if record:
            for (_, window, _), game in zip(views, self.games, strict=True):
                game["history"] = (game["history"] + [window[-1]])[-self.policy_cfg.opponent_window:]
        return tuple(np.stack(part) for part in zip(*views, strict=True))

    def collect(self, weights: dict, steps: int):
        """``steps`` steps of every game with the learner's ``weights``: (``training/ppo.Rollout``, finished
        ``Episode``s). Games carry over between calls, as does the learner's memory."""
        self.policy.load_state_dict(weights)
        n = len(self.envs)
        buffer = RolloutBuffer(steps, n)
        legal = torch.ones(n, NUM_ACTIONS, dtype=torch.bool)
        finished: list[Episode] = []
        for t in range(steps):
            obs, opponent, valid = self._views(record=True)
            start = torch.tensor([g["start"] for g in self.games])
            with torch.no_grad():
                out = self.policy.step(torch.from_numpy(obs), torch.from_numpy(opponent), torch.from_numpy(valid),
                                       start, legal, self.state)
            actions, logp = self.sample(out.logits[:, 0], self.generator)
            buffer.put(t, obs=obs, opponent=opponent, opponent_valid=valid, legal=legal, episode_start=start,
                       actions=actions, logp=logp, values=out.values[:, 0], h=self.state[0], c=self.state[1])
            self.state = out.state
            for i, (env, game) in enumerate(zip(self.envs, self.games, strict=True)):
                before, side = env.frame, game["side"]
                mine = controller(int(actions[i]))
                theirs = np.asarray(game["ctrl"].act(before, 1 - side), np.float32)
                _, _, term, trunc, info = env.step((mine, theirs) if side == 0 else (theirs, mine))
                terms = reward_terms(info["outcome"], side)
                reward = terms.total(self.reward_per_percent)
                for k in game["terms"]:
                    game["terms"][k] += getattr(terms, k)
                game["reward"] += reward
                game["frames"] += 1
                game["start"] = False
                final = 0.0
                if trunc:  # the time limit: the game would go on, so the value of where it stopped is bootstrapped
                    o, w, v = (torch.from_numpy(x)[None] for x in self._view(i))
                    with torch.no_grad():
                        final = float(self.policy.step(o, w, v, torch.tensor([False]), legal[:1],
                                                       (self.state[0][i:i + 1], self.state[1][i:i + 1])).values)
                if term or trunc:
                    finished.append(Episode(opponent=game["opponent"], side=side, frames=game["frames"],
                                            terms=dict(game["terms"]), reward=game["reward"],
                                            score=_score(env.frame, side), truncated=bool(trunc)))
                    self.games[i] = self._new_game(i)
                buffer.put(t, i, rewards=reward, terminated=bool(term), truncated=bool(trunc), final_values=final)
        # the value after the last step: the games' current observations under the memory they carry on with
        obs, opponent, valid = self._views(record=False)
        with torch.no_grad():
            bootstrap = self.policy.step(torch.from_numpy(obs), torch.from_numpy(opponent), torch.from_numpy(valid),
                                         torch.tensor([g["start"] for g in self.games]), legal,
                                         self.state).values[:, 0]
        data = buffer.data
        next_values = torch.cat([data["values"][1:], bootstrap[None]])
        return buffer.rollout(next_values=torch.where(data["truncated"], data["final_values"], next_values)), finished


@dataclass(frozen=True, kw_only=True)
class MeleeSelfPlayOptions(SelfPlayOptions):
    """Melee in the world model: its games and their reward.

    Attributes:
        shards: the melee_frames shard version the games are seeded from (a local path or a URI).
        world_model: the world-model checkpoint the games run in (folder or state.pt), or ``untrained`` for a fresh
            model of --world-model-preset (tests, demo).
        world_model_preset: preset of an untrained world model.
        envs_per_runner: games each runner plays at once.
        seed_frames: real frames each game is primed on.
        max_frames: frames before a game is cut by the time limit (bootstrapped, not terminal).
        reward_per_percent: reward per percent of damage dealt (taken: the negative); a stock is worth 1.
    """

    shards: str = ""
    world_model: str = "untrained"
    world_model_preset: str = "tiny"
    envs_per_runner: int = 4
    seed_frames: int = 60
    max_frames: int = 600
    reward_per_percent: float = 0.01

    def __post_init__(self):
        if min(self.envs_per_runner, self.max_frames) < 1:
            raise ValueError("--envs-per-runner and --max-frames must be >= 1")

    def normalized(self):
        return dataclasses.replace(self, **{k: storage.normalize(getattr(self, k)) for k in ("shards", "world_model")
                                            if getattr(self, k) and getattr(self, k) != "untrained"})

    @classmethod
    def tiny(cls, **overrides):
        return cls(**{"envs_per_runner": 2, "seed_frames": 20, "max_frames": 12, **overrides})


class MeleeSelfPlay(SelfPlayEnvironment):
    """The Melee world model as self-play's environment: every runner's games side by side, one rollout column
    each."""

    name = "melee"
    kind = "melee_selfplay"
    options_class = MeleeSelfPlayOptions
    runner_class = MeleeRunner
    reward_terms = tuple(RewardTerms.__dataclass_fields__)
    knockout_term = "stocks_taken"

    @staticmethod
    def config_problem(cfg) -> str | None:
        if cfg.reference_kl:
            return "--reference-kl needs a policy to stay near, and Melee self-play starts from none"
        return None

    def __init__(self, cfg):
        if not cfg.options.shards:
            raise ValueError("--env melee needs --shards: the melee_frames version the games are seeded from")
        super().__init__(cfg)

    @property
    def num_envs(self) -> int:
        return self.cfg.num_runners * self.cfg.options.envs_per_runner

    def policy_config(self):
        return RecurrentPolicyConfig(d_obs=OBS_WIDTH, num_actions=NUM_ACTIONS,
                                     opponent_window=self.cfg.opponent_window, d_lstm=self.cfg.d_lstm)

    def league_config(self):
        return self.cfg.league(strong=("replay",), weak=("random",))

    def identity(self):
        return shard_identity(open_version(self.cfg.options.shards))

    def runner_kwargs(self, policy_cfg) -> dict:
        o = self.cfg.options
        return dict(world_model=load_world_model(o, self.cfg.seed), shards=o.shards, policy_cfg=policy_cfg,
                    num_envs=o.envs_per_runner, seed_frames=o.seed_frames, max_frames=o.max_frames,
                    reward_per_percent=o.reward_per_percent)

    def collect_args(self, ppo) -> tuple:
        return (ppo.rollout_steps,)

    def collect(self, results: list, ppo):
        return concat_rollouts([r for r, _ in results]), [e for _, episodes in results for e in episodes]


def load_world_model(options: MeleeSelfPlayOptions, seed: int):
    """The world model a run's games play in: ``options.world_model``'s checkpoint, or with ``untrained`` a fresh
    model of ``options.world_model_preset`` initialised from ``seed``."""
    if options.world_model == "untrained":
        torch.manual_seed(seed)
        return WorldModel(WorldModelConfig.preset(options.world_model_preset)).eval()
    return load_model(options.world_model)

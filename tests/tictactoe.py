"""A third game defined only here, to prove the core knows no game: tic-tac-toe replays (a text file per game),
declared, parsed by the real job, trained by the real ``fit()`` and by self-play's core, registered once by
``register()`` through the same registries the built-in games use. Each section is what a game package holds in its
layer:
``shards_schema/<game>.py``, ``pipelines/<game>/``, ``models/``, ``training/<game>/``.

A replay::

    tictactoe 1
    X 4
    O 0
    ...
    result X

(``result`` is ``X``, ``O`` or ``draw``). The players alternate, X first, on free cells 0-8.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Annotated

import numpy as np
import pyarrow as pa
import torch
from torch import nn

from models.ppo_policy import RecurrentPolicy, RecurrentPolicyConfig
from pipelines import registry as pipeline_registry
from pipelines.errors import InvalidRecordError
from pipelines.inputs import NOT_A_REPLAY, file_items, has_suffix, input_id, list_sized, resolve_input
from pipelines.stages import Parsed, Parser, Plan, Source, read_row
from shards_schema import registry as dataset_registry
from shards_schema import storage
from shards_schema.declare import arrow_schema, i8, i16
from shards_schema.manifest import Counts, Manifest
from shards_schema.reader import ShardVersion
from shards_schema.versions import CodeVersions
from training import registry as training_registry
from training import selfplay_envs
from training.checkpoints import live_identity
from training.fit import Recipe, TrainerConfig
from training.ppo import RolloutBuffer, concat_rollouts
from training.selfplay_base import Episode, Runner, SelfPlayEnvironment, SelfPlayOptions
from training.windows import cut_windows, gather_windows

# ---------------------------------------------------------------------------- shards_schema: declarations
NAME = "tictactoe"
CODE_VERSIONS = CodeVersions(schema="1.0.0", parser="1.0.0", observation="0.0.0",
                             reparse_command="python pipelines/parse_replays.py --source tictactoe --input <replays>",
                             refeaturize_command=None)


@dataclass(frozen=True, kw_only=True)
class Move:
    """One move of a game.

    Attributes:
        game_id: the replay's input id.
        turn: move number from 0.
        player: ``X`` or ``O``.
        board: the board before the move, cell by cell: 0 empty, 1 the mover's, 2 the opponent's.
        move: the cell played, 0-8.
        reward: the game's outcome for the mover: 1 won, -1 lost, 0 drawn.
    """

    game_id: str
    turn: i16
    player: str
    board: Annotated[list[int], pa.list_(pa.field("item", pa.int8(), nullable=False), 9)]
    move: i8
    reward: float


@dataclass(frozen=True, kw_only=True)
class GameIndexRow:
    """Where a game's moves live.

    Attributes:
        game_id: as in the moves.
        result: ``X``, ``O`` or ``draw``.
        input_id: the replay it came from.
        file: the shard holding its moves.
        row_start: its first move's row in that file.
        num_rows: its moves.
    """

    game_id: str
    result: str
    input_id: str
    file: str
    row_start: int
    num_rows: int


MOVES_SCHEMA = arrow_schema(Move, name=NAME, version=CODE_VERSIONS.schema)
INDEX_SCHEMA = arrow_schema(GameIndexRow, name=f"{NAME}.index", version=CODE_VERSIONS.schema)


# ---------------------------------------------------------------------------- pipelines: source and parser
LINES_OF_THREE = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]


def write_game(rng: random.Random) -> str:
    """A random legal game as replay text."""
    board, lines, player = [None] * 9, ["tictactoe 1"], "X"
    lines_of_three = LINES_OF_THREE
    result = "draw"
    while any(c is None for c in board):
        cell = rng.choice([i for i, c in enumerate(board) if c is None])
        board[cell] = player
        lines.append(f"{player} {cell}")
        if any(all(board[i] == player for i in line) for line in lines_of_three):
            result = player
            break
        player = "O" if player == "X" else "X"
    return "\n".join([*lines, f"result {result}"]) + "\n"


@dataclass(frozen=True, kw_only=True)
class TicTacToeOptions:
    """Which games to keep.

    Attributes:
        min_moves: keep games of at least this many moves.
    """

    min_moves: int = 0


class TicTacToeParser(Parser):
    """A replay's text → one row per move; a game's index row from its rows."""

    schema = MOVES_SCHEMA
    index_schema = INDEX_SCHEMA
    versions = CODE_VERSIONS

    def parse(self, input_id: str, payload: bytes, sha256: str, facts: dict) -> Parsed:
        try:
            lines = payload.decode("ascii").split("\n")
        except UnicodeDecodeError as err:
            raise InvalidRecordError(f"not ASCII text: {err}") from None
        lines = [line for line in lines if line]
        if not lines or lines[0] != "tictactoe 1":
            raise InvalidRecordError("the first line is not `tictactoe 1`")
        if len(lines) < 2 or not lines[-1].startswith("result ") or lines[-1][7:] not in ("X", "O", "draw"):
            raise InvalidRecordError("the last line is not `result X|O|draw`")
        result = lines[-1][7:]
        cells: list[str | None] = [None] * 9
        rows = []
        for turn, line in enumerate(lines[1:-1]):
            player, _, cell = line.partition(" ")
            if player != "XO"[turn % 2] or not cell.isdigit() or int(cell) > 8 or cells[int(cell)] is not None:
                raise InvalidRecordError(f"move {turn}: {line!r} is not a legal move of {'XO'[turn % 2]}")
            board = [0 if c is None else 1 if c == player else 2 for c in cells]
            reward = 0.0 if result == "draw" else 1.0 if result == player else -1.0
            rows.append({"game_id": input_id, "turn": turn, "player": player, "board": board, "move": int(cell),
                         "reward": reward})
            cells[int(cell)] = player
        if len(rows) < self.options.min_moves:
            return Parsed(None, "too_short")
        return Parsed(rows)

    def dedupe_key(self, parsed: Parsed) -> str | None:
        return None

    @staticmethod
    def index_rows(rows: pa.Table) -> list[dict]:
        rewards = rows.column("reward").to_pylist()
        players = rows.column("player").to_pylist()
        last = rewards[-1]
        result = "draw" if last == 0 else players[-1] if last > 0 else "XO"[players[-1] == "X"]
        return [{"game_id": rows.column("game_id")[0].as_py(), "result": result, "row_start": 0,
                 "num_rows": rows.num_rows}]

    @classmethod
    def describe(cls, counts: Counts) -> str:
        return f"{counts.trajectories} games, {counts.rows} moves"


class TicTacToeSource(Source):
    """``.ttt`` files under ``--input``; one work item per file."""

    name = NAME
    parser = TicTacToeParser
    options_class = TicTacToeOptions
    shard_bytes_per_input_byte = 1.0

    def plan(self) -> Plan:
        root, revision = resolve_input(self.inputs, self.name, "main")
        return Plan(file_items(root, list_sized(root, None)), revision)

    def read(self, item: dict) -> list[dict]:
        rel = input_id(item["uri"], item["root"])
        if not has_suffix(rel, (".ttt",)):
            return [read_row(rel, filter_reason=NOT_A_REPLAY)]
        return [read_row(rel, storage.read_bytes(item["uri"]))]

    def output_config(self) -> dict:
        return {"min_moves": self.options.min_moves}


# ---------------------------------------------------------------------------- models: a trivial policy
@dataclass(frozen=True, kw_only=True)
class TinyPolicyConfig:
    """A linear policy over the one-hot board.

    Attributes:
        hidden: hidden units.
    """

    hidden: int = 16


class TinyPolicy(nn.Module):
    def __init__(self, cfg: TinyPolicyConfig):
        super().__init__()
        self.cfg = cfg
        self.net = nn.Sequential(nn.Linear(27, cfg.hidden), nn.Tanh(), nn.Linear(cfg.hidden, 9))

    def forward(self, board: torch.Tensor) -> torch.Tensor:
        """(B, T, 9) cells → (B, T, 9) move logits."""
        onehot = nn.functional.one_hot(board.long(), 3).float()  # (B, T, 9, 3)
        return self.net(onehot.flatten(-2))


# ---------------------------------------------------------------------------- training: the recipe
@dataclass(frozen=True, kw_only=True)
class TicTacToeTrainConfig(TrainerConfig):
    """Behaviour cloning of the replays' moves.

    Attributes:
        hidden: the policy's hidden units.
    """

    hidden: int = 16


class LoadMoves:
    """Window specs → padded (B, T) arrays of boards, moves and their validity, read from the version's shards
    (verified by the driver)."""

    def __init__(self, version_path: str, context: int):
        self.version = ShardVersion(version_path, Manifest.load(version_path))
        self.context = context
        self._decoded: dict[str, dict[str, np.ndarray]] = {}

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        files = batch["file"].astype(str)
        starts, counts = batch["row_start"].astype(np.int64), batch["num_rows"].astype(np.int64)
        out = None
        for file in np.unique(files):
            if file not in self._decoded:
                table = self.version.read_table(str(file), ["board", "move"])
                self._decoded[file] = {"board": np.array(table.column("board").to_pylist(), np.int64),
                                       "move": table.column("move").to_numpy().astype(np.int64)}
            where = np.flatnonzero(files == file)
            part = gather_windows(self._decoded[file], starts[where], counts[where], self.context)
            if out is None:
                out = {k: np.empty((len(files),) + v.shape[1:], v.dtype) for k, v in part.items()}
            for key, value in part.items():
                out[key][where] = value
        return out


class TicTacToeRecipe(Recipe):
    config_class = TicTacToeTrainConfig
    kind = "tictactoe_policy"
    tag = "ttt"
    sample_unit = "moves"

    def model_config(self):
        return TinyPolicyConfig(hidden=self.cfg.hidden)

    def epoch_windows(self, version, epoch: int):
        return cut_windows(version.index(), self.cfg.context, self.cfg.context, seed=self.cfg.seed + epoch)

    def loader(self, model_config):
        return LoadMoves(self.cfg.shards, self.cfg.context)

    def loss(self, model, batch: dict, step: int):
        logits = model(batch["board"])  # (B, T, 9)
        valid = batch["valid"]
        loss = nn.functional.cross_entropy(logits[valid], batch["move"][valid])
        return loss, {"bc_loss": loss}


# ---------------------------------------------------------------------------- training: self-play
OBS_WIDTH = 28  # the one-hot board (27) padded to a multiple of the policy's attention heads


def board_vector(board: list[int], player: int) -> np.ndarray:
    """(OBS_WIDTH,) the board as ``player`` (1 or 2) sees it: its own cells as 1, the opponent's as 2."""
    seen = [c if c == 0 or player == 1 else 3 - c for c in board]
    return np.concatenate([np.eye(3, dtype=np.float32)[seen].ravel(), np.zeros(1, np.float32)])


class TicTacToeRunner(Runner):
    """``num_envs`` games at once for the learner (X or O, drawn per game) against league opponents: a snapshot of
    the policy, ``first`` (the lowest free cell; strong) or ``random`` (weak). A step is a learner's move and the
    opponent's reply; the opponent's moves are never recorded."""

    def __init__(self, policy_cfg, *, num_envs: int, **common):
        super().__init__(**common)
        self.policy_cfg, self.policy = policy_cfg, RecurrentPolicy(policy_cfg).eval()
        self.rng, self.generator = random.Random(self.seed), torch.Generator().manual_seed(self.seed)
        self.games = [self._new_game() for _ in range(num_envs)]
        self.state = self.policy.initial_state(num_envs)

    def _policy_move(self, policy, board: list[int], player: int) -> int:
        legal = torch.tensor([c == 0 for c in board])[None]
        with torch.no_grad():
            out = policy.step(torch.from_numpy(board_vector(board, player))[None],
                              torch.zeros(1, self.policy_cfg.opponent_window, OBS_WIDTH),
                              torch.zeros(1, self.policy_cfg.opponent_window, dtype=torch.bool),
                              torch.tensor([True]), legal, policy.initial_state(1))
        return int(self.sample(out.logits[:, 0], self.generator)[0][0])

    def _opponent_move(self, game: dict) -> None:
        board, opponent = game["board"], game["opponent"]
        free = [i for i, c in enumerate(board) if c == 0]
        if opponent.kind == "snapshot":
            if "policy" not in game:
                game["policy"] = RecurrentPolicy(self.policy_cfg).eval()
                game["policy"].load_state_dict(self.snapshot_weights(opponent.name))
            cell = self._policy_move(game["policy"], board, 2)
        else:
            cell = free[0] if opponent.name == "first" else self.rng.choice(free)
        board[cell] = 2

    def _new_game(self) -> dict:
        game = {"board": [0] * 9, "side": self.rng.randrange(2), "opponent": self.draw_opponent(), "start": True,
                "frames": 0}
        if game["side"] == 1:  # the learner plays O: X moves first
            self._opponent_move(game)
        return game

    @staticmethod
    def _result(board: list[int]) -> float | None:
        """1 the learner won, -1 it lost, 0 a draw, None: the game goes on."""
        for line in LINES_OF_THREE:
            if board[line[0]] and all(board[i] == board[line[0]] for i in line):
                return 1.0 if board[line[0]] == 1 else -1.0
        return 0.0 if all(board) else None

    def collect(self, weights: dict, steps: int):
        self.policy.load_state_dict(weights)
        n = len(self.games)
        buffer, finished = RolloutBuffer(steps, n), []
        window = self.policy_cfg.opponent_window
        for t in range(steps):
            obs = torch.from_numpy(np.stack([board_vector(g["board"], 1) for g in self.games]))
            legal = torch.tensor([[c == 0 for c in g["board"]] for g in self.games])
            start = torch.tensor([g["start"] for g in self.games])
            opponent, valid = torch.zeros(n, window, OBS_WIDTH), torch.zeros(n, window, dtype=torch.bool)
            with torch.no_grad():
                out = self.policy.step(obs, opponent, valid, start, legal, self.state)
            actions, logp = self.sample(out.logits[:, 0], self.generator)
            buffer.put(t, obs=obs, opponent=opponent, opponent_valid=valid, legal=legal, episode_start=start,
                       actions=actions, logp=logp, values=out.values[:, 0], h=self.state[0], c=self.state[1])
            self.state = out.state
            for i, game in enumerate(self.games):
                game["board"][int(actions[i])] = 1
                game["start"], game["frames"] = False, game["frames"] + 1
                result = self._result(game["board"])
                if result is None:
                    self._opponent_move(game)
                    result = self._result(game["board"])
                if result is not None:
                    finished.append(Episode(opponent=game["opponent"], side=game["side"], frames=game["frames"],
                                            terms={"result": result}, reward=result, score=(result + 1) / 2,
                                            truncated=False))
                    self.games[i] = self._new_game()
                buffer.put(t, i, rewards=result or 0.0, terminated=result is not None)
        values = buffer.data["values"]
        return buffer.rollout(truncated=torch.zeros_like(buffer.data["terminated"]),
                              next_values=torch.cat([values[1:], torch.zeros(1, n)])), finished


@dataclass(frozen=True, kw_only=True)
class TicTacToeSelfPlayOptions(SelfPlayOptions):
    """Tic-tac-toe against the league.

    Attributes:
        games_per_runner: games each runner plays at once.
    """

    games_per_runner: int = 2


class TicTacToeSelfPlay(SelfPlayEnvironment):
    """Tic-tac-toe as self-play's environment: every runner's games side by side, one rollout column each."""

    name = "tictactoe"
    kind = "tictactoe_selfplay"
    options_class = TicTacToeSelfPlayOptions
    runner_class = TicTacToeRunner
    reward_terms = ("result",)
    knockout_term = "result"

    @property
    def num_envs(self) -> int:
        return self.cfg.num_runners * self.cfg.options.games_per_runner

    def policy_config(self):
        return RecurrentPolicyConfig(d_obs=OBS_WIDTH, num_actions=9, opponent_window=self.cfg.opponent_window,
                                     d_strategy=16, d_lstm=self.cfg.d_lstm)

    def league_config(self):
        return self.cfg.league(strong=("first",), weak=("random",))

    def identity(self):
        return live_identity("tictactoe_board")

    def runner_kwargs(self, policy_cfg) -> dict:
        return {"policy_cfg": policy_cfg, "num_envs": self.cfg.options.games_per_runner}

    def collect_args(self, ppo) -> tuple:
        return (ppo.rollout_steps,)

    def collect(self, results: list, ppo):
        return concat_rollouts([r for r, _ in results]), [e for _, episodes in results for e in episodes]


# ---------------------------------------------------------------------------- registered once
def register() -> None:
    """Make the game known to every layer, as a game package's registration does."""
    dataset_registry.register_dataset(dataset_registry.DatasetSpec(name=NAME, rows=MOVES_SCHEMA,
                                                                   index=INDEX_SCHEMA, code=CODE_VERSIONS))
    pipeline_registry.register_source(TicTacToeSource)
    training_registry.register_features(training_registry.FeatureSpec(
        name="tictactoe_board", dataset=NAME, version="1.0.0", stored=False, vocabulary_dir=None,
        refresh="train again"))
    training_registry.register_model_kind(TicTacToeRecipe.kind, training_registry.ModelKind(
        config=TinyPolicyConfig, module=TinyPolicy, features="tictactoe_board"))
    training_registry.register_model_kind(TicTacToeSelfPlay.kind, training_registry.ModelKind(
        config=RecurrentPolicyConfig, module=RecurrentPolicy, features="tictactoe_board"))
    selfplay_envs.register_environment(TicTacToeSelfPlay)


def tiny_train_config(**overrides) -> TicTacToeTrainConfig:
    values = {"context": 4, "batch_size": 8, "steps": 6, "checkpoint_every": 3, "log_every": 1, "lr": 1e-2,
              "num_workers": 1, "max_failures": 0, "wandb_mode": "disabled", "hidden": 8, **overrides}
    return TicTacToeTrainConfig(**values)


"""A third game defined only here, to prove the core knows no game: tic-tac-toe replays (a text file per game),
declared, parsed by the real job, and trained by the real ``fit()``, registered once by ``register()`` through the
same registries the built-in games use. Each section is what a game package holds in its layer:
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
from training.fit import Recipe, TrainerConfig
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
def write_game(rng: random.Random) -> str:
    """A random legal game as replay text."""
    board, lines, player = [None] * 9, ["tictactoe 1"], "X"
    lines_of_three = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]
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


def tiny_train_config(**overrides) -> TicTacToeTrainConfig:
    values = {"context": 4, "batch_size": 8, "steps": 6, "checkpoint_every": 3, "log_every": 1, "lr": 1e-2,
              "num_workers": 1, "max_failures": 0, "wandb_mode": "disabled", "hidden": 8, **overrides}
    return TicTacToeTrainConfig(**values)


"""The policy's windows of ``pokemon_turns`` rows: which trajectories (player sides, the validation split by battle)
and how a shard's turns decode into the arrays the policy trains on (``LoadTurnWindows``), beside a readable
reference of one window (``load_window_reference``) that the tests compare the fast path with.

``teacher_action`` decodes like ``action`` (a teacher's label, tera moves folded onto their moves); a version made
before the column existed (schema 2.0.0) has none, and every turn of it reads -1: no teacher labelled it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from models.pokemon_policy import check_inputs
from shards_schema.pokemon import CODE_VERSIONS, NUM_ACTIONS, NUM_MOVES, NUM_SWITCHES, OBS_NUMERIC, OBS_WORDS
from shards_schema.reader import ShardVersion
from training.pokemon.rewards import shaped_rewards
from training.returns import discounted_returns
from training.windows import LoadWindows, VersionUnion, cut_windows, held_out, index_columns

COLUMNS = ["obs_tokens", "obs_numeric", "legal_mask", "action", "teacher_action", "reward", "done"]
"""The columns the policy trains on; a version without ``teacher_action`` is read without it (``shard_columns``)."""


def shard_columns(version: ShardVersion) -> list[str]:
    """The ``COLUMNS`` a version's shards hold (``teacher_action`` only from schema 2.1.0)."""
    return [c for c in COLUMNS if c in version.row_columns]


def teacher_labelled_turns(version: ShardVersion | VersionUnion) -> int:
    """Rows of ``version`` (every version of a union) that a teacher labelled (``teacher_action`` >= 0), read from
    that one column."""
    versions = version.versions if isinstance(version, VersionUnion) else [version]
    total = 0
    for v in versions:
        if "teacher_action" not in v.row_columns:
            continue
        for file in v.manifest.files:
            total += pc.sum(pc.greater_equal(v.read_table(file.path, ["teacher_action"]).column("teacher_action"),
                                             0)).as_py() or 0
    return total


def window_specs(version: ShardVersion | VersionUnion, context: int, seed: int, sides: list[str] | None = None, *,
                 validation_share: float = 0.0, split_seed: int = 0, validation: bool = False,
                 train_share: float = 1.0) -> pa.Table:
    """The windows of ``context`` turns of every trajectory (only the given player sides), shuffled with ``seed``.
    With a ``validation_share``, only the training battles' windows, or with ``validation`` only the held-out ones
    (``held_out`` with ``split_seed``). A ``train_share`` below 1 keeps that share of the training battles (a second
    seeded hash: the held-out battles are the same whatever the share, and each share holds the smaller ones). Of a
    ``VersionUnion``, the windows of all its versions, each with its version's number; the split goes by battle id
    across them (a battle in two versions is on the same side in both)."""
    index = index_columns(version.index(), ["file", "row_start", "num_rows", "player_side", "battle_id"])
    if sides:
        index = index.filter(pc.is_in(index.column("player_side"), pa.array(sides)))
    if validation_share > 0:
        out = held_out(index.column("battle_id").to_pylist(), validation_share, split_seed)
        index = index.filter(pa.array(out if validation else ~out))
    if train_share < 1.0 and not validation:
        kept = held_out(index.column("battle_id").to_pylist(), train_share, f"{split_seed}:train-share")
        index = index.filter(pa.array(kept))
    return cut_windows(index.drop_columns(["player_side", "battle_id"]), context, context, seed)


def _fold(mask13: np.ndarray) -> np.ndarray:
    moves = mask13[:, :NUM_MOVES] | mask13[:, NUM_MOVES + NUM_SWITCHES:]
    return np.concatenate([moves, mask13[:, NUM_MOVES:NUM_MOVES + NUM_SWITCHES]], axis=1)


def _fixed_list(column: pa.ChunkedArray, width: int, dtype) -> np.ndarray:
    """A fixed-size list column → (rows, width) numpy array."""
    flat = column.combine_chunks().flatten().to_numpy(zero_copy_only=False)
    return flat.astype(dtype, copy=False).reshape(-1, width)


def _fold_actions(action: np.ndarray) -> np.ndarray:
    """13-way action ids → the policy's 9: a tera move (9-12) is its move (0-3); -1 stays -1."""
    return np.where(action >= NUM_MOVES + NUM_SWITCHES, action - NUM_MOVES - NUM_SWITCHES, action)


NO_TEACHER = next(c.absent for c in CODE_VERSIONS.added_columns if c.name == "teacher_action")
"""The ``teacher_action`` of a row no teacher labelled, as the schema declares it for versions without the column."""


def _teacher_actions(table: pa.Table) -> np.ndarray:
    """(N,) the rows' folded ``teacher_action``, all ``NO_TEACHER`` where the table has no such column (a version
    from before the schema added it)."""
    if "teacher_action" not in table.column_names:
        return np.full(table.num_rows, NO_TEACHER, np.int64)
    return _fold_actions(table.column("teacher_action").to_numpy().astype(np.int64))


def decode_shard(table: pa.Table) -> dict[str, np.ndarray]:
    """A shard's training columns as row-aligned numpy arrays, in the dtypes the trainer consumes."""
    return {
        "tokens": _fixed_list(table.column("obs_tokens"), OBS_WORDS, np.int32),  # (N, 87); embeddings take int32
        "numeric": _fixed_list(table.column("obs_numeric"), OBS_NUMERIC, np.float32),  # (N, 50)
        "legal": _fold(_fixed_list(table.column("legal_mask"), NUM_ACTIONS, bool)),  # (N, 9)
        "action": _fold_actions(table.column("action").to_numpy().astype(np.int64)),  # (N,)
        "teacher_action": _teacher_actions(table),  # (N,)
        "reward": table.column("reward").to_numpy().astype(np.float32),
        "done": table.column("done").to_numpy(zero_copy_only=False).astype(bool),
    }


def load_window_reference(table: pa.Table, start: int, count: int, context: int) -> dict[str, np.ndarray]:
    """Readable reference of one padded window, straight from the Arrow rows (tests compare the fast path to it)."""
    rows = table.slice(start, count)
    k = rows.num_rows
    out = {"tokens": np.zeros((context, OBS_WORDS), np.int32),
           "numeric": np.zeros((context, OBS_NUMERIC), np.float32),
           "legal": np.zeros((context, NUM_MOVES + NUM_SWITCHES), bool), "action": np.full(context, -1, np.int64),
           "teacher_action": np.full(context, -1, np.int64),
           "reward": np.zeros(context, np.float32), "done": np.zeros(context, bool), "valid": np.zeros(context, bool)}
    out["tokens"][:k] = rows.column("obs_tokens").combine_chunks().flatten().to_numpy().reshape(k, -1)
    out["numeric"][:k] = rows.column("obs_numeric").combine_chunks().flatten().to_numpy().reshape(k, -1)
    mask13 = rows.column("legal_mask").combine_chunks().flatten().to_numpy(zero_copy_only=False).reshape(k, -1)
    out["legal"][:k] = _fold(mask13)
    action = rows.column("action").to_numpy().astype(np.int64)
    out["action"][:k] = np.where(action >= NUM_MOVES + NUM_SWITCHES, action - NUM_MOVES - NUM_SWITCHES, action)
    if "teacher_action" in rows.column_names:  # else none labelled: -1, as padded
        teacher = rows.column("teacher_action").to_numpy().astype(np.int64)
        out["teacher_action"][:k] = np.where(teacher >= NUM_MOVES + NUM_SWITCHES,
                                             teacher - NUM_MOVES - NUM_SWITCHES, teacher)
    out["reward"][:k] = rows.column("reward").to_numpy()
    out["done"][:k] = rows.column("done").to_numpy(zero_copy_only=False)
    out["valid"][:k] = True
    return out


def shard_trajectories(index: pa.Table, file: str) -> tuple[np.ndarray, np.ndarray]:
    """(first rows, rows) of the trajectories ``index`` (a version's) places in shard ``file``."""
    rows = index.filter(pc.equal(index.column("file"), file))
    return rows.column("row_start").to_numpy(), rows.column("num_rows").to_numpy()


class LoadTurnWindows(LoadWindows):
    """Window specs of turns → padded arrays of the policy's inputs: about 390 bytes per cached turn. With
    ``shaping`` (hp weight, faint weight), each turn's ``reward`` also holds the dense reward of the turn it closes
    (``training/pokemon/rewards.shaped_rewards``). With ``gammas``, each turn also carries ``returns`` (G,): its
    trajectory's discounted return of those rewards from that decision to the trajectory's end for each discount
    factor (``training/returns.discounted_returns``), 4 bytes per factor more per turn. Both are derived once per
    decoded shard, trajectory by trajectory from the version's index."""

    def __init__(self, version_paths: str | list[str], context: int, max_cached_bytes: int = 4 << 30,
                 vocab_size: int | None = None, gammas: tuple[float, ...] | None = None,
                 shaping: tuple[float, float] | None = None):
        super().__init__(version_paths, context, max_cached_bytes)
        self.vocab_size = vocab_size  # token ids are checked against it once per decoded shard
        self.gammas, self.shaping = gammas, shaping

    def _decode(self, file: str, number: int = 0) -> dict[str, np.ndarray]:
        version = self.versions[number]
        arrays = decode_shard(version.read_table(file, shard_columns(version)))
        if self.gammas is not None or self.shaping is not None:
            starts, counts = shard_trajectories(version.index(), file)
            if self.shaping is not None:
                arrays["reward"] = arrays["reward"] + shaped_rewards(arrays["tokens"], arrays["numeric"], starts,
                                                                     counts, *self.shaping)
            if self.gammas is not None:
                arrays["returns"] = discounted_returns(arrays["reward"], starts, counts, self.gammas)
        if self.vocab_size is not None:
            # here rather than in the model's forward pass, where the check would wait on the device every step
            check_inputs(arrays["tokens"], self.vocab_size)
        return arrays

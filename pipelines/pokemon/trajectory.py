"""Turn a sequence of (state, action, legal mask) into ``pokemon_turns`` rows (rewards, checks), and rows into a
table, with the observation columns derived from the rows' states for the whole table at once."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pyarrow as pa

from pipelines.errors import IllegalActionError, NoActivePokemonError
from pipelines.pokemon.observation import observation_columns
from shards_schema.declare import to_table
from shards_schema.pokemon import NUM_ACTIONS, NUM_MOVES, NUM_SWITCHES, TURNS_SCHEMA

_RESULT_REWARD = {"win": 1.0, "loss": -1.0, "tie": 0.0, "unknown": 0.0}
_NO_POWER = (False, False)


@dataclass(frozen=True, kw_only=True)
class TrajectoryMeta:
    """What is constant over one trajectory.

    Attributes:
        battle_id: the battle's id.
        format: format id.
        player_side: ``p1``, ``p2`` or ``unknown``.
        player_name: the player's name.
        opponent_name: the opponent's name.
        result: ``win``, ``loss``, ``tie`` or ``unknown``.
        rating: the player's rating, if known.
    """

    battle_id: str
    format: str
    player_side: str
    player_name: str | None
    opponent_name: str | None
    result: str
    rating: int | None

    @property
    def trajectory_id(self) -> str:
        who = self.player_side if self.player_side != "unknown" else (self.player_name or "unknown")
        return f"{self.battle_id}:{who}"


def derived_mask(state: dict) -> list[bool]:
    """The legal actions implied by a state alone (no request): move slots the active knows unless it must
    switch, one switch per available bench Pokémon, tera moves while tera is possible. Cannot see Disable,
    zero PP, trapping or choice locks, so it is a superset of the true mask. The list is shared by every state
    with the same mask: never mutate it."""
    active = state["player_active"]
    num_moves = len(active["moves"]) if active and not state["forced_switch"] else 0
    return _mask(min(num_moves, NUM_MOVES), min(len(state["available_switches"]), NUM_SWITCHES),
                 bool(state["can_tera"]))


@functools.cache
def _mask(num_moves: int, num_switches: int, can_tera: bool) -> list[bool]:
    mask = [False] * NUM_ACTIONS
    for slot in range(num_moves):
        mask[slot] = True
        if can_tera:
            mask[NUM_MOVES + NUM_SWITCHES + slot] = True
    for slot in range(num_switches):
        mask[NUM_MOVES + slot] = True
    return mask


def build_rows(meta: TrajectoryMeta, steps: list[tuple[dict, int, list[bool]]], *, mask_exact: bool,
               battle_turns: list[int | None], powers: list[tuple[bool, bool]] | None = None,
               teacher_actions: list[int] | None = None) -> list[dict]:
    """Rows for one trajectory, with the fields of ``ROW_SCHEMA`` (``turns_table`` adds the observations). The
    last step is terminal (done) and carries the result's reward. ``powers``: (``zmove``, ``dynamax``) of each
    step's chosen move (None: neither, as in generations without them). ``teacher_actions``: the action id a
    teacher chose at each step, in the layout of the action (None: no teacher, -1 on every row).

    Raises IllegalActionError when a visible action or a teacher's action is not legal under its mask,
    NoActivePokemonError when the player has no active Pokémon at a decision (every step but the terminal one).
    """
    rows = []
    last = len(steps) - 1
    powers = powers or [_NO_POWER] * len(steps)
    teacher_actions = teacher_actions or [-1] * len(steps)
    for i, ((state, action, mask), battle_turn, (zmove, dynamax), teacher_action) in enumerate(
            zip(steps, battle_turns, powers, teacher_actions, strict=True)):
        if state["player_active"] is None and i != last:
            raise NoActivePokemonError(
                f"{meta.trajectory_id} decision {i} (battle turn {battle_turn}): the player has no active Pokémon "
                f"(do the leads switch in after |turn|1?)"
            )
        if action >= 0 and (action >= NUM_ACTIONS or not mask[action]):
            raise IllegalActionError(
                f"{meta.trajectory_id} decision {i}: action {action} is not legal there (legal: "
                f"{[a for a, ok in enumerate(mask) if ok]})"
            )
        if teacher_action >= 0 and (teacher_action >= NUM_ACTIONS or not mask[teacher_action]):
            raise IllegalActionError(
                f"{meta.trajectory_id} decision {i}: the teacher's action {teacher_action} is not legal there (legal: "
                f"{[a for a, ok in enumerate(mask) if ok]})"
            )
        rows.append({
            "trajectory_id": meta.trajectory_id, "battle_id": meta.battle_id, "format": meta.format,
            "player_side": meta.player_side, "player_name": meta.player_name, "opponent_name": meta.opponent_name,
            "turn_index": i, "battle_turn": battle_turn, "state": state, "action": action,
            "teacher_action": teacher_action, "zmove": zmove,
            "dynamax": dynamax, "legal_mask": mask,
            "legal_mask_exact": mask_exact, "reward": _RESULT_REWARD[meta.result] if i == last else 0.0,
            "done": i == last, "result": meta.result, "rating": meta.rating,
        })
    return rows


OBSERVATION_COLUMNS = ("obs_text", "obs_tokens", "obs_numeric", "obs_unknown_words")
"""The ``pokemon_turns`` columns derived from a row's state by the observation spec; rows do not carry them."""
ROW_SCHEMA = pa.schema([f for f in TURNS_SCHEMA if f.name not in OBSERVATION_COLUMNS], metadata=TURNS_SCHEMA.metadata)
"""The fields of a row of ``build_rows``: ``TURNS_SCHEMA`` without ``OBSERVATION_COLUMNS``."""


def turns_table(rows: list[dict]) -> pa.Table:
    """Rows of ``build_rows`` → a ``pokemon_turns`` table: their fields as they are, and the observation columns
    derived from their states (``observation_columns``), for the whole batch at once."""
    base = to_table(rows, ROW_SCHEMA)
    observations = observation_columns([row["state"] for row in rows], [row["format"] for row in rows])
    return pa.Table.from_arrays([observations[f.name] if f.name in observations else base.column(f.name)
                                 for f in TURNS_SCHEMA], schema=TURNS_SCHEMA)

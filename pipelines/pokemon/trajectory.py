"""Turn a sequence of (state, action, legal mask) into ``pokemon_turns`` rows: observations, rewards, checks."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from pipelines.errors import IllegalActionError
from pipelines.pokemon.observation import Observer
from shards_schema.pokemon import NUM_ACTIONS, NUM_MOVES, NUM_SWITCHES

_RESULT_REWARD = {"win": 1.0, "loss": -1.0, "tie": 0.0, "unknown": 0.0}


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
               battle_turns: list[int | None]) -> list[dict]:
    """Rows for one trajectory. The last step is terminal (done) and carries the result's reward.

    Raises IllegalActionError when a visible action is not legal under its mask.
    """
    rows = []
    last = len(steps) - 1
    observe = Observer(meta.format)
    for i, ((state, action, mask), battle_turn) in enumerate(zip(steps, battle_turns, strict=True)):
        if action >= 0 and (action >= NUM_ACTIONS or not mask[action]):
            raise IllegalActionError(
                f"{meta.trajectory_id} decision {i}: action {action} is not legal there (legal: "
                f"{[a for a, ok in enumerate(mask) if ok]})"
            )
        text, tokens, numeric, unknown = observe(state)
        rows.append({
            "trajectory_id": meta.trajectory_id, "battle_id": meta.battle_id, "format": meta.format,
            "player_side": meta.player_side, "player_name": meta.player_name, "opponent_name": meta.opponent_name,
            "turn_index": i, "battle_turn": battle_turn, "state": state, "obs_text": text, "obs_tokens": tokens,
            "obs_numeric": numeric, "obs_unknown_words": unknown, "action": action, "legal_mask": mask,
            "legal_mask_exact": mask_exact, "reward": _RESULT_REWARD[meta.result] if i == last else 0.0,
            "done": i == last, "result": meta.result, "rating": meta.rating,
        })
    return rows

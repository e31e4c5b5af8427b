"""Dense rewards of a Pokémon trajectory, derived from its observation columns (as Metamon shapes its rewards): each
decision's reward for the turn it led to is the HP it took from the foe's active Pokémon minus the HP its own active
lost, and the foe's Pokémon fainted minus its own, beside the battle's result on the closing row.

    r_t += hp_weight × (dealt_t − taken_t) + faint_weight × (foe fainted_t − own fainted_t)

for row t > 0 of a trajectory, from rows t − 1 and t. Damage counts only while the same Pokémon stays in (its
species word unchanged and present): a switch changes the active's HP fraction without any damage, and a faint is
counted by the faint term (the remaining counts ÷ 6, numbers 41 and 42). The layout is observation spec 2.x's
(``pipelines/pokemon/observation.py``): word 12 the player's active species, word 32 the foe's, number 0 the
player's active HP fraction, number 24 the foe's. Nothing is stored: the trainer derives them when it decodes a
shard, so a change here is a change of training code, not of the shards.
"""

from __future__ import annotations

import numpy as np

PLAYER_SPECIES_WORD, FOE_SPECIES_WORD = 12, 32
PLAYER_HP, FOE_HP = 0, 24
PLAYER_REMAINING, FOE_REMAINING = 41, 42
TEAM_SCALE = 6.0  # the remaining counts are ÷ 6
BLANK_WORD = 2  # ``<blank>``: no Pokémon there (pipelines/pokemon/observation.PAD, UNK, BLANK)


def shaped_rewards(tokens: np.ndarray, numeric: np.ndarray, row_start: np.ndarray, num_rows: np.ndarray,
                   hp_weight: float, faint_weight: float) -> np.ndarray:
    """(N,) dense rewards of a shard's rows: tokens (N, 87), numeric (N, 50) and its trajectories' (first row, rows);
    0 at each trajectory's first row and outside every trajectory (see the module docstring)."""
    n = len(numeric)
    out = np.zeros(n, np.float64)
    if n < 2:
        return out.astype(np.float32)
    numbers = numeric.astype(np.float64)
    prev, cur = slice(0, n - 1), slice(1, n)

    def same(word: int) -> np.ndarray:
        return (tokens[prev, word] == tokens[cur, word]) & (tokens[cur, word] != BLANK_WORD)

    dealt = np.where(same(FOE_SPECIES_WORD), numbers[prev, FOE_HP] - numbers[cur, FOE_HP], 0.0)
    taken = np.where(same(PLAYER_SPECIES_WORD), numbers[prev, PLAYER_HP] - numbers[cur, PLAYER_HP], 0.0)
    foe_fainted = np.round((numbers[prev, FOE_REMAINING] - numbers[cur, FOE_REMAINING]) * TEAM_SCALE)
    own_fainted = np.round((numbers[prev, PLAYER_REMAINING] - numbers[cur, PLAYER_REMAINING]) * TEAM_SCALE)
    out[1:] = hp_weight * (dealt - taken) + faint_weight * (foe_fainted - own_fainted)
    inside = np.zeros(n, bool)  # rows after their trajectory's first
    for start, rows in zip(np.asarray(row_start, np.int64), np.asarray(num_rows, np.int64), strict=True):
        inside[start + 1:start + rows] = True
    return np.where(inside, out, 0.0).astype(np.float32)

"""The Pokémon policy's dense rewards (``training/pokemon/rewards.py``) on a hand-built trajectory: damage only while
the same Pokémon stays in, faints from the remaining counts, nothing at a trajectory's first row or across
trajectories."""

from __future__ import annotations

import numpy as np
import pytest

from shards_schema.pokemon import OBS_NUMERIC, OBS_WORDS
from training.pokemon.rewards import (
    BLANK_WORD,
    FOE_HP,
    FOE_REMAINING,
    FOE_SPECIES_WORD,
    PLAYER_HP,
    PLAYER_REMAINING,
    PLAYER_SPECIES_WORD,
    shaped_rewards,
)


def _rows(*turns):
    """(tokens, numeric) of turns given as (own species, own hp, foe species, foe hp, own left, foe left)."""
    tokens = np.zeros((len(turns), OBS_WORDS), np.int32)
    numeric = np.zeros((len(turns), OBS_NUMERIC), np.float32)
    for i, (own, own_hp, foe, foe_hp, own_left, foe_left) in enumerate(turns):
        tokens[i, PLAYER_SPECIES_WORD], tokens[i, FOE_SPECIES_WORD] = own, foe
        numeric[i, [PLAYER_HP, FOE_HP, PLAYER_REMAINING, FOE_REMAINING]] = own_hp, foe_hp, own_left / 6, foe_left / 6
    return tokens, numeric


def test_a_hand_built_trajectory():
    tokens, numeric = _rows(
        (10, 1.0, 20, 1.0, 6, 6),  # first row: no reward
        (10, 0.8, 20, 0.5, 6, 6),  # dealt 0.5, took 0.2
        (10, 0.8, 21, 1.0, 6, 5),  # the foe's Pokémon fainted (its replacement's HP is no damage)
        (11, 0.9, 21, 0.9, 6, 5),  # we switched (no damage counted on our side), dealt 0.1
        (BLANK_WORD, 0.0, 21, 0.9, 5, 5),  # the closing row: our active fainted
    )
    rewards = shaped_rewards(tokens, numeric, np.array([0]), np.array([5]), hp_weight=1.0, faint_weight=2.0)
    np.testing.assert_allclose(rewards, [0.0, 0.5 - 0.2, 2.0, 0.1, -2.0], atol=1e-6)
    only_hp = shaped_rewards(tokens, numeric, np.array([0]), np.array([5]), hp_weight=0.5, faint_weight=0.0)
    np.testing.assert_allclose(only_hp, [0.0, 0.15, 0.0, 0.05, 0.0], atol=1e-6)


def test_nothing_crosses_trajectories():
    a = _rows((10, 1.0, 20, 1.0, 6, 6), (10, 0.5, 20, 0.5, 6, 6))
    b = _rows((10, 0.1, 20, 0.9, 1, 6), (10, 0.1, 20, 0.4, 1, 6))
    tokens, numeric = np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]])
    rewards = shaped_rewards(tokens, numeric, np.array([0, 2]), np.array([2, 2]), 1.0, 1.0)
    assert rewards.tolist() == pytest.approx([0.0, 0.0, 0.0, 0.5])  # row 2 starts b: nothing from a's last row
    assert shaped_rewards(tokens, numeric, np.array([2]), np.array([2]), 1.0, 1.0)[:2].tolist() == [0.0, 0.0]

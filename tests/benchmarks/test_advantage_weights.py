"""The critic diagnostic's arithmetic (``benchmarks/advantage_weights.py``): the AUC against a brute-force count,
per-player weights, the weakest-over-strongest ratio and the β it chooses (no model, no data)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.advantage_weights import auc, choose_beta, player_of, separation, summarize


def test_auc_counts_pairs_ties_half():
    rng = np.random.default_rng(0)
    pos, neg = rng.integers(0, 5, 40).astype(float), rng.integers(0, 5, 30).astype(float)  # many ties
    brute = np.mean([(p > n) + 0.5 * (p == n) for p in pos for n in neg])
    assert auc(pos, neg) == pytest.approx(brute)
    assert auc(np.array([2.0, 3.0]), np.array([0.0, 1.0])) == 1.0
    assert auc(np.array([0.0]), np.array([1.0])) == 0.0
    with pytest.raises(ValueError, match="both players"):
        auc(np.array([]), neg)


def test_players_come_from_the_manifest_else_the_side():
    assert player_of({"p1": "search", "p2": "random"}, "p2") == "random"
    assert player_of({}, "p1") == "p1"


def test_separated_advantages_give_a_high_auc_and_a_beta_that_halves_the_weakest():
    groups = {"search": np.full(100, 0.2), "heuristic": np.zeros(100), "random": np.full(100, -0.2)}
    rows = summarize(groups, [1.0, 0.3, 0.1])
    split = separation(groups, rows, "search", "random")
    assert [r["auc"] for r in split] == [1.0] * 3
    ratios = {r["beta"]: r["weight_ratio"] for r in split}
    assert ratios[1.0] == pytest.approx(np.exp(-0.4)) and ratios[0.1] == pytest.approx(np.exp(-4.0))
    assert choose_beta(split)["beta"] == 0.3  # exp(-0.4 / 0.3) = 0.26 <= 0.5; β = 1 gives 0.67
    by_player = {r["player"]: r for r in rows if r["beta"] == 1.0}
    assert by_player["search"]["relative_weight"] > by_player["heuristic"]["relative_weight"] > \
        by_player["random"]["relative_weight"]
    assert by_player["search"]["ess_share"] == pytest.approx(1.0)  # equal weights within a player


def test_a_critic_that_does_not_separate_gets_chance_and_the_lowest_ratio():
    rng = np.random.default_rng(1)
    groups = {"search": rng.normal(0, 0.05, 2000), "random": rng.normal(0, 0.05, 2000)}
    split = separation(groups, summarize(groups, [1.0, 0.1]), "search", "random")
    assert abs(split[0]["auc"] - 0.5) < 0.05
    assert choose_beta(split) is min(split, key=lambda r: r["weight_ratio"])
    with pytest.raises(ValueError, match="--strongest"):
        separation(groups, summarize(groups, [1.0]), "search", "heuristic")

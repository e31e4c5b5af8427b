"""The strength ladder: the Bradley-Terry fit and its bootstrap on hand-checkable cases (no simulator), and one tiny
ladder through a real local Showdown server that checks its files and that every battle is counted once."""

from __future__ import annotations

import csv
import dataclasses
import math

import numpy as np
import pytest
from conftest import needs_simulator

from training.pokemon.ladder import LadderConfig, bootstrap_ratings, bradley_terry, pairings, scores_of


def test_two_players_elo_gap_is_the_win_rate_logit():
    """p = 0.75 → a gap of 400·log10(0.75 / 0.25) = 190.85 Elo; the anchor keeps 1000 wherever it sits."""
    scores = np.array([[0.0, 25.0], [75.0, 0.0]])  # player 1 beat player 0 in 75 of 100
    ratings = bradley_terry(scores, anchor=0)
    assert ratings[0] == 1000.0
    assert ratings[1] - ratings[0] == pytest.approx(400 * math.log10(3), abs=1e-6)
    moved = bradley_terry(scores, anchor=1, anchor_elo=1500.0)
    assert moved[1] == 1500.0 and moved[1] - moved[0] == pytest.approx(400 * math.log10(3), abs=1e-6)


def test_ties_count_half():
    """30 wins, 40 ties, 30 losses is an even record: the same rating as the anchor."""
    battles = np.array([(0, 1, 1.0)] * 30 + [(0, 1, 0.5)] * 40 + [(0, 1, 0.0)] * 30)
    assert bradley_terry(scores_of(battles, 2))[1] == pytest.approx(1000.0, abs=1e-6)


def test_three_transitive_players_recover_their_ratings():
    """Expected scores of players at 1000, 1200, 1500 (each pair 1,000 battles): the fit gives the ratings back."""
    true = np.array([1000.0, 1200.0, 1500.0])
    p = 1 / (1 + 10 ** ((true[None, :] - true[:, None]) / 400))  # p[i, j] = P(i beats j)
    scores = 1000 * p
    np.fill_diagonal(scores, 0.0)
    np.testing.assert_allclose(bradley_terry(scores), true, atol=1e-6)


def test_a_player_that_never_won_gets_a_finite_rating_from_the_prior_only():
    scores = np.array([[0.0, 20.0, 20.0], [0.0, 0.0, 10.0], [0.0, 10.0, 0.0]])  # 1 and 2 never beat 0
    with pytest.raises(ValueError, match="no finite maximum"):
        bradley_terry(scores)
    ratings = bradley_terry(scores, prior_ties=1.0)
    assert np.isfinite(ratings).all() and ratings[0] == 1000.0
    assert ratings[1] < 1000.0 and ratings[1] == pytest.approx(ratings[2])  # even against each other
    # one virtual tie in 21 battles: 0.5 of 21 → 400·log10(0.5 / 20.5) below the anchor for a two-player set
    two = bradley_terry(np.array([[0.0, 20.0], [0.0, 0.0]]), prior_ties=1.0)
    assert two[1] - 1000.0 == pytest.approx(400 * math.log10(0.5 / 20.5), abs=1e-6)


def test_bootstrap_is_seeded_and_brackets_the_fit():
    rng = np.random.default_rng(3)
    battles = np.array([(0, 1, float(rng.random() < 0.7)) for _ in range(200)]
                       + [(1, 2, float(rng.random() < 0.4)) for _ in range(200)]
                       + [(2, 0, float(rng.random() < 0.8)) for _ in range(200)])
    ratings, low, high = bootstrap_ratings(battles, 3, samples=200, seed=7, prior_ties=0.0)
    again = bootstrap_ratings(battles, 3, samples=200, seed=7, prior_ties=0.0)
    for a, b in zip((ratings, low, high), again, strict=True):
        np.testing.assert_array_equal(a, b)
    assert low[0] == high[0] == 1000.0  # the anchor does not move
    assert (low[1:] < ratings[1:]).all() and (ratings[1:] < high[1:]).all()
    assert ((high - low)[1:] > 20).all() and ((high - low)[1:] < 300).all()  # 200 battles a pair: tens of Elo wide
    other = bootstrap_ratings(battles, 3, samples=200, seed=8, prior_ties=0.0)
    assert not np.array_equal(other[1], low)


def test_config_checks():
    with pytest.raises(ValueError, match="even"):
        LadderConfig(out="x", port=1, battles_per_pair=3)
    with pytest.raises(ValueError, match="anchor"):
        LadderConfig(out="x", port=1, players=["maxbp", "heuristic"])
    with pytest.raises(ValueError, match="unknown"):
        LadderConfig(out="x", port=1, players=["random", "nobody"])
    with pytest.raises(ValueError, match="unknown --scripted"):
        LadderConfig(out="x", port=1, scripted=["heuristc"])


@needs_simulator
@pytest.mark.timeout(180)
def test_tiny_ladder_counts_every_battle_once(tmp_path):
    """RandomPlayer against the generator's Node heuristic player, 2 battles (one each side) on the real server: the
    files are written, wins + ties = battles in every count, and the two matrix cells of the pair add up. No win rate
    is asserted."""
    from training.pokemon.ladder import run
    from training.pokemon.showdown_server import free_port

    cfg = LadderConfig.tiny(out=str(tmp_path / "ladder"), port=free_port(), players=["random"], scripted=["heuristic"])
    result = run(cfg, log=lambda *_: None)
    assert sorted(p.name for p in (tmp_path / "ladder").iterdir()) == ["elo.csv", "ladder.png", "matches.csv",
                                                                       "matrix.csv"]
    assert len(result["records"]) == 2
    assert sorted((r["i"], r["j"]) for r in result["records"]) == [(0, 1), (1, 0)]  # one battle each side
    with open(tmp_path / "ladder" / "matches.csv") as f:
        matches = list(csv.DictReader(f))
    assert len(matches) == 1
    m = matches[0]
    assert (m["player_a"], m["player_b"], m["format"]) == ("RandomPlayer", "node-heuristic", "gen9randombattle")
    assert int(m["battles"]) == 2 and int(m["wins_a"]) + int(m["wins_b"]) + int(m["ties"]) == 2
    with open(tmp_path / "ladder" / "matrix.csv") as f:
        matrix = list(csv.DictReader(f))
    assert len(matrix) == 2 and sum(float(r["win_rate"]) for r in matrix) == pytest.approx(1.0)
    with open(tmp_path / "ladder" / "elo.csv") as f:
        elo = {r["player"]: r for r in csv.DictReader(f)}
    assert float(elo["RandomPlayer"]["elo"]) == 1000.0 and int(elo["RandomPlayer"]["battles"]) == 2
    assert math.isfinite(float(elo["node-heuristic"]["elo"]))  # finite even after 2-0 (the prior tie)


def test_a_gauntlet_leaves_out_only_the_checkpoint_pairs():
    everyone = LadderConfig(out="o", port=1, players=["random", "heuristic"], checkpoints=["a", "b", "c"])
    assert len(pairings(everyone, 5)) == 10
    gauntlet = dataclasses.replace(everyone, checkpoints_meet=False)
    assert pairings(gauntlet, 5) == [(0, 1), (0, 2), (0, 3), (0, 4), (1, 2), (1, 3), (1, 4)]


def test_a_gauntlets_tables_and_figure_leave_the_unplayed_pairs_blank():
    from training.pokemon.ladder import Entrant, _plot, matrix_rows, print_tables

    entrants = [Entrant(name, None) for name in ("RandomPlayer", "runs/a/policy", "runs/b/policy")]
    matches = [{"format": "gen9randombattle", "player_a": "RandomPlayer", "player_b": name, "battles": 10,
                "wins_a": 1, "wins_b": 9, "ties": 0} for name in ("runs/a/policy", "runs/b/policy")]
    lines = []
    print_tables(matrix_rows(matches, entrants), [], entrants, ["gen9randombattle"], log=lines.append)
    [row_a] = [line for line in lines if line.startswith("runs/a/policy")]
    assert row_a.split()[-1] == "·" and "90.0% [60%, 98%]" in row_a
    assert _plot(matrix_rows(matches, entrants), entrants, ["gen9randombattle"]).startswith(b"\x89PNG")

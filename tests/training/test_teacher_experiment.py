"""The teacher experiment's bookkeeping (``benchmarks/teacher_experiment.py``): arms as typed, and the per-run and
per-arm rows made from a ladder's matrix (no training, no simulator)."""

from __future__ import annotations

import pytest

from benchmarks.teacher_experiment import ExperimentConfig, parse_arm, summarize
from training.pokemon.evaluate import wilson_interval


def test_an_arm_names_its_objective_and_versions():
    assert parse_arm("bc-mixed=bc@out/a+out/b") == ("bc-mixed", "bc", ["out/a", "out/b"], {})
    assert parse_arm("x=exp_adv@s3://b/v1") == ("x", "exp_adv", ["s3://b/v1"], {})
    assert parse_arm("o=bc,sides=p1,critic-target=mc@a+b") == ("o", "bc", ["a", "b"],
                                                               {"sides": ["p1"], "critic-target": ["mc"]})
    assert parse_arm("t=exp_adv,sides=p1/p2@a")[3] == {"sides": ["p1", "p2"]}
    for bad in ("bc@v", "x=bc", "=bc@v", "x=@v", "x=,sides=p1@v"):
        with pytest.raises(ValueError, match="name=objective"):
            parse_arm(bad)
    with pytest.raises(ValueError, match="flag=value"):
        parse_arm("x=bc,sides@v")
    with pytest.raises(ValueError, match="at least one --arm"):
        ExperimentConfig(out="o", port=1)


def _cell(row, column, wins, battles):
    low, high = wilson_interval(wins, battles)
    return {"format": "gen9randombattle", "row": row, "column": column, "battles": battles,
            "win_rate": wins / battles, "ci_low": low, "ci_high": high}


def test_runs_get_their_win_rates_and_arms_pool_their_seeds():
    runs = [{"arm": "bc", "seed": s, "run": f"out/bc-seed{s}/", "val_accuracy": acc}
            for s, acc in ((0, 0.5), (1, 0.7))]
    matrix = [_cell("out/bc-seed0", "SimpleHeuristicsPlayer", 40, 200),
              _cell("out/bc-seed1", "SimpleHeuristicsPlayer", 80, 200),
              _cell("SimpleHeuristicsPlayer", "out/bc-seed0", 160, 200),
              _cell("RandomPlayer", "SimpleHeuristicsPlayer", 1, 200)]
    rows, arms = summarize(runs, matrix)
    assert [r["gen9randombattle vs SimpleHeuristicsPlayer"] for r in rows] == [0.2, 0.4]
    assert all("battles" not in r for r in rows)
    [arm] = arms
    low, high = wilson_interval(120, 400)
    assert (arm["mean"], arm["lowest"], arm["highest"], arm["pooled_battles"]) == (0.3, 0.2, 0.4, 400)
    assert arm["pooled_interval"] == f"[{low:.4f}, {high:.4f}]" and arm["val_accuracy_mean"] == 0.6

"""The critic diagnostic (``benchmarks/advantage_weights.py``): its arithmetic (the AUC against a brute-force count,
per-player weights, the weakest-over-strongest ratio and the β it chooses) and the advantages it reads from held-out
windows of a real version."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmarks.advantage_weights import auc, choose_beta, held_out_advantages, player_of, separation, summarize


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


def test_held_out_advantages_read_the_checkpoints_rewards_returns_and_q(tiny_generated):
    """On held-out windows of a generated version: the ``return``/``zero`` advantage is the loader's own return of
    the checkpoint's rewards at the training discount, ``q``/``zero`` the critic's Q of the action taken, and
    ``return``/``mean`` the two's difference with V; every kind counts the same decisions."""
    from models.pokemon_policy import PokemonPolicy, PolicyConfig
    from pipelines.pokemon.observation import vocabulary
    from shards_schema.reader import open_version
    from training.pokemon.offline_rl import step_mask
    from training.pokemon.windows import LoadTurnWindows, window_specs
    from training.windows import first_windows

    _, published, _ = tiny_generated
    version = open_version(published.path)
    vocab_size = len(vocabulary(version.manifest.observation_version))
    torch.manual_seed(0)
    model = PokemonPolicy(PolicyConfig.preset("tiny", vocab_size)).eval()
    train = {"context": 8, "validation_share": 0.5, "seed": 3, "advantage_gamma": 1, "reward_hp": 1.0,
             "reward_faint": 0.5}
    kinds = [("return", "zero"), ("q", "zero"), ("return", "mean")]
    found = held_out_advantages(model, version, str(published.path), "p1", train, 50, kinds)
    specs = window_specs(version, 8, 0, ["p1"], validation_share=0.5, split_seed=3, validation=True)
    arrays = first_windows(specs, 50, LoadTurnWindows(str(published.path), 8, vocab_size=vocab_size,
                                                      gammas=model.cfg.gammas, shaping=(1.0, 0.5)))
    batch = {k: torch.as_tensor(v) for k, v in arrays.items() if k != "window"}
    mask = step_mask(batch)
    assert mask.sum() > 0 and all(len(found[kind]) == int(mask.sum()) for kind in kinds)
    np.testing.assert_allclose(found["return", "zero"], batch["returns"][..., 1][mask].numpy(), rtol=1e-6)
    with torch.no_grad():
        out = model(batch["tokens"], batch["numeric"], batch["legal"], batch["valid"])
    q_taken = out.q_values[..., 1, :].gather(-1, batch["action"].clamp(min=0)[..., None]).squeeze(-1)
    np.testing.assert_allclose(found["q", "zero"], q_taken[mask].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(found["return", "mean"], (batch["returns"][..., 1] - out.values[..., 1])[mask].numpy(),
                               rtol=1e-5, atol=1e-6)

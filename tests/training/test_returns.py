"""The critic's targets: whole-trajectory discounted returns (fast path against the readable loop, both against a
hand-computed trajectory), λ-returns inside a window, and the loss's three target kinds on one batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from training import losses
from training.pokemon.offline_rl import TrainConfig, critic_targets
from training.returns import discounted_returns, discounted_returns_reference

GAMMAS = (0.5, 0.9, 1.0)


def test_returns_of_a_hand_computed_trajectory():
    """Four decisions and the closing row with the result (+1): G_t = γ^(3-t) from decision t ≥ 1, the closing
    row's 0. The reward of row t itself (here 0.25 at row 1, e.g. shaped) counts for the decisions before it, not for
    t: G_0 = 0.25 + γ G_1."""
    rewards = np.array([0.0, 0.25, 0.0, 0.0, 1.0])
    expected = np.array([[0.25 + 0.5 ** 3, 0.25 + 0.9 ** 3, 0.25 + 1.0],
                         [0.5 ** 2, 0.9 ** 2, 1.0],
                         [0.5, 0.9, 1.0],
                         [1.0, 1.0, 1.0],
                         [0.0, 0.0, 0.0]])
    np.testing.assert_allclose(discounted_returns_reference(rewards, GAMMAS), expected)
    np.testing.assert_allclose(discounted_returns(rewards, np.array([0]), np.array([5]), GAMMAS), expected,
                               rtol=1e-6)


def test_the_fast_path_equals_the_reference_trajectory_by_trajectory():
    rng = np.random.default_rng(0)
    lengths = [1, 2, 7, 40, 3, 120, 1, 15]
    gaps = [0, 2, 0, 1, 0, 0, 3, 0]  # rows between trajectories belong to none
    starts, position = [], 0
    for gap, n in zip(gaps, lengths, strict=True):
        position += gap
        starts.append(position)
        position += n
    rewards = rng.normal(size=position)
    fast = discounted_returns(rewards, np.array(starts), np.array(lengths), GAMMAS)
    assert fast.shape == (position, len(GAMMAS)) and fast.dtype == np.float32
    covered = np.zeros(position, bool)
    for start, n in zip(starts, lengths, strict=True):
        np.testing.assert_allclose(fast[start:start + n],
                                   discounted_returns_reference(rewards[start:start + n], GAMMAS), rtol=1e-5,
                                   atol=1e-5)
        covered[start:start + n] = True
    assert not fast[~covered].any()
    # the trajectories in another order in the index give the same rows
    order = rng.permutation(len(starts))
    np.testing.assert_array_equal(
        discounted_returns(rewards, np.array(starts)[order], np.array(lengths)[order], GAMMAS), fast)


def _window(rewards, dones, values, valid, tail):
    """(B=1, T) tensors of a window's next-row inputs, as ``critic_targets`` shifts them."""
    def row(x, dtype=torch.float32):
        return torch.as_tensor(np.asarray(x), dtype=dtype)[None]

    return row(rewards), row(dones, torch.bool), row(values), row(valid, torch.bool), row(tail)


def test_lambda_returns_hand_computed():
    """T = 3 steps, one discount γ = 0.5, λ = 0.5; next rows: reward 0, 0, (outside the window); V(s') 0.4, 0.8;
    the trajectory's own return past the window's end 0.6 at step 2."""
    r, d, v, ok, tail = _window([0.0, 0.0, 0.0], [False, False, False], [[0.4], [0.8], [0.0]],
                                [True, True, False], [[0.1], [0.3], [0.6]])
    gamma = torch.tensor([0.5])
    out = losses.lambda_returns(r, d, v, ok, tail, gamma, 0.5)
    g2 = 0.6  # the window's last step: the Monte Carlo tail
    g1 = 0.0 + 0.5 * (0.5 * 0.8 + 0.5 * g2)
    g0 = 0.0 + 0.5 * (0.5 * 0.4 + 0.5 * g1)
    torch.testing.assert_close(out, torch.tensor([[[g0], [g1], [g2]]]))


def test_lambda_one_is_monte_carlo_and_lambda_zero_is_one_step():
    rng = np.random.default_rng(1)
    rewards = np.concatenate([np.zeros(9), [1.0]])  # 9 decisions, then the closing row with the result
    mc = discounted_returns(rewards, np.array([0]), np.array([10]), GAMMAS)
    # a window of turns 2..7: the next rows' rewards, dones and values, the last step's next row outside the window
    t = np.arange(2, 8)
    nr, nd = rewards[t + 1], t + 1 == 9
    nv = rng.normal(size=(len(t), len(GAMMAS)))
    ok = np.r_[np.ones(len(t) - 1, bool), False]
    r, d, v, okt, tail = _window(nr, nd, nv, ok, mc[t])
    gammas = torch.tensor(GAMMAS)
    torch.testing.assert_close(losses.lambda_returns(r, d, v, okt, tail, gammas, 1.0), tail[None][0])
    one_step = losses.lambda_returns(r, d, v, okt, tail, gammas, 0.0)
    torch.testing.assert_close(one_step[:, :-1], losses.td_targets(r, d, v, gammas)[:, :-1])
    torch.testing.assert_close(one_step[:, -1], tail[:, -1])
    # the window reaching the trajectory's end: the decision before the closing row is its reward, whatever λ
    r, d, v, okt, tail = _window(rewards[[8, 9]], [False, True], nv[:2], [True, False], mc[[7, 8]])
    for lam in (0.0, 0.5, 1.0):
        assert losses.lambda_returns(r, d, v, okt, tail, gammas, lam)[0, 1].tolist() == pytest.approx([1.0] * 3)


def test_each_critic_target_on_one_batch():
    """``critic_targets`` of a padded batch (window 0: the first 4 turns of a 7-row trajectory; window 1: a whole
    2-row one, then padding): mc is the loader's returns on every valid step; lambda with λ = 1 the same; td has no
    target on a window's last valid step."""
    long = discounted_returns(np.r_[np.zeros(6), 1.0], np.array([0]), np.array([7]), GAMMAS)[:4]
    short = discounted_returns(np.array([0.0, -1.0]), np.array([0]), np.array([2]), GAMMAS)
    returns = torch.zeros(2, 4, len(GAMMAS))
    returns[0], returns[1, :2] = torch.from_numpy(long), torch.from_numpy(short)
    valid = torch.tensor([[True, True, True, True], [True, True, False, False]])
    reward = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, -1.0, 0.0, 0.0]])
    done = torch.tensor([[False, False, False, False], [False, True, False, False]])
    batch = {"valid": valid, "reward": reward, "done": done, "returns": returns}
    values = torch.rand(2, 4, len(GAMMAS))
    gammas = torch.tensor(GAMMAS)
    config = {"shards": "x", "out": "y"}
    targets, where = critic_targets(batch, values, gammas, TrainConfig(critic_target="mc", **config))
    assert torch.equal(targets, returns) and torch.equal(where, valid)
    targets, where = critic_targets(batch, values, gammas, TrainConfig(critic_target="lambda", critic_lambda=1.0,
                                                                      **config))
    torch.testing.assert_close(targets[valid], returns[valid])
    assert torch.equal(where, valid)
    targets, where = critic_targets(batch, values, gammas, TrainConfig(critic_target="td", **config))
    assert where.tolist() == [[True, True, True, False], [True, False, False, False]]
    torch.testing.assert_close(targets[1, 0], torch.full((len(GAMMAS),), -1.0))  # the next row closes the battle


def test_the_config_refuses_unknown_targets():
    with pytest.raises(ValueError, match="--critic-target"):
        TrainConfig(shards="x", out="y", critic_target="gae")
    with pytest.raises(ValueError, match="--critic-lambda"):
        TrainConfig(shards="x", out="y", critic_target="lambda", critic_lambda=1.5)


def test_the_max_baseline_is_the_best_legal_actions_q():
    q = torch.tensor([[[[1.0, 9.0, 3.0], [0.5, -1.0, -2.0]]]])  # (B=1, T=1, G=2, A=3)
    legal = torch.tensor([[[True, False, True]]])
    torch.testing.assert_close(losses.best_legal_values(q, legal), torch.tensor([[[3.0, 0.5]]]))
    # a row with no legal action takes the max over all (its steps never reach a loss)
    torch.testing.assert_close(losses.best_legal_values(q, torch.zeros_like(legal)), torch.tensor([[[9.0, 0.5]]]))
    adv = losses.advantages(q, losses.best_legal_values(q, legal), torch.tensor([[0]]))
    torch.testing.assert_close(adv, torch.tensor([[[-2.0, 0.0]]]))  # never above 0 for a legal action
    with pytest.raises(ValueError, match="--advantage-baseline"):
        TrainConfig(shards="x", out="y", advantage_baseline="median")

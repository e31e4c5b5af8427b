"""PPO math against plain references and hand-computed values: GAE (time limits bootstrapped, real ends not),
the clipped surrogate and value losses, entropy with illegal actions, normalisation, schedules, sequence
minibatches."""

from __future__ import annotations

import math

import pytest
import torch

from training import ppo_losses as P


def _rollout(steps=7, envs=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(steps, envs, generator=g)
    values = torch.randn(steps, envs, generator=g)
    next_values = torch.randn(steps, envs, generator=g)
    terminated = torch.rand(steps, envs, generator=g) < 0.2
    truncated = (torch.rand(steps, envs, generator=g) < 0.2) & ~terminated
    return rewards, values, next_values, terminated, truncated


@pytest.mark.parametrize("seed", range(4))
def test_gae_matches_the_reference(seed):
    args = _rollout(seed=seed)
    advantages, returns = P.gae(*args, gamma=0.97, lam=0.9)
    ref_adv, ref_ret = P.gae_reference(*[a.tolist() for a in args], gamma=0.97, lam=0.9)
    torch.testing.assert_close(advantages, torch.tensor(ref_adv))
    torch.testing.assert_close(returns, torch.tensor(ref_ret))


def test_a_time_limit_bootstraps_and_a_real_end_does_not():
    reward, value, final_value = torch.tensor([[1.0]]), torch.tensor([[0.5]]), torch.tensor([[2.0]])
    no, yes = torch.tensor([[False]]), torch.tensor([[True]])
    truncated, _ = P.gae(reward, value, final_value, terminated=no, truncated=yes, gamma=0.9, lam=0.95)
    terminated, _ = P.gae(reward, value, final_value, terminated=yes, truncated=no, gamma=0.9, lam=0.95)
    assert truncated.item() == pytest.approx(1.0 + 0.9 * 2.0 - 0.5)
    assert terminated.item() == pytest.approx(1.0 - 0.5)


def test_gae_with_lambda_one_is_the_discounted_return_minus_the_value():
    rewards = torch.tensor([[1.0], [0.0], [2.0]])
    values = torch.tensor([[0.3], [0.1], [0.2]])
    bootstrap = 5.0
    next_values = torch.tensor([[0.1], [0.2], [bootstrap]])
    none = torch.zeros(3, 1, dtype=torch.bool)
    advantages, returns = P.gae(rewards, values, next_values, none, none, gamma=0.9, lam=1.0)
    expected = P.discounted_return([1.0, 0.0, 2.0], 0.9) + 0.9 ** 3 * bootstrap
    assert returns[0, 0].item() == pytest.approx(expected)
    assert advantages[0, 0].item() == pytest.approx(expected - 0.3)


def test_clipped_surrogate_by_hand():
    old = torch.log(torch.tensor([0.5, 0.5, 0.5]))
    new = torch.log(torch.tensor([0.8, 0.2, 0.55]))  # ratios 1.6, 0.4, 1.1
    adv = torch.tensor([1.0, -1.0, 2.0])
    loss = P.policy_loss(new, old, adv, clip=0.2)
    # min(1.6, 1.2)·1 = 1.2; min(0.4·-1, 0.8·-1) = -0.8; min(1.1·2, 1.1·2) = 2.2
    assert loss.item() == pytest.approx(-(1.2 - 0.8 + 2.2) / 3)
    new = new.clone().requires_grad_(True)
    P.policy_loss(new, old, adv, clip=0.2).backward()
    assert new.grad[0].item() == 0.0 and new.grad[1].item() == 0.0 and new.grad[2].item() != 0.0  # clipped: no push


def test_clipped_value_loss_by_hand():
    values, old, returns = torch.tensor([2.0, 0.0]), torch.tensor([1.0, 0.5]), torch.tensor([3.0, 1.0])
    # sample 0: unclipped (2-3)²=1, clipped (1+0.2-3)²=3.24 → 3.24; sample 1: (0-1)²=1, (0.5-0.2-1)²=0.49 → 1
    assert P.value_loss(values, old, returns, clip=0.2).item() == pytest.approx(0.5 * (3.24 + 1.0) / 2)
    assert P.value_loss(values, old, returns, clip=None).item() == pytest.approx(0.5 * (1.0 + 1.0) / 2)
    mask = torch.tensor([False, True])
    assert P.value_loss(values, old, returns, clip=0.2, mask=mask).item() == pytest.approx(0.5)


def test_entropy_ignores_illegal_actions_and_masks():
    logits = torch.tensor([[0.0, 0.0, float("-inf"), float("-inf")], [0.0, 0.0, 0.0, 0.0]])
    assert P.entropy(logits[:1]).item() == pytest.approx(math.log(2))
    assert P.entropy(logits).item() == pytest.approx((math.log(2) + math.log(4)) / 2)
    assert P.entropy(logits, mask=torch.tensor([False, True])).item() == pytest.approx(math.log(4))


def test_entropy_gradient_is_finite_with_illegal_actions():
    logits = torch.tensor([[0.3, -0.2, float("-inf")]], requires_grad=True)
    P.entropy(logits).backward()
    assert torch.isfinite(logits.grad).all() and logits.grad[0, 2] == 0.0


def test_advantage_normalisation_over_the_mask():
    adv = torch.tensor([1.0, 2.0, 3.0, 100.0])
    mask = torch.tensor([True, True, True, False])
    out = P.normalize_advantages(adv, mask)
    assert out[:3].mean().item() == pytest.approx(0.0, abs=1e-6)
    assert out[:3].pow(2).mean().sqrt().item() == pytest.approx(1.0, abs=1e-4)


def test_kl_and_clip_fraction():
    same = torch.log(torch.tensor([0.3, 0.7]))
    assert P.approx_kl(same, same).item() == 0.0
    assert P.clip_fraction(torch.log(torch.tensor([0.3, 0.9])), same, clip=0.2).item() == 0.5


def test_learning_rate_anneals_linearly():
    assert P.annealed_lr(1e-3, 0, 10) == 1e-3
    assert P.annealed_lr(1e-3, 5, 10) == pytest.approx(5e-4)
    assert P.annealed_lr(1e-3, 10, 10) == 0.0
    assert P.annealed_lr(1e-3, 10, 10, final_share=0.1) == pytest.approx(1e-4)


def test_sequence_minibatches_deal_every_chunk_once():
    batches = P.sequence_minibatches(num_envs=3, num_steps=8, seq_len=4, num_minibatches=4,
                                     generator=torch.Generator().manual_seed(0))
    assert len(batches) == 4 and sorted(torch.cat(batches).tolist()) == list(range(6))
    with pytest.raises(ValueError, match="multiple"):
        P.sequence_minibatches(3, 8, 3, 2, torch.Generator())


@pytest.mark.parametrize("seed", range(3))
def test_reference_kl_matches_the_reference(seed):
    g = torch.Generator().manual_seed(seed)
    logits, reference = torch.randn(2, 5, 4, generator=g), torch.randn(2, 5, 4, generator=g)
    legal = torch.rand(2, 5, 4, generator=g) > 0.3
    legal[..., 0] = True
    logits, reference = logits.masked_fill(~legal, float("-inf")), reference.masked_fill(~legal, float("-inf"))
    rows = lambda x: torch.softmax(x, -1).reshape(-1, 4).tolist()  # noqa: E731
    assert P.reference_kl(logits, reference).item() == pytest.approx(
        P.reference_kl_reference(rows(logits), rows(reference)), rel=1e-5)
    assert P.reference_kl(logits, logits).item() == pytest.approx(0.0, abs=1e-7)


def test_reference_kl_gradient_is_finite_with_illegal_actions():
    logits = torch.tensor([[0.3, -0.2, float("-inf")]], requires_grad=True)
    P.reference_kl(logits, torch.tensor([[1.0, 0.0, float("-inf")]])).backward()
    assert torch.isfinite(logits.grad).all() and logits.grad[0, 2] == 0.0


def test_agreement_counts_equal_argmaxes_over_the_mask():
    logits = torch.tensor([[2.0, 0.0], [0.0, 2.0], [2.0, 0.0]])
    reference = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    assert P.agreement(logits, reference).item() == pytest.approx(1 / 3)
    assert P.agreement(logits, reference, torch.tensor([True, False, False])).item() == 1.0

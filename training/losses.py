"""The math of offline training, as small pure functions of tensors (unit-tested against hand-computed values).

Shapes: B batch, T turns, G discount factors, A = 9 actions. ``step_mask`` (B, T) is True on real, visible-action
steps; padding and steps without a visible action never contribute.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def masked_mean(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is true (0 when nothing is; every entry when ``mask`` is None), the one
    masked mean of every loss (offline RL, PPO, the world model). ``mask``: bool, or 0/1 of any dtype. Masked
    entries are dropped, not multiplied by zero: a masked step may hold -inf (the log-probability of an illegal
    placeholder action), and 0 * -inf is NaN."""
    if mask is None:
        return values.mean()
    keep = mask if mask.dtype == torch.bool else mask != 0
    kept = torch.where(keep, values, torch.zeros_like(values))
    return kept.sum() / keep.to(values.dtype).sum().clamp(min=1.0)


def action_log_probs(logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """log π(a|s) of the taken actions; (B, T, A), (B, T) → (B, T). Actions of -1 give 0 (mask them out)."""
    log_probs = F.log_softmax(logits.float(), dim=-1)
    return log_probs.gather(-1, actions.clamp(min=0)[..., None]).squeeze(-1)


def behaviour_cloning_loss(logits: torch.Tensor, actions: torch.Tensor, step_mask: torch.Tensor) -> torch.Tensor:
    """Negative log-likelihood of the taken actions."""
    return -masked_mean(action_log_probs(logits, actions), step_mask)


def td_targets(rewards: torch.Tensor, dones: torch.Tensor, next_values: torch.Tensor,
               gammas: torch.Tensor) -> torch.Tensor:
    """One-step targets r + γ (1 - done) V(s') per discount factor; (B, T), (B, T), (B, T, G), (G,) → (B, T, G)."""
    return rewards[..., None] + gammas * (1.0 - dones.float())[..., None] * next_values


def lambda_returns(next_rewards: torch.Tensor, next_dones: torch.Tensor, next_values: torch.Tensor,
                   next_valid: torch.Tensor, tail_returns: torch.Tensor, gammas: torch.Tensor,
                   lam: float) -> torch.Tensor:
    """λ-returns inside a window whose tail is the trajectory's own return; (B, T) next reward, done and valid,
    (B, T, G) next values and tail returns, (G,) → (B, T, G).

    ``G^λ_t = r_{t+1} + γ (1 - done_{t+1}) [(1 - λ) V(s_{t+1}) + λ G^λ_{t+1}]``, and at a step whose next row is not in
    the window (``next_valid`` False: the window's last step, or padding) ``G^λ_t`` is ``tail_returns[t]``, the Monte
    Carlo return of the rest of the trajectory (``training/returns.discounted_returns``), so no target is cut at the
    window's edge. λ = 1 gives the Monte Carlo returns; λ = 0 the one-step targets ``td_targets`` wherever the next
    row is in the window."""
    out = torch.empty_like(tail_returns)
    following = tail_returns[:, -1]
    keep = (1.0 - next_dones.float())[..., None]  # (B, T, 1)
    for t in range(tail_returns.shape[1] - 1, -1, -1):
        inside = next_rewards[:, t, None] + gammas * keep[:, t] * ((1.0 - lam) * next_values[:, t] + lam * following)
        following = torch.where(next_valid[:, t, None], inside, tail_returns[:, t])
        out[:, t] = following
    return out


def critic_loss(q_values: torch.Tensor, actions: torch.Tensor, targets: torch.Tensor,
                step_mask: torch.Tensor) -> torch.Tensor:
    """Mean squared error of Q(s, a) against fixed targets, averaged over discount factors; (B, T, G, A) q."""
    index = actions.clamp(min=0)[..., None, None].expand(*actions.shape, q_values.shape[2], 1)
    q_taken = q_values.gather(-1, index).squeeze(-1)  # (B, T, G)
    return masked_mean(((q_taken - targets.detach()) ** 2).mean(-1), step_mask)


def advantages(q_values: torch.Tensor, values: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """A(s, a) = Q(s, a) - V(s) per discount factor; → (B, T, G)."""
    index = actions.clamp(min=0)[..., None, None].expand(*actions.shape, q_values.shape[2], 1)
    return q_values.gather(-1, index).squeeze(-1) - values


def best_legal_values(q_values: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
    """max over legal actions of Q(s, a) per discount factor; (B, T, G, A), (B, T, A) → (B, T, G). A row with no legal
    action gets its max over all actions (its steps never reach a loss). The baseline of CRR's ``max`` advantage
    A = Q(s, a) - max_a' Q(s, a'): unlike the policy's expectation, it does not follow whoever's choices the policy
    copies in that state, so a weak player's choices score below a strong one's even where the policy imitates the
    weak one."""
    any_legal = legal.any(-1, keepdim=True)
    allowed = (legal | ~any_legal)[:, :, None, :]
    return q_values.masked_fill(~allowed, float("-inf")).amax(-1)


def filtered_bc_weights(advantage: torch.Tensor) -> torch.Tensor:
    """Binary filter: imitate only actions whose advantage is not negative (better than the policy's average under
    the ``mean`` baseline; the critic's best legal action under ``max``, where no advantage is above 0)."""
    return (advantage >= 0).float()


def exp_advantage_weights(advantage: torch.Tensor, beta: float = 1.0, max_weight: float = 20.0) -> torch.Tensor:
    """exp(A / β), clipped: advantage-weighted regression."""
    return torch.exp(advantage / beta).clamp(max=max_weight)


def weighted_actor_loss(logits: torch.Tensor, actions: torch.Tensor, weights: torch.Tensor,
                        step_mask: torch.Tensor) -> torch.Tensor:
    """-w · log π(a|s) with weights held fixed (no gradient through the critic)."""
    log_probs = action_log_probs(logits, actions)
    return -masked_mean(weights.detach() * torch.where(step_mask, log_probs, torch.zeros_like(log_probs)), step_mask)

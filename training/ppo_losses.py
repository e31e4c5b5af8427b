"""PPO's math as small pure functions of tensors: generalized advantage estimation with time limits bootstrapped,
the clipped surrogate, the clipped value loss, the entropy bonus, the KL penalty to a reference policy, advantage
normalisation, the learning-rate schedule, and the minibatches of whole sequences a recurrent policy trains on.

Rollouts are laid out time-major, ``(T, N)`` for T steps of N environments. Step t holds the observation the agent
acted on, its action's log-probability and value, the reward that followed, and whether the episode ended there:
``terminated`` (a real end: no value after it) or ``truncated`` (a time limit: the game went on, so the value of
the observation it was cut at is bootstrapped, never taken as zero). Each ``*_reference`` function is the readable
per-element version the tests compare the fast one with.
"""

from __future__ import annotations

import math

import torch

from training.losses import masked_mean


def gae(rewards: torch.Tensor, values: torch.Tensor, next_values: torch.Tensor, terminated: torch.Tensor,
        truncated: torch.Tensor, gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns), each (T, N).

    rewards, values: (T, N); next_values: (T, N), the value of the observation after step t: of the next step's
    observation inside an episode, of the final observation where the episode was truncated (the environment reset
    after it), of the observation after the rollout for its last step. terminated, truncated: (T, N) bool.

    δ_t = r_t + γ V(s_{t+1}) (1 - terminated_t) - V(s_t);  A_t = δ_t + γ λ (1 - done_t) A_{t+1},
    with done = terminated or truncated: the recursion stops at any episode end, the bootstrap only at a real one."""
    not_terminal = 1.0 - terminated.float()
    not_done = 1.0 - (terminated | truncated).float()
    deltas = rewards + gamma * next_values * not_terminal - values
    advantages = torch.zeros_like(deltas)
    running = torch.zeros_like(deltas[0])
    for t in range(deltas.shape[0] - 1, -1, -1):  # (N,) at a time: the recursion runs backwards in time
        running = deltas[t] + gamma * lam * not_done[t] * running
        advantages[t] = running
    return advantages, advantages + values


def gae_reference(rewards, values, next_values, terminated, truncated, gamma: float, lam: float):
    """``gae`` one environment and one step at a time, in plain Python floats."""
    steps, envs = len(rewards), len(rewards[0])
    advantages = [[0.0] * envs for _ in range(steps)]
    for n in range(envs):
        following = 0.0
        for t in reversed(range(steps)):
            bootstrap = 0.0 if terminated[t][n] else gamma * float(next_values[t][n])
            delta = float(rewards[t][n]) + bootstrap - float(values[t][n])
            if terminated[t][n] or truncated[t][n]:
                following = 0.0
            following = delta + gamma * lam * following
            advantages[t][n] = following
    returns = [[advantages[t][n] + float(values[t][n]) for n in range(envs)] for t in range(steps)]
    return advantages, returns


def normalize_advantages(advantages: torch.Tensor, mask: torch.Tensor | None = None,
                         eps: float = 1e-8) -> torch.Tensor:
    """Advantages shifted to mean 0 and scaled to standard deviation 1 over the (masked) minibatch."""
    mean = masked_mean(advantages, mask)
    std = masked_mean((advantages - mean) ** 2, mask).sqrt()
    return (advantages - mean) / (std + eps)


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, clip: float,
                mask: torch.Tensor | None = None) -> torch.Tensor:
    """The clipped surrogate, to minimize: -E[min(ρ A, clip(ρ, 1-ε, 1+ε) A)], ρ = π(a|s) / π_old(a|s)."""
    ratio = torch.exp(logp - old_logp)
    surrogate = torch.minimum(ratio * advantages, ratio.clamp(1.0 - clip, 1.0 + clip) * advantages)
    return -masked_mean(surrogate, mask)


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip: float | None,
               mask: torch.Tensor | None = None) -> torch.Tensor:
    """½ E[max((V - R)², (V_old + clip(V - V_old, -ε, ε) - R)²)]: a value update moves at most ε from the value
    the rollout saw, like the policy (``clip`` None: the plain squared error)."""
    unclipped = (values - returns) ** 2
    if clip is None:
        return 0.5 * masked_mean(unclipped, mask)
    clipped = (old_values + (values - old_values).clamp(-clip, clip) - returns) ** 2
    return 0.5 * masked_mean(torch.maximum(unclipped, clipped), mask)


def entropy(logits: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean entropy of categorical distributions given by logits (illegal actions at -inf contribute 0)."""
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    # -inf zeroed before the product: torch.where over p·log p would still send 0 · -inf = NaN back to the logits
    safe = log_probs.masked_fill(~torch.isfinite(log_probs), 0.0)
    return masked_mean(-(log_probs.exp() * safe).sum(-1), mask)


def reference_kl(logits: torch.Tensor, reference_logits: torch.Tensor,
                 mask: torch.Tensor | None = None) -> torch.Tensor:
    """E[KL(π ‖ π_ref)] = E[Σ_a π(a) (log π(a) - log π_ref(a))]: how far the policy has moved from a reference policy
    (the one a fine-tune started from), as a penalty that keeps what the reference knew. Both logits (…, A) carry
    -inf on the same illegal actions, which contribute 0."""
    log_p = torch.log_softmax(logits.float(), dim=-1)
    log_ref = torch.log_softmax(reference_logits.float(), dim=-1)
    # 0 · (-inf - -inf) is NaN: illegal actions are zeroed before the product, as in ``entropy``
    legal = torch.isfinite(log_p) & torch.isfinite(log_ref)
    diff = (log_p - log_ref).masked_fill(~legal, 0.0)
    return masked_mean((log_p.exp() * diff).sum(-1), mask)


def reference_kl_reference(probs: list[list[float]], reference_probs: list[list[float]]) -> float:
    """``reference_kl`` over rows of probabilities, in plain Python floats (0 · log 0 taken as 0)."""
    total = 0.0
    for p, q in zip(probs, reference_probs, strict=True):
        total += sum(pa * (math.log(pa) - math.log(qa)) for pa, qa in zip(p, q, strict=True) if pa > 0)
    return total / len(probs)


def agreement(logits: torch.Tensor, reference_logits: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Share of decisions where the policy's most likely action is the reference policy's (logging)."""
    return masked_mean((logits.argmax(-1) == reference_logits.argmax(-1)).float(), mask)


def approx_kl(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """E[(ρ - 1) - log ρ], the low-variance estimate of KL(π_old ‖ π) (Schulman's k3), for logging and early stop."""
    log_ratio = logp - old_logp
    return masked_mean(torch.exp(log_ratio) - 1.0 - log_ratio, mask)


def clip_fraction(logp: torch.Tensor, old_logp: torch.Tensor, clip: float,
                  mask: torch.Tensor | None = None) -> torch.Tensor:
    """Share of samples whose ratio left [1-ε, 1+ε]."""
    return masked_mean(((torch.exp(logp - old_logp) - 1.0).abs() > clip).float(), mask)


def annealed_lr(lr: float, update: int, num_updates: int, final_share: float = 0.0) -> float:
    """Linear annealing from ``lr`` at update 0 to ``final_share × lr`` at ``num_updates``."""
    progress = min(max(update / max(num_updates, 1), 0.0), 1.0)
    return lr * (1.0 - progress * (1.0 - final_share))


def sequence_minibatches(num_envs: int, num_steps: int, seq_len: int, num_minibatches: int,
                         generator: torch.Generator) -> list[torch.Tensor]:
    """Minibatches of whole sequences for a recurrent policy: each environment's rollout is cut into chunks of
    ``seq_len`` steps (its recurrent state stored at each chunk's start), and the chunks are shuffled and dealt into
    ``num_minibatches`` groups. Returns, per minibatch, chunk ids ``env × chunks_per_env + chunk`` (every chunk in
    exactly one minibatch). Episode starts inside a chunk are handled by the model resetting its state there."""
    if num_steps % seq_len:
        raise ValueError(f"rollout length {num_steps} is not a multiple of the sequence length {seq_len}")
    chunks = num_envs * (num_steps // seq_len)
    if num_minibatches < 1 or num_minibatches > chunks:
        raise ValueError(f"{num_minibatches} minibatches of {chunks} sequences: need 1..{chunks}")
    order = torch.randperm(chunks, generator=generator)
    return list(order.tensor_split(num_minibatches))


def discounted_return(rewards: list[float], gamma: float) -> float:
    """Σ γ^t r_t of one episode (metrics and tests)."""
    return math.fsum(r * gamma ** t for t, r in enumerate(rewards))

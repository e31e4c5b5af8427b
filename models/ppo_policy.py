"""The self-play policy: a strategy encoder over the opponent's recent observations, observation features conditioned
on it by cross-attention, an LSTM, and actor and critic heads.

Per step t the policy reads its own observation's features (``obs``, from an environment-specific backbone: the
offline-RL policy's turn transformer for Pokémon, a frame MLP for Melee) and the opponent's last N observations
(``opponent``, the same width, with a validity mask). The strategy encoder (a transformer over those N) is
attention-pooled to ``num_latents`` latent vectors; the observation features attend to them (cross-attention), then
an LSTM carries memory across steps, reset wherever an episode starts. Both additions enter as residuals whose last
projections start at zero.

A fine-tune's policy (``prior``) adds its actor's logits to per-step prior logits: the logits of the policy it
starts from, whatever that policy's head reads (the Pokémon slot head also reads each action's own words), computed
by the environment and recorded in the rollout. Its actor starts at zero, so at step 0 it chooses exactly as the
starting policy (``tests/models/test_ppo_policy.py`` checks it), and PPO moves it away by training the actor and the
trunk under it.

Plain ``nn.Module``s, no I/O; ``step`` runs one time step for rollouts and equals ``forward`` over a sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True, kw_only=True)
class RecurrentPolicyConfig:
    """Shapes of the self-play policy.

    Attributes:
        d_obs: width of one observation's features (what the backbone gives per step).
        num_actions: actions the actor chooses among.
        opponent_window: the opponent's last N observations the strategy encoder reads.
        d_strategy: width inside the strategy encoder and of its latents.
        strategy_layers: transformer layers of the strategy encoder.
        strategy_heads: attention heads of the strategy encoder, the pooling and the cross-attention.
        num_latents: latent vectors the opponent's observations are pooled into.
        d_lstm: LSTM hidden width.
        prior: the logits are prior logits given with every step (``forward``'s ``prior``: a starting policy's) plus
            the actor's, which starts at zero; False: the actor's alone (from scratch).
    """

    d_obs: int
    num_actions: int
    opponent_window: int = 8
    d_strategy: int = 64
    strategy_layers: int = 2
    strategy_heads: int = 4
    num_latents: int = 4
    d_lstm: int = 128
    prior: bool = False

    def __post_init__(self):
        if self.d_strategy % self.strategy_heads or self.d_obs % self.strategy_heads:
            raise ValueError(f"d_strategy {self.d_strategy} and d_obs {self.d_obs} must be multiples of "
                             f"strategy_heads {self.strategy_heads}")


class StrategyEncoder(nn.Module):
    """The opponent's last N observations (B, N, d_obs) → ``num_latents`` latents (B, L, d_strategy)."""

    def __init__(self, cfg: RecurrentPolicyConfig):
        super().__init__()
        self.embed = nn.Linear(cfg.d_obs, cfg.d_strategy)
        self.position = nn.Parameter(torch.zeros(cfg.opponent_window, cfg.d_strategy))
        layer = nn.TransformerEncoderLayer(cfg.d_strategy, cfg.strategy_heads, 4 * cfg.d_strategy, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, cfg.strategy_layers, enable_nested_tensor=False)
        self.queries = nn.Parameter(torch.randn(cfg.num_latents, cfg.d_strategy) * 0.02)
        self.pool = nn.MultiheadAttention(cfg.d_strategy, cfg.strategy_heads, batch_first=True)
        self.norm = nn.LayerNorm(cfg.d_strategy)

    def forward(self, opponent: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        # opponent (B, N, d_obs), valid (B, N) bool → (B, L, d_strategy); all-invalid rows (no opponent step yet)
        # give zero latents: one key is unmasked there so attention stays finite, and the result is zeroed
        any_valid = valid.any(-1)  # (B,)
        keys_valid = valid.clone()
        keys_valid[:, 0] |= ~any_valid
        x = self.embed(opponent) + self.position[: opponent.shape[1]]
        x = self.encoder(x, src_key_padding_mask=~keys_valid)
        queries = self.queries.expand(opponent.shape[0], -1, -1)
        latents, _ = self.pool(queries, x, x, key_padding_mask=~keys_valid, need_weights=False)
        return self.norm(latents) * any_valid[:, None, None].to(latents.dtype)


@dataclass
class PolicyStep:
    """Outputs over steps.

    Attributes:
        logits: (B, T, A) action logits, illegal actions at -inf (a step with no legal action keeps finite logits).
        values: (B, T) state values.
        state: the LSTM state (h, c), each (B, d_lstm), after the last step.
    """

    logits: torch.Tensor
    values: torch.Tensor
    state: tuple[torch.Tensor, torch.Tensor]


def mask_illegal(logits: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
    """Logits (..., A) with illegal actions at -inf; a step with no legal action (padding) keeps its logits, so its
    softmax stays finite."""
    return logits.masked_fill(~legal & legal.any(-1, keepdim=True), float("-inf"))


class RecurrentPolicy(nn.Module):
    def __init__(self, cfg: RecurrentPolicyConfig):
        super().__init__()
        self.cfg = cfg
        self.strategy = StrategyEncoder(cfg)
        self.cross = nn.MultiheadAttention(cfg.d_obs, cfg.strategy_heads, kdim=cfg.d_strategy, vdim=cfg.d_strategy,
                                           batch_first=True)
        self.cross_norm = nn.LayerNorm(cfg.d_obs)
        self.cross_gate = nn.Parameter(torch.zeros(()))  # tanh(0) = 0: conditioning on the opponent starts off
        self.lstm = nn.LSTMCell(cfg.d_obs, cfg.d_lstm)
        self.lstm_out = nn.Linear(cfg.d_lstm, cfg.d_obs)
        nn.init.zeros_(self.lstm_out.weight)  # memory starts as a no-op residual (see the module docstring)
        nn.init.zeros_(self.lstm_out.bias)
        self.actor = nn.Linear(cfg.d_obs, cfg.num_actions)
        if cfg.prior:  # the prior alone at step 0 (see the module docstring)
            nn.init.zeros_(self.actor.weight)
            nn.init.zeros_(self.actor.bias)
        self.critic = nn.Sequential(nn.Linear(cfg.d_obs, cfg.d_obs), nn.Tanh(), nn.Linear(cfg.d_obs, 1))

    def initial_state(self, batch: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
        zeros = torch.zeros(batch, self.cfg.d_lstm, device=device)
        return zeros, zeros.clone()

    def conditioned(self, obs: torch.Tensor, opponent: torch.Tensor, opponent_valid: torch.Tensor) -> torch.Tensor:
        """Observation features after cross-attention to the strategy latents: obs (B, T, d_obs), opponent
        (B, T, N, d_obs), opponent_valid (B, T, N) → (B, T, d_obs)."""
        b, t, n, d = opponent.shape
        latents = self.strategy(opponent.reshape(b * t, n, d), opponent_valid.reshape(b * t, n))  # (B·T, L, ds)
        query = self.cross_norm(obs).reshape(b * t, 1, d)
        attended, _ = self.cross(query, latents, latents, need_weights=False)  # (B·T, 1, d_obs)
        return obs + torch.tanh(self.cross_gate) * attended.reshape(b, t, d)

    def heads(self, x: torch.Tensor, legal: torch.Tensor,
              prior: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.actor(x) if prior is None else prior.to(x.dtype) + self.actor(x)
        return mask_illegal(logits, legal), self.critic(x).squeeze(-1)

    def forward(self, obs: torch.Tensor, opponent: torch.Tensor, opponent_valid: torch.Tensor,
                episode_start: torch.Tensor, legal: torch.Tensor,
                state: tuple[torch.Tensor, torch.Tensor] | None = None,
                prior: torch.Tensor | None = None) -> PolicyStep:
        """obs (B, T, d_obs), opponent (B, T, N, d_obs), opponent_valid (B, T, N) bool, episode_start (B, T) bool
        (the LSTM state is zeroed before such a step), legal (B, T, A) bool, state: (h, c) before the first step
        (zeros when None), prior (B, T, A): the starting policy's logits, before any mask (exactly where
        ``cfg.prior``)."""
        if (prior is not None) != self.cfg.prior:
            raise ValueError("this policy's logits are a residual on prior logits: pass forward's prior"
                             if self.cfg.prior else "this policy reads no prior logits (cfg.prior is False)")
        b, t, _ = obs.shape
        x = self.conditioned(obs, opponent, opponent_valid)
        h, c = state if state is not None else self.initial_state(b, obs.device)
        outputs = []
        for i in range(t):  # the recurrence runs step by step; everything else is batched over steps
            keep = (~episode_start[:, i]).to(h.dtype)[:, None]
            h, c = self.lstm(x[:, i], (h * keep, c * keep))
            outputs.append(h)
        memory = self.lstm_out(torch.stack(outputs, 1))  # (B, T, d_obs)
        logits, values = self.heads(x + memory, legal, prior)
        return PolicyStep(logits=logits, values=values, state=(h, c))

    def step(self, obs: torch.Tensor, opponent: torch.Tensor, opponent_valid: torch.Tensor,
             episode_start: torch.Tensor, legal: torch.Tensor,
             state: tuple[torch.Tensor, torch.Tensor], prior: torch.Tensor | None = None) -> PolicyStep:
        """One time step for rollouts: obs (B, d_obs), opponent (B, N, d_obs), opponent_valid (B, N),
        episode_start (B,), legal (B, A), prior (B, A) or None; outputs with T = 1."""
        return self.forward(obs[:, None], opponent[:, None], opponent_valid[:, None], episode_start[:, None],
                            legal[:, None], state, None if prior is None else prior[:, None])

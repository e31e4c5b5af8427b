"""PPO: the hyperparameters (one shared set; ``test`` and ``full`` differ only in length and cadence), the action
sampler every runner acts with, the buffer a runner fills step by step and the rollout it gives, and one update over
it in minibatches of whole sequences. An environment may train
its observation encoder beside the policy (``TrainableEncoder``): the rollout then carries each step's raw inputs and
the update recomputes the observations from them with gradients. A fine-tune's rollout carries each step's prior
logits (the starting policy's, ``models/ppo_policy.RecurrentPolicyConfig.prior``): the policy adds its own to them,
and they are the reference policy of ``PPOConfig.reference_kl``.

A ``Rollout`` holds only the learning agent's own steps: an environment runner records the agent's observations,
actions and rewards and never the opponent's, so the learner cannot train on the opponent's transitions (the opponent
appears only inside the agent's observations, through the strategy encoder's window). The math is
``training/ppo_losses.py``; the policy ``models/ppo_policy.py``; the optimizer step ``training/fit.Learner``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from models.ppo_policy import mask_illegal
from training import ppo_losses as P


@dataclass(frozen=True, kw_only=True)
class PPOConfig:
    """PPO hyperparameters.

    Attributes:
        num_envs: environments stepped per runner update.
        rollout_steps: steps per environment between updates (T).
        updates: PPO updates of the whole run.
        epochs: passes over each rollout.
        seq_len: steps per training sequence (the LSTM is unrolled over it from the stored state); divides T.
        num_minibatches: minibatches per epoch (of whole sequences).
        lr: learning rate at update 0 (annealed linearly to ``final_lr_share`` × lr).
        final_lr_share: share of ``lr`` left at the last update.
        gamma: discount factor.
        gae_lambda: GAE λ.
        clip: surrogate clip ε.
        value_clip: value-update clip (None: unclipped).
        value_weight: weight of the value loss.
        entropy_weight: weight of the entropy bonus.
        grad_clip: largest gradient norm.
        target_kl: stop an update's epochs early once the approximate KL passes it (None: never).
        reference_kl: weight of KL(π ‖ π_ref), the policy's distance from a reference policy (a fine-tune's
            starting policy, whose logits are the rollout's ``prior``; 0: no penalty). Needs a rollout with a prior.
        critic_warmup_updates: updates at the run's start that train the critic only: the policy keeps its starting
            weights while the value head, fresh in a fine-tune, learns the returns its advantages come from.
        temperature: the policy PPO trains and its runners play is softmax(logits / temperature) (``tempered``):
            its log-probabilities, entropy and reference KL are the tempered distribution's; 1: the logits' own.
        checkpoint_every: updates between checkpoints.
        seed: seed of minibatch order and of the league's draws.
    """

    num_envs: int = 8
    rollout_steps: int = 64
    updates: int = 2000
    epochs: int = 4
    seq_len: int = 16
    num_minibatches: int = 4
    lr: float = 3e-4
    final_lr_share: float = 0.0
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.2
    value_clip: float | None = 0.2
    value_weight: float = 0.5
    entropy_weight: float = 0.01
    grad_clip: float = 0.5
    target_kl: float | None = None
    reference_kl: float = 0.0
    critic_warmup_updates: int = 0
    temperature: float = 1.0
    checkpoint_every: int = 50
    seed: int = 0

    def __post_init__(self):
        if self.rollout_steps % self.seq_len:
            raise ValueError(f"--rollout-steps {self.rollout_steps} must be a multiple of --seq-len {self.seq_len}")
        chunks = self.num_envs * self.rollout_steps // self.seq_len
        if not 1 <= self.num_minibatches <= chunks:
            raise ValueError(f"--num-minibatches must be 1..{chunks} (sequences per rollout)")
        if self.reference_kl < 0 or self.critic_warmup_updates < 0:
            raise ValueError("--reference-kl and --critic-warmup-updates must be >= 0")
        if not self.temperature > 0:
            raise ValueError(f"--temperature must be > 0, not {self.temperature}")

    @classmethod
    def full(cls, **overrides) -> PPOConfig:
        """The full run's hyperparameters."""
        return cls(**overrides)

    @classmethod
    def test(cls, **overrides) -> PPOConfig:
        """The same hyperparameters as ``full``, over a few updates with frequent checkpoints (what works small
        works large: only ``TEST_ONLY`` fields differ, tested)."""
        return dataclasses.replace(cls.full(), **{"updates": 4, "checkpoint_every": 2, **overrides})


TEST_ONLY = ("updates", "checkpoint_every")
"""The only fields ``PPOConfig.test`` changes from ``PPOConfig.full``: the run's length and checkpoint cadence."""


@dataclass
class Rollout:
    """T steps of N environments from the learning agent's side, time-major.

    Attributes:
        obs: (T, N, d_obs) observation features.
        opponent: (T, N, K, d_obs) the opponent's last K observations at each step.
        opponent_valid: (T, N, K) bool.
        legal: (T, N, A) bool legal actions.
        episode_start: (T, N) bool: the step is an episode's first (the LSTM state is zeroed before it).
        actions: (T, N) actions taken.
        logp: (T, N) their log-probabilities under the policy that acted.
        values: (T, N) its value estimates.
        rewards: (T, N) rewards after each step.
        terminated: (T, N) bool: the episode really ended there.
        truncated: (T, N) bool: a time limit cut it there (bootstrapped).
        next_values: (T, N) value of the observation after each step (the final observation where truncated, the
            next rollout's first for the last step).
        states: ((T, N, d_lstm), (T, N, d_lstm)) the LSTM state (h, c) before each step, as the runner had it.
        mask: (T, N) bool, False on padding steps that hold no decision (episodes of unequal length laid out one
            per column); None: every step is real.
        inputs: the raw inputs each step's observations were encoded from, each (T, N, ...), for a
            ``TrainableEncoder`` to recompute ``obs``, ``opponent`` and ``opponent_valid`` from; None: a frozen
            encoder (the recorded observations are trained on).
        prior: (T, N, A) the starting policy's logits at each step, before the legal mask, which a ``prior``
            policy adds its own to (a fine-tune; zeros on padding); None: a policy without a prior.
    """

    obs: torch.Tensor
    opponent: torch.Tensor
    opponent_valid: torch.Tensor
    legal: torch.Tensor
    episode_start: torch.Tensor
    actions: torch.Tensor
    logp: torch.Tensor
    values: torch.Tensor
    rewards: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    next_values: torch.Tensor
    states: tuple[torch.Tensor, torch.Tensor]
    mask: torch.Tensor | None = None
    inputs: dict[str, torch.Tensor] | None = None
    prior: torch.Tensor | None = None


@dataclass
class TrainableEncoder:
    """An observation encoder trained with the policy, with its own optimizer and learning rate (annealed on the
    policy's schedule) and its own gradient clip.

    Attributes:
        module: ``module(**inputs)`` maps a minibatch's recorded inputs (``Rollout.inputs``, each
            (B, seq_len, ...)) to the policy's (obs (B, seq_len, d_obs), opponent (B, seq_len, K, d_obs),
            opponent_valid (B, seq_len, K)), exactly as the runner encoded them when acting.
        optimizer: the encoder's optimizer (its state goes into the environment's checkpoint extra).
        lr: its learning rate at update 0.
        grad_clip: largest gradient norm of the encoder's parameters.
    """

    module: torch.nn.Module
    optimizer: torch.optim.Optimizer
    lr: float
    grad_clip: float


def sample_actions(logits: torch.Tensor, generator: torch.Generator | None, temperature: float = 1.0):
    """(actions (N,), their log-probabilities (N,)) for logits (N, A) of legal-masked actions: drawn with
    ``generator`` from ``tempered(logits, temperature)``'s softmax, the distribution PPO trains, or the most likely
    where ``generator`` is None (greedy, the same at every temperature). Every player that acts for PPO or plays a
    trained policy draws here, so a seeded run's random stream is one function's."""
    probs = torch.softmax(tempered(logits.float(), temperature), -1)
    if generator is None:
        actions = probs.argmax(-1)
    else:
        actions = torch.multinomial(probs, 1, generator=generator)[:, 0]
    return actions, torch.log(probs.gather(-1, actions[:, None])[:, 0])


def tempered(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """The logits of the policy that acts at ``temperature``: softmax(logits / T). T < 1 sharpens the distribution
    toward its argmax (T → 0: greedy), so the sampled play PPO trains comes closer to the argmax evaluation plays;
    -inf (illegal) stays -inf."""
    return logits if temperature == 1.0 else logits / temperature


class RolloutBuffer:
    """A rollout's (T, N, ...) tensors, preallocated and filled step by step, as cleanrl's PPO fills its storage.
    Each key is allocated at its first ``put`` with that value's shape and dtype, filled with ``FILL``'s value
    (0 or False unless named there) where nothing is put: padding after an episode that ended early."""

    FILL = {"legal": True, "episode_start": True}

    def __init__(self, steps: int, envs: int):
        self.steps, self.envs, self.data = steps, envs, {}

    def put(self, t, column=slice(None), **values) -> None:
        """Step(s) ``t`` of ``column`` (every environment by default): each value a tensor, array or number."""
        for key, value in values.items():
            value = torch.as_tensor(value)
            if key not in self.data:
                shape = value.shape[1:] if isinstance(column, slice) and value.dim() else value.shape
                self.data[key] = torch.full((self.steps, self.envs, *shape), self.FILL.get(key, 0),
                                            dtype=value.dtype)
            self.data[key][t, column] = value

    def rollout(self, **given) -> Rollout:
        """The ``Rollout`` of what was put (``h`` and ``c``: the LSTM state before each step) and ``given``."""
        data = {**self.data, **given}
        names = [f.name for f in dataclasses.fields(Rollout) if f.name != "states"]
        return Rollout(**{k: data[k] for k in names if k in data}, states=(data["h"], data["c"]))


def concat_rollouts(rollouts: list[Rollout]) -> Rollout:
    """Rollouts of the same length side by side (their environments concatenated)."""
    def cat(values):
        if values[0] is None:
            return None
        if isinstance(values[0], tuple):
            return tuple(torch.cat(parts, 1) for parts in zip(*values, strict=True))
        if isinstance(values[0], dict):
            return {k: torch.cat([v[k] for v in values], 1) for k in values[0]}
        return torch.cat(values, 1)

    return Rollout(**{f.name: cat([getattr(r, f.name) for r in rollouts]) for f in dataclasses.fields(Rollout)})


def sequences(x: torch.Tensor, seq_len: int) -> torch.Tensor:
    """(T, N, ...) → (N · T/seq_len, seq_len, ...): each environment's steps cut into consecutive chunks, chunk id
    ``env × chunks_per_env + chunk`` (``ppo_losses.sequence_minibatches``' numbering)."""
    t, n = x.shape[:2]
    per_env = x.transpose(0, 1)  # (N, T, ...)
    return per_env.reshape(n * (t // seq_len), seq_len, *x.shape[2:])


INPUT = "input_"
"""Prefix of a rollout's raw inputs among a minibatch's fields (``training_sequences``)."""


def sequence_loss(policy, chunk: dict, cfg: PPOConfig, train_policy: bool = True, encoder=None):
    """(loss, parts) of a minibatch of sequences (each ``(B, seq_len, ...)`` from ``sequences``). A chunk with
    ``prior`` logits (a fine-tune) gives them to the policy and takes them as the reference policy: its KL (the
    ``cfg.reference_kl`` penalty) and agreement are logged; ``train_policy`` False: the value loss alone
    (``PPOConfig.critic_warmup_updates``); ``encoder``: a ``TrainableEncoder.module`` recomputing the observations from
    the chunk's inputs (with gradients only where the policy trains: during the critic warm-up the encoder stays as it
    is)."""
    obs, opponent, opponent_valid = chunk["obs"], chunk["opponent"], chunk["opponent_valid"]
    if encoder is not None:
        inputs = {k.removeprefix(INPUT): v for k, v in chunk.items() if k.startswith(INPUT)}
        with torch.set_grad_enabled(train_policy and torch.is_grad_enabled()):
            obs, opponent, opponent_valid = encoder(**inputs)
    prior = chunk.get("prior")
    out = policy(obs, opponent, opponent_valid, chunk["episode_start"], chunk["legal"], (chunk["h0"], chunk["c0"]),
                 prior)
    mask = chunk["mask"]  # padding steps reach no loss
    logits = tempered(out.logits.float(), cfg.temperature)  # the distribution the runners sampled from
    log_probs = torch.log_softmax(logits, dim=-1)
    logp = log_probs.gather(-1, chunk["actions"].clamp(min=0)[..., None]).squeeze(-1)
    advantages = P.normalize_advantages(chunk["advantages"], mask)
    actor = P.policy_loss(logp, chunk["logp"], advantages, cfg.clip, mask)
    critic = P.value_loss(out.values.float(), chunk["values"], chunk["returns"], cfg.value_clip, mask)
    entropy = P.entropy(logits, mask)
    parts = {"policy_loss": actor, "value_loss": critic, "entropy": entropy,
             "approx_kl": P.approx_kl(logp.detach(), chunk["logp"], mask),
             "clip_fraction": P.clip_fraction(logp.detach(), chunk["logp"], cfg.clip, mask)}
    policy_terms = actor - cfg.entropy_weight * entropy
    if prior is not None:
        # the starting policy at the same temperature: the KL is between the two players as they act
        reference_logits = tempered(mask_illegal(prior, chunk["legal"]).float(), cfg.temperature)
        parts["reference_kl"] = P.reference_kl(logits, reference_logits, mask)
        parts["reference_agreement"] = P.agreement(logits.detach(), reference_logits, mask)
        policy_terms = policy_terms + cfg.reference_kl * parts["reference_kl"]
    loss = cfg.value_weight * critic + (policy_terms if train_policy else 0.0)
    return loss, parts


def training_sequences(rollout: Rollout, cfg: PPOConfig) -> dict[str, torch.Tensor]:
    """GAE over the rollout, then every field cut into sequences of ``seq_len`` steps (``sequences``), with the
    LSTM state each sequence starts from (``h0``, ``c0``: the runner's state before its first step)."""
    advantages, returns = P.gae(rollout.rewards, rollout.values, rollout.next_values, rollout.terminated,
                                rollout.truncated, cfg.gamma, cfg.gae_lambda)
    fields = {"obs": rollout.obs, "opponent": rollout.opponent, "opponent_valid": rollout.opponent_valid,
              "legal": rollout.legal, "episode_start": rollout.episode_start, "actions": rollout.actions,
              "logp": rollout.logp, "values": rollout.values, "advantages": advantages, "returns": returns,
              "mask": rollout.mask if rollout.mask is not None else torch.ones_like(rollout.actions, dtype=torch.bool)}
    if rollout.prior is not None:
        fields["prior"] = rollout.prior
    fields.update({INPUT + k: v for k, v in (rollout.inputs or {}).items()})
    chunks = {k: sequences(v, cfg.seq_len) for k, v in fields.items()}
    chunks["h0"], chunks["c0"] = (sequences(s, cfg.seq_len)[:, 0] for s in rollout.states)
    return chunks


def update(learner, rollout: Rollout, cfg: PPOConfig, update_index: int, generator: torch.Generator,
           encoder: TrainableEncoder | None = None) -> dict:
    """One PPO update on a rollout: GAE, then ``epochs`` passes of minibatches of whole sequences through
    ``learner.step`` (a ``training/fit.Learner``), the learning rate annealed for ``update_index``; the critic
    alone during the first ``cfg.critic_warmup_updates`` updates; the rollout's ``prior`` logits are the reference
    policy (``cfg.reference_kl``). ``encoder``: the observation encoder trained beside the policy (the rollout carries
    its ``inputs``), stepped after each of the policy's steps. Returns the last epoch's mean of each logged part and
    the epochs run."""
    if encoder is not None and rollout.inputs is None:
        raise ValueError("a trainable encoder needs the rollout's inputs (Rollout.inputs): the runners must record "
                         "them")
    if cfg.reference_kl and rollout.prior is None:
        raise ValueError("--reference-kl needs the starting policy's logits (Rollout.prior): a fine-tune's rollout")
    # the runners' rollouts arrive on the CPU; the learner (and the encoder beside it) may train on a GPU. One copy
    # per update: a rollout is a few MB, and its minibatches are indexed from it every epoch.
    chunks = {k: v.to(learner.device, non_blocking=True) for k, v in training_sequences(rollout, cfg).items()}
    train_policy = update_index >= cfg.critic_warmup_updates
    trainable = [p for p in learner.module.parameters() if p.requires_grad]
    if not train_policy:
        # the critic head alone: value gradients through the shared trunk (cross-attention, LSTM) would move the
        # policy too; parameters without a gradient are skipped by the optimizer
        learner.module.requires_grad_(False)
        learner.module.critic.requires_grad_(True)
    try:
        return _epochs(learner, chunks, rollout.obs.shape, cfg, update_index, generator, train_policy, encoder)
    finally:
        for p in trainable:
            p.requires_grad_(True)


def _epochs(learner, chunks: dict, shape, cfg: PPOConfig, update_index: int, generator, train_policy: bool,
            encoder: TrainableEncoder | None = None) -> dict:
    for group in learner.optimizer.param_groups:
        group["lr"] = P.annealed_lr(cfg.lr, update_index, cfg.updates, cfg.final_lr_share)
    if encoder is not None:
        for group in encoder.optimizer.param_groups:
            group["lr"] = P.annealed_lr(encoder.lr, update_index, cfg.updates, cfg.final_lr_share)
    module = encoder.module if encoder is not None else None
    num_steps, num_envs = shape[:2]
    epochs_run, sums = 0, {}
    for _ in range(cfg.epochs):
        sums = {}
        sequences_here = num_envs * (num_steps // cfg.seq_len)
        # a rollout of fewer sequences than minibatches (a few short battles) is dealt one sequence per minibatch
        batches = P.sequence_minibatches(num_envs, num_steps, cfg.seq_len,
                                         min(cfg.num_minibatches, sequences_here), generator)
        for ids in batches:
            if encoder is not None:  # the learner zeroes its own gradients only; its backward fills the encoder's
                encoder.optimizer.zero_grad(set_to_none=True)
            parts = learner.step(lambda model, batch: sequence_loss(model, batch, cfg, train_policy, module),
                                 {k: v[ids] for k, v in chunks.items()})
            if encoder is not None:  # the norm before clipping; 0 in the critic warm-up, which leaves it as it is
                norm = torch.zeros(())
                if train_policy:
                    norm = torch.nn.utils.clip_grad_norm_(encoder.module.parameters(), encoder.grad_clip)
                    encoder.optimizer.step()
                parts["encoder_grad_norm"] = norm
            for k, v in parts.items():  # summed on the device; read once per epoch, not per minibatch
                sums[k] = sums.get(k, 0.0) + v / len(batches)
        sums = {k: float(v) for k, v in sums.items()}
        epochs_run += 1
        if cfg.target_kl is not None and sums["approx_kl"] > cfg.target_kl:
            break
    out = {**sums, "epochs": epochs_run, "lr": learner.optimizer.param_groups[0]["lr"],
           "policy_trained": float(train_policy)}
    if encoder is not None:
        out["encoder_lr"] = encoder.optimizer.param_groups[0]["lr"]
    return out

"""The PPO learner: the test and full configs share every hyperparameter but length and cadence; sequences cut
from a rollout carry the runner's LSTM states, so the learner's first pass reproduces the acting policy's
log-probabilities exactly; a few updates on a bandit learn the rewarded action; truncation is bootstrapped."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from models.ppo_policy import RecurrentPolicy, RecurrentPolicyConfig
from training.fit import Learner
from training.ppo import (
    TEST_ONLY,
    PPOConfig,
    Rollout,
    sample_actions,
    sequence_loss,
    sequences,
    training_sequences,
    update,
)

CFG = RecurrentPolicyConfig(d_obs=16, num_actions=3, opponent_window=2, d_strategy=8, strategy_layers=1,
                            strategy_heads=2, num_latents=1, d_lstm=8)


def test_test_and_full_differ_only_in_length_and_cadence():
    full, test = dataclasses.asdict(PPOConfig.full()), dataclasses.asdict(PPOConfig.test())
    assert {k for k in full if full[k] != test[k]} == set(TEST_ONLY)
    assert test["updates"] < full["updates"]


def test_sequences_are_numbered_env_major():
    x = torch.arange(8 * 3).reshape(8, 3)  # (T=8, N=3): value = t * 3 + env
    chunks = sequences(x, 4)  # (6, 4)
    assert chunks[0].tolist() == [0, 3, 6, 9] and chunks[1].tolist() == [12, 15, 18, 21]  # env 0
    assert chunks[2].tolist() == [1, 4, 7, 10]  # env 1, first chunk


def test_sampling_at_a_temperature_draws_from_the_tempered_softmax():
    logits = torch.tensor([[2.0, 1.0, float("-inf"), 0.0]]).expand(4000, 4)
    for temperature in (1.0, 0.5, 2.0):
        actions, logp = sample_actions(logits, torch.Generator().manual_seed(0), temperature)
        expected = torch.log_softmax(logits / temperature, -1)
        assert torch.allclose(logp, expected.gather(-1, actions[:, None])[:, 0])
        assert not (actions == 2).any()  # illegal stays illegal at every temperature
        share = (actions == 0).float().mean().item()
        assert share == pytest.approx(expected[0, 0].exp().item(), abs=0.03), (temperature, share)
    # at T = 1 the draws are the plain softmax's; greedy play is the argmax at every temperature
    plain = torch.multinomial(torch.softmax(logits, -1), 1, generator=torch.Generator().manual_seed(0))[:, 0]
    assert torch.equal(sample_actions(logits, torch.Generator().manual_seed(0))[0], plain)
    assert all(sample_actions(logits, None, t)[0].eq(0).all() for t in (0.1, 1.0, 3.0))


def test_a_run_at_a_temperature_trains_the_tempered_policy_it_played():
    torch.manual_seed(0)
    policy = _live(RecurrentPolicy(CFG))
    rollout = collect(policy, 12, 3, episode_len=5, generator=torch.Generator().manual_seed(1), temperature=0.5)
    kl = {}
    for temperature in (0.5, 1.0):
        cfg = PPOConfig.test(num_envs=3, rollout_steps=12, seq_len=4, num_minibatches=1, temperature=temperature)
        with torch.no_grad():
            _, parts = sequence_loss(policy.eval(), training_sequences(rollout, cfg), cfg)
        kl[temperature] = float(parts["approx_kl"])
    # the log-probabilities the update computes are the play's at the run's temperature, and not at another
    assert kl[0.5] < 1e-7 and kl[1.0] > 1e-4, kl
    with pytest.raises(ValueError, match="temperature"):
        PPOConfig.test(temperature=0.0)


def collect(policy: RecurrentPolicy, steps: int, envs: int, episode_len: int, generator: torch.Generator,
            prior: torch.Tensor | None = None, temperature: float = 1.0) -> Rollout:
    """A bandit with memory-free observations: reward 1 for action 0, episodes of ``episode_len`` steps (the last
    one of the rollout truncated), recorded exactly as a runner records the agent's side; ``prior`` (A,): a starting
    policy's logits at every step, for a ``prior`` policy; ``temperature``: the actions drawn at it."""
    obs = torch.randn(steps, envs, CFG.d_obs, generator=generator)
    opponent = torch.zeros(steps, envs, CFG.opponent_window, CFG.d_obs)
    opponent_valid = torch.zeros(steps, envs, CFG.opponent_window, dtype=torch.bool)
    legal = torch.ones(steps, envs, CFG.num_actions, dtype=torch.bool)
    start = (torch.arange(steps) % episode_len == 0)[:, None].expand(steps, envs).clone()
    priors = None if prior is None else prior.expand(steps, envs, CFG.num_actions).clone()
    state = policy.initial_state(envs)
    records = {k: [] for k in ("actions", "logp", "values", "h", "c")}
    with torch.no_grad():
        for t in range(steps):
            records["h"].append(state[0])
            records["c"].append(state[1])
            out = policy.step(obs[t], opponent[t], opponent_valid[t], start[t], legal[t], state,
                              None if priors is None else priors[t])
            action, logp = sample_actions(out.logits[:, 0], generator, temperature)
            records["actions"].append(action)
            records["logp"].append(logp)
            records["values"].append(out.values[:, 0])
            state = out.state
    actions = torch.stack(records["actions"])
    ends = (torch.arange(steps) % episode_len == episode_len - 1)[:, None].expand(steps, envs)
    values = torch.stack(records["values"])
    next_values = torch.cat([values[1:], torch.zeros(1, envs)])
    return Rollout(obs=obs, opponent=opponent, opponent_valid=opponent_valid, legal=legal, episode_start=start,
                   actions=actions, logp=torch.stack(records["logp"]), values=values,
                   rewards=(actions == 0).float(), terminated=ends.clone(), truncated=torch.zeros_like(ends),
                   next_values=next_values, states=(torch.stack(records["h"]), torch.stack(records["c"])),
                   prior=priors)


def _live(policy):
    with torch.no_grad():
        torch.nn.init.normal_(policy.lstm_out.weight, std=0.5)  # memory on, so the stored states matter
    return policy


def test_the_first_pass_reproduces_the_acting_policy():
    torch.manual_seed(0)
    policy = _live(RecurrentPolicy(CFG))
    cfg = PPOConfig.test(num_envs=3, rollout_steps=12, seq_len=4, num_minibatches=1)
    rollout = collect(policy, 12, 3, episode_len=5, generator=torch.Generator().manual_seed(1))
    chunks = training_sequences(rollout, cfg)
    with torch.no_grad():
        _, parts = sequence_loss(policy.eval(), chunks, cfg)
    assert float(parts["approx_kl"]) < 1e-10 and float(parts["clip_fraction"]) == 0.0
    # without the stored states (zeros at every chunk start) the pass differs: the states are what make it exact
    chunks["h0"], chunks["c0"] = torch.zeros_like(chunks["h0"]), torch.zeros_like(chunks["c0"])
    with torch.no_grad():
        _, zeroed = sequence_loss(policy, chunks, cfg)
    assert float(zeroed["approx_kl"]) > 1e-6


def test_updates_learn_the_rewarded_action():
    torch.manual_seed(0)
    policy = RecurrentPolicy(CFG)
    cfg = PPOConfig.test(num_envs=4, rollout_steps=16, seq_len=8, num_minibatches=2, lr=1e-2, updates=15,
                         entropy_weight=0.0)
    learner = Learner(policy, lr=cfg.lr, weight_decay=0.0, grad_clip=cfg.grad_clip, device=torch.device("cpu"))
    g = torch.Generator().manual_seed(2)
    first = collect(policy, 16, 4, episode_len=8, generator=g).rewards.mean().item()
    for u in range(cfg.updates):
        metrics = update(learner, collect(policy, 16, 4, episode_len=8, generator=g), cfg, u, g)
    last = torch.stack([collect(policy, 16, 4, episode_len=8, generator=g).rewards.mean() for _ in range(5)]).mean()
    assert first < 0.5 and last.item() > 0.8, (first, last.item())
    assert metrics["epochs"] == cfg.epochs and metrics["lr"] < cfg.lr  # annealed


def test_critic_warmup_trains_the_critic_alone():
    torch.manual_seed(0)
    policy = _live(RecurrentPolicy(CFG))
    cfg = PPOConfig.test(num_envs=4, rollout_steps=16, seq_len=8, num_minibatches=2, lr=1e-2, critic_warmup_updates=2)
    learner = Learner(policy, lr=cfg.lr, weight_decay=0.0, grad_clip=cfg.grad_clip, device=torch.device("cpu"))
    g = torch.Generator().manual_seed(3)
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    for u in range(2):
        metrics = update(learner, collect(policy, 16, 4, episode_len=8, generator=g), cfg, u, g)
        assert metrics["policy_trained"] == 0.0
    moved = {k for k, v in policy.state_dict().items() if not torch.equal(v, before[k])}
    assert moved and all(k.startswith("critic.") for k in moved), moved
    assert all(p.requires_grad for p in policy.parameters())  # the whole policy trains after the warm-up
    metrics = update(learner, collect(policy, 16, 4, episode_len=8, generator=g), cfg, 2, g)
    assert metrics["policy_trained"] == 1.0 and not torch.equal(policy.actor.weight, before["actor.weight"])


def test_the_reference_penalty_keeps_the_policy_near_its_start():
    """The bandit rewards action 0; a policy started on prior logits that prefer action 2 acts as the prior at step
    0, and the reference penalty (the prior is the reference) holds a penalised policy near it. A rollout without a
    prior has no reference to be held to."""
    prior = torch.tensor([0.0, 0.0, 1.0])

    def train(reference_kl: float):
        torch.manual_seed(0)
        policy = RecurrentPolicy(dataclasses.replace(CFG, prior=True))
        cfg = PPOConfig.test(num_envs=4, rollout_steps=16, seq_len=8, num_minibatches=2, lr=1e-2, updates=10,
                             entropy_weight=0.0, reference_kl=reference_kl)
        learner = Learner(policy, lr=cfg.lr, weight_decay=0.0, grad_clip=cfg.grad_clip, device=torch.device("cpu"))
        g = torch.Generator().manual_seed(2)
        for u in range(cfg.updates):
            rollout = collect(policy, 16, 4, episode_len=8, generator=g, prior=prior)
            if u == 0:  # the prior's own log-probabilities: the policy is its prior at step 0
                torch.testing.assert_close(rollout.logp, torch.log_softmax(prior, -1)[rollout.actions])
            metrics = update(learner, rollout, cfg, u, g)
        return metrics

    free, held = train(0.0), train(5.0)
    assert held["reference_kl"] < free["reference_kl"] / 2, (held, free)
    assert held["reference_agreement"] > free["reference_agreement"]
    policy = RecurrentPolicy(CFG)
    learner = Learner(policy, lr=1e-2, weight_decay=0.0, grad_clip=0.5, device=torch.device("cpu"))
    g = torch.Generator().manual_seed(2)
    with pytest.raises(ValueError, match="--reference-kl needs"):
        update(learner, collect(policy, 16, 4, episode_len=8, generator=g),
               PPOConfig.test(num_envs=4, rollout_steps=16, seq_len=8, num_minibatches=2, reference_kl=1.0), 0, g)


class _RawEncoder(torch.nn.Module):
    """A trainable observation encoder for the bandit: raw inputs (B, T, 4) → obs (B, T, d_obs), no opponent."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, CFG.d_obs)

    def forward(self, raw):
        b, t, _ = raw.shape
        return (self.linear(raw), torch.zeros(b, t, CFG.opponent_window, CFG.d_obs),
                torch.zeros(b, t, CFG.opponent_window, dtype=torch.bool))


def test_a_trainable_encoder_steps_with_the_policy_but_not_in_the_critic_warmup():
    from training.ppo import TrainableEncoder, concat_rollouts

    torch.manual_seed(0)
    policy, encoder = RecurrentPolicy(CFG), _RawEncoder()
    cfg = PPOConfig.test(num_envs=4, rollout_steps=16, seq_len=8, num_minibatches=2, critic_warmup_updates=1)
    learner = Learner(policy, lr=cfg.lr, weight_decay=0.0, grad_clip=cfg.grad_clip, device=torch.device("cpu"))
    trainable = TrainableEncoder(module=encoder, optimizer=torch.optim.AdamW(encoder.parameters(), lr=1e-2),
                                 lr=1e-2, grad_clip=cfg.grad_clip)
    g = torch.Generator().manual_seed(2)

    def rollout():
        raw = torch.randn(16, 4, 4, generator=g)
        halves = []
        for cols in (slice(0, 2), slice(2, 4)):  # two runners' rollouts side by side: inputs concatenated too
            r = collect(policy, 16, 2, episode_len=8, generator=g)  # its obs: what the encoder now recomputes
            r.inputs = {"raw": raw[:, cols]}
            halves.append(r)
        return concat_rollouts(halves)

    before = encoder.linear.weight.clone()
    with pytest.raises(ValueError, match="inputs"):
        update(learner, collect(policy, 16, 4, episode_len=8, generator=g), cfg, 1, g, encoder=trainable)
    warm = update(learner, rollout(), cfg, 0, g, encoder=trainable)
    assert warm["encoder_grad_norm"] == 0.0 and torch.equal(encoder.linear.weight, before)
    trained = update(learner, rollout(), cfg, 1, g, encoder=trainable)
    assert trained["encoder_grad_norm"] > 0 and not torch.equal(encoder.linear.weight, before)
    assert trained["encoder_lr"] < 1e-2  # annealed on the policy's schedule


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (self-play's --use-gpu learner)")
def test_a_learner_on_the_gpu_trains_on_the_runners_cpu_rollouts():
    """Runners act on the CPU and return CPU rollouts; a ``--use-gpu`` learner's update moves them to its device
    and steps as the CPU learner does (to float tolerance: bf16 autocast on CUDA)."""
    torch.manual_seed(0)
    policy = RecurrentPolicy(CFG)
    cfg = PPOConfig.test(num_envs=4, rollout_steps=16, seq_len=8, num_minibatches=2)
    rollout = collect(policy, 16, 4, episode_len=8, generator=torch.Generator().manual_seed(1))
    metrics = {}
    for device in ("cpu", "cuda"):
        learner = Learner(RecurrentPolicy(CFG), lr=cfg.lr, weight_decay=0.0, grad_clip=cfg.grad_clip,
                          device=torch.device(device))
        learner.load({"model": policy.state_dict()}, optimizer=False)
        metrics[device] = update(learner, rollout, cfg, 0, torch.Generator().manual_seed(2))
        assert all(p.device.type == device for p in learner.module.parameters())
    for name in ("policy_loss", "value_loss", "entropy"):
        assert metrics["cuda"][name] == pytest.approx(metrics["cpu"][name], abs=0.05), name

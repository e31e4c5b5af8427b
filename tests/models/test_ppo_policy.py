"""The self-play policy: step-by-step equals the sequence pass, the LSTM forgets at episode starts, a policy started
on an offline-RL policy's logits (its prior, either head) chooses exactly as it at step 0, and no opponent history
stays finite."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from models.ppo_policy import RecurrentPolicy, RecurrentPolicyConfig
from shards_schema.pokemon import OBS_NUMERIC

CFG = RecurrentPolicyConfig(d_obs=32, num_actions=9, opponent_window=5, d_strategy=16, strategy_layers=1,
                            strategy_heads=4, num_latents=2, d_lstm=24)


def _inputs(b=3, t=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(b, t, CFG.d_obs, generator=g)
    opponent = torch.randn(b, t, CFG.opponent_window, CFG.d_obs, generator=g)
    opponent_valid = torch.rand(b, t, CFG.opponent_window, generator=g) < 0.7
    start = torch.zeros(b, t, dtype=torch.bool)
    start[:, 0] = True
    start[1, 3] = True  # a new episode inside the sequence
    legal = torch.rand(b, t, CFG.num_actions, generator=g) < 0.6
    legal[..., 0] = True
    return obs, opponent, opponent_valid, start, legal


def _live(policy: RecurrentPolicy) -> RecurrentPolicy:
    """Residuals switched on (they start at zero), so the tests see the LSTM and the cross-attention at work."""
    with torch.no_grad():
        torch.nn.init.normal_(policy.lstm_out.weight, std=0.3)
        policy.cross_gate.fill_(0.8)
    return policy.eval()


@pytest.mark.parametrize("with_prior", [False, True])
def test_step_by_step_equals_the_sequence_pass(with_prior):
    torch.manual_seed(0)
    policy = _live(RecurrentPolicy(dataclasses.replace(CFG, prior=with_prior)))
    obs, opponent, valid, start, legal = _inputs()
    prior = None
    if with_prior:
        torch.nn.init.normal_(policy.actor.weight.data)  # moved off zero, so the actor's share shows
        prior = torch.randn(3, 6, CFG.num_actions)
    whole = policy(obs, opponent, valid, start, legal, prior=prior)
    state = policy.initial_state(3)
    for t in range(obs.shape[1]):
        out = policy.step(obs[:, t], opponent[:, t], valid[:, t], start[:, t], legal[:, t], state,
                          None if prior is None else prior[:, t])
        state = out.state
        torch.testing.assert_close(out.logits[:, 0], whole.logits[:, t])
        torch.testing.assert_close(out.values[:, 0], whole.values[:, t])
    torch.testing.assert_close(state[0], whole.state[0])


def test_the_lstm_forgets_everything_before_an_episode_start():
    torch.manual_seed(0)
    policy = _live(RecurrentPolicy(CFG))
    obs, opponent, valid, start, legal = _inputs()
    a = policy(obs, opponent, valid, start, legal)
    other = obs.clone()
    other[1, :3] = torch.randn(3, CFG.d_obs) * 5  # the previous episode of row 1 changes entirely
    b = policy(other, opponent, valid, start, legal, state=(torch.randn(3, CFG.d_lstm), torch.randn(3, CFG.d_lstm)))
    torch.testing.assert_close(a.logits[1, 3:], b.logits[1, 3:])  # from its new episode on: the same
    assert not torch.allclose(a.values[1, :3], b.values[1, :3])  # before it: the change is seen


@pytest.mark.parametrize("action_head", ["linear", "slots"])
def test_started_on_an_offline_rl_policy_it_chooses_as_that_policy(action_head):
    """A ``prior`` policy's logits are the offline-RL policy's at step 0, whatever its head reads (the slot head also
    reads each action's own words), with the LSTM and the cross-attention live; once its actor moves, they differ."""
    from models.pokemon_policy import PokemonPolicy, PolicyConfig
    from training.pokemon.selfplay_player import starting_logits

    torch.manual_seed(0)
    bc = PokemonPolicy(PolicyConfig.preset("tiny", 100, action_head=action_head)).eval()
    cfg = RecurrentPolicyConfig(d_obs=bc.cfg.d_model, num_actions=9, opponent_window=4, d_strategy=16,
                                strategy_heads=2, d_lstm=16, prior=True)
    policy = _live(RecurrentPolicy(cfg))
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 100, (2, 7, 87), generator=g)
    numeric = torch.rand(2, 7, OBS_NUMERIC, generator=g)
    legal = torch.rand(2, 7, 9, generator=g) < 0.5
    legal[..., 2] = True
    valid = torch.ones(2, 7, dtype=torch.bool)
    with torch.no_grad():
        features = bc.features(tokens, numeric, valid)
        prior = starting_logits(bc, tokens, numeric, features)
        opponent = torch.randn(2, 7, 4, cfg.d_obs, generator=g)
        start = torch.zeros(2, 7, dtype=torch.bool)
        start[:, 0] = True
        ours = policy(features, opponent, torch.ones(2, 7, 4, dtype=torch.bool), start, legal, prior=prior)
        theirs = bc(tokens, numeric, legal, valid)
        torch.testing.assert_close(ours.logits, theirs.logits, rtol=0, atol=0)
        torch.testing.assert_close(starting_logits(bc, tokens, numeric), prior)  # features computed there: the same
        policy.actor.bias[3] = 1.0  # PPO moves the actor: the policy moves away from the prior
        moved = policy(features, opponent, torch.ones(2, 7, 4, dtype=torch.bool), start, legal, prior=prior)
    assert not torch.equal(moved.logits[legal], theirs.logits[legal])
    if action_head == "slots":  # the slot scores are part of the prior: the linear read alone is another policy
        assert not torch.allclose(bc.actor(features), prior)
    with pytest.raises(ValueError, match="pass forward's prior"):
        policy(features, opponent, torch.ones(2, 7, 4, dtype=torch.bool), start, legal)
    with pytest.raises(ValueError, match="reads no prior"):
        RecurrentPolicy(CFG)(*_inputs(), prior=torch.zeros(3, 6, 9))


def test_no_opponent_history_yet_is_finite_and_zero_latents():
    torch.manual_seed(0)
    policy = _live(RecurrentPolicy(CFG))
    obs, opponent, _, start, legal = _inputs(b=2, t=4)
    none = torch.zeros(2, 4, CFG.opponent_window, dtype=torch.bool)
    out = policy(obs, opponent, none, start, legal)
    assert torch.isfinite(out.values).all() and torch.isfinite(out.logits[legal]).all()
    latents = policy.strategy(opponent[:, 0], none[:, 0])
    assert torch.count_nonzero(latents) == 0

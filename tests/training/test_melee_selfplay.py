"""Self-play pieces in the world model: discrete controller actions in featurize's layout, each player seeing itself
first, zero-sum reward terms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shards_schema.melee_features import BUTTON_BITS, CAT_FIELDS, CAT_INDEX, CONT_FIELDS, CONT_INDEX, CTRL_PER_PLAYER
from training.melee.env import frame_outcome, zero_sum_reward
from training.melee.rollout_rules import Frame, normalize_controller
from training.melee.selfplay import (
    CONTROLLER_ACTIONS,
    NUM_ACTIONS,
    OBS_WIDTH,
    controller,
    frame_vector,
    reward_terms,
)


def _frame(percent=(10.0, 50.0), stocks=(4, 3)) -> Frame:
    cont = np.zeros(len(CONT_FIELDS), np.float32)
    cont[CONT_INDEX["p0.percent"]], cont[CONT_INDEX["p1.percent"]] = percent[0] / 100, percent[1] / 100
    cont[CONT_INDEX["p0.x"]], cont[CONT_INDEX["p1.x"]] = -0.3, 0.4
    cat = np.ones(len(CAT_FIELDS), np.int64)
    cat[CAT_INDEX["p0.stocks"]], cat[CAT_INDEX["p1.stocks"]] = stocks[0] + 1, stocks[1] + 1
    binary = np.zeros(10, np.float32)
    return Frame(cont=cont, cont_valid=np.ones(len(CONT_FIELDS), bool), binary=binary,
                 binary_valid=np.ones(10, bool), cat=cat)


def test_actions_are_controllers_the_shards_could_hold():
    assert NUM_ACTIONS == len({name for name, *_ in CONTROLLER_ACTIONS})  # names unique
    for action in range(NUM_ACTIONS):
        ctrl = controller(action)
        assert ctrl.shape == (CTRL_PER_PLAYER,)
        np.testing.assert_array_equal(normalize_controller(np.concatenate([ctrl, ctrl]))[:CTRL_PER_PLAYER], ctrl)
    jump_right = controller([n for n, *_ in CONTROLLER_ACTIONS].index("jump right"))
    assert jump_right[BUTTON_BITS.index(0x400)] == 1.0 and jump_right[len(BUTTON_BITS)] == 1.0  # X, main_x = 1


def test_each_player_sees_itself_first():
    frame = _frame()
    me, them = frame_vector(frame, 0), frame_vector(frame, 1)
    assert me.shape == (OBS_WIDTH,) and OBS_WIDTH % 8 == 0
    p0, p1 = CONT_INDEX["p0.percent"], CONT_INDEX["p1.percent"]
    assert (me[p0], me[p1]) == pytest.approx((0.1, 0.5)) and (them[p0], them[p1]) == pytest.approx((0.5, 0.1))
    swapped = _frame(percent=(50.0, 10.0), stocks=(3, 4))
    swapped.cont[CONT_INDEX["p0.x"]], swapped.cont[CONT_INDEX["p1.x"]] = 0.4, -0.3
    np.testing.assert_allclose(frame_vector(swapped, 0), them)  # p1's view of a frame = p0's of the mirrored one


def test_reward_terms_are_zero_sum():
    before, after = _frame(percent=(10.0, 50.0), stocks=(4, 3)), _frame(percent=(22.0, 50.0), stocks=(4, 2))
    outcome = frame_outcome((10.0, 50.0), before, after)
    mine, theirs = reward_terms(outcome, 0), reward_terms(outcome, 1)
    assert (mine.damage_taken, mine.damage_dealt, mine.stocks_taken, mine.stocks_lost) == pytest.approx((12, 0, 1, 0))
    assert mine.total(0.01) == pytest.approx(-theirs.total(0.01)) and mine.total(0.01) == pytest.approx(0.88)
    assert mine.total(0.01) == pytest.approx(zero_sum_reward(outcome, 0.01))


def test_damage_counts_only_new_highs_in_a_stock():
    """p0's percent as a world model may predict it: a hit, a dip (noise), a recovery past the old high, a lost
    stock (percent back to 0), a hit in the new stock. Only rises above the stock's high are damage."""
    path = [(10.0, 4), (22.0, 4), (18.0, 4), (25.0, 4), (0.0, 3), (5.0, 3)]
    highs, taken, lost = (10.0, 50.0), [], []
    for (p_before, s_before), (p_after, s_after) in zip(path[:-1], path[1:], strict=True):
        outcome = frame_outcome(highs, _frame(percent=(p_before, 50.0), stocks=(s_before, 3)),
                                _frame(percent=(p_after, 50.0), stocks=(s_after, 3)))
        highs = outcome.highs
        taken.append(outcome.damage[0])
        lost.append(outcome.stocks_lost[0])
    assert taken == pytest.approx([12.0, 0.0, 3.0, 0.0, 5.0])  # counting every rise would give 12, 0, 7, 0, 5
    assert lost == [0, 0, 0, 1, 0] and highs == pytest.approx((5.0, 50.0))


def test_a_runner_returns_the_learners_side_only_and_bootstraps_time_limits(synthetic_frames):
    """Against each opponent kind: the rollout holds one learner action per game and step (never the opponent's),
    the LSTM states it acted with, and at a time limit the value of the frame it stopped on."""
    import itertools

    import torch

    from models.ppo_policy import RecurrentPolicy, RecurrentPolicyConfig
    from models.world_model import WorldModel, WorldModelConfig
    from training.fit import Learner
    from training.league import Opponent
    from training.melee.selfplay import MeleeRunner
    from training.ppo import PPOConfig, update

    torch.manual_seed(0)
    world = WorldModel(WorldModelConfig.preset("tiny")).eval()
    cfg = RecurrentPolicyConfig(d_obs=OBS_WIDTH, num_actions=NUM_ACTIONS, opponent_window=3, d_strategy=16,
                                strategy_heads=4, num_latents=2, d_lstm=16)
    learner_policy = RecurrentPolicy(cfg)
    kinds = itertools.cycle([Opponent("snapshot", "snapshot-000001"), Opponent("strong", "replay"),
                             Opponent("weak", "random")])
    drawn = []

    def draw():
        drawn.append(next(kinds))
        return drawn[-1]

    runner = MeleeRunner(world, synthetic_frames, cfg, num_envs=2, seed=0, seed_frames=20, max_frames=4,
                         draw_opponent=draw, snapshot_weights=lambda name: learner_policy.state_dict())
    rollout, episodes = runner.collect(learner_policy.state_dict(), steps=8)
    assert rollout.actions.shape == (8, 2) and rollout.obs.shape == (8, 2, OBS_WIDTH)
    assert int(rollout.actions.min()) >= 0 and int(rollout.actions.max()) < NUM_ACTIONS
    assert len(episodes) == 4 and all(e.truncated and e.frames == 4 for e in episodes)  # 2 games × 2 time limits
    assert {e.opponent.kind for e in episodes} == {"snapshot", "strong", "weak"}
    assert rollout.truncated.sum() == 4 and not rollout.terminated.any()
    assert rollout.episode_start[0].all() and rollout.episode_start[4].all()  # new games after each time limit
    # each game's reward terms add up to its reward
    for e in episodes:
        total = 0.01 * (e.terms["damage_dealt"] - e.terms["damage_taken"]) + e.terms["stocks_taken"] - \
            e.terms["stocks_lost"]
        assert e.reward == pytest.approx(total, abs=1e-5) and e.score in (0.0, 0.5, 1.0)
    # the states recorded are the ones the learner acted with: zero at each game's first step
    assert torch.count_nonzero(rollout.states[0][1]) > 0
    # and the rollout trains
    ppo = PPOConfig.test(num_envs=2, rollout_steps=8, seq_len=4, num_minibatches=2)
    learner = Learner(learner_policy, lr=ppo.lr, weight_decay=0.0, grad_clip=ppo.grad_clip,
                      device=torch.device("cpu"))
    metrics = update(learner, rollout, ppo, 0, torch.Generator().manual_seed(0))
    assert math.isfinite(metrics["policy_loss"]) and math.isfinite(metrics["value_loss"])


def test_a_runner_plays_at_the_runs_temperature(synthetic_frames):
    """A runner made at temperature 0.5 records the tempered policy's log-probabilities: PPO at the same temperature
    recomputes them exactly (approximate KL 0), at temperature 1 it does not."""
    import torch

    from models.ppo_policy import RecurrentPolicy, RecurrentPolicyConfig
    from models.world_model import WorldModel, WorldModelConfig
    from training.league import Opponent
    from training.melee.selfplay import MeleeRunner
    from training.ppo import PPOConfig, sequence_loss, training_sequences

    torch.manual_seed(0)
    world = WorldModel(WorldModelConfig.preset("tiny")).eval()
    cfg = RecurrentPolicyConfig(d_obs=OBS_WIDTH, num_actions=NUM_ACTIONS, opponent_window=3, d_strategy=16,
                                strategy_heads=4, num_latents=2, d_lstm=16)
    policy = RecurrentPolicy(cfg).eval()
    runner = MeleeRunner(world, synthetic_frames, cfg, num_envs=2, seed=0, seed_frames=20, max_frames=4,
                         temperature=0.5, draw_opponent=lambda: Opponent("weak", "random"))
    rollout, _ = runner.collect(policy.state_dict(), steps=8)
    kl = {}
    for temperature in (0.5, 1.0):
        ppo = PPOConfig.test(num_envs=2, rollout_steps=8, seq_len=4, num_minibatches=1, temperature=temperature)
        with torch.no_grad():
            kl[temperature] = float(sequence_loss(policy, training_sequences(rollout, ppo), ppo)[1]["approx_kl"])
    assert kl[0.5] < 1e-7 and kl[1.0] > 1e-5, kl

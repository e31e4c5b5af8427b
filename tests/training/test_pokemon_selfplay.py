"""Self-play in real Pokémon battles: the learner's player on a runner's own local Showdown server records only its
own decisions, starts on the offline-RL policy's choices, and its battles become a masked rollout that trains."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import torch
from conftest import needs_simulator


@pytest.fixture(scope="module")
def bc_policy():
    from models.pokemon_policy import PokemonPolicy, PolicyConfig
    from pipelines.pokemon.observation import vocabulary

    torch.manual_seed(0)
    return PokemonPolicy(PolicyConfig.preset("tiny", len(vocabulary()))).eval()


def test_battles_become_a_masked_rollout():
    from training.pokemon.selfplay import battles_to_rollout

    def step(start, value):
        return {"obs": torch.ones(4), "opponent": torch.zeros(2, 4), "opponent_valid": torch.zeros(2, dtype=torch.bool),
                "legal": torch.ones(9, dtype=torch.bool), "episode_start": start, "actions": 1,
                "logp": torch.tensor(-1.0), "values": torch.tensor(value), "h": torch.zeros(3), "c": torch.zeros(3)}

    battles = [([step(True, 0.1), step(False, 0.2), step(False, 0.3)], 1.0, (2, 0)), ([step(True, 0.5)], -1.0, (0, 1))]
    rollout = battles_to_rollout(battles, seq_len=2)
    assert rollout.actions.shape == (4, 2)  # 3 decisions padded to 4
    assert rollout.mask[:, 0].tolist() == [True, True, True, False] and rollout.mask[:, 1].sum() == 1
    assert rollout.rewards[2, 0] == 1.0 and rollout.rewards[0, 1] == -1.0 and rollout.rewards.abs().sum() == 2.0
    assert rollout.terminated[2, 0] and rollout.terminated[0, 1]


@needs_simulator
@pytest.mark.timeout(300)
def test_a_runner_plays_real_battles_and_they_train(bc_policy):
    from models.ppo_policy import RecurrentPolicy, RecurrentPolicyConfig
    from training.fit import Learner
    from training.league import Opponent
    from training.pokemon.selfplay import PokemonRunner, battles_to_rollout
    from training.ppo import PPOConfig, sequence_loss, training_sequences, update

    cfg = RecurrentPolicyConfig(d_obs=bc_policy.cfg.d_model, num_actions=9, opponent_window=4, d_strategy=16,
                                strategy_heads=2, d_lstm=16)
    policy = RecurrentPolicy.on_top_of(cfg, bc_policy.actor)
    draws = itertools.cycle([Opponent("weak", "random"), Opponent("strong", "maxbp")])
    runner = PokemonRunner(bc_policy, 16, cfg, seed=3, draw_opponent=lambda: next(draws))
    try:
        recorded, battles = runner.collect(policy.state_dict(), battles=2)
    finally:
        runner.close()
    assert len(battles) == 2 and all(b.reward in (-1.0, 0.0, 1.0) and b.frames > 0 for b in battles)
    assert all(b.score == (b.reward + 1) / 2 for b in battles)
    # each battle against its own draw, and each result filed under the opponent it was played against
    assert sorted(b.opponent.name for b in battles) == ["maxbp", "random"]
    assert [r[3] for r in recorded] == [b.opponent for b in battles]
    rollout = battles_to_rollout(recorded, seq_len=8)
    assert rollout.mask.sum() == sum(b.frames for b in battles)  # its own decisions, nothing of the opponent
    assert rollout.episode_start[0].all()
    ppo = PPOConfig.test(num_envs=2, rollout_steps=rollout.actions.shape[0], seq_len=8, num_minibatches=1)
    with torch.no_grad():  # the learner's first pass gives the log-probabilities the player acted with
        _, first = sequence_loss(policy, training_sequences(rollout, ppo), ppo)
    assert abs(float(first["approx_kl"])) < 1e-6
    learner = Learner(policy, lr=ppo.lr, weight_decay=0.0, grad_clip=ppo.grad_clip, device=torch.device("cpu"))
    metrics = update(learner, rollout, ppo, 0, torch.Generator().manual_seed(0))
    assert math.isfinite(metrics["policy_loss"]) and math.isfinite(metrics["value_loss"])
    assert all(torch.isfinite(p).all() for p in policy.parameters())


@needs_simulator
@pytest.mark.timeout(600)
def test_a_short_selfplay_run_in_real_battles(bc_policy, ray_local, tmp_path):
    """``training/selfplay.py --env pokemon`` on an offline-RL checkpoint: runner actors with their own servers,
    the learner on Ray Train, the league; its checkpoint says what it holds and carries the league. The first
    update trains the critic alone, so the policy still chooses as the offline-RL policy (agreement 1, KL 0)."""
    import csv

    from training.checkpoints import live_identity, payload, read_checkpoint
    from training.loop import latest_checkpoint
    from training.pokemon.offline_rl import TrainConfig
    from training.registry import POKEMON_OBSERVATION
    from training.selfplay import SelfPlayConfig, run

    source = tmp_path / "bc"
    source.mkdir()
    state = payload(kind="pokemon_policy", model_config=bc_policy.cfg,
                    train_config=TrainConfig.tiny(shards="s", out="o", context=16), step=1,
                    data=live_identity(POKEMON_OBSERVATION), model=bc_policy, optimizer=None)
    torch.save({**state, "rng": []}, source / "state.pt")
    out = tmp_path / "run"
    result = run(SelfPlayConfig.tiny(env="pokemon", policy_init=str(source), out=str(out), updates=2,
                                     num_runners=1, battles_per_runner=2, snapshot_every=1, reference_kl=0.1,
                                     critic_warmup=1))
    assert result.error is None
    saved = read_checkpoint(latest_checkpoint(out))
    assert saved.kind == "pokemon_selfplay" and saved.step == 2 and saved.data.features == POKEMON_OBSERVATION
    assert sorted(saved.extra["league"]["snapshots"]) == ["snapshot-000001", "snapshot-000002"]
    with open(out / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["step"]) for r in rows] == [1, 2] and all(int(r["games"]) == 2 for r in rows)
    assert all(float(r["term_result"]) in (-1.0, -0.5, 0.0, 0.5, 1.0) for r in rows)
    assert all(math.isfinite(float(r["policy_loss"])) for r in rows)
    assert [float(r["policy_trained"]) for r in rows] == [0.0, 1.0]
    assert float(rows[0]["reference_agreement"]) == 1.0 and float(rows[0]["reference_kl"]) < 1e-6
    assert {"win_rate_vs_heuristic", "win_rate_vs_maxbp", "win_rate_vs_random"} <= set(rows[0])


@needs_simulator
@pytest.mark.timeout(600)
def test_from_scratch_the_encoder_travels_with_the_checkpoint_and_it_plays(ray_local, tmp_path):
    """Without --policy-init: an untrained, frozen encoder of --encoder-preset; the checkpoint keeps it, evaluation
    plays the checkpoint from it alone, and the report draws the snapshots' ratings."""
    from training.checkpoints import read_checkpoint
    from training.loop import latest_checkpoint
    from training.pokemon.evaluate import EvalConfig
    from training.pokemon.evaluate import run as evaluate
    from training.pokemon.selfplay import untrained_encoder
    from training.pokemon.selfplay_player import encoder_from_state
    from training.pokemon.showdown_server import free_port
    from training.selfplay import SelfPlayConfig, run_to_end
    from training.selfplay_report import ReportConfig, report

    out = tmp_path / "run"
    cfg = SelfPlayConfig.tiny(env="pokemon", out=str(out), updates=2, num_runners=1, battles_per_runner=2,
                              snapshot_every=1, encoder_preset="tiny", encoder_context=3, seed=5)
    last, seconds = run_to_end(cfg)
    assert last == latest_checkpoint(out) and seconds > 0
    saved = read_checkpoint(last)
    encoder, context = encoder_from_state(saved.extra["encoder"])
    assert context == 3 and saved.extra["encoder"]["source"] == "untrained tiny (seed 5)"
    fresh = untrained_encoder("tiny", 5)
    assert all(torch.equal(a, b) for a, b in zip(encoder.state_dict().values(), fresh.state_dict().values(),
                                                 strict=True))
    rows = evaluate(EvalConfig.tiny(checkpoint=last, port=free_port()), log=lambda _: None)
    assert rows[0]["battles"] == 2 and rows[0]["fallback_moves"] == 0
    said = []
    png = report(ReportConfig(out=str(out)), log=said.append)
    assert png.endswith("/ratings.png") and Path(png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not said
    (out / "metrics.csv").unlink()  # as on a machine other than the learner's: the report says what it left out
    report(ReportConfig(out=str(out), png=str(tmp_path / "snapshots.png")), log=said.append)
    assert len(said) == 1 and "snapshots only" in said[0] and (tmp_path / "snapshots.png").exists()


def test_the_report_reads_snapshots_and_the_learner_by_update(tmp_path):
    from training.selfplay_report import learner_ratings, snapshot_ratings

    assert snapshot_ratings({"random": 1000.0, "learner": 1100.0, "snapshot-000010": 1050.0,
                             "snapshot-000002": 990.0}) == [(2, 990.0), (10, 1050.0)]
    (tmp_path / "metrics.csv").write_text("step,learner_rating\n1,1000\n2,1010\n2,1012\n3,1020\n")
    assert learner_ratings(tmp_path / "metrics.csv") == [(1, 1000.0), (2, 1012.0), (3, 1020.0)]

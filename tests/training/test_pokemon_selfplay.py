"""Self-play in real Pokémon battles: the learner's player on a runner's own local Showdown server records only its
own decisions, starts on the offline-RL policy's choices (linear or slot head: its logits are the policy's prior),
and its battles become a masked rollout that trains; a fine-tune resumes exactly and its checkpoint plays."""

from __future__ import annotations

import dataclasses
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


def _slot_checkpoint_untrained(folder: Path) -> str:
    """A tiny slot-head offline-RL checkpoint as initialised (no simulator needed): the pure tests' starting policy."""
    from models.pokemon_policy import PokemonPolicy, PolicyConfig
    from pipelines.pokemon.observation import vocabulary
    from training.checkpoints import live_identity, payload
    from training.pokemon.offline_rl import TrainConfig
    from training.registry import POKEMON_OBSERVATION

    torch.manual_seed(1)
    model = PokemonPolicy(PolicyConfig.preset("tiny", len(vocabulary()), action_head="slots"))
    folder.mkdir()
    state = payload(kind="pokemon_policy", model_config=model.cfg,
                    train_config=TrainConfig.tiny(shards="s", out="o", action_head="slots"), step=1,
                    data=live_identity(POKEMON_OBSERVATION), model=model, optimizer=None)
    torch.save({**state, "rng": []}, folder / "state.pt")
    return str(folder)


def _team(own_hp=1.0, opponent_hp=1.0, own_fainted=0, opponent_fainted=0):
    from training.pokemon.selfplay_player import TeamState

    return TeamState(own_hp=own_hp, opponent_hp=opponent_hp, own_fainted=own_fainted,
                     opponent_fainted=opponent_fainted)


def test_battles_become_a_masked_rollout():
    from training.pokemon.selfplay import RecordedBattle, battles_to_rollout

    def step(start, value):
        return {"obs": torch.ones(4), "opponent": torch.zeros(2, 4), "opponent_valid": torch.zeros(2, dtype=torch.bool),
                "legal": torch.ones(9, dtype=torch.bool), "episode_start": start, "actions": 1,
                "logp": torch.tensor(-1.0), "values": torch.tensor(value), "h": torch.zeros(3), "c": torch.zeros(3),
                "team": _team()}

    battles = [RecordedBattle(steps=[step(True, 0.1), step(False, 0.2), step(False, 0.3)], result=1.0,
                              end=_team(0.5, 0.0, 2, 6)),
               RecordedBattle(steps=[step(True, 0.5)], result=-1.0, end=_team(0.0, 0.9, 6, 1))]
    rollout = battles_to_rollout(battles, seq_len=2)
    assert rollout.actions.shape == (4, 2)  # 3 decisions padded to 4
    assert rollout.mask[:, 0].tolist() == [True, True, True, False] and rollout.mask[:, 1].sum() == 1
    # the default weights (all 0): the result alone at each battle's last decision, as before the dense terms
    assert rollout.rewards[2, 0] == 1.0 and rollout.rewards[0, 1] == -1.0 and rollout.rewards.abs().sum() == 2.0
    assert rollout.terminated[2, 0] and rollout.terminated[0, 1] and rollout.inputs is None


def test_dense_reward_terms_by_hand():
    from training.pokemon.selfplay import RewardWeights, potential, shaping_rewards, step_terms

    # decision 0, decision 1 (we lost 30% of our team's HP, they lost 50% and a Pokémon), the end (a knockout each)
    states = [_team(1.0, 1.0), _team(0.7, 0.5, 0, 1), _team(0.6, 0.4, 1, 2)]
    terms = step_terms(states)
    assert [t["knockouts_dealt"] for t in terms] == [1, 1] and [t["knockouts_taken"] for t in terms] == [0, 1]
    assert [t["hp_dealt"] for t in terms] == pytest.approx([0.5, 0.1])
    assert [t["hp_taken"] for t in terms] == pytest.approx([0.3, 0.1])
    w = RewardWeights(knockout_dealt=0.2, knockout_taken=0.3, hp_swing=1.0)
    assert potential(states[1], w) == pytest.approx(0.2 * 1 + 1.0 * (0.7 - 0.5))
    plain = shaping_rewards(states, w, gamma=0.9)
    assert plain == pytest.approx([0.2 + (0.5 - 0.3), 0.2 - 0.3 + (0.1 - 0.1)])
    # plain differences telescope to Φ(end) − Φ(start): they pay for how the battle ended, not only for winning
    assert sum(plain) == pytest.approx(potential(states[-1], w) - potential(states[0], w))
    # potential-based (Φ = 0 at the end): the discounted sum is −Φ(start) whatever happened, so the optimum stays
    kept = shaping_rewards(states, dataclasses.replace(w, keep_optimum=True), gamma=0.9)
    other = shaping_rewards([states[0], _team(0.1, 0.9, 3, 0), _team(0.0, 0.8, 6, 1)],
                            dataclasses.replace(w, keep_optimum=True), gamma=0.9)
    for rewards in (kept, other):
        assert sum(r * 0.9 ** t for t, r in enumerate(rewards)) == pytest.approx(-potential(states[0], w))
    assert shaping_rewards(states, RewardWeights(), gamma=0.9) == [0.0, 0.0]


def test_battle_rewards_add_the_weighted_terms_and_log_each():
    from training.pokemon.selfplay import RecordedBattle, RewardWeights, battle_rewards, episodes_of

    battle = RecordedBattle(steps=[{"team": _team(1.0, 1.0)}, {"team": _team(0.8, 0.5, 0, 1)}], result=1.0,
                            end=_team(0.8, 0.0, 0, 6))
    rewards, terms = battle_rewards(battle, RewardWeights(), gamma=0.99)
    assert rewards == [0.0, 1.0] and terms["shaping"] == 0.0
    assert (terms["knockouts_dealt"], terms["knockouts_taken"]) == (6.0, 0.0)
    assert terms["hp_dealt"] == pytest.approx(1.0) and terms["hp_taken"] == pytest.approx(0.2)
    w = RewardWeights(knockout_dealt=0.1, hp_swing=0.5)
    shaped, terms = battle_rewards(battle, w, gamma=0.99)
    assert shaped == pytest.approx([0.1 + 0.5 * (0.5 - 0.2), 1.0 + 0.1 * 5 + 0.5 * 0.5])
    assert terms["shaping"] == pytest.approx(sum(shaped) - 1.0)
    [episode] = episodes_of([battle], w, gamma=0.99)
    assert episode.reward == pytest.approx(sum(shaped)) and episode.score == 1.0 and episode.frames == 2


def test_team_state_reads_both_teams_as_the_player_sees_them():
    from types import SimpleNamespace

    from training.pokemon.selfplay_player import team_state

    def mon(hp, fainted=False):
        return SimpleNamespace(current_hp_fraction=hp, fainted=fainted)

    battle = SimpleNamespace(team={str(i): mon(h, h == 0) for i, h in enumerate([1.0, 0.5, 0.0, 1.0, 1.0, 1.0])},
                             opponent_team={"a": mon(0.25), "b": mon(0.0, True)})  # 4 not seen yet: unhurt
    assert team_state(battle) == pytest.approx(_team(4.5 / 6, 4.25 / 6, 1, 1))


def test_window_features_are_the_turns_the_player_read():
    from training.pokemon.selfplay_player import window_features

    features = torch.arange(2 * 4 * 3, dtype=torch.float32).reshape(2, 4, 3)  # 2 windows of 4 turns, d = 3
    obs, opponent, valid = window_features(features, torch.tensor([4, 2]), window=2)
    assert torch.equal(obs, features[[0, 1], [3, 1]])
    assert torch.equal(opponent[0], features[0, 1:3]) and valid[0].all()
    assert torch.equal(opponent[1, 1], features[1, 0]) and valid[1].tolist() == [False, True]
    assert not opponent[1, 0].any()  # zeros before the battle's first turn


def test_each_battle_draws_its_own_opponent_reproducibly():
    import collections

    from training.league import LeagueConfig
    from training.pokemon.selfplay import battle_draws
    from training.selfplay import LeagueActor

    cfg = LeagueConfig(strong=("heuristic", "maxbp"), weak=("random",), snapshot_share=0.5, strong_share=0.3,
                       weak_share=0.2)
    state = {"snapshots": {"snapshot-000002": {}}, "ratings": {}, "games": {}}
    first, second = LeagueActor(cfg, state, seed=1), LeagueActor(cfg, state, seed=99)
    second.draw()  # its own stream moved on: keyed draws do not read it
    runs = [battle_draws(actor.draw, draw_seed=7, update=3, index=i, battles=40) for actor in (first, second)
            for i in (1, 0)]
    assert runs[0] == runs[2] and runs[1] == runs[3]  # the same key, the same draw, in any order
    assert runs[0] != runs[1]  # another runner, other draws
    counts = sum(runs[:2], collections.Counter())
    assert sum(counts.values()) == 80 and {o.kind for o in counts} == {"snapshot", "strong", "weak"}
    assert battle_draws(first.draw, draw_seed=8, update=3, index=1, battles=40) != runs[0]


@pytest.fixture
def one_torch_thread():
    """One intra-op thread while a test runs: its tensors are tiny, and the suite's processes share the cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("start", ["scratch", "slots"])
def test_a_trained_encoder_changes_and_resumes_exactly(start, tmp_path, one_torch_thread):
    """--encoder-lr: battles recorded through the learner's own ``select`` (with their encoder windows) train the
    encoder; the learner's recomputed features are the ones the player acted on (KL 0 on the first pass); a run
    stopped after 2 updates and resumed from its checkpointed state (encoder, its optimizer, the policy and its
    optimizer, through ``weights_only``) ends with the uninterrupted run's weights, and evaluation's player reads
    the trained encoder. From scratch, and fine-tuning a slot-head checkpoint: there the prior comes from the
    starting policy's frozen copy, which the checkpoint keeps unchanged beside the trained encoder, the first pass
    agrees with it everywhere, and evaluation's player gets it."""
    import io
    from types import SimpleNamespace

    from models.ppo_policy import RecurrentPolicy
    from training.checkpoints import live_identity, payload, read_checkpoint
    from training.fit import Learner
    from training.pokemon.players import load_player
    from training.pokemon.selfplay import PokemonSelfPlay, RecordedBattle, battles_to_rollout
    from training.pokemon.selfplay_player import SelfPlayPlayer, TeamState
    from training.ppo import sequence_loss, training_sequences, update
    from training.registry import POKEMON_OBSERVATION
    from training.selfplay import SelfPlayConfig

    init = {} if start == "scratch" else {"policy_init": _slot_checkpoint_untrained(tmp_path / "bc")}
    cfg = SelfPlayConfig.tiny(env="pokemon", out=str(tmp_path / "run"), encoder_preset="tiny", encoder_context=3,
                              encoder_lr=3e-3, reward_hp_swing=0.5, num_runners=1, battles_per_runner=2, seed=4,
                              **init)
    cpu = torch.device("cpu")

    def play(env, policy, u):
        """2 battles of 4 and 5 decisions, random turns, through SelfPlayPlayer.select."""
        g = torch.Generator().manual_seed(100 + u)
        me = SimpleNamespace(policy=policy.eval(), model=env.bc, context=env.context, states={}, steps={},
                             record=True, record_inputs=True, sampler=g, temperature=1.0, start=env.start)
        battles = []
        for b in range(2):
            tag, history = f"b{b}", []
            battle = SimpleNamespace(battle_tag=tag, team={}, opponent_team={})
            for _ in range(4 + b):
                history.append((torch.randint(1, env.bc.cfg.vocab_size, (87,), generator=g),
                                torch.randn(50, generator=g), torch.rand(9, generator=g) < 0.7))
                window = history[-env.context:]
                legal = torch.stack([w[2] for w in window])[None]
                legal[0, -1, 0] = True
                SelfPlayPlayer.select(me, battle, torch.stack([w[0] for w in window])[None],
                                      torch.stack([w[1] for w in window])[None], legal)
            battles.append(RecordedBattle(steps=me.steps.pop(tag), result=1.0 - 2 * b,
                                          end=TeamState(0.5, 0.25 * b, 1, 3)))
        return battles_to_rollout(battles, 4, cfg.options.reward_weights(), 0.99)

    def begin(extra=None, model=None, optimizer=None):
        env = PokemonSelfPlay(cfg)
        if extra is not None:
            env.restore(extra)
        ppo = dataclasses.replace(cfg.ppo(env.num_envs), rollout_steps=8, seq_len=4, num_minibatches=1, updates=3,
                                  epochs=1)
        torch.manual_seed(0)
        policy = RecurrentPolicy(env.policy_config())
        learner = Learner(policy, lr=ppo.lr, weight_decay=0.0, grad_clip=ppo.grad_clip, device=cpu)
        if model is not None:
            learner.load({"model": model, "optimizer": optimizer}, optimizer=True)
        return env, policy, learner, ppo, env.trainable_encoder(cpu, ppo)

    def train(env, policy, learner, ppo, encoder, updates):
        for u in updates:
            rollout = play(env, policy, u)
            assert rollout.inputs["tokens"].shape[2:] == (env.context, 87)
            assert (rollout.prior is None) == (start == "scratch")
            if u == 0:
                with torch.no_grad():
                    _, first = sequence_loss(policy, training_sequences(rollout, ppo), ppo, encoder=encoder.module)
                assert abs(float(first["approx_kl"])) < 1e-5
                if start == "slots":  # the policy is its prior at step 0
                    assert float(first["reference_agreement"]) == 1.0 and float(first["reference_kl"]) < 1e-6
            metrics = update(learner, rollout, ppo, u, torch.Generator().manual_seed(u), encoder=encoder)
            assert metrics["encoder_grad_norm"] > 0 and metrics["encoder_lr"] <= cfg.options.encoder_lr
        return {**{f"policy.{k}": v for k, v in policy.state_dict().items()},
                **{f"encoder.{k}": v for k, v in env.bc.state_dict().items()}}

    env, policy, learner, ppo, encoder = begin()
    initial = {k: v.clone() for k, v in env.bc.state_dict().items()}
    whole = train(env, policy, learner, ppo, encoder, range(3))
    assert not torch.equal(whole["encoder.encoder.mix.weight"], initial["encoder.mix.weight"])
    assert torch.equal(whole["encoder.actor.weight"], initial["actor.weight"])  # the heads are not on the path
    if start == "slots":  # the prior's source stays the starting checkpoint, apart from the trained encoder
        assert env.start is not env.bc and env.start.cfg.action_head == "slots"
        assert all(torch.equal(v, initial[k]) for k, v in env.start.state_dict().items())

    env, policy, learner, ppo, encoder = begin()
    train(env, policy, learner, ppo, encoder, range(2))
    buffer = io.BytesIO()
    state = payload(kind="pokemon_selfplay", model_config=env.policy_config(), train_config=cfg, step=2,
                    data=live_identity(POKEMON_OBSERVATION), model=policy, optimizer=learner.optimizer,
                    extra=env.extra())
    torch.save({**state, "rng": []}, buffer)
    saved = torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)  # as a checkpoint is read
    assert saved["extra"]["encoder"]["optimizer"]["state"]
    assert saved["model_config"]["prior"] == (start == "slots")
    resumed = train(*begin(saved["extra"], saved["model"], saved["optimizer"]), range(2, 3))
    assert whole.keys() == resumed.keys()
    assert all(torch.equal(whole[k], resumed[k]) for k in whole), [k for k in whole
                                                                   if not torch.equal(whole[k], resumed[k])]

    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "state.pt").write_bytes(buffer.getvalue())
    made = load_player(str(tmp_path / "ckpt"))
    played = made.args[0]  # the encoder evaluation's player reads
    assert all(torch.equal(v, saved["extra"]["encoder"]["model"][k]) for k, v in played.state_dict().items())
    if start == "scratch":
        assert saved["extra"]["start"] is None and made.keywords["start"] is None
    else:  # the starting policy, kept whole: the prior evaluation adds the policy's logits to is training's
        assert made.keywords["start"] is not played and not saved["extra"]["start"]["is_encoder"]
        assert all(torch.equal(v, initial[k]) for k, v in made.keywords["start"].state_dict().items())
        assert read_checkpoint(str(tmp_path / "ckpt")).build_config().prior


@needs_simulator
@pytest.mark.timeout(300)
def test_a_runner_in_a_format_with_teams_plays_its_own_exported_teams(bc_policy, one_torch_thread):
    """In gen1ou (a format that needs teams) the runner's learner and opponents play exported teams: the runner's
    own slice of the export at its team seed (another runner another slice), the learner's rotation and the
    opponents' apart, and the rotation carries on across updates rather than replaying the first teams."""
    from models.ppo_policy import RecurrentPolicy, RecurrentPolicyConfig
    from training.league import Opponent
    from training.pokemon.evaluate import export_teams
    from training.pokemon.selfplay import PokemonRunner, RewardWeights, episodes_of

    cfg = RecurrentPolicyConfig(d_obs=bc_policy.cfg.d_model, num_actions=9, opponent_window=4, d_strategy=16,
                                strategy_heads=2, d_lstm=16, prior=True)
    torch.manual_seed(0)
    policy = RecurrentPolicy(cfg)
    runner = PokemonRunner(bc_policy, 16, cfg, seed=3, draw_opponent=lambda key: Opponent("weak", "random"),
                           battle_format="gen1ou", num_teams=3, team_seed=41, index=1, start="encoder")
    try:
        learner_teams, opponent_teams = runner.teams
        assert learner_teams.packed + opponent_teams.packed == export_teams("gen1ou", 6, 41, first_index=6)
        assert learner_teams.packed != export_teams("gen1ou", 3, 41)  # runner 0's
        found = []
        for _ in range(2):  # two updates of one battle each
            recorded, _ = runner.collect(policy.state_dict(), battles=1)
            found += episodes_of(recorded, RewardWeights(), 0.99)
    finally:
        runner.close()
    assert len(found) == 2 and all(b.frames > 0 and b.reward in (-1.0, 0.0, 1.0) for b in found)
    assert learner_teams.next == 2 and opponent_teams.next == 2  # the second update played each rotation's 2nd


@needs_simulator
@pytest.mark.timeout(400)
@pytest.mark.parametrize("action_head", ["linear", "slots"])
def test_a_runner_plays_real_battles_as_the_checkpoint_and_they_train(action_head, bc_policy, tmp_path,
                                                                       one_torch_thread):
    """A fine-tune's runner on a real server: each decision's recorded prior is the offline-RL policy's own logits
    (``PokemonPolicy.forward``) on the window of real turns it read, linear head or slot head, and the learner
    chose from exactly those (its log-probabilities are the checkpoint's); the learner's first pass agrees with the
    prior everywhere; one update moves the policy away from it."""
    from models.ppo_policy import RecurrentPolicy, RecurrentPolicyConfig
    from training.checkpoints import read_checkpoint
    from training.fit import Learner
    from training.league import Opponent
    from training.pokemon.selfplay import PokemonRunner, RewardWeights, battles_to_rollout, episodes_of
    from training.ppo import PPOConfig, sequence_loss, training_sequences, update

    if action_head == "slots":
        checkpoint = read_checkpoint(_slot_checkpoint_untrained(tmp_path / "bc"))  # trained: the Ray run's test
        bc, context = checkpoint.build_model(), int(checkpoint.train_config["context"])
    else:
        bc, context = bc_policy, 16
    assert bc.cfg.action_head == action_head
    cfg = RecurrentPolicyConfig(d_obs=bc.cfg.d_model, num_actions=9, opponent_window=4, d_strategy=16,
                                strategy_heads=2, d_lstm=16, prior=True)
    torch.manual_seed(0)
    policy = RecurrentPolicy(cfg)
    draws = itertools.cycle([Opponent("weak", "random"), Opponent("strong", "maxbp")])
    runner = PokemonRunner(bc, context, cfg, seed=3, draw_opponent=lambda key: next(draws), record_inputs=True,
                           start="encoder")
    try:
        recorded, drawn = runner.collect(policy.state_dict(), battles=2)
    finally:
        runner.close()
    assert sum(drawn.values()) == 2
    battles = episodes_of(recorded, RewardWeights(), 0.99)
    assert len(battles) == 2 and all(b.reward in (-1.0, 0.0, 1.0) and b.frames > 0 for b in battles)
    assert all(b.score == (b.reward + 1) / 2 for b in battles)
    # each battle against its own draw, and each result filed under the opponent it was played against
    assert sorted(b.opponent.name for b in battles) == ["maxbp", "random"]
    assert [r.opponent for r in recorded] == [b.opponent for b in battles]
    steps = [step for r in recorded for step in r.steps]
    with torch.no_grad():
        for step in steps:  # the checkpoint itself on the turns the player read
            n = step["turns"]
            tokens, numeric = step["tokens"][None, :n].long(), step["numeric"][None, :n]
            everything = torch.ones(1, n, 9, dtype=torch.bool)
            theirs = bc(tokens, numeric, everything, torch.ones(1, n, dtype=torch.bool)).logits[0, -1]
            torch.testing.assert_close(step["prior"], theirs)
            chosen = torch.log_softmax(theirs.masked_fill(~step["legal"], float("-inf")), -1)[step["actions"]]
            torch.testing.assert_close(step["logp"], chosen)
    if action_head == "slots":  # the slot scores shape the prior: the linear read alone would choose otherwise
        assert any(not torch.allclose(bc.actor(bc.features(s["tokens"][None, :s["turns"]].long(),
                                                           s["numeric"][None, :s["turns"]],
                                                           torch.ones(1, s["turns"], dtype=torch.bool)))[0, -1],
                                      s["prior"]) for s in steps)
    rollout = battles_to_rollout(recorded, seq_len=8)
    assert rollout.mask.sum() == sum(b.frames for b in battles)  # its own decisions, nothing of the opponent
    assert rollout.episode_start[0].all() and rollout.prior.shape == (*rollout.mask.shape, 9)
    ppo = PPOConfig.test(num_envs=2, rollout_steps=rollout.actions.shape[0], seq_len=8, num_minibatches=1,
                         reference_kl=0.1)
    with torch.no_grad():  # the learner's first pass gives the log-probabilities the player acted with
        _, first = sequence_loss(policy, training_sequences(rollout, ppo), ppo)
    assert abs(float(first["approx_kl"])) < 1e-6
    assert float(first["reference_agreement"]) == 1.0 and abs(float(first["reference_kl"])) < 1e-6
    learner = Learner(policy, lr=ppo.lr, weight_decay=0.0, grad_clip=ppo.grad_clip, device=torch.device("cpu"))
    metrics = update(learner, rollout, ppo, 0, torch.Generator().manual_seed(0))
    assert math.isfinite(metrics["policy_loss"]) and math.isfinite(metrics["value_loss"])
    assert all(torch.isfinite(p).all() for p in policy.parameters())
    assert policy.actor.weight.abs().sum() > 0  # PPO moved the policy off its prior
    with torch.no_grad():
        _, after = sequence_loss(policy, training_sequences(rollout, ppo), ppo)
    assert float(after["reference_kl"]) > 0


@needs_simulator
@pytest.mark.timeout(600)
def test_a_short_selfplay_run_in_real_battles(bc_policy, ray_local, tmp_path):
    """``training/selfplay.py --env pokemon`` on an offline-RL checkpoint: runner actors with their own servers,
    the learner on Ray Train, the league; its checkpoint says what it holds and carries the league. The first
    update trains the critic alone, so the policy still chooses as the offline-RL policy (agreement 1, KL 0). With
    dense rewards and a trained encoder (--encoder-lr): the encoder moves in the second update and its optimizer is
    checkpointed, beside the starting policy the prior comes from; each battle's draw is counted."""
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
                                     critic_warmup_updates=1, encoder_lr=1e-3, reward_hp_swing=0.5,
                                     reward_knockout_dealt=0.1))
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
    assert {"win_rate_vs_heuristic", "win_rate_vs_maxbp", "win_rate_vs_random", "term_hp_dealt", "term_hp_taken",
            "term_shaping"} <= set(rows[0])
    assert all(sum(int(r[f"drawn_{o}"]) for o in ("snapshot", "heuristic", "maxbp", "random")) == 2 for r in rows)
    assert float(rows[0]["encoder_grad_norm"]) == 0.0 and float(rows[1]["encoder_grad_norm"]) > 0.0
    encoder = saved.extra["encoder"]
    assert encoder["optimizer"]["state"] and not torch.equal(encoder["model"]["encoder.mix.weight"],
                                                             bc_policy.encoder.mix.weight)
    # the prior's source, kept apart from the trained encoder: the offline-RL policy as it started
    assert saved.build_config().prior and not saved.extra["start"]["is_encoder"]
    assert all(torch.equal(v, saved.extra["start"]["model"][k]) for k, v in bc_policy.state_dict().items())


@needs_simulator
@pytest.mark.timeout(900)
def test_a_slot_head_fine_tune_resumes_and_its_checkpoint_plays(slot_checkpoint, ray_local, tmp_path):
    """``training/selfplay.py --env pokemon --policy-init`` a slot-head checkpoint: the run starts (the frozen
    encoder is the starting policy, so the checkpoint holds it once), agrees with it while the critic warms up,
    trains, resumes from its checkpoint (the prior restored with it), and evaluation plays the checkpoint (the
    ladder's player) with the same prior: battles finish with no fallback."""
    import csv

    from training.checkpoints import read_checkpoint
    from training.loop import latest_checkpoint
    from training.pokemon.evaluate import EvalConfig
    from training.pokemon.evaluate import run as evaluate
    from training.pokemon.players import load_player
    from training.pokemon.showdown_server import free_port
    from training.selfplay import SelfPlayConfig, run

    out = tmp_path / "run"
    common = dict(env="pokemon", policy_init=slot_checkpoint, out=str(out), num_runners=1, battles_per_runner=2,
                  snapshot_every=1, reference_kl=0.1, critic_warmup_updates=1)
    assert run(SelfPlayConfig.tiny(updates=2, **common)).error is None
    saved = read_checkpoint(latest_checkpoint(out))
    assert saved.step == 2 and saved.build_config().prior
    assert saved.extra["start"]["is_encoder"] and "model" not in saved.extra["start"]  # the encoder, held once
    assert any(torch.count_nonzero(v) for k, v in saved.model.items() if k.startswith("actor."))  # it trained
    assert run(SelfPlayConfig.tiny(updates=3, resume=True, **common)).error is None
    resumed = read_checkpoint(latest_checkpoint(out))
    assert resumed.step == 3 and resumed.extra["start"]["is_encoder"]
    with open(out / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["step"]) for r in rows] == [1, 2, 3]
    assert [float(r["policy_trained"]) for r in rows] == [0.0, 1.0, 1.0]
    assert float(rows[0]["reference_agreement"]) == 1.0 and float(rows[0]["reference_kl"]) < 1e-6
    assert all(math.isfinite(float(r["policy_loss"])) for r in rows)
    made = load_player(latest_checkpoint(out))
    assert made.keywords["start"] is made.args[0] and made.keywords["start"].cfg.action_head == "slots"
    rows = evaluate(EvalConfig.tiny(checkpoint=latest_checkpoint(out), port=free_port()), log=lambda _: None)
    assert rows[0]["battles"] == 2 and rows[0]["fallback_moves"] == 0


@needs_simulator
@pytest.mark.timeout(600)
def test_from_scratch_the_encoder_travels_with_the_checkpoint_and_it_plays(ray_local, tmp_path):
    """Without --policy-init: an untrained, frozen encoder of --encoder-preset; the checkpoint keeps it, evaluation
    plays the checkpoint from it alone (sampling its actions), and the report draws the snapshots' ratings."""
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
    # sampled, as the runners play it (greedy evaluation is the fine-tune test's)
    rows = evaluate(EvalConfig.tiny(checkpoint=last, port=free_port(), sample=True), log=lambda _: None)
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

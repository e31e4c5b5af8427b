"""PPO self-play on Ray in the Melee world model: a short real run (runner actors, the learner on Ray Train, the
league actor), its metrics per reward term and opponent kind, and a resume that keeps the league."""

from __future__ import annotations

import csv
import math

import pytest

from training.selfplay import SelfPlayConfig, run


def _rows(out):
    with open(out / "metrics.csv") as fh:
        return list(csv.DictReader(fh))


def test_a_short_run_then_a_resume_keeps_the_league(synthetic_frames, tmp_path):
    from training.checkpoints import read_checkpoint
    from training.loop import latest_checkpoint

    out = tmp_path / "run"
    first = run(SelfPlayConfig.tiny(shards=str(synthetic_frames), out=str(out), updates=4))
    assert first.error is None
    saved = read_checkpoint(latest_checkpoint(out))
    assert saved.kind == "melee_selfplay" and saved.step == 4 and saved.data.features == "melee_features"
    league = saved.extra["league"]
    assert sorted(league["snapshots"]) == ["snapshot-000002", "snapshot-000004"]
    games_before = league["games"]["learner"]
    assert games_before > 0  # every finished game was reported to the league

    rows = _rows(out)
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4]
    for column in ("term_damage_dealt", "term_damage_taken", "term_stocks_taken", "term_stocks_lost",
                   "win_rate_weak", "policy_loss", "value_loss", "entropy", "env_steps_per_s", "learner_rating"):
        assert column in rows[0], column
    assert all(math.isfinite(float(r["policy_loss"])) and float(r["env_steps_per_s"]) > 0 for r in rows)

    resumed = run(SelfPlayConfig.tiny(shards=str(synthetic_frames), out=str(out), updates=6, resume=True))
    assert resumed.error is None
    after = read_checkpoint(latest_checkpoint(out))
    assert after.step == 6
    snapshots = after.extra["league"]["snapshots"]
    assert sorted(snapshots) == ["snapshot-000002", "snapshot-000004", "snapshot-000006"]  # the first run's kept
    assert after.extra["league"]["games"]["learner"] > games_before  # the restored league went on counting
    assert [int(r["step"]) for r in _rows(out)] == [1, 2, 3, 4, 5, 6]


def test_the_fine_tune_settings_reach_ppo_and_need_a_starting_policy(tmp_path):
    cfg = SelfPlayConfig.from_flags(out=str(tmp_path), env="pokemon", policy_init="bc", reference_kl=0.05,
                                    critic_warmup_updates=10)
    ppo = cfg.ppo(num_envs=16)
    assert (ppo.reference_kl, ppo.critic_warmup_updates) == (0.05, 10)
    with pytest.raises(ValueError, match="--reference-kl needs"):
        SelfPlayConfig.from_flags(out=str(tmp_path), env="pokemon", reference_kl=0.05)  # from scratch: no start
    with pytest.raises(ValueError, match="--reference-kl needs"):
        SelfPlayConfig.from_flags(out=str(tmp_path), shards="s", reference_kl=0.05)


def test_the_temperature_reaches_ppo(tmp_path):
    assert SelfPlayConfig.from_flags(out=str(tmp_path), shards="s").ppo(num_envs=8).temperature == 1.0
    assert SelfPlayConfig.from_flags(out=str(tmp_path), shards="s", temperature=0.5).ppo(num_envs=8).temperature == 0.5
    with pytest.raises(ValueError, match="--temperature"):
        SelfPlayConfig.from_flags(out=str(tmp_path), shards="s", temperature=0.0)


def test_lr_and_entropy_weight_override_the_preset_only_where_set(tmp_path):
    from training.ppo import PPOConfig

    preset = PPOConfig.full()
    default = SelfPlayConfig.from_flags(out=str(tmp_path), shards="s").ppo(num_envs=8)
    assert (default.lr, default.entropy_weight) == (preset.lr, preset.entropy_weight)
    swept = SelfPlayConfig.from_flags(out=str(tmp_path), shards="s", lr=1e-3, entropy_weight=0.0).ppo(num_envs=8)
    assert (swept.lr, swept.entropy_weight) == (1e-3, 0.0)  # 0 is a weight, not "the preset's"
    with pytest.raises(ValueError, match="--entropy-weight"):
        SelfPlayConfig.from_flags(out=str(tmp_path), shards="s", entropy_weight=-0.01)


def test_each_environment_has_its_own_options_and_old_flat_configs_still_load(tmp_path, capsys):
    import dataclasses

    from pipelines.cli import parse_config
    from training.melee.selfplay import MeleeSelfPlayOptions
    from training.pokemon.selfplay import PokemonSelfPlayOptions

    cfg = SelfPlayConfig.from_flags(out=str(tmp_path), shards="s", max_frames=30, seed=3)
    assert cfg.options == MeleeSelfPlayOptions(shards="s", max_frames=30) and cfg.seed == 3
    assert SelfPlayConfig.from_dict(dataclasses.asdict(cfg)) == cfg
    # a checkpoint written when the config held every game's fields side by side
    flat = {**{k: v for k, v in dataclasses.asdict(cfg).items() if k != "options"},
            **dataclasses.asdict(cfg.options), **dataclasses.asdict(PokemonSelfPlayOptions())}
    assert SelfPlayConfig.from_dict(flat) == cfg
    with pytest.raises(ValueError, match=r"has no fields \['critic_warmup'\]"):  # a field of no config is refused
        SelfPlayConfig.from_dict({**dataclasses.asdict(cfg), "critic_warmup": 10})
    with pytest.raises(ValueError, match="--battles-per-runner is an option of --env pokemon"):
        SelfPlayConfig.from_flags(out=str(tmp_path), shards="s", battles_per_runner=2)
    with pytest.raises(SystemExit):
        parse_config(SelfPlayConfig, ["--help"])
    text = capsys.readouterr().out
    assert "options of --env melee" in text and "options of --env pokemon" in text
    assert text.index("\n  --max-frames") > text.index("options of --env melee")

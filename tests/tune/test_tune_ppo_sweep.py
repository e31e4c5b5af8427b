"""PPO self-play sweep: its config checks, the windowed metric against a per-game reference, trial resources from
the cluster's, and a tiny real sweep (Ray Tune + ASHA over self-play runs in an untrained world model on synthetic
games) that writes its table and figure."""

from __future__ import annotations

import csv
import json
import math
import random

import numpy as np
import pytest

from tune.ppo_sweep import METRIC, SweepConfig, selfplay_resources, window_metrics


def test_the_sweep_config_checks_its_axes_and_windows():
    with pytest.raises(ValueError, match="--lrs"):
        SweepConfig(shards="s", out="o", world_model="untrained", lrs=[0.0])
    with pytest.raises(ValueError, match="--entropy-weights"):
        SweepConfig(shards="s", out="o", world_model="untrained", entropy_weights=[-0.1])
    with pytest.raises(ValueError, match="each value once"):
        SweepConfig(shards="s", out="o", world_model="untrained", lrs=[1e-3, 1e-3])
    with pytest.raises(ValueError, match="shorter than a game"):  # 128 frames are 2 updates of 64 steps
        SweepConfig(shards="s", out="o", world_model="untrained", window_updates=1)
    with pytest.raises(ValueError, match="--grace-updates"):
        SweepConfig(shards="s", out="o", world_model="untrained", grace_updates=50)
    with pytest.raises(ValueError, match="not both 0"):
        SweepConfig(shards="s", out="o", world_model="untrained", strong_share=0.0, weak_share=0.0,
                    snapshot_share=1.0)
    with pytest.raises(ValueError, match="sum to 1"):  # self-play's own check, before any Ray starts
        SweepConfig(shards="s", out="o", world_model="untrained", snapshot_share=0.9)
    tiny = SweepConfig.tiny(shards="s", out="o")
    cfg = tiny.selfplay_config(1e-2, 0.0, "o/trials/x", {})
    ppo = cfg.ppo(cfg.num_runners * cfg.options.envs_per_runner)
    assert (ppo.lr, ppo.entropy_weight, ppo.updates) == (1e-2, 0.0, tiny.updates)


def test_the_cli_lists_every_option(capsys):
    import dataclasses

    from tune.ppo_sweep import main

    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    for f in dataclasses.fields(SweepConfig):
        assert "--" + f.name.replace("_", "-") in text, f.name


def _episode(kind: str, reward: float, score: float):
    from training.league import Opponent
    from training.selfplay_base import Episode

    terms = {"damage_dealt": 0.0, "damage_taken": 0.0, "stocks_taken": 0, "stocks_lost": 0}
    return Episode(opponent=Opponent(kind, {"snapshot": "snapshot-000002", "strong": "replay",
                                            "weak": "random"}[kind]),
                   side=0, frames=12, terms=terms, reward=reward, score=score, truncated=True)


@pytest.mark.parametrize("seed", range(3))
def test_the_window_pools_the_scripted_games_of_its_updates(seed):
    """Self-play's per-update lines, pooled: the same as the mean over the scripted games themselves, whatever
    updates they fell in (updates without any included); the snapshot games never count."""
    from training.melee.selfplay import RewardTerms
    from training.selfplay import episode_metrics

    rng = random.Random(seed)
    updates = [[_episode(rng.choice(["snapshot", "strong", "weak"]), rng.uniform(-1, 1), rng.choice([0, 0.5, 1]))
                for _ in range(rng.randint(0, 5))] for _ in range(6)]
    lines = [episode_metrics(games, tuple(RewardTerms.__dataclass_fields__), "stocks_taken") for games in updates]
    got = window_metrics(lines)
    scripted = [e for games in updates for e in games if e.opponent.kind != "snapshot"]
    assert got["scripted_games"] == len(scripted)
    if scripted:
        assert got[METRIC] == pytest.approx(sum(e.reward for e in scripted) / len(scripted))
        assert got["scripted_win_rate"] == pytest.approx(sum(e.score for e in scripted) / len(scripted))
    assert math.isnan(window_metrics(lines[:0])[METRIC])


def test_trial_resources_leave_room_for_the_trial_itself():
    resources, concurrent = selfplay_resources({"CPU": 2.0}, 0, num_runners=2)
    assert concurrent == 1 and not resources["use_gpu"]
    # the learner, two runners and the Tune trial's 0.01 fit on 2 CPUs (0.5 + 2 × 0.75 + 0.01 would not)
    assert resources["cpus_per_worker"] + 2 * resources["cpus_per_runner"] + 0.01 <= 2.0
    resources, concurrent = selfplay_resources({"CPU": 32.0, "GPU": 4.0}, 0, num_runners=2)
    assert resources["use_gpu"] and concurrent == 4 and resources["cpus_per_runner"] == 1.0  # one thread each


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_tiny_sweep_writes_its_table_and_figure(synthetic_frames, tmp_path):
    from tune.ppo_sweep import run

    sweep = SweepConfig.tiny(shards=str(synthetic_frames), out=str(tmp_path / "sweep"))
    grid = run(sweep, log=lambda *_: None)
    assert len(grid) == 2 and not grid.errors
    with open(tmp_path / "sweep" / "ppo_sweep.csv") as fh:
        rows = list(csv.DictReader(fh))
    trials: dict = {}
    for r in rows:
        trials.setdefault((float(r["lr"]), float(r["entropy_weight"])), []).append(r)
    assert set(trials) == {(1e-2, 0.05), (1e-4, 0.05)}
    for key, history in trials.items():
        updates = [int(r["update"]) for r in history]
        assert updates == list(range(1, len(updates) + 1)), key  # every update reached Tune
        last = updates[-1]
        # ASHA decides at its rungs (4, then 8): a stopped trial's last report is the first rung's
        assert last in (sweep.grace_updates, sweep.updates), key
        assert all(r["stopped_early"] == str(last < sweep.updates) for r in history)
        # from the first finished game (12 frames: update 2) each window holds scripted games
        assert all(math.isfinite(float(r[METRIC])) and int(r["scripted_games"]) > 0 for r in history[2:]), key
    # ASHA's first rung replayed from the table: on 2 CPUs the trials run one at a time in grid order (the table's),
    # so each one meets, at update 4, the values the trials before it had there; below their median it stops
    recorded, expected = [], set()
    for key, history in trials.items():
        value = float(history[sweep.grace_updates - 1][METRIC])
        if recorded and value < np.nanpercentile(recorded, (1 - 1 / sweep.reduction_factor) * 100):
            expected.add(key)
        recorded.append(value)
    stopped = {k for k, h in trials.items() if int(h[-1]["update"]) < sweep.updates}
    assert stopped == expected
    # the first trial always goes on; the runs are seeded alike, and here the lr 0.01 trials (first in the grid) lead
    assert stopped and len(stopped) < 2
    table = (tmp_path / "sweep" / "ppo_sweep.md").read_text()
    trial_lines = [line for line in table.splitlines() if line.startswith("| 0.0")]
    assert len(trial_lines) == 2 and "| no |" in trial_lines[0]  # the trial that ran longest first
    assert (tmp_path / "sweep" / "ppo_sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # each trial's config on the run's storage: Tune's params and the resolved self-play config
    params = list((tmp_path / "sweep" / "tune" / "ray" / "sweep").glob("*/params.json"))
    assert len(params) == 2 and {json.loads(p.read_text())["lr"] for p in params} == {1e-4, 1e-2}
    saved = json.loads((tmp_path / "sweep" / "trials" / "lr0.01-ent0.05" / "selfplay_config.json").read_text())
    assert (saved["lr"], saved["entropy_weight"], saved["updates"]) == (1e-2, 0.05, 8)


def test_a_sweep_never_reuses_a_folder(tmp_path):
    from tune.ppo_sweep import run

    (tmp_path / "tune").mkdir()
    with pytest.raises(FileExistsError, match="never overwritten"):
        run(SweepConfig.tiny(shards="unused", out=str(tmp_path)))

"""The data flywheel, one tiny round: the teacher's battles are parsed and trained on, the policy's own battles are
parsed into a new version that names the weights that played, and round 1 trains on both versions; another seed
starts from the same teacher versions."""

from __future__ import annotations

import csv
import json

import pytest
from conftest import needs_simulator

from shards_schema.reader import ShardIntegrityError, open_version
from training.checkpoints import read_checkpoint
from training.pokemon.flywheel import FlywheelConfig, run

pytestmark = needs_simulator


def test_config_checks():
    with pytest.raises(ValueError, match="generator's players"):
        FlywheelConfig(out="x", port=1, teacher="nobody")
    with pytest.raises(ValueError, match="even"):
        FlywheelConfig(out="x", port=1, ladder_battles=3)
    with pytest.raises(ValueError, match="--policy-objective"):
        FlywheelConfig(out="x", port=1, policy_objective="dagger")


def test_one_round_of_the_flywheel(ray_local, tmp_path):
    rows = run(FlywheelConfig.tiny(out=str(tmp_path), port=1, objective="bc", policy_objective="exp_adv"),
               log=lambda *_: None)
    assert [r["round"] for r in rows] == [0, 1]
    teacher_version = rows[0]["versions"]
    assert rows[1]["versions"].split() == [teacher_version, rows[1]["versions"].split()[1]]
    shards = tmp_path / "shards" / "pokemon_turns"
    policy_version = open_version(str(shards / rows[1]["versions"].split()[1]))
    config = policy_version.manifest.config
    # round 1's battles were played by round 0's weights, named by their bytes
    assert config["p1_checkpoint"]["sha256"] == rows[0]["checkpoint_sha256"]
    counts = policy_version.manifest.counts
    assert config["p2"] == "random" and counts.written == counts.inputs > 0
    ckpt = read_checkpoint(rows[1]["checkpoint"])
    assert [ckpt.data.version, *ckpt.data.extra_versions] == rows[1]["versions"].split()  # trained on both
    # BC on the teacher, offline RL on the policy's own battles
    assert [read_checkpoint(r["checkpoint"]).train_config["objective"] for r in rows] == ["bc", "exp_adv"]
    with open(tmp_path / "flywheel.csv") as f:
        assert [r["checkpoint_sha256"] for r in csv.DictReader(f)] == [r["checkpoint_sha256"] for r in rows]
    assert json.dumps(rows)  # plain values only
    # another seed on the same teacher data: round 0 trains on the given version, no battles played
    again = run(FlywheelConfig.tiny(out=str(tmp_path / "seed1"), port=1, rounds=0, seed=1,
                                    teacher_versions=[str(shards / teacher_version)]), log=lambda *_: None)
    assert again[0]["versions"] == teacher_version and again[0]["played_by"] == "heuristic"
    assert not (tmp_path / "seed1" / "shards").exists()
    assert read_checkpoint(again[0]["checkpoint"]).train_config["seed"] == 1
    with pytest.raises(ShardIntegrityError, match="no manifest.json"):
        run(FlywheelConfig.tiny(out=str(tmp_path / "bad"), port=1, teacher_versions=[str(tmp_path / "nothing")]),
            log=lambda *_: None)


def test_a_dagger_round_labels_the_policys_decisions_and_trains_on_the_labels(ray_local, tmp_path):
    rows = run(FlywheelConfig.tiny(out=str(tmp_path), port=1, dagger=True, sides=["p1"]), log=lambda *_: None)
    shards = tmp_path / "shards" / "pokemon_turns"
    teacher_version, policy_version = (open_version(str(shards / v)) for v in rows[1]["versions"].split())
    assert teacher_version.manifest.config.get("p1_teacher") is None
    assert policy_version.manifest.config["p1_teacher"] == "heuristic"
    labels = policy_version.table(columns=["player_side", "teacher_action"]).to_pylist()
    labelled = {side: [r["teacher_action"] >= 0 for r in labels if r["player_side"] == side] for side in ("p1", "p2")}
    # the policy's decisions carry the teacher's choice (-1 only where a choice maps to no action: a forced move, a
    # switch past the action layout), the league's none
    assert sum(labelled["p1"]) >= len(labelled["p1"]) / 2 and not any(labelled["p2"])
    assert read_checkpoint(rows[0]["checkpoint"]).train_config["label"] == "action"  # round 0 has no labels
    assert read_checkpoint(rows[1]["checkpoint"]).train_config["label"] == "teacher"

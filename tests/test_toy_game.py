"""The definition of "the core knows no game": a third game, defined only under tests/ (``tests/tictactoe.py``),
registered once, is parsed into a versioned shard by the real job, trained and resumed by the real ``fit()``, and
plays self-play through self-play's core. Nothing outside tests/ names it."""

from __future__ import annotations

import dataclasses
import random
import subprocess
from pathlib import Path

import pytest
import tictactoe
import torch

from pipelines.parse_replays import ParseConfig, run
from shards_schema.reader import open_version
from training.checkpoints import read_checkpoint
from training.fit import fit
from training.loop import latest_checkpoint

REPO = Path(__file__).resolve().parents[1]
CODE_FOLDERS = ("pipelines", "shards_schema", "training", "models", "tune", "tools", "benchmarks", "notebooks")


@pytest.fixture(scope="module")
def toy_game(ray_local):
    tictactoe.register()
    # The workers get the toy game's classes inside the objects the driver hands them (the source, the recipe, the
    # model kind, the self-play environment); by value, as a game whose package is not installed on the nodes would
    # travel.
    ray_local.cloudpickle.register_pickle_by_value(tictactoe)


@pytest.fixture(scope="module")
def toy_version(toy_game, tmp_path_factory):
    replays = tmp_path_factory.mktemp("ttt")
    rng = random.Random(7)
    for i in range(24):
        (replays / f"game{i:02d}.ttt").write_text(tictactoe.write_game(rng))
    (replays / "broken.ttt").write_text("tictactoe 1\nX 4\nO 4\nresult O\n")  # O plays an occupied cell
    (replays / "notes.txt").write_text("not a replay")
    out = tmp_path_factory.mktemp("out")
    cfg = ParseConfig(source="tictactoe", input=str(replays), out=str(out), shard_size_mb=0.001,
                      progress_every_s=60.0)
    first = run(cfg, log=lambda line: None)
    second = run(cfg, log=lambda line: None)
    return first, second


def test_the_real_job_parses_a_game_the_core_does_not_name(toy_version):
    first, second = toy_version
    version = open_version(first.uri)
    m = version.manifest
    assert (m.schema_name, m.source, m.counts.inputs, m.counts.written) == ("tictactoe", "tictactoe", 26, 24)
    assert m.counts.quarantined == {"invalid_record": 1} and m.counts.filtered == {"not_a_replay": 1}
    assert len(m.files) > 1  # a tiny shard size: several shards, one index
    index = version.index().to_pylist()
    moves = version.table()
    assert len(index) == 24 and sum(r["num_rows"] for r in index) == moves.num_rows == m.counts.rows
    quarantine = version.quarantine().to_pylist()
    assert sorted((q["input_id"], q["kind"], q["reason"]) for q in quarantine) == [
        ("broken.ttt", "quarantined", "invalid_record"), ("notes.txt", "filtered", "not_a_replay")]
    assert second.reused and second.uri == first.uri  # the same inputs and code: the same version


def test_fit_trains_and_resumes_the_toy_game(toy_version, tmp_path):
    """Resuming exactly is fit()'s, tested with the real games (tests/training/test_train_faults.py); here: a game
    fit() has never heard of trains, checkpoints with its own model family, and goes on from its checkpoint."""
    cfg = tictactoe.tiny_train_config(shards=toy_version[0].uri, out=str(tmp_path / "run"), steps=3)
    first = fit(cfg, tictactoe.TicTacToeRecipe)
    assert first.metrics["step"] == 3
    start = read_checkpoint(latest_checkpoint(cfg.out))
    resumed = fit(dataclasses.replace(cfg, steps=6, resume=True), tictactoe.TicTacToeRecipe)
    assert resumed.metrics["step"] == 6
    end = read_checkpoint(latest_checkpoint(cfg.out))
    assert (end.kind, end.data.dataset, end.data.features, start.step, end.step) == (
        "tictactoe_policy", "tictactoe", "tictactoe_board", 3, 6)
    assert end.optimizer["state"][0]["step"].item() == 6  # the optimizer went on from the checkpoint's state
    assert any(not torch.equal(end.model[k], start.model[k]) for k in end.model)
    assert isinstance(end.build_model(), tictactoe.TinyPolicy)


def test_selfplay_plays_and_resumes_the_toy_game(toy_game, tmp_path):
    """Self-play's core on a game it has never heard of: runner actors, the league, a checkpoint with the league in
    it, a resume that goes on from it; the toy game's options are a --help section of their own."""
    from training.selfplay import SelfPlayConfig, run
    from training.selfplay_envs import options_classes

    assert options_classes()["tictactoe"] is tictactoe.TicTacToeSelfPlayOptions
    cfg = SelfPlayConfig.tiny(env="tictactoe", out=str(tmp_path / "sp"), updates=2, num_runners=1)
    assert run(cfg).error is None
    first = read_checkpoint(latest_checkpoint(cfg.out))
    assert (first.kind, first.step, first.data.features) == ("tictactoe_selfplay", 2, "tictactoe_board")
    assert first.extra["league"]["games"]["learner"] > 0 and first.extra["league"]["snapshots"]
    assert run(dataclasses.replace(cfg, updates=3, resume=True)).error is None
    end = read_checkpoint(latest_checkpoint(cfg.out))
    assert end.step == 3 and end.extra["league"]["games"]["learner"] > first.extra["league"]["games"]["learner"]


def test_no_code_outside_tests_names_the_toy_game():
    """The docs may point to it as the worked example; no code folder may know it."""
    tracked = subprocess.run(["git", "grep", "-il", "tictactoe", "--", *CODE_FOLDERS], cwd=REPO, capture_output=True,
                             text=True)
    assert tracked.returncode in (0, 1), tracked.stderr
    assert tracked.stdout.split() == []

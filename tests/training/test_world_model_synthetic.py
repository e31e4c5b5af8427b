"""World-model training and play on synthetic ``.slp`` games: the smoke tests that need no ``../shared`` (a user's clone
without the shared replays runs them; ``tests/training/test_world_model.py`` and
``tests/training/test_world_model_play.py`` use the real replays). Only the public entry points: ``run(cfg)`` of
``training/melee/world_model.py`` and ``training/melee/world_model_play.py``, their configs' ``tiny()``."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import torch

from training.melee.world_model import WorldModelTrainConfig
from training.melee.world_model import run as train
from training.melee.world_model_play import PlayConfig
from training.melee.world_model_play import run as play


@pytest.fixture(scope="module")
def synthetic_frames(three_synthetic_games):
    """A melee_frames shard version of 3 synthetic games (``--source slp`` without ``--input``; the session's, see
    tests/conftest.py): one held out for validation (``validation_share`` rounds up to one game), two to train."""
    return three_synthetic_games


@pytest.fixture(scope="module")
def trained(synthetic_frames, tmp_path_factory):
    """A tiny world model trained 4 steps, then resumed to 8: (run folder, first result, resumed result)."""
    out = tmp_path_factory.mktemp("run")
    cfg = dict(shards=str(synthetic_frames), out=str(out), log_every=1, checkpoint_every=2, eval_every=4)
    first = train(WorldModelTrainConfig.tiny(steps=4, **cfg))
    resumed = train(WorldModelTrainConfig.tiny(steps=8, resume=True, **cfg))
    return out, first, resumed


def _metrics(out: Path) -> list[dict]:
    with open(out / "metrics.csv") as fh:
        return list(csv.DictReader(fh))


def test_train_on_synthetic_games_and_resume(trained):
    out, first, resumed = trained
    assert first.error is None and resumed.error is None
    assert (Path(first.checkpoint.path) / "state.pt").is_file()
    assert (Path(resumed.checkpoint.path) / "state.pt").is_file()
    assert first.metrics["step"] == 4 and resumed.metrics["step"] == 8
    rows = _metrics(out)
    steps = [int(r["step"]) for r in rows]
    # the resumed run continues at step 5: every step logged once, none repeated or skipped
    assert steps == list(range(1, 9)), steps
    losses = [float(r["loss_total"]) for r in rows]
    assert all(math.isfinite(x) and x > 0 for x in losses), losses
    with open(out / "eval.csv") as fh:
        evaluated = list(csv.DictReader(fh))
    assert [int(r["step"]) for r in evaluated] == [4, 8]
    assert all(math.isfinite(float(r["val_loss_total"])) for r in evaluated), evaluated
    assert all(0.0 <= float(r["val_action_acc"]) <= 1.0 for r in evaluated), evaluated


def _check_play(published, rows, cfg: PlayConfig):
    from shards_schema.reader import open_version

    rollout = open_version(published.path)
    index = rollout.index().to_pylist()
    assert len(index) == 1 and index[0]["num_rows"] == cfg.seed_frames + cfg.frames, index
    assert rollout.manifest.counts.rows == cfg.seed_frames + cfg.frames
    assert sorted({(r.predictor, r.horizon) for r in rows}) == sorted(
        (p, h) for p in ("copy last frame", rows[0].predictor) for h in cfg.horizons)
    for r in rows:
        assert r.frames > 0, r
        assert all(math.isfinite(v) for v in (r.position_mae, r.percent_mae, r.action_acc, r.stocks_acc)), r
        assert 0.0 <= r.action_acc <= 1.0 and 0.0 <= r.stocks_acc <= 1.0, r


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)  # play's --torch-threads sets this process's count


def test_play_the_trained_checkpoint(synthetic_frames, trained, tmp_path, one_thread):
    _, _, resumed = trained
    from shards_schema.reader import sha256_file

    # the checkpoint folder, as the trainer prints it
    cfg = PlayConfig(checkpoint=resumed.checkpoint.path, shards=str(synthetic_frames), out=str(tmp_path),
                     seed_frames=20, frames=40, horizons=[10, 40])
    published, rows = play(cfg, log=lambda *_: None)
    _check_play(published, rows, cfg)
    state = Path(resumed.checkpoint.path) / "state.pt"
    assert published.manifest.source_revision == f"sha256:{sha256_file(state)}"


def test_play_untrained(synthetic_frames, tmp_path, one_thread):
    cfg = PlayConfig.tiny(shards=str(synthetic_frames), out=str(tmp_path), seed_frames=20, frames=30,
                          horizons=[5, 30], controllers="random")
    published, rows = play(cfg, log=lambda *_: None)
    _check_play(published, rows, cfg)
    assert published.manifest.source_revision == "untrained-tiny-seed0"

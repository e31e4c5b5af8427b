"""Melee world model: features from real shards, learning against the copy-last-frame baseline, step() equal to
forward, Ray Train smoke and exact resume."""

from __future__ import annotations

import csv
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow.compute as pc
import pytest
import torch
from conftest import shared_data

from models.world_model import WorldModel, WorldModelConfig
from pipelines.melee.features import featurize
from shards_schema.melee_features import CAT_INDEX, CONT_INDEX
from training.melee.windows import LoadFrameWindows, window_specs
from training.melee.world_model import WorldModelTrainConfig, evaluate, run, train_step, validation_windows
from training.melee.world_model_losses import split_window


@pytest.fixture(scope="module")
def shared_frames(ray_local, tmp_path_factory):
    """A melee_frames shard version of the shared real replays (all of them: no length or CPU filter)."""
    from pipelines.melee.source import SlpConfig
    from pipelines.parse_replays import ParseConfig
    from pipelines.parse_replays import run as parse

    root = shared_data("melee", "slp")
    out = tmp_path_factory.mktemp("melee")
    return parse(ParseConfig(source="slp", input=str(root), out=str(out),
                             options=SlpConfig(min_frames=0, allow_cpu=True))).path


def test_features_follow_the_shards(shared_frames):
    from shards_schema.reader import open_version

    version = open_version(shared_frames)
    table = version.table()
    features = featurize(table)
    x = pc.struct_field(table.column("p0"), ["leader", "x"]).to_numpy()
    assert np.allclose(features["cont"][:, CONT_INDEX["p0.x"]] * 100.0, x, atol=1e-3)
    action = pc.struct_field(table.column("p1"), ["leader", "action_state"]).to_numpy()
    assert (features["cat"][:, CAT_INDEX["p1.action"]] == np.minimum(action + 1, 1023)).all()
    hitlag_valid = pc.struct_field(table.column("p0"), ["leader", "hitlag"]).is_valid().to_numpy(zero_copy_only=False)
    assert (features["cont_valid"][:, CONT_INDEX["p0.hitlag"]] == hitlag_valid).all()  # null stays "not recorded"
    assert not hitlag_valid.all() and hitlag_valid.any()
    assert np.isfinite(features["ctrl"]).all() and np.abs(features["ctrl"]).max() <= 1.0


def _windows(version_path, context, seed=0):
    from shards_schema.reader import open_version

    specs = window_specs(open_version(version_path), context, seed)
    columns = {k: specs.column(k).to_numpy() for k in specs.column_names}
    columns["window"] = np.arange(specs.num_rows)
    return LoadFrameWindows(str(version_path), context)(columns)


def test_tiny_model_beats_copy_last_frame(shared_frames):
    """Trained briefly on the shared replays, the tiny Mamba-2 model's loss falls below the copy-last-frame
    baseline's (a baseline calibrated on the very frames it is scored on)."""
    torch.manual_seed(0)
    windows = _windows(shared_frames, 32)
    model = WorldModel(WorldModelConfig.preset("tiny"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    rng = np.random.default_rng(0)
    n = len(windows["valid"])
    before = evaluate(model, windows, "cpu")
    for step in range(120):
        pick = rng.choice(n, 16, replace=False)
        batch = {k: torch.as_tensor(v[pick]) for k, v in windows.items()}
        parts = train_step(model, batch, sampled=step % 4 == 3)
        optimizer.zero_grad()
        parts["total"].backward()
        optimizer.step()
    after = evaluate(model, windows, "cpu")
    assert after["val_loss_total"] < before["val_loss_total"]
    assert after["val_loss_total"] < after["copy_loss_total"], after


@pytest.mark.parametrize("backbone", ["mamba2", "mlp"])
def test_step_equals_forward(shared_frames, backbone):
    torch.manual_seed(0)
    windows = _windows(shared_frames, 24)
    batch = {k: torch.as_tensor(v[:3]) for k, v in windows.items()}
    current, ctrl, stage, _ = split_window(batch)
    model = WorldModel(WorldModelConfig.preset("tiny", backbone=backbone)).eval().double()
    current.cont, current.binary, ctrl = current.cont.double(), current.binary.double(), ctrl.double()
    with torch.no_grad():
        full, _ = model(current, ctrl, stage)
        prime = 10
        _, cache = model(_slice(current, 0, prime), ctrl[:, :prime], stage[:, :prime])
        for t in range(prime, current.cat.shape[1]):
            one, cache = model.step(_slice(current, t, t + 1), ctrl[:, t:t + 1], stage[:, t:t + 1], cache)
            assert torch.allclose(one.cont_delta[:, 0], full.cont_delta[:, t], atol=1e-8)
            assert torch.allclose(one.cat_logits[0][:, 0], full.cat_logits[0][:, t], atol=1e-8)


def _slice(state, a, b):
    from models.world_model import FrameState

    return FrameState(cont=state.cont[:, a:b], binary=state.binary[:, a:b], cat=state.cat[:, a:b],
                      cont_valid=state.cont_valid[:, a:b])


def _losses(out):
    with open(out / "metrics.csv") as fh:
        return {int(r["step"]): float(r["loss_total"]) for r in csv.DictReader(fh)}


def test_ray_train_smoke_and_exact_resume(shared_frames, tmp_path):
    cfg = dict(shards=str(shared_frames), log_every=1, scheduled_sampling=0.5)
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    # the uninterrupted run beside the other two, from a thread (Ray Train's fit() takes its SIGINT handler in the
    # main thread only): most of a tiny run is its actors' start-up. Each records under its own folder.
    with ThreadPoolExecutor(1) as pool:
        uninterrupted = pool.submit(run, WorldModelTrainConfig.tiny(out=str(straight), steps=8, **cfg))
        run(WorldModelTrainConfig.tiny(out=str(resumed), steps=4, **cfg))
        run(WorldModelTrainConfig.tiny(out=str(resumed), steps=8, resume=True, **cfg))
        result = uninterrupted.result()
    assert result.checkpoint is not None
    with open(straight / "eval.csv") as fh:
        evaluated = list(csv.DictReader(fh))
    assert evaluated and 0.0 <= float(evaluated[-1]["val_action_acc"]) <= 1.0
    assert 0.0 <= float(evaluated[-1]["copy_action_acc"]) <= 1.0
    a, b = _losses(straight), _losses(resumed)
    assert all(a[s] == a[s] for s in a)  # no NaN
    assert [round(a[s], 6) for s in range(5, 9)] == [round(b[s], 6) for s in range(5, 9)]


def test_validation_windows_are_held_out_games(shared_frames):
    from shards_schema.reader import open_version
    from training.melee.windows import split_games

    train, val = split_games(open_version(shared_frames), 0.2, seed=0)
    assert val and not set(train) & set(val)
    windows = validation_windows(str(shared_frames), 32, val, limit=1000)
    index = open_version(shared_frames).index().to_pylist()
    expected = sum(max(1, -(-(r["num_rows"] - 1) // 32)) for r in index if r["game_id"] in val)
    assert len(windows["valid"]) == expected


def test_run_stream_resumes_where_it_stopped(shared_frames):
    """The trainer's stream (its recipe's epochs through ``window_stream``), cut at a resume step, is the rest of
    the uninterrupted stream; each epoch has its own order and phase; held-out games never appear."""
    from shards_schema.reader import open_version
    from training.melee.world_model import WorldModelRecipe
    from training.windows import window_stream

    version = open_version(shared_frames)
    cfg = WorldModelTrainConfig.tiny(shards=str(shared_frames), out="-", validation_share=0.2)
    recipe = WorldModelRecipe(cfg, WorldModelRecipe.make_plan(cfg, version))
    per_epoch = recipe.epoch_windows(version, 0).num_rows
    straight = window_stream(lambda e: recipe.epoch_windows(version, e), 0, 3 * per_epoch)
    resumed = window_stream(lambda e: recipe.epoch_windows(version, e), per_epoch + 5, 2 * per_epoch - 5)
    assert straight.slice(per_epoch + 5).to_pylist() == resumed.to_pylist()
    first, second = straight.slice(0, per_epoch), straight.slice(per_epoch, per_epoch)
    assert first.column("row_start").to_pylist() != second.column("row_start").to_pylist()
    held_out = [r for r in version.index().to_pylist() if r["game_id"] in set(recipe.plan["val_games"])]
    assert held_out
    held_rows = {(r["file"], s) for r in held_out for s in range(r["row_start"], r["row_start"] + r["num_rows"])}
    assert not any((w["file"], w["row_start"]) in held_rows for w in straight.to_pylist())


def test_train_share_keeps_a_nested_subset_and_the_same_held_out_games(shared_frames):
    """The data axis of a sweep: a smaller --train-share trains on a subset of a larger one's games (the same
    seeded order), and the validation games do not move."""
    from shards_schema.reader import open_version
    from training.melee.world_model import WorldModelRecipe

    version = open_version(shared_frames)

    def trained_games(share: float) -> tuple[set, list]:
        cfg = WorldModelTrainConfig.tiny(shards=str(shared_frames), out="-", validation_share=0.2, train_share=share)
        recipe = WorldModelRecipe(cfg, WorldModelRecipe.make_plan(cfg, version))
        files = {(w["file"], w["row_start"]) for w in recipe.epoch_windows(version, 0).to_pylist()}
        games = {r["game_id"] for r in version.index().to_pylist()
                 if any(f == r["file"] and r["row_start"] <= s < r["row_start"] + r["num_rows"] for f, s in files)}
        return games, recipe.plan["val_games"]

    (half, val_half), (full, val_full) = trained_games(0.5), trained_games(1.0)
    assert val_half == val_full and not (full & set(val_full))
    assert half < full and len(half) == max(1, round(len(full) * 0.5))
    with pytest.raises(ValueError, match="--train-share"):
        WorldModelTrainConfig.tiny(shards="s", out="o", train_share=0.0)


def test_d_model_sets_the_width(shared_frames):
    from shards_schema.reader import open_version
    from training.melee.world_model import WorldModelRecipe

    cfg = WorldModelTrainConfig.tiny(shards=str(shared_frames), out="-", d_model=32)
    recipe = WorldModelRecipe(cfg, WorldModelRecipe.make_plan(cfg, open_version(shared_frames)))
    small = WorldModel(recipe.model_config())
    assert recipe.model_config().d_model == 32
    assert sum(p.numel() for p in small.parameters()) < sum(p.numel() for p in WorldModel(
        WorldModelConfig.preset("tiny")).parameters())

"""The shared training loop's pieces that need no Ray: the Learner's step, its compiled model keeping the plain
parameter names (checkpoints load either way), and a trainer config's shared checks."""

from __future__ import annotations

import pytest
import torch

from training.fit import Learner, Progress, TrainerConfig


def _loss(model, batch):
    out = model(batch["x"])
    loss = ((out - batch["y"]) ** 2).mean()
    return loss, {"mse": loss, "rows": 4}


def test_a_learner_step_lowers_the_loss_and_returns_detached_parts():
    torch.manual_seed(0)
    learner = Learner(torch.nn.Linear(3, 1), lr=0.1, weight_decay=0.0, grad_clip=1.0, device=torch.device("cpu"))
    batch = {"x": torch.randn(4, 3), "y": torch.randn(4, 1)}
    first = learner.step(_loss, batch)
    for _ in range(20):
        last = learner.step(_loss, batch)
    assert float(last["loss"]) < float(first["loss"])
    assert not first["loss"].requires_grad and first["rows"] == 4
    assert learner.optimizer.defaults["fused"] is None  # fused AdamW is CUDA's; CPU takes the default


def test_compile_keeps_the_plain_parameter_names():
    torch.manual_seed(0)
    plain = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    names = list(plain.state_dict())
    learner = Learner(plain, lr=0.01, weight_decay=0.0, grad_clip=1.0, device=torch.device("cpu"), compile=True)
    learner.step(_loss, {"x": torch.randn(4, 3), "y": torch.randn(4, 1)})
    assert list(learner.module.state_dict()) == names  # no "_orig_mod." prefix: a checkpoint loads uncompiled too
    torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)).load_state_dict(
        learner.module.state_dict())


def test_progress_reports_throughput_and_eta():
    progress = Progress(first_step=10, steps=20, unit="frames")
    progress.add(500)
    metrics = progress.metrics(15)
    assert set(metrics) == {"frames_per_s", "elapsed_s", "eta_s"} and metrics["frames_per_s"] > 0
    assert metrics["eta_s"] == pytest.approx(metrics["elapsed_s"] / 5 * 5)


@pytest.mark.parametrize("change,message", [
    ({"batch_size": 6, "num_workers": 4}, "multiple of --num-workers"),
    ({"resume": True, "init_from": "x"}, "pick one"),
    ({"steps": 0}, "at least 1"),
    ({"wandb_mode": "loud"}, "--wandb-mode"),
])
def test_shared_config_checks(change, message):
    with pytest.raises(ValueError, match=message):
        TrainerConfig(shards="s", out="o", **change)


def test_extra_shards_come_from_the_command_line_and_default_to_none():
    from pipelines.cli import parse_config
    from training.pokemon.offline_rl import TrainConfig

    cfg = parse_config(TrainConfig, ["--shards", "a", "--out", "o", "--extra-shards", "b", "c"])
    assert cfg.extra_shards == ["b", "c"] and cfg.shard_paths() == ["a", "b", "c"]
    assert parse_config(TrainConfig, ["--shards", "a", "--out", "o"]).shard_paths() == ["a"]

"""Train the Melee world model on a ``melee_frames`` shard version with Ray Train.

    python training/melee/world_model.py --shards OUT/melee_frames/<version> --out runs/wm --preset base
    python training/melee/world_model.py --tiny --shards ... --out ... --backbone mlp      # the MLP baseline

Windows of K+1 frames come through the games index (``training/melee/windows.py``) in a seeded order; a seeded
share of steps uses scheduled sampling (inputs after the first frame are the model's own predictions of them, so it
learns to live with its errors in rollout). Validation on held-out games reports next-frame action accuracy, accuracy
where the action changes, per-category accuracy and position MAE, each beside the copy-last-frame baseline's.
The loop, resume and checkpoints are ``training/fit.py``'s (self-describing: ``training/checkpoints.py``, with the
Melee feature spec's version); this file holds the world model's windows, batch, losses and validation. Metrics go to
``OUT/metrics.csv`` and Weights & Biases (offline unless logged in).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from pathlib import Path

import torch

from models.world_model import FrameState, WorldModelConfig
from training.checkpoints import live_identity, read_checkpoint
from training.fit import Recipe, TrainerConfig, fit
from training.fit import main as fit_main
from training.melee.windows import LoadFrameWindows, split_games, window_specs
from training.melee.world_model_losses import MetricSums, copy_last_prediction, losses, split_window
from training.registry import MELEE_FEATURES
from training.windows import first_windows, open_shards


@dataclass(frozen=True, kw_only=True)
class WorldModelTrainConfig(TrainerConfig):
    """Configuration of world-model training (the shared fields are ``training/fit.TrainerConfig``'s).

    Attributes:
        preset: model size: tiny or base (~15M).
        backbone: mamba2 or mlp (the baseline).
        scheduled_sampling: share of steps whose inputs (after the first frame) are the model's own predictions.
        validation_share: share of games held out for validation.
        train_share: share of the training games trained on (the first of a seeded order; the held-out games stay
            the same whatever the share): the data axis of a scaling sweep.
        d_model: model width replacing the preset's (0: the preset's): the size axis of a scaling sweep.
        eval_every: steps between validations (and at the end).
        max_eval_windows: validation windows used (the first ones of the held-out games, in order).
        require_fused: fail at the start unless mamba_ssm's fused Mamba-2 scan runs (CUDA workers with mamba-ssm
            installed: ``make setup-gpu``) instead of falling back to the PyTorch scan with a warning.
    """

    context: int = 64
    batch_size: int = 16
    steps: int = 2000
    lr: float = 1e-3
    checkpoint_every: int = 500
    log_every: int = 50
    preset: str = "base"
    backbone: str = "mamba2"
    scheduled_sampling: float = 0.25
    validation_share: float = 0.1
    train_share: float = 1.0
    d_model: int = 0
    eval_every: int = 500
    max_eval_windows: int = 512
    require_fused: bool = False

    def __post_init__(self):
        super().__post_init__()
        if self.backbone not in ("mamba2", "mlp"):
            raise ValueError("--backbone must be mamba2 or mlp")
        if self.require_fused and self.backbone != "mamba2":
            raise ValueError("--require-fused applies to the mamba2 backbone only")
        if not 0.0 <= self.scheduled_sampling <= 1.0:
            raise ValueError("--scheduled-sampling is a share in [0, 1]")
        if not 0.0 <= self.validation_share < 1.0:
            raise ValueError("--validation-share is a share in [0, 1)")
        if not 0.0 < self.train_share <= 1.0:
            raise ValueError("--train-share is a share in (0, 1]")
        if self.d_model < 0:
            raise ValueError("--d-model must be >= 0 (0: the preset's width)")

    @classmethod
    def tiny(cls, *, shards: str, out: str, **overrides) -> WorldModelTrainConfig:
        fields = {"preset": "tiny", "context": 32, "batch_size": 8, "steps": 12, "eval_every": 6,
                  "max_eval_windows": 32, "checkpoint_every": 4, "log_every": 2, "wandb_mode": "disabled",
                  **overrides}
        return cls(shards=shards, out=out, **fields)


def scheduled_inputs(model, current, ctrl, stage):
    """Inputs for a scheduled-sampling step: frame 0 as recorded, frames 1.. as the model predicted them from the
    recorded frame before (one pass without gradients)."""
    with torch.no_grad():
        pred, _ = model(current, ctrl, stage)
        guess = pred.next_state(current)
    return FrameState(cont=torch.cat([current.cont[:, :1], guess.cont[:, :-1]], 1),
                      binary=torch.cat([current.binary[:, :1], guess.binary[:, :-1]], 1),
                      cat=torch.cat([current.cat[:, :1], guess.cat[:, :-1]], 1), cont_valid=current.cont_valid)


def train_step(model, batch: dict, sampled: bool):
    """Losses of one batch (the math lives in training/melee/world_model_losses.py)."""
    current, ctrl, stage, targets = split_window(batch)
    inputs = scheduled_inputs(model, current, ctrl, stage) if sampled else current
    pred, _ = model(inputs, ctrl, stage)
    return losses(pred, targets)


def evaluate(model, windows: dict, device, batch_size: int = 64) -> dict[str, float]:
    """Validation metrics of the model and of the copy-last-frame baseline on the same windows."""
    was_training = model.training
    model.eval()
    sums, copy_sums, totals, copy_totals, batches = MetricSums(), MetricSums(), {}, {}, 0
    n = len(windows["valid"])
    with torch.no_grad():
        for start in range(0, n, batch_size):
            batch = {k: torch.as_tensor(v[start:start + batch_size]).to(device) for k, v in windows.items()}
            current, ctrl, stage, targets = split_window(batch)
            pred, _ = model(current, ctrl, stage)
            copy = copy_last_prediction(targets)
            sums.add(pred, targets)
            copy_sums.add(copy, targets)
            for name, value in losses(pred, targets).items():
                totals[name] = totals.get(name, 0.0) + float(value)
            for name, value in losses(copy, targets).items():
                copy_totals[name] = copy_totals.get(name, 0.0) + float(value)
            batches += 1
    model.train(was_training)
    out = {f"val_loss_{k}": v / max(batches, 1) for k, v in totals.items()}
    out |= {f"copy_loss_{k}": v / max(batches, 1) for k, v in copy_totals.items()}
    return out | sums.as_dict("val_") | copy_sums.as_dict("copy_")


def validation_windows(version_paths: str | list[str], context: int, games: list[str], limit: int) -> dict:
    """The first ``limit`` windows of the held-out games of the versions trained on, in a fixed order (no
    randomness: resuming stays exact)."""
    specs = window_specs(open_shards(version_paths, check_sha256=False), context, 0, games=games)
    return first_windows(specs, limit, LoadFrameWindows(version_paths, context))


def scheduled_step(seed: int, step: int, share: float) -> bool:
    """Whether ``step`` uses scheduled sampling: seeded per step, not drawn from the global RNG, so a resumed run
    samples the same steps."""
    return bool(torch.rand((), generator=torch.Generator().manual_seed(seed * 1_000_003 + step)) < share)


class WorldModelRecipe(Recipe):
    """The Melee world model on ``training/fit.py``: windows of K+1 frames of the training games, scheduled
    sampling, validation on held-out games."""

    config_class = WorldModelTrainConfig
    kind = "world_model"
    tag = "world-model"
    sample_unit = "frames"
    stream_fields = ("validation_share", "train_share")
    runtime_fields = ("use_fused", "require_fused")

    def __init__(self, cfg: WorldModelTrainConfig, plan: dict):
        super().__init__(cfg, plan)
        self._index = None
        self._val = None

    @classmethod
    def make_plan(cls, cfg: WorldModelTrainConfig, version) -> dict:
        train_games, val_games = split_games(version, cfg.validation_share, cfg.seed)
        kept = max(1, round(len(train_games) * cfg.train_share))
        left_out = sorted(random.Random(f"{cfg.seed}:train-share").sample(train_games, len(train_games))[kept:])
        print(f"[world-model] {kept} training games, {len(val_games)} held out"
              + (f", {len(left_out)} left out (--train-share {cfg.train_share})" if left_out else ""))
        return {"val_games": val_games, "left_out": left_out}

    def model_config(self):
        width = {"d_model": self.cfg.d_model} if self.cfg.d_model else {}
        return WorldModelConfig.preset(self.cfg.preset, backbone=self.cfg.backbone, **width)

    def on_device(self, model_config, cuda: bool):
        # require_fused asks for the fused scan on any device: on a CPU worker that is the error it should be
        return dataclasses.replace(model_config, use_fused=cuda or self.cfg.require_fused,
                                   require_fused=self.cfg.require_fused)

    def epoch_windows(self, version, epoch: int):
        phase = 0 if epoch == 0 else random.Random(f"{self.cfg.seed}:{epoch}").randrange(self.cfg.context)
        return window_specs(version, self.cfg.context, self.cfg.seed + epoch,
                            exclude=self.plan["val_games"] + self.plan.get("left_out", []), phase=phase)

    def loader(self, model_config):
        return LoadFrameWindows(self.cfg.shard_paths(), self.cfg.context)

    def samples(self, batch: dict) -> int:
        return int(batch["valid"][:, 1:].sum())  # next-frame targets

    def loss(self, model, batch: dict, step: int):
        sampled = scheduled_step(self.cfg.seed, step, self.cfg.scheduled_sampling)
        parts = train_step(model, batch, sampled)
        return parts["total"], {**{f"loss_{k}": v for k, v in parts.items()}, "scheduled": int(sampled)}

    def evaluate(self, model, device, step: int) -> dict | None:
        if not (step % self.cfg.eval_every == 0 or step == self.cfg.steps):
            return None
        if self._val is None:
            self._val = validation_windows(self.cfg.shard_paths(), self.cfg.context, self.plan["val_games"],
                                           self.cfg.max_eval_windows)
        return evaluate(model, self._val, device) if self._val else None


def run(cfg: WorldModelTrainConfig):
    """Train on Ray Train (``training/fit.fit``); Ray Train's ``Result``."""
    return fit(cfg, WorldModelRecipe)


def load_model(checkpoint: str | Path, device: str = "cpu"):
    """A trained WorldModel from a checkpoint folder or its ``state.pt`` (a local path or a URI), rebuilt from the
    checkpoint alone; refused when its feature spec is not this code's (``pipelines/melee/features.py``)."""
    ckpt = read_checkpoint(checkpoint, device, kind="world_model")
    ckpt.check_features(live_identity(MELEE_FEATURES))
    return ckpt.build_model(use_fused=False, require_fused=False)


def main(argv: list[str] | None = None) -> None:
    fit_main(WorldModelTrainConfig, WorldModelRecipe, argv)


if __name__ == "__main__":
    main()

"""Train the Melee world model on a ``melee_frames`` shard version with Ray Train.

    python training/world_model.py --shards OUT/melee_frames/<version> --out runs/wm --preset base
    python training/world_model.py --tiny --shards ... --out ... --backbone mlp      # the MLP baseline

Windows of K+1 frames come through the games index (``training/melee_windows.py``) in a seeded order; a seeded
share of steps uses scheduled sampling (inputs after the first frame are the model's own predictions of them, so it
learns to live with its errors in rollout). Validation on held-out games reports next-frame action accuracy, accuracy
where the action changes, per-category accuracy and position MAE, each beside the copy-last-frame baseline's.
Checkpoints hold model, optimizer, step, RNG states and the resolved config; resuming gives the same next batches and
losses. Metrics go to ``OUT/metrics.csv`` and Weights & Biases (offline unless logged in).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


@dataclass(frozen=True, kw_only=True)
class WorldModelTrainConfig:
    """Configuration of world-model training.

    Attributes:
        shards: the melee_frames shard version folder (a local path or a URI).
        out: run folder (checkpoints, metrics.csv, wandb); a URI puts the checkpoints on that store and keeps
            metrics.csv and wandb on rank 0's disk under ``runs/<bucket>/<key>`` (``training/loop.local_run_folder``).
        preset: model size: tiny or base (~15M).
        backbone: mamba2 or mlp (the baseline).
        context: frames per training window (K; each window holds K+1 frames).
        batch_size: windows per optimizer step (summed over workers).
        steps: optimizer steps.
        lr: learning rate (AdamW).
        weight_decay: AdamW weight decay.
        scheduled_sampling: share of steps whose inputs (after the first frame) are the model's own predictions.
        validation_share: share of games held out for validation.
        eval_every: steps between validations (and at the end).
        max_eval_windows: validation windows used (the first ones of the held-out games, in order).
        checkpoint_every: steps between checkpoints.
        log_every: steps between metric lines.
        seed: seed of model initialization, window order, split and scheduled sampling.
        num_workers: Ray Train workers.
        cpus_per_worker: CPUs each worker reserves (fractional on small machines).
        use_gpu: train on GPU workers (bf16 autocast, fused Mamba-2 scan when mamba_ssm is installed).
        torch_threads: intra-op threads per worker (0: Ray's default).
        wandb_mode: auto (online when logged in, else offline), online, offline or disabled.
        resume: continue from the latest checkpoint in --out.
    """

    shards: str
    out: str
    preset: str = "base"
    backbone: str = "mamba2"
    context: int = 64
    batch_size: int = 16
    steps: int = 2000
    lr: float = 1e-3
    weight_decay: float = 0.01
    scheduled_sampling: float = 0.25
    validation_share: float = 0.1
    eval_every: int = 500
    max_eval_windows: int = 512
    checkpoint_every: int = 500
    log_every: int = 50
    seed: int = 0
    num_workers: int = 1
    cpus_per_worker: float = 0.5
    use_gpu: bool = False
    torch_threads: int = 0
    wandb_mode: str = "auto"
    resume: bool = False

    def __post_init__(self):
        if self.backbone not in ("mamba2", "mlp"):
            raise ValueError("--backbone must be mamba2 or mlp")
        if not 0.0 <= self.scheduled_sampling <= 1.0:
            raise ValueError("--scheduled-sampling is a share in [0, 1]")
        if not 0.0 <= self.validation_share < 1.0:
            raise ValueError("--validation-share is a share in [0, 1)")
        if self.batch_size % self.num_workers:
            raise ValueError("--batch-size must be a multiple of --num-workers")
        if self.wandb_mode not in ("auto", "online", "offline", "disabled"):
            raise ValueError("--wandb-mode must be auto, online, offline or disabled")

    @classmethod
    def tiny(cls, *, shards: str, out: str, **overrides) -> WorldModelTrainConfig:
        fields = {"preset": "tiny", "context": 32, "batch_size": 8, "steps": 12, "eval_every": 6,
                  "max_eval_windows": 32, "checkpoint_every": 4, "log_every": 2, "wandb_mode": "disabled",
                  **overrides}
        return cls(shards=shards, out=out, **fields)


def model_config(cfg: WorldModelTrainConfig, cuda: bool = False):
    from models.world_model import WorldModelConfig

    return WorldModelConfig.preset(cfg.preset, backbone=cfg.backbone, use_fused=cuda)


def scheduled_inputs(model, current, ctrl, stage):
    """Inputs for a scheduled-sampling step: frame 0 as recorded, frames 1.. as the model predicted them from the
    recorded frame before (one pass without gradients)."""
    import torch

    from models.world_model import FrameState

    with torch.no_grad():
        pred, _ = model(current, ctrl, stage)
        guess = pred.next_state(current)
    return FrameState(cont=torch.cat([current.cont[:, :1], guess.cont[:, :-1]], 1),
                      binary=torch.cat([current.binary[:, :1], guess.binary[:, :-1]], 1),
                      cat=torch.cat([current.cat[:, :1], guess.cat[:, :-1]], 1), cont_valid=current.cont_valid)


def train_step(model, batch: dict, sampled: bool):
    """Losses of one batch (the math lives in training/world_model_losses.py)."""
    from training.world_model_losses import losses, split_window

    current, ctrl, stage, targets = split_window(batch)
    inputs = scheduled_inputs(model, current, ctrl, stage) if sampled else current
    pred, _ = model(inputs, ctrl, stage)
    return losses(pred, targets)


def evaluate(model, windows: dict, device, batch_size: int = 64) -> dict[str, float]:
    """Validation metrics of the model and of the copy-last-frame baseline on the same windows."""
    import torch

    from training.world_model_losses import MetricSums, copy_last_prediction, losses, split_window

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


def validation_windows(version_path: str, context: int, games: list[str], limit: int) -> dict:
    """The first ``limit`` windows of the held-out games, in a fixed order (no randomness: resuming stays exact)."""
    import numpy as np

    from shards_schema.reader import open_version
    from training.melee_windows import LoadFrameWindows, window_specs

    specs = sorted(window_specs(open_version(version_path, check_sha256=False), context, 0, games),
                   key=lambda s: (s["file"], s["row_start"]))[:limit]
    if not specs:
        return {}
    columns = {k: np.array([s[k] for s in specs]) for k in specs[0]}
    return LoadFrameWindows(version_path, context)(columns)


def train_loop_per_worker(config: dict) -> None:
    """Runs on every Ray Train worker: rebuilds the typed config, then trains."""
    import ray.train
    import ray.train.torch
    import torch

    from models.world_model import WorldModel
    from training.loop import MetricsWriter, report_checkpoint, resume, start_worker
    from training.melee_windows import LoadFrameWindows
    from training.windows import window_batches

    cfg = WorldModelTrainConfig(**config["cfg"])
    rank, world, device, cuda = start_worker(cfg, "world-model")
    model = WorldModel(model_config(cfg, cuda))
    if rank == 0:
        print(f"[world-model] {cfg.preset} {cfg.backbone}: {model.num_parameters():,} parameters")
    model = ray.train.torch.prepare_model(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    step = resume(config, model, optimizer, rank, device)  # Ray's own checkpoint after a restart, or --resume's
    val = validation_windows(config["shards"], cfg.context, config["val_games"], cfg.max_eval_windows) \
        if rank == 0 else {}
    shard = ray.train.get_dataset_shard("train")
    per_worker = cfg.batch_size // world
    writer = MetricsWriter(Path(config["run_folder"]), dataclasses.asdict(cfg), cfg.wandb_mode, "world-model") \
        if rank == 0 else None
    start, frames = time.monotonic(), 0
    # The stream holds the window specs of steps first_step+1 .. steps in order (run() cuts it from the resume
    # point); every worker reads the same stream and gathers its slice of each global batch itself.
    skip = step - config["first_step"]  # > 0 only when Ray restarted the run from a later checkpoint
    for batch in window_batches(shard, LoadFrameWindows(config["shards"], cfg.context), cfg.batch_size,
                                first_batch=skip, rows=slice(rank * per_worker, (rank + 1) * per_worker)):
        if step >= cfg.steps:
            break
        local = {k: torch.from_numpy(v).to(device, non_blocking=True) for k, v in batch.items() if k != "window"}
        # seeded per step, not drawn from the global RNG: the same steps are sampled after a resume
        sampled = bool(torch.rand((), generator=torch.Generator().manual_seed(cfg.seed * 1_000_003 + step))
                       < cfg.scheduled_sampling)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=cuda):
            parts = train_step(model, local, sampled)
        optimizer.zero_grad(set_to_none=True)
        parts["total"].backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        frames += int(local["valid"][:, 1:].sum()) * world
        metrics = {"step": step, **{f"loss_{k}": float(v) for k, v in parts.items()},
                   "scheduled": int(sampled), "frames_per_s": frames / (time.monotonic() - start)}
        save = step % cfg.checkpoint_every == 0 or step == cfg.steps
        if writer and (step % cfg.log_every == 0 or save):
            writer.write(metrics)
        if writer and val and (step % cfg.eval_every == 0 or step == cfg.steps):
            writer.write({"step": step, **evaluate(getattr(model, "module", model), val, device)}, "eval")
        if save:
            payload = {"model": getattr(model, "module", model).state_dict(), "optimizer": optimizer.state_dict(),
                       "step": step, "config": dataclasses.asdict(cfg),
                       "model_config": dataclasses.asdict(model_config(cfg))}
            report_checkpoint(payload, metrics, rank, world)
    if writer:
        writer.close()


def run(cfg: WorldModelTrainConfig):
    from shards_schema import storage
    from training.loop import (
        check_workers_reach,
        init_local_ray,
        latest_checkpoint,
        local_run_folder,
        run_storage,
    )

    init_local_ray()  # before the first `import ray`: a local instance then binds 127.0.0.1 only
    import ray
    import ray.train
    from ray.train.torch import TorchTrainer

    from shards_schema.reader import open_version
    from training.melee_windows import run_specs, split_games, window_specs, windows_dataset

    ray.data.DataContext.get_current().execution_options.preserve_order = True
    shards = storage.normalize(cfg.shards)
    cfg = dataclasses.replace(cfg, shards=shards, out=storage.normalize(cfg.out))  # workers run elsewhere
    version = open_version(shards)
    train_games, val_games = split_games(version, cfg.validation_share, cfg.seed)
    check_workers_reach(shards, cfg.out)
    latest = latest_checkpoint(cfg.out) if cfg.resume else None
    if cfg.resume and latest is None:
        raise FileNotFoundError(f"--resume: no checkpoint under {storage.join(cfg.out, 'ray')}")
    first_step = _checkpoint_step(latest) if latest else 0
    if first_step >= cfg.steps:
        raise ValueError(f"--resume: the checkpoint is at step {first_step}, --steps is {cfg.steps}: nothing to do")
    specs = run_specs(version, cfg.context, cfg.seed, train_games, start=first_step * cfg.batch_size,
                      count=(cfg.steps - first_step) * cfg.batch_size)
    dataset = windows_dataset(specs)
    num_windows = len(window_specs(version, cfg.context, cfg.seed, train_games))
    print(f"[world-model] {len(train_games)} training games ({num_windows} windows an epoch), {len(val_games)} "
          f"held out; steps {first_step + 1}..{cfg.steps}")
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config={"cfg": dataclasses.asdict(cfg), "shards": shards, "first_step": first_step,
                           "val_games": val_games, "resume_path": latest,
                           "run_folder": str(local_run_folder(cfg.out))},
        scaling_config=ray.train.ScalingConfig(num_workers=cfg.num_workers, use_gpu=cfg.use_gpu,
                                               resources_per_worker={"CPU": cfg.cpus_per_worker}),
        run_config=ray.train.RunConfig(name=f"world-model-{time.strftime('%Y%m%d-%H%M%S')}",
                                       **run_storage(cfg.out),
                                       checkpoint_config=ray.train.CheckpointConfig(num_to_keep=2)),
        datasets={"train": dataset},
        dataset_config=ray.train.DataConfig(datasets_to_split=[]),
    )
    return trainer.fit()


def _checkpoint_step(checkpoint_dir: str) -> int:
    from shards_schema import storage
    from training.loop import load_state

    return int(load_state(storage.join(checkpoint_dir, "state.pt"))["step"])


def load_model(checkpoint: str | Path, device: str = "cpu"):
    """A trained WorldModel from a ``state.pt``, a local path or a URI (architecture from the checkpoint)."""
    from models.world_model import WorldModel, WorldModelConfig
    from training.loop import load_state

    state = load_state(checkpoint, device)
    model = WorldModel(WorldModelConfig(**{**state["model_config"], "use_fused": False}))
    model.load_state_dict(state["model"])
    return model.eval()


def main(argv: list[str] | None = None) -> None:
    from pipelines.cli import parse_config

    cfg = parse_config(WorldModelTrainConfig, argv)
    result = run(cfg)
    print(f"[world-model] done: {result.metrics}")
    if result.checkpoint:  # the folder to pass to evaluate.py / world_model_play.py (a URI on a store)
        from shards_schema import storage
        from training.loop import checkpoint_uri

        print(checkpoint_uri(result.checkpoint, storage.normalize(cfg.out)))


if __name__ == "__main__":
    main()

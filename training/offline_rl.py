"""Train the Pokémon policy offline on a ``pokemon_turns`` shard version with Ray Train.

    python training/offline_rl.py --shards OUT/pokemon_turns/<version> --out runs/bc --preset small
    python training/offline_rl.py --tiny --shards ... --out ... --objective filtered_bc

Objectives: ``bc`` (behaviour cloning), ``filtered_bc`` (imitate actions whose advantage under the multi-gamma
critic is positive) and ``exp_adv`` (advantage-weighted, exp(A/β) clipped); the critics learn one-step TD targets
for every discount factor in all three (for ``bc`` they are trained beside, not used). bf16 autocast and TF32 on
CUDA, fp32 on CPU; DDP across workers. Checkpoints hold model, optimizer, step, RNG states and the resolved config,
every ``checkpoint_every`` steps and at the end; resuming continues with the same next batches and losses.
Metrics go to ``OUT/metrics.csv`` and to Weights & Biases (offline unless logged in).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

OBJECTIVES = ("bc", "filtered_bc", "exp_adv")


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Configuration of offline training.

    Attributes:
        shards: the shard version folder to train on (a local path or a URI: ``s3://bucket/out/pokemon_turns/<v>``).
        out: run folder (checkpoints, metrics.csv, wandb); a URI puts the checkpoints on that store and keeps
            metrics.csv and wandb on rank 0's disk under ``runs/<bucket>/<key>`` (``training/loop.local_run_folder``).
        preset: model size: tiny, small, medium or large.
        objective: bc, filtered_bc or exp_adv.
        context: turns per training window.
        batch_size: windows per optimizer step (summed over workers).
        steps: optimizer steps.
        lr: learning rate (AdamW).
        weight_decay: AdamW weight decay.
        critic_weight: weight of the critic loss.
        advantage_gamma: index of the discount factor whose advantage weighs the actor.
        exp_beta: temperature of exp_adv weights.
        checkpoint_every: steps between checkpoints.
        log_every: steps between metric lines.
        seed: seed of model initialization and window order.
        num_workers: Ray Train workers.
        cpus_per_worker: CPUs each worker reserves (fractional on small machines).
        use_gpu: train on GPU workers.
        wandb_mode: auto (online when logged in, else offline), online, offline or disabled.
        resume: continue from the latest checkpoint in --out.
        sides: train only on trajectories of these player sides (e.g. ``p1`` when p1 is the player to imitate).
        torch_threads: intra-op threads per worker (0: Ray's default, one per whole reserved CPU). More threads than
            reserved CPUs wait on each other whenever anything else runs: a ``small`` step on 2 cores took 0.55-0.65 s
            with 2 threads on 1 reserved CPU while the machine was quiet and 3.3 s once other processes ran, 0.9-1.1 s
            with 1 thread either way (benchmarks/policy_train_step.py).
    """

    shards: str
    out: str
    preset: str = "small"
    objective: str = "bc"
    context: int = 32
    batch_size: int = 32
    steps: int = 1000
    lr: float = 3e-4
    weight_decay: float = 0.01
    critic_weight: float = 0.5
    advantage_gamma: int = 2
    exp_beta: float = 1.0
    checkpoint_every: int = 200
    log_every: int = 20
    seed: int = 0
    num_workers: int = 1
    cpus_per_worker: float = 0.5
    use_gpu: bool = False
    wandb_mode: str = "auto"
    resume: bool = False
    sides: list[str] = field(default_factory=list)
    torch_threads: int = 0

    def __post_init__(self):
        if self.objective not in OBJECTIVES:
            raise ValueError(f"--objective must be one of {OBJECTIVES}")
        if self.wandb_mode not in ("auto", "online", "offline", "disabled"):
            raise ValueError("--wandb-mode must be auto, online, offline or disabled")
        if self.batch_size % self.num_workers:
            raise ValueError("--batch-size must be a multiple of --num-workers")

    @classmethod
    def tiny(cls, *, shards: str, out: str, **overrides) -> TrainConfig:
        fields = {"preset": "tiny", "context": 8, "batch_size": 8, "steps": 12, "checkpoint_every": 4,
                  "log_every": 2, "wandb_mode": "disabled", **overrides}
        return cls(shards=shards, out=out, **fields)


@dataclass
class StepMetrics:
    step: int
    loss: float
    actor_loss: float
    critic_loss: float
    accuracy: float
    samples: int
    extra: dict = field(default_factory=dict)


def compute_losses(model, batch, cfg: TrainConfig, gammas):
    """All losses of one batch (the math lives in training/losses.py)."""
    import torch

    from training import losses

    out = model(batch["tokens"], batch["numeric"], batch["legal"], batch["valid"])
    action, valid = batch["action"], batch["valid"]
    step_mask = valid & (action >= 0) & batch["legal"].any(-1)
    # one-step TD targets inside the window: reward and done of the next row, V of the next state
    next_valid = torch.zeros_like(valid)
    next_valid[:, :-1] = valid[:, 1:]
    next_values = torch.zeros_like(out.values)
    next_values[:, :-1] = out.values[:, 1:].detach()
    next_reward = torch.zeros_like(batch["reward"])
    next_reward[:, :-1] = batch["reward"][:, 1:]
    next_done = torch.ones_like(batch["done"])
    next_done[:, :-1] = batch["done"][:, 1:]
    targets = losses.td_targets(next_reward, next_done, next_values, gammas)
    critic = losses.critic_loss(out.q_values.float(), action, targets.float(), step_mask & next_valid)
    if cfg.objective == "bc":
        actor = losses.behaviour_cloning_loss(out.logits, action, step_mask)
    else:
        adv = losses.advantages(out.q_values.float(), out.values.float(), action)[..., cfg.advantage_gamma]
        weights = (losses.filtered_bc_weights(adv) if cfg.objective == "filtered_bc"
                   else losses.exp_advantage_weights(adv, beta=cfg.exp_beta))
        actor = losses.weighted_actor_loss(out.logits, action, weights, step_mask)
    predicted = out.logits.argmax(-1)
    accuracy = ((predicted == action) & step_mask).sum() / step_mask.sum().clamp(min=1)
    return actor + cfg.critic_weight * critic, actor, critic, accuracy, int(step_mask.sum())


def train_loop_per_worker(config: dict) -> None:
    """Runs on every Ray Train worker: rebuilds the typed config, then trains."""
    import ray.train
    import ray.train.torch
    import torch

    from models.pokemon_policy import PokemonPolicy, PolicyConfig
    from pipelines.pokemon.observation import vocabulary
    from training.loop import MetricsWriter, report_checkpoint, resume, start_worker
    from training.windows import LoadWindows, window_batches

    cfg = TrainConfig(**config["cfg"])
    rank, world, device, cuda = start_worker(cfg, "train")
    policy_cfg = PolicyConfig.preset(cfg.preset, len(vocabulary()))
    policy_cfg = dataclasses.replace(policy_cfg, max_turns=max(policy_cfg.max_turns, cfg.context))
    model = PokemonPolicy(policy_cfg)
    if rank == 0:
        print(f"[train] {cfg.preset}: {model.num_parameters():,} parameters")
    model = ray.train.torch.prepare_model(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    gammas = torch.tensor(policy_cfg.gammas, device=device)
    step = resume(config, model, optimizer, rank, device)  # Ray's own checkpoint after a restart, or --resume's
    shard = ray.train.get_dataset_shard("train")
    per_worker = cfg.batch_size // world
    writer = MetricsWriter(Path(config["run_folder"]), dataclasses.asdict(cfg), cfg.wandb_mode) if rank == 0 else None
    start, done_samples = time.monotonic(), 0
    # every worker reads the same ordered stream of window specs (all epochs in one pass) and gathers its slice of
    # each global batch; a resumed run skips the batches already trained on: exact resume
    for batch in window_batches(shard, LoadWindows(cfg.shards, cfg.context), cfg.batch_size, first_batch=step,
                                rows=slice(rank * per_worker, (rank + 1) * per_worker)):
        local = {k: torch.from_numpy(v).to(device, non_blocking=True) for k, v in batch.items()}
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=cuda):
            loss, actor, critic, accuracy, samples = compute_losses(model, local, cfg, gammas)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        done_samples += samples
        metrics = {"step": step, "loss": float(loss), "actor_loss": float(actor), "critic_loss": float(critic),
                   "accuracy": float(accuracy), "samples_per_s": done_samples * world / (time.monotonic() - start),
                   "elapsed_s": time.monotonic() - start}
        save = step % cfg.checkpoint_every == 0 or step == cfg.steps
        if writer and (step % cfg.log_every == 0 or save):
            writer.write(metrics)
        if save:
            report_checkpoint({"model": getattr(model, "module", model).state_dict(),
                               "optimizer": optimizer.state_dict(), "step": step, "config": dataclasses.asdict(cfg)},
                              metrics, rank, world)
        if step >= cfg.steps:
            break
    if writer:
        writer.close()


def run(cfg: TrainConfig):
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

    from training.windows import windows_dataset

    # workers run in Ray's session folder: a relative --out would put metrics.csv and wandb there, not in the run
    cfg = dataclasses.replace(cfg, out=storage.normalize(cfg.out), shards=storage.normalize(cfg.shards))
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    # every step's batch in one stream (epochs back to back)
    dataset, _ = windows_dataset(cfg.shards, cfg.context, cfg.seed, sides=cfg.sides,
                                 batch_size=cfg.batch_size, min_batches=cfg.steps)
    check_workers_reach(cfg.shards, cfg.out)
    latest = latest_checkpoint(cfg.out) if cfg.resume else None
    if cfg.resume and latest is None:
        raise FileNotFoundError(f"--resume: no checkpoint under {storage.join(cfg.out, 'ray')}")
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config={"cfg": dataclasses.asdict(cfg), "resume_path": latest,
                           "run_folder": str(local_run_folder(cfg.out))},
        scaling_config=ray.train.ScalingConfig(num_workers=cfg.num_workers, use_gpu=cfg.use_gpu,
                                               resources_per_worker={"CPU": cfg.cpus_per_worker}),
        run_config=ray.train.RunConfig(name=f"train-{time.strftime('%Y%m%d-%H%M%S')}", **run_storage(cfg.out),
                                       checkpoint_config=ray.train.CheckpointConfig(num_to_keep=2)),
        datasets={"train": dataset},
        dataset_config=ray.train.DataConfig(datasets_to_split=[]),
    )
    result = trainer.fit()
    return result


def main(argv: list[str] | None = None) -> None:
    from pipelines.cli import parse_config

    cfg = parse_config(TrainConfig, argv)
    result = run(cfg)
    print(f"[train] done: {result.metrics}")
    if result.checkpoint:  # the folder to pass to evaluate.py / world_model_play.py (a URI on a store)
        from shards_schema import storage
        from training.loop import checkpoint_uri

        print(checkpoint_uri(result.checkpoint, storage.normalize(cfg.out)))


if __name__ == "__main__":
    main()

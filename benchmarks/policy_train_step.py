"""Seconds per training step of the policy: a plain loop in this process against the same step inside Ray Train.

    python benchmarks/policy_train_step.py                     # small preset, batches of 32 × 32 turns
    python benchmarks/policy_train_step.py --preset tiny --steps 50

Every variant runs the same step (``compute_losses``, backward, clip, AdamW) on the same fixed batch, so data loading is
out of it unless named: 1. bare, in this process, with 1 and with 2 intra-op threads; 2. inside a 1-worker
``TorchTrainer`` (through ``prepare_model``, as ``training/pokemon/offline_rl.py`` does) at 0.5 and 1.0 reserved CPUs,
with the thread count Ray gives the worker and with ``torch_threads`` 2; 3. the real trainer
(``training/pokemon/offline_rl.py`` on a generated shard version, Ray Data streaming beside it), s/step from its step
times. Each line prints the worker's intra-op threads and ``OMP_NUM_THREADS`` and the load average (the machine may be
shared); all variants run in rounds and the medians are compared with the bare loop at 2 threads."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

CPUS = 2


def fixed_batch(context: int, batch_size: int, vocab_size: int) -> dict:
    import torch

    g = torch.Generator().manual_seed(0)
    return {"tokens": torch.randint(0, vocab_size, (batch_size, context, 87), generator=g),
            "numeric": torch.randn(batch_size, context, 48, generator=g),
            "legal": torch.rand(batch_size, context, 9, generator=g) < 0.7,
            "action": torch.randint(0, 9, (batch_size, context), generator=g),
            "reward": torch.zeros(batch_size, context), "done": torch.zeros(batch_size, context, dtype=torch.bool),
            "valid": torch.ones(batch_size, context, dtype=torch.bool)}


def time_steps(preset: str, context: int, batch_size: int, warmup: int, steps: int, threads: int = 0,
               prepare=None) -> dict:
    """Mean s/step of ``steps`` optimizer steps after ``warmup`` (threads 0: leave torch's count as it is)."""
    import torch

    from models.pokemon_policy import PokemonPolicy, PolicyConfig
    from pipelines.pokemon.observation import vocabulary
    from training.pokemon.offline_rl import TrainConfig, compute_losses

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    cfg = TrainConfig(shards="-", out="-", preset=preset, context=context, batch_size=batch_size)
    policy_cfg = PolicyConfig.preset(preset, len(vocabulary()))
    policy_cfg = dataclasses.replace(policy_cfg, max_turns=max(policy_cfg.max_turns, context))
    model = PokemonPolicy(policy_cfg)
    if prepare is not None:
        model = prepare(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    gammas = torch.tensor(policy_cfg.gammas)
    batch = fixed_batch(context, batch_size, policy_cfg.vocab_size)
    times = []
    for _ in range(warmup + steps):
        t0 = time.perf_counter()
        loss = compute_losses(model, batch, cfg, gammas)[0]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        times.append(time.perf_counter() - t0)
    return {"s_per_step": sum(times[warmup:]) / steps, "threads": torch.get_num_threads(),
            "omp": os.environ.get("OMP_NUM_THREADS", "unset"), "ddp": type(model).__name__}


def _worker(config: dict) -> None:
    import json

    import ray.train.torch

    result = time_steps(config["preset"], config["context"], config["batch_size"], config["warmup"], config["steps"],
                        threads=config["threads"], prepare=ray.train.torch.prepare_model)
    # Ray Train's Result keeps only metrics reported with a checkpoint: hand the figures back through a file
    Path(config["result_path"]).write_text(json.dumps(result))


def in_trainer(args, cpus: float, threads: int, storage: Path) -> dict:
    import json

    import ray.train
    from ray.train.torch import TorchTrainer

    result_path = storage / f"step-{cpus}-{threads}.json"
    trainer = TorchTrainer(
        _worker, train_loop_config={"preset": args.preset, "context": args.context, "batch_size": args.batch_size,
                                    "warmup": args.warmup, "steps": args.steps, "threads": threads,
                                    "result_path": str(result_path)},
        scaling_config=ray.train.ScalingConfig(num_workers=1, resources_per_worker={"CPU": cpus}),
        run_config=ray.train.RunConfig(name=f"step-{cpus}-{threads}", storage_path=str(storage)))
    trainer.fit()
    return json.loads(result_path.read_text())


def real_trainer(args, cpus: float, threads: int, work: Path, shards: str) -> dict:
    """s/step of training/pokemon/offline_rl.py itself: mean of its step times after the first ``warmup`` steps."""
    import csv

    from training.pokemon.offline_rl import TrainConfig
    from training.pokemon.offline_rl import run as train

    out = work / f"real-{cpus}-{threads}-{time.monotonic_ns()}"
    train(TrainConfig(shards=shards, out=str(out), preset=args.preset, context=args.context,
                      batch_size=args.batch_size, steps=args.warmup + args.steps, log_every=1,
                      checkpoint_every=10_000, cpus_per_worker=cpus, torch_threads=threads, wandb_mode="disabled"))
    with open(out / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    ends = [float(r["elapsed_s"]) for r in rows]  # seconds since the worker's first batch, at each step's end
    return {"s_per_step": (ends[-1] - ends[args.warmup - 1]) / args.steps, "threads": threads or "ray default",
            "omp": "-", "ddp": "-"}


def main() -> None:
    from pipelines.parse_replays import ParseConfig
    from pipelines.parse_replays import run as parse
    from pipelines.pokemon.generated import GeneratedConfig

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--context", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--battles", type=int, default=60, help="generated battles for the real-trainer variant")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of all variants (medians are reported)")
    args = parser.parse_args()

    from pipelines.ray_start import start_ray

    start_ray(num_cpus=CPUS, log_to_driver=False)  # before `import ray`: token auth, servers on 127.0.0.1
    import ray

    runs: dict[str, list[float]] = {}

    def show(name: str, r: dict) -> None:
        runs.setdefault(name, []).append(r["s_per_step"])
        print(f"{name:44s} {r['s_per_step']:7.3f} s/step  threads={r['threads']} OMP_NUM_THREADS={r['omp']} "
              f"model={r['ddp']}  load average {os.getloadavg()[0]:.1f}", flush=True)

    work = Path(tempfile.mkdtemp(prefix="train-step-"))
    try:
        published = parse(ParseConfig(source="generated", out=str(work / "shards"), formats=["gen9randombattle"],
                                      options=GeneratedConfig(num_battles=args.battles, p1="heuristic",
                                                                p2="random", seed=7)),
                          log=lambda *_: None)
        # rounds of every variant in turn: on a shared machine, load drifts between variants, not within a round
        for _ in range(args.rounds):
            for threads in (2, 1):
                show(f"bare, {threads} threads", time_steps(args.preset, args.context, args.batch_size, args.warmup,
                                                            args.steps, threads=threads))
            for cpus, threads in ((0.5, 0), (1.0, 0), (1.0, 2)):
                show(f"TorchTrainer, {cpus} CPU, threads {threads or 'Ray default'}",
                     in_trainer(args, cpus, threads, work))
            for cpus, threads in ((1.0, 2), (1.0, 0)):
                show(f"offline_rl.py, {cpus} CPU, torch_threads {threads}",
                     real_trainer(args, cpus, threads, work, str(published.path)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        ray.shutdown()
    base = statistics.median(runs["bare, 2 threads"])
    for name, values in runs.items():
        median = statistics.median(values)
        print(f"RESULT {args.preset} {name}: median {median:.3f} s/step over {len(values)} rounds "
              f"({median / base:.2f}× bare 2 threads; each: {', '.join(f'{v:.3f}' for v in values)})")


if __name__ == "__main__":
    main()

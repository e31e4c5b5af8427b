"""Does the shard loader keep up? Training samples/s of the ``tiny`` policy on CPU against the loader's samples/s.

    python benchmarks/policy_loader_vs_trainer.py                  # 200 generated battles, batches of 32 × 32 turns
    python benchmarks/policy_loader_vs_trainer.py --battles 50 --epochs 2

In one run: 1. generate a small shard version (``generated`` source) in a temporary folder; 2. the loader: the
window-spec stream of ``training/windows.py`` and its gather (``window_batches``), exactly as the trainer reads it
(same context, batch size, seed, preserved order, all epochs in one stream), no model; 3. the trainer: the same
batches, already in memory, through ``compute_losses``, backward and AdamW on the ``tiny`` preset in this process,
no loading, at 1 and 2 intra-op threads. A sample is one turn that reaches the loss (valid, with an action), the
unit of the trainer's ``samples_per_s``. Goal: loader ≥ 10× the fastest trainer.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import tempfile
import time
from pathlib import Path

CPUS = 2


def _samples(batch) -> int:
    return int((batch["valid"] & (batch["action"] >= 0) & batch["legal"].any(-1)).sum())


def measure_loader(version_path: str, context: int, batch_size: int, seed: int, epochs: int):
    """(seconds to the first batch, seconds in all, samples, batches, windows per epoch) of one pass over ``epochs``
    epochs, the way the trainer streams them; plus the first epoch's batches for the trainer."""
    import ray
    import torch

    from shards_schema.reader import open_version
    from training.fit import stream_dataset
    from training.pokemon.windows import LoadTurnWindows, window_specs
    from training.windows import window_batches, window_stream

    ray.data.DataContext.get_current().execution_options.preserve_order = True
    ray.data.DataContext.get_current().enable_progress_bars = False
    version = open_version(version_path)
    num_windows = window_specs(version, context, seed).num_rows
    # the trainer's stream (training/fit.py): epochs back to back, each with its own seed
    dataset = stream_dataset(window_stream(lambda epoch: window_specs(version, context, seed + epoch), 0,
                                           epochs * (num_windows // batch_size) * batch_size))
    batches, samples, first_s = [], 0, None
    t0 = time.perf_counter()
    for arrays in window_batches(dataset, LoadTurnWindows(version_path, context), batch_size):
        batch = {k: torch.from_numpy(v) for k, v in arrays.items()}  # as the trainer takes them
        if first_s is None:
            first_s = time.perf_counter() - t0
        samples += _samples(batch)
        if len(batches) < num_windows // batch_size:
            batches.append(batch)
    total_s = time.perf_counter() - t0
    return first_s, total_s, samples, epochs * (num_windows // batch_size), num_windows, batches


def measure_trainer(batches: list, context: int, steps: int, threads: int):
    """(seconds, samples, steps) of optimizer steps of the tiny preset over in-memory batches."""
    import torch

    from models.pokemon_policy import PokemonPolicy, PolicyConfig
    from pipelines.pokemon.observation import vocabulary
    from training.pokemon.offline_rl import TrainConfig, compute_losses

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cfg = TrainConfig.tiny(shards="-", out="-", context=context)
    policy_cfg = PolicyConfig.preset("tiny", len(vocabulary()))
    policy_cfg = dataclasses.replace(policy_cfg, max_turns=max(policy_cfg.max_turns, context))
    model = PokemonPolicy(policy_cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    gammas = torch.tensor(policy_cfg.gammas)

    def step(batch) -> int:
        loss, _, _, _, samples = compute_losses(model, batch, cfg, gammas)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return samples

    for batch in batches[:3]:  # warm-up: allocator, first-call overheads
        step(batch)
    t0 = time.perf_counter()
    samples = 0
    for i in range(steps):
        samples += step(batches[i % len(batches)])
    return time.perf_counter() - t0, samples, steps


def main() -> None:
    from pipelines.parse_replays import ParseConfig
    from pipelines.parse_replays import run as parse
    from pipelines.pokemon.generated import GeneratedConfig

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--battles", type=int, default=200, help="generated gen9randombattle battles")
    parser.add_argument("--context", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=20, help="epochs the loader streams in one pass")
    parser.add_argument("--steps", type=int, default=60, help="timed trainer steps")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, CPUS],
                        help="torch intra-op threads of the trainer (each measured; the fastest is compared)")
    args = parser.parse_args()

    from pipelines.ray_start import start_ray

    start_ray(num_cpus=CPUS, log_to_driver=False)  # before `import ray`: token auth, servers on 127.0.0.1
    import ray

    work = Path(tempfile.mkdtemp(prefix="loader-vs-trainer-"))
    try:
        t0 = time.perf_counter()
        published = parse(ParseConfig(source="generated", out=str(work), formats=["gen9randombattle"],
                                      options=GeneratedConfig(num_battles=args.battles, p1="heuristic",
                                                                p2="random", seed=7)),
                          log=lambda *_: None)
        print(f"shards: {args.battles} battles → {published.path.name} in {time.perf_counter() - t0:.0f}s")
        first_s, total_s, samples, num_batches, num_windows, batches = measure_loader(
            str(published.path), args.context, args.batch_size, 0, args.epochs)
        per_batch = samples / num_batches
        steady_rate = (samples - per_batch) / (total_s - first_s)
        print(f"windows: {num_windows} of {args.context} turns; {num_batches // args.epochs} batches of "
              f"{args.batch_size} per epoch, {args.epochs} epochs in one stream")
        print(f"loader: first batch after {first_s:.2f}s (stream start, shard decode); {samples} samples in "
              f"{total_s:.2f}s = {samples / total_s:.0f} samples/s; after the first batch {steady_rate:.0f} samples/s "
              f"({(num_batches - 1) / (total_s - first_s):.0f} batches/s)")
        loader_rate = samples / total_s
        trainer_rate = 0.0
        for threads in args.threads:  # the fastest trainer is the one the loader must outrun
            train_s, train_samples, steps = measure_trainer(batches, args.context, args.steps, threads)
            trainer_rate = max(trainer_rate, train_samples / train_s)
            print(f"trainer tiny, {threads} thread(s): {train_samples} samples in {train_s:.2f}s = "
                  f"{train_samples / train_s:.0f} samples/s ({steps / train_s:.1f} steps/s; load average "
                  f"{os.getloadavg()[0]:.1f})")
        print(f"RESULT loader {steady_rate:.0f} samples/s after its first batch ({loader_rate:.0f} with start-up), "
              f"fastest trainer {trainer_rate:.0f} samples/s: loader/trainer = {steady_rate / trainer_rate:.1f}× "
              f"({loader_rate / trainer_rate:.1f}× with start-up; goal ≥ 10×)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        ray.shutdown()


if __name__ == "__main__":
    main()

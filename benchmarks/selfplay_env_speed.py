"""Self-play environment steps per second: Ray runner actors next to a single-process loop, on the same games.

    python benchmarks/selfplay_env_speed.py --shards OUT/melee_frames/<version>
    python benchmarks/selfplay_env_speed.py            # synthetic games, parsed first

Both sides step the same environment (``MeleeRunner``: the world model, the learner's policy, league opponents drawn
from a fixed mix of random and recorded controllers) with the same total number of games. The single process runs
all games in one ``MeleeRunner``; the Ray side splits them over ``--runners`` actors of ``--cpus-per-runner`` CPUs
and collects from all at once, as ``training/selfplay.py`` does. Blocks alternate (single, Ray, single, Ray, ...) so
drift of the machine's load falls on both; the ratio is printed per block and overall.
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time

import torch

from models.ppo_policy import RecurrentPolicy, RecurrentPolicyConfig
from models.world_model import WorldModel, WorldModelConfig
from pipelines.parse_replays import ParseConfig
from pipelines.parse_replays import run as parse
from pipelines.ray_start import start_ray
from training.league import Opponent
from training.melee.selfplay import NUM_ACTIONS, OBS_WIDTH, MeleeRunner


def _draw():
    kinds = itertools.cycle([Opponent("weak", "random"), Opponent("strong", "replay")])
    return lambda: next(kinds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shards", help="a melee_frames version (default: synthetic games parsed here)")
    parser.add_argument("--games", type=int, default=8, help="games stepped at once, in total")
    parser.add_argument("--runners", type=int, default=2)
    parser.add_argument("--cpus-per-runner", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=32, help="steps per game per block")
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--world-model-preset", default="tiny")
    args = parser.parse_args()

    start_ray(num_cpus=2, log_to_driver=False)
    import ray  # after start_ray, which imports it first (Ray reads its single-machine switch once, at import)

    shards = args.shards
    if shards is None:
        shards = str(parse(ParseConfig.tiny(source="slp", out=tempfile.mkdtemp(), num_battles=4),
                           log=lambda *_: None).path)
    torch.manual_seed(0)
    world = WorldModel(WorldModelConfig.preset(args.world_model_preset)).eval()
    policy_cfg = RecurrentPolicyConfig(d_obs=OBS_WIDTH, num_actions=NUM_ACTIONS)
    weights = RecurrentPolicy(policy_cfg).state_dict()
    common = dict(seed_frames=30, max_frames=600)
    single = MeleeRunner(world, shards, policy_cfg, num_envs=args.games, seed=0, draw_opponent=_draw(), **common)
    runner_class = ray.remote(num_cpus=args.cpus_per_runner)(MeleeRunner)
    per_runner = args.games // args.runners
    actors = [runner_class.remote(world, shards, policy_cfg, num_envs=per_runner, seed=i + 1,
                                  draw_opponent=_draw(), **common) for i in range(args.runners)]
    ref = ray.put(weights)
    ray.get([a.collect.remote(ref, 2) for a in actors])  # actors started and warm
    single.collect(weights, 2)
    totals = {"single": [0, 0.0], "ray": [0, 0.0]}
    for block in range(args.blocks):
        t0 = time.perf_counter()
        rollout, _ = single.collect(weights, args.steps)
        single_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        results = ray.get([a.collect.remote(ref, args.steps) for a in actors])
        ray_s = time.perf_counter() - t0
        single_steps = rollout.actions.numel()
        ray_steps = sum(r.actions.numel() for r, _ in results)
        totals["single"][0] += single_steps
        totals["single"][1] += single_s
        totals["ray"][0] += ray_steps
        totals["ray"][1] += ray_s
        print(f"block {block}: single process {single_steps / single_s:8.1f} steps/s, {args.runners} Ray runners "
              f"{ray_steps / ray_s:8.1f} steps/s, ratio {(ray_steps / ray_s) / (single_steps / single_s):.2f}")
    single_rate = totals["single"][0] / totals["single"][1]
    ray_rate = totals["ray"][0] / totals["ray"][1]
    print(f"overall ({args.games} games, {args.world_model_preset} world model): single process "
          f"{single_rate:.1f} steps/s, {args.runners} Ray runners x {args.cpus_per_runner} CPU {ray_rate:.1f} "
          f"steps/s, ratio {ray_rate / single_rate:.2f}")


if __name__ == "__main__":
    main()

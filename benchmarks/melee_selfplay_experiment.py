"""Self-play in the Melee world model, measured: the trained agent's predicted damage ratio (damage dealt ÷ damage
taken, in percent, summed over whole games) against a random-controller opponent and against the replay's recorded
controller, beside the same figures for a uniform-random agent over the same 25 controller actions.

    python benchmarks/melee_selfplay_experiment.py                      # the shared replays, tiny world model
    python benchmarks/melee_selfplay_experiment.py --shards OUT/melee_frames/<v> --world-model RUN/.../checkpoint_X

1. Without ``--shards``: parse ``--input`` (.slp files) into a melee_frames version; without ``--world-model``:
   train a ``--wm-preset`` world model on it for ``--wm-steps`` steps (``training/melee/world_model.py``);
2. ``training/selfplay.py --env melee`` for ``--updates`` PPO updates (timed);
3. ``--games`` games per agent and opponent in the world model (``MeleeRunner``, the same seeding, frames and time
   limit as training; every game played to its end or the time limit), with the run's last checkpoint and with the
   uniform-random agent: damage dealt and taken, stocks taken and lost, score; ``results.json`` and the rating curve.

Every figure is the world model's prediction of the game, not the game: a small world model trained on few replays
predicts damage poorly, and an agent can learn to exploit its errors. The ratio says how the agent does in the
model it was trained in.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from models.ppo_policy import RecurrentPolicy
from pipelines.melee.source import SlpConfig
from pipelines.parse_replays import ParseConfig
from pipelines.parse_replays import run as parse
from training.checkpoints import read_checkpoint
from training.league import Opponent
from training.loop import latest_checkpoint
from training.melee.selfplay import MeleeRunner, load_world_model
from training.melee.world_model import WorldModelTrainConfig
from training.melee.world_model import run as train_world_model
from training.selfplay import SelfPlayConfig, run_to_end
from training.selfplay_report import ReportConfig, report

REPO_ROOT = Path(__file__).resolve().parents[1]


def uniform_policy(policy_cfg):
    """The random agent: the policy with a zero actor head, so every action has probability 1/25 at every frame."""
    policy = RecurrentPolicy(policy_cfg)
    with torch.no_grad():
        policy.actor.weight.zero_()
        policy.actor.bias.zero_()
    return policy


def play(world_model, cfg, policy_cfg, weights: dict, opponent, games: int, seed: int) -> dict:
    """``games`` whole games of ``weights`` against ``opponent`` (a league ``Opponent``): summed terms and score."""
    o = cfg.options
    runner = MeleeRunner(world_model, o.shards, policy_cfg, num_envs=min(games, 8), seed=seed,
                         seed_frames=o.seed_frames, max_frames=o.max_frames,
                         reward_per_percent=o.reward_per_percent, draw_opponent=lambda: opponent)
    finished = []
    while len(finished) < games:
        _, episodes = runner.collect(weights, o.max_frames)
        finished += episodes
    finished = finished[:games]
    total = {k: sum(e.terms[k] for e in finished) for k in finished[0].terms}
    return {"games": len(finished), **total, "frames": sum(e.frames for e in finished),
            "damage_ratio": total["damage_dealt"] / max(total["damage_taken"], 1e-9),
            "score": sum(e.score for e in finished) / len(finished)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", default=str(REPO_ROOT.parent / "shared/data/melee/slp"), help=".slp files")
    parser.add_argument("--work-dir", default="/tmp/replayforge_melee_selfplay_experiment")
    parser.add_argument("--shards", default="", help="a melee_frames version (empty: parse --input)")
    parser.add_argument("--world-model", default="", help="a world-model checkpoint (empty: train one)")
    parser.add_argument("--wm-preset", default="tiny")
    parser.add_argument("--wm-steps", type=int, default=1000)
    parser.add_argument("--updates", type=int, default=60, help="PPO updates")
    parser.add_argument("--games", type=int, default=32, help="evaluation games per agent and opponent")
    parser.add_argument("--max-frames", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    work = Path(args.work_dir)
    shards = args.shards
    if not shards:
        shards = str(parse(ParseConfig(source="slp", input=args.input, out=str(work / "shards"),
                                       options=SlpConfig(min_frames=0, allow_cpu=True))).path)
    world_model = args.world_model
    t0 = time.monotonic()
    if not world_model:
        wm_out = work / "world_model"
        train_world_model(WorldModelTrainConfig(shards=shards, out=str(wm_out), preset=args.wm_preset,
                                                steps=args.wm_steps, context=64, batch_size=16,
                                                eval_every=args.wm_steps, checkpoint_every=args.wm_steps,
                                                log_every=100, cpus_per_worker=1.0, torch_threads=1,
                                                wandb_mode="disabled"))
        world_model = latest_checkpoint(str(wm_out))
    wm_s = time.monotonic() - t0
    cfg = SelfPlayConfig.from_flags(out=str(work / "run"), env="melee", shards=shards, world_model=world_model,
                                    preset="full", updates=args.updates, max_frames=args.max_frames, seed=args.seed,
                                    wandb_mode="disabled")
    last, train_s = run_to_end(cfg)
    trained = read_checkpoint(last, kind="melee_selfplay")
    policy_cfg = trained.build_config()
    torch.manual_seed(args.seed)
    model = load_world_model(cfg.options, cfg.seed)
    agents = {f"trained (update {trained.step})": trained.model,
              "uniform random": uniform_policy(policy_cfg).state_dict()}
    opponents = {"random controller": Opponent("weak", "random"), "replay controller": Opponent("strong", "replay")}
    rows = []
    for agent, weights in agents.items():
        for label, opponent in opponents.items():
            row = play(model, cfg, policy_cfg, weights, opponent, args.games, seed=args.seed + 17)
            rows.append({"agent": agent, "opponent": label, **row})
            print(f"[experiment] {agent} vs {label}: {row}")
    png = report(ReportConfig(out=cfg.out, png=str(work / "ratings.png")))

    print(f"\nworld model {world_model} ({wm_s / 60:.1f} min); self-play {args.updates} updates in "
          f"{train_s / 60:.1f} min")
    print(f"{'agent':22s} {'opponent':18s} {'games':>5s} {'dealt %':>8s} {'taken %':>8s} {'ratio':>6s} "
          f"{'stocks +/-':>10s} {'score':>6s}")
    for r in rows:
        print(f"{r['agent']:22s} {r['opponent']:18s} {r['games']:5d} {r['damage_dealt']:8.1f} "
              f"{r['damage_taken']:8.1f} {r['damage_ratio']:6.2f} "
              f"{r['stocks_taken']:4.0f}/{r['stocks_lost']:<4.0f} {r['score']:6.2f}")
    print(f"rating curve: {png}")
    (work / "results.json").write_text(json.dumps({"args": vars(args), "world_model": world_model,
                                                   "train_s": train_s, "checkpoint": last, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

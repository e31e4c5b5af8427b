"""The learning experiment anyone can rerun on a laptop: imitate the built-in heuristic player, then battle.

    python benchmarks/pokemon_bc_experiment.py                    # 5,000 battles, small model, ~8 min training
    python benchmarks/pokemon_bc_experiment.py --objective filtered_bc
    python benchmarks/pokemon_bc_experiment.py --objective exp_adv --formats gen9randombattle gen1ou

1. Generate battles of the heuristic player (p1) against the random player with the real simulator and parse them
   into shards (``generated`` source); 2. train on the heuristic side's trajectories only, on CPU, with Ray Train;
3. evaluate the checkpoint on a local Showdown server against poke-env's RandomPlayer, MaxBasePowerPlayer and
   SimpleHeuristicsPlayer (``--battles`` each, concurrently) and print win rates with 95% intervals.
``--formats`` names the formats to generate (``--num-battles`` each), train on (one policy for all) and evaluate
in; an OU format's evaluation teams are exported from the generator (``training/pokemon/evaluate.py``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from pipelines.parse_replays import ParseConfig
from pipelines.parse_replays import run as parse
from pipelines.pokemon.generated import GeneratedConfig
from shards_schema import storage
from training.loop import latest_checkpoint
from training.pokemon.evaluate import EvalConfig
from training.pokemon.evaluate import run as evaluate
from training.pokemon.offline_rl import TrainConfig
from training.pokemon.offline_rl import run as train
from training.pokemon.showdown_server import free_port


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work-dir", default="runs/bc-experiment")
    parser.add_argument("--num-battles", type=int, default=5000, help="generated battles per format")
    parser.add_argument("--formats", nargs="+", default=["gen9randombattle"], help="formats to train and evaluate on")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--objective", default="bc")
    parser.add_argument("--steps", type=int, default=500, help="optimizer steps of 32 windows")
    parser.add_argument("--battles", type=int, default=200, help="evaluation battles per opponent and format")
    args = parser.parse_args()
    work = Path(args.work_dir)
    t0 = time.monotonic()
    published = parse(ParseConfig(source="generated", out=str(work / "shards"), formats=args.formats,
                                  options=GeneratedConfig(num_battles=args.num_battles, p1="heuristic",
                                                            p2="random", seed=2026),
                                  progress_every_s=60))
    t1 = time.monotonic()
    out = work / f"{args.objective}-{args.preset}"
    train(TrainConfig(shards=str(published.path), out=str(out), preset=args.preset, objective=args.objective,
                      steps=args.steps, context=32, batch_size=32, checkpoint_every=500, log_every=100, sides=["p1"],
                      cpus_per_worker=1.0, wandb_mode="offline"))
    t2 = time.monotonic()
    rows = evaluate(EvalConfig(checkpoint=storage.join(latest_checkpoint(out), "state.pt"), port=free_port(),
                               battles=args.battles, formats=args.formats))
    t3 = time.monotonic()
    print(f"data {t1 - t0:.0f}s, training {t2 - t1:.0f}s, evaluation {t3 - t2:.0f}s")
    for r in rows:
        print(f"RESULT {args.objective} {args.preset} {r['format']} vs {r['opponent']}: {r['win_rate']:.1%} "
              f"[{r['ci_low']:.1%}, {r['ci_high']:.1%}] over {r['battles']} battles, {r['fallback_moves']} fallback "
              f"moves")


if __name__ == "__main__":
    main()

"""World-model learning experiment: Mamba-2 vs the MLP baseline vs copy-last-frame, on held-out games.

    python benchmarks/world_model_experiment.py                        # the shared real replays, tiny, 1,500 steps
    python benchmarks/world_model_experiment.py --input DIR_OF_SLP --preset base --steps 5000

1. Parse the replays into a melee_frames shard version (no length or CPU filter: the shared set is small);
2. train the Mamba-2 model and the MLP baseline with the same data, split, steps and seed on Ray Train (CPU);
3. print the last validation of each next to the copy-last-frame baseline on the same held-out games.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from pipelines.melee.source import SlpConfig
from pipelines.parse_replays import ParseConfig
from pipelines.parse_replays import run as parse
from training.melee.world_model import WorldModelTrainConfig
from training.melee.world_model import run as train

METRICS = ("val_loss_total", "val_action_acc", "val_action_change_acc", "val_position_mae")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--input", default=str(Path(__file__).resolve().parents[2] / "shared/data/melee/slp"))
    parser.add_argument("--work-dir", default="runs/world-model-experiment")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--validation-share", type=float, default=0.2)
    args = parser.parse_args()
    work = Path(args.work_dir)
    published = parse(ParseConfig(source="slp", input=args.input, out=str(work / "shards"),
                                  options=SlpConfig(min_frames=0, allow_cpu=True)))
    finals = {}
    for backbone in ("mamba2", "mlp"):
        out = work / f"{args.preset}-{backbone}"
        train(WorldModelTrainConfig(shards=str(published.path), out=str(out), preset=args.preset, backbone=backbone,
                                    steps=args.steps, context=args.context, batch_size=args.batch_size,
                                    validation_share=args.validation_share, eval_every=max(1, args.steps // 10),
                                    checkpoint_every=args.steps, log_every=100, cpus_per_worker=1.0, torch_threads=1,
                                    wandb_mode="offline"))
        with open(out / "eval.csv") as fh:
            finals[backbone] = list(csv.DictReader(fh))[-1]
    copy = {k.replace("copy_", "val_"): v for k, v in finals["mamba2"].items() if k.startswith("copy_")}
    rows = {"copy last frame": copy, f"MLP ({args.preset})": finals["mlp"],
            f"Mamba-2 ({args.preset})": finals["mamba2"]}
    categories = sorted(k for k in finals["mamba2"] if k.startswith("val_acc_"))
    print(f"{'model':18s} " + " ".join(f"{m[4:]:>18s}" for m in METRICS))
    for name, row in rows.items():
        print(f"{name:18s} " + " ".join(f"{float(row.get(m, 'nan')):18.4f}" for m in METRICS))
    print("per-category next-frame action accuracy:")
    print(f"{'model':18s} " + " ".join(f"{c[8:]:>13s}" for c in categories))
    for name, row in rows.items():
        print(f"{name:18s} " + " ".join(f"{float(row.get(c, 'nan')):13.3f}" for c in categories))


if __name__ == "__main__":
    main()

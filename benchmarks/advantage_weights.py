"""Which decisions an advantage-weighted policy up-weights: the weights exp(A / β) that ``exp_adv`` puts on each
held-out decision of its own data, by version and player side, and what a lower β would make of the same
advantages.

    python benchmarks/advantage_weights.py --checkpoint runs/exp1/exp_adv-mixed-seed0 \
        --out benchmarks/results/advantage-weights-2026-11-27 --betas 1 0.3 0.1 0.03

The checkpoint's own training config gives its versions (``--shards`` then ``--extra-shards``), context, held-out
battles (``--validation-share`` with its ``--seed``), advantage discount and β. For each version and side (p1, p2;
a generated version's manifest names the player of each), the first ``--windows`` held-out windows go through the
policy; every decision that reaches the actor loss contributes its advantage A = Q(s, a) - V(s) at the training
discount. Printed and written to ``weights.csv`` per group and β: decisions, mean and spread of A, the mean weight
(relative to all groups' mean: the group's share of the gradient against plain BC's), the share of weights outside
[0.8, 1.25], and the effective sample size (Σw)² / (n Σw²) as a share of n (1: every decision weighs the same, as in
BC).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np
import torch

from pipelines.pokemon.observation import vocabulary
from shards_schema.reader import open_version
from training import losses
from training.checkpoints import read_checkpoint
from training.pokemon.offline_rl import step_mask
from training.pokemon.windows import LoadTurnWindows, window_specs
from training.windows import first_windows


def held_out_advantages(model, version, version_uri: str, side: str, train: dict, windows: int,
                        batch_size: int = 64):
    """Advantages (at the training discount) of the held-out decisions of one side of one version (opened, and its
    URI for the loader), 1-D."""
    vocab_size = len(vocabulary(version.manifest.observation_version))
    specs = window_specs(version, train["context"], 0, [side], validation_share=train["validation_share"],
                         split_seed=train["seed"], validation=True)
    arrays = first_windows(specs, windows, LoadTurnWindows(version_uri, train["context"], vocab_size=vocab_size))
    found = []
    with torch.no_grad():
        for start in range(0, len(arrays.get("valid", ())), batch_size):
            batch = {k: torch.as_tensor(v[start:start + batch_size]) for k, v in arrays.items() if k != "window"}
            out = model(batch["tokens"], batch["numeric"], batch["legal"], batch["valid"])
            adv = losses.advantages(out.q_values.float(), out.values.float(), batch["action"])
            found.append(adv[..., train["advantage_gamma"]][step_mask(batch)].numpy())
    return np.concatenate(found) if found else np.zeros(0, np.float32)


def summarize(groups: dict[str, np.ndarray], betas: list[float]) -> list[dict]:
    """One row per group and β (see the module docstring)."""
    rows = []
    for beta in betas:
        weights = {name: losses.exp_advantage_weights(torch.as_tensor(adv), beta=beta).numpy()
                   for name, adv in groups.items()}
        overall = np.concatenate(list(weights.values())).mean()
        for name, adv in groups.items():
            w = weights[name]
            rows.append({"group": name, "beta": beta, "decisions": len(adv), "adv_mean": float(adv.mean()),
                         "adv_std": float(adv.std()), "adv_p05": float(np.quantile(adv, 0.05)),
                         "adv_p95": float(np.quantile(adv, 0.95)), "relative_weight": float(w.mean() / overall),
                         "share_outside_0.8_1.25": float(((w < 0.8) | (w > 1.25)).mean()),
                         "ess_share": float(w.sum() ** 2 / (len(w) * (w ** 2).sum()))})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, help="an exp_adv run folder or checkpoint (URI)")
    parser.add_argument("--out", required=True, help="folder for weights.csv")
    parser.add_argument("--windows", type=int, default=400, help="held-out windows per version and side")
    parser.add_argument("--betas", type=float, nargs="+", default=[1.0, 0.3, 0.1, 0.03],
                        help="temperatures to weigh the same advantages with (the checkpoint's own is added)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    ckpt = read_checkpoint(args.checkpoint, kind="pokemon_policy")
    train, model = ckpt.train_config, ckpt.build_model()
    groups = {}
    for number, uri in enumerate([train["shards"], *train.get("extra_shards", [])]):
        version = open_version(uri, check_sha256=False)
        config = version.manifest.config
        for side in ("p1", "p2"):
            name = f"v{number} {side} ({config.get(side, side)} vs {config.get('p2' if side == 'p1' else 'p1', '?')})"
            groups[name] = held_out_advantages(model, version, uri, side, train, args.windows)
    betas = sorted({train["exp_beta"], *args.betas}, reverse=True)
    rows = summarize(groups, betas)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "weights.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"checkpoint {ckpt.where} (objective {train['objective']}, β {train['exp_beta']}, discount index "
          f"{train['advantage_gamma']}, step {ckpt.step})")
    for row in rows:
        print(f"β {row['beta']:<5g} {row['group']:<40} n {row['decisions']:>6} A {row['adv_mean']:+.3f} ± "
              f"{row['adv_std']:.3f} [p5 {row['adv_p05']:+.3f}, p95 {row['adv_p95']:+.3f}] relative weight "
              f"{row['relative_weight']:.3f} outside [0.8, 1.25] {row['share_outside_0.8_1.25']:.1%} "
              f"ESS {row['ess_share']:.1%}")
    print(f"wrote {out / 'weights.csv'}")


if __name__ == "__main__":
    main()

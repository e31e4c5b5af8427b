"""Whether a policy's critic tells good choices from bad: the advantage A = Q(s, a) - V(s) (or another target and
baseline) it gives each held-out decision of its own data, per player, the weights exp(A / β) that ``exp_adv`` would
put on them, and how well the advantage alone tells the strongest player's decisions from the weakest's.

    python benchmarks/advantage_weights.py --checkpoint runs/mixed/bc-mc-seed0 \
        --out benchmarks/results/advantage-weights-mixed/mc --strongest search --weakest random

The checkpoint's own training config gives its versions (``--shards`` then ``--extra-shards``), context, held-out
battles (``--validation-share`` with its ``--seed``), critic target, rewards and advantage discount
(``--advantage-gamma`` picks another); the advantages are reported for each target (``--targets``: ``q``, the
critic's Q(s, a); ``return``, the decision's own discounted return) against each baseline (``--baselines``:
``mean``, the policy's V(s); ``max``, the best legal action's Q; ``zero``, none), as ``offline_rl.advantage``
computes them. A decision's player is the policy its version's manifest names for its side (a generated version's
``p1``/``p2``: ``search``, ``heuristic``, ``random``), else the side itself; the groups pool every version. For each
version and side the first ``--windows`` held-out windows go through the policy, and every decision that reaches the
actor loss adds its advantage at the training discount.

Printed and written: ``players.csv``, one row per target, baseline, player and β: decisions, mean and spread of A,
the share ``filtered_bc`` keeps (A ≥ 0), the mean weight relative to all decisions' mean (the player's share of the
gradient against plain BC's), the share of weights outside [0.8, 1.25] and the effective sample size (Σw)² / (n Σw²)
as a share of n; ``separation.csv``, one row per target, baseline and β: the AUC of telling the strongest player's
decisions from the weakest's by A (0.5: chance; the same at every β, as the weights are monotone in A), the
weakest's mean weight over the strongest's, and the effective sample size of all decisions. The chosen β is the
largest at which the weakest's weight is at most half the strongest's (the critic goal), i.e. the mildest weighting
that separates them; with none, the β with the lowest ratio.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from pipelines.pokemon.observation import vocabulary
from shards_schema.reader import open_version
from training import losses, outputs
from training.checkpoints import read_checkpoint
from training.pokemon.offline_rl import ADVANTAGE_BASELINES, ADVANTAGE_TARGETS, advantage, reward_shaping, step_mask
from training.pokemon.windows import LoadTurnWindows, window_specs
from training.windows import first_windows

WEIGHT_RATIO_GOAL = 0.5
"""The critic goal: the weakest player's decisions get at most this share of the strongest's mean weight."""


def held_out_advantages(model, version, version_uri: str, side: str, train: dict, windows: int,
                        kinds: list[tuple[str, str]], batch_size: int = 64) -> dict[tuple[str, str], np.ndarray]:
    """Advantages (at the training discount) of the held-out decisions of one side of one version (opened, and its
    URI for the loader), 1-D, per (target, baseline) of ``kinds`` (``offline_rl.advantage``; the returns are those
    of the checkpoint's rewards)."""
    vocab_size = len(vocabulary(version.manifest.observation_version))
    specs = window_specs(version, train["context"], 0, [side], validation_share=train["validation_share"],
                         split_seed=train["seed"], validation=True)
    shaping = reward_shaping(train.get("reward_hp", 0.0), train.get("reward_faint", 0.0))
    gammas = tuple(model.cfg.gammas) if any(target == "return" for target, _ in kinds) else None
    arrays = first_windows(specs, windows, LoadTurnWindows(version_uri, train["context"], vocab_size=vocab_size,
                                                           gammas=gammas, shaping=shaping))
    found = {kind: [] for kind in kinds}
    with torch.no_grad():
        for start in range(0, len(arrays.get("valid", ())), batch_size):
            batch = {k: torch.as_tensor(v[start:start + batch_size]) for k, v in arrays.items() if k != "window"}
            out = model(batch["tokens"], batch["numeric"], batch["legal"], batch["valid"])
            for target, baseline in kinds:
                adv = advantage(out, batch, baseline, target)[..., train["advantage_gamma"]]
                found[target, baseline].append(adv[step_mask(batch)].numpy())
    return {kind: np.concatenate(parts) if parts else np.zeros(0, np.float32) for kind, parts in found.items()}


def player_of(manifest_config: dict, side: str) -> str:
    """The player whose decisions a side of a version holds: the policy its manifest names for the side (generated
    versions), else the side."""
    return str(manifest_config.get(side, side))


def auc(positive: np.ndarray, negative: np.ndarray) -> float:
    """Probability that a random ``positive`` score exceeds a random ``negative`` one, ties counting half (the area
    under the ROC curve of telling them apart by score; Mann-Whitney U / (n_pos n_neg))."""
    if not len(positive) or not len(negative):
        raise ValueError("the AUC needs decisions of both players")
    ordered = np.sort(np.asarray(negative, np.float64))
    below = np.searchsorted(ordered, positive, side="left")
    not_above = np.searchsorted(ordered, positive, side="right")
    return float((below + 0.5 * (not_above - below)).sum() / (len(positive) * len(negative)))


def summarize(groups: dict[str, np.ndarray], betas: list[float], max_weight: float = 20.0) -> list[dict]:
    """One row per player and β (see the module docstring)."""
    rows = []
    for beta in betas:
        weights = {name: losses.exp_advantage_weights(torch.as_tensor(adv), beta=beta,
                                                      max_weight=max_weight).double().numpy()
                   for name, adv in groups.items()}
        overall = np.concatenate(list(weights.values())).mean()
        for name, adv in groups.items():
            w = weights[name]
            rows.append({"player": name, "beta": beta, "decisions": len(adv), "adv_mean": float(adv.mean()),
                         "adv_std": float(adv.std()), "adv_p05": float(np.quantile(adv, 0.05)),
                         "adv_p95": float(np.quantile(adv, 0.95)),
                         "filter_kept_share": float(losses.filtered_bc_weights(torch.as_tensor(adv)).mean()),
                         "relative_weight": float(w.mean() / overall),
                         "share_outside_0.8_1.25": float(((w < 0.8) | (w > 1.25)).mean()),
                         "ess_share": float(w.sum() ** 2 / (len(w) * (w ** 2).sum()))})
    return rows


def separation(groups: dict[str, np.ndarray], rows: list[dict], strongest: str, weakest: str) -> list[dict]:
    """One row per β: the AUC of telling ``strongest``'s decisions from ``weakest``'s by advantage, the weakest's
    mean weight over the strongest's, and the effective sample size of all decisions at that β."""
    for name in (strongest, weakest):
        if name not in groups:
            raise ValueError(f"no held-out decisions of player {name!r} (players: {sorted(groups)}); name them with "
                             "--strongest and --weakest")
    score = auc(groups[strongest], groups[weakest])
    out = []
    for beta in dict.fromkeys(r["beta"] for r in rows):
        at = {r["player"]: r for r in rows if r["beta"] == beta}
        weights = np.concatenate([losses.exp_advantage_weights(torch.as_tensor(a), beta=beta).double().numpy()
                                  for a in groups.values()])
        out.append({"beta": beta, "strongest": strongest, "weakest": weakest, "auc": score,
                    "weight_ratio": at[weakest]["relative_weight"] / at[strongest]["relative_weight"],
                    "ess_share": float(weights.sum() ** 2 / (len(weights) * (weights ** 2).sum()))})
    return out


def choose_beta(rows: list[dict]) -> dict:
    """The ``separation`` row of the β that ``exp_adv`` should train with: the largest β whose weight ratio meets
    ``WEIGHT_RATIO_GOAL``, else the one with the lowest ratio."""
    meeting = [r for r in rows if r["weight_ratio"] <= WEIGHT_RATIO_GOAL]
    return max(meeting, key=lambda r: r["beta"]) if meeting else min(rows, key=lambda r: r["weight_ratio"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, help="a run folder or checkpoint (URI) of the policy")
    parser.add_argument("--out", required=True, help="folder for players.csv and separation.csv")
    parser.add_argument("--windows", type=int, default=400, help="held-out windows per version and side")
    parser.add_argument("--betas", type=float, nargs="+", default=[1.0, 0.3, 0.1, 0.03],
                        help="temperatures to weigh the same advantages with (the checkpoint's own is added)")
    parser.add_argument("--strongest", default="search", help="the player whose decisions should weigh most")
    parser.add_argument("--weakest", default="random", help="the player whose decisions should weigh least")
    parser.add_argument("--advantage-gamma", type=int, default=None,
                        help="index of the discount factor whose advantage to report (default: the checkpoint's)")
    parser.add_argument("--baselines", nargs="+", default=["mean", "max"], choices=ADVANTAGE_BASELINES,
                        help="advantage baselines to report (the checkpoint's own is what its actor trained with)")
    parser.add_argument("--targets", nargs="+", default=["q"], choices=ADVANTAGE_TARGETS,
                        help="what the action is worth in A = target - baseline: the critic's Q, or the return")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    ckpt = read_checkpoint(args.checkpoint, kind="pokemon_policy")
    train, model = ckpt.train_config, ckpt.build_model()
    if args.advantage_gamma is not None:
        train = {**train, "advantage_gamma": args.advantage_gamma}
    kinds = [(target, baseline) for target in args.targets for baseline in args.baselines]
    groups: dict[tuple[str, str], dict[str, list[np.ndarray]]] = {kind: {} for kind in kinds}
    for uri in [train["shards"], *train.get("extra_shards", [])]:
        version = open_version(uri, check_sha256=False)
        for side in ("p1", "p2"):
            found = held_out_advantages(model, version, uri, side, train, args.windows, kinds)
            for kind, adv in found.items():
                groups[kind].setdefault(player_of(version.manifest.config, side), []).append(adv)
    betas = sorted({train["exp_beta"], *args.betas}, reverse=True)
    rows, split = [], []
    for target, baseline in kinds:
        pooled = {name: np.concatenate(parts) for name, parts in groups[target, baseline].items()}
        these = summarize(pooled, betas)
        separated = separation(pooled, these, args.strongest, args.weakest)
        chosen = choose_beta(separated)
        rows += [{"target": target, "baseline": baseline, **r} for r in these]
        split += [{"target": target, "baseline": baseline, **r, "chosen": r is chosen} for r in separated]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    outputs.write_csv(str(out / "players.csv"), rows)
    outputs.write_csv(str(out / "separation.csv"), split)
    print(f"checkpoint {ckpt.where} (objective {train['objective']}, critic {train.get('critic_target', 'td')}, "
          f"baseline {train.get('advantage_baseline', 'mean')}, β {train['exp_beta']}, discount index "
          f"{train['advantage_gamma']}, step {ckpt.step})")
    for row in rows:
        print(f"{row['target']:<6} {row['baseline']:<4} β {row['beta']:<5g} {row['player']:<10} "
              f"n {row['decisions']:>6} A {row['adv_mean']:+.3f} ± {row['adv_std']:.3f} [p5 {row['adv_p05']:+.3f}, "
              f"p95 {row['adv_p95']:+.3f}] filter keeps {row['filter_kept_share']:.1%}, relative weight "
              f"{row['relative_weight']:.3f}, outside [0.8, 1.25] {row['share_outside_0.8_1.25']:.1%}, "
              f"ESS {row['ess_share']:.1%}")
    for row in split:
        print(f"{row['target']:<6} {row['baseline']:<4} β {row['beta']:<5g} AUC {row['strongest']} vs "
              f"{row['weakest']} {row['auc']:.3f}, "
              f"weight ratio {row['weight_ratio']:.3f}, ESS {row['ess_share']:.1%}"
              f"{'  <- chosen' if row['chosen'] else ''}")
    print(f"wrote {out / 'players.csv'} and {out / 'separation.csv'}")


if __name__ == "__main__":
    main()

"""The mixed-quality benchmark's data: generated battles between players of three skill levels, one version per
pairing, and the share of the decisions each player holds.

    python benchmarks/mixed_quality_data.py --out out/mixed --num-battles 1200 \
        --results benchmarks/results/mixed-quality-data

The recipe: every pairing of ``search``, ``heuristic`` and ``random`` (in that order of strength: the search player
beats SimpleHeuristicsPlayer 86.5%, the heuristic player 71%, the random player ~0.5%) plays ``--num-battles``
gen9randombattle battles, each pairing with its own seed (``--seed`` + its position), parsed by the parse job as a
user runs it (``--source generated``). Both sides of every battle are kept, so each player holds about a third of the
decisions; the recipe asks that no player hold more than half and the weakest at least a quarter
(``check_recipe``), and the trainers hold out battles for validation by a hash of the battle id
(``--validation-share``), both sides together. Printed and written to ``composition.csv``: each version's path and
pairing, and each player's decisions (rows with an action) and share. An existing version of the same config is
published again under the same name (byte-identical), so running the script twice reuses nothing but costs nothing
new in the results.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

# benchmarks/ is not an installed package (pyproject's packages.find): the checkout's root on the path imports it
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.advantage_weights import player_of
from shards_schema.reader import open_version
from training import outputs

PARSE = Path(__file__).resolve().parents[1] / "pipelines" / "parse_replays.py"
PAIRINGS = (("search", "heuristic"), ("heuristic", "random"), ("search", "random"))
MAX_SHARE, MIN_WEAKEST_SHARE = 0.5, 0.25


def generate(out: str, p1: str, p2: str, num_battles: int, seed: int, fmt: str, log: Path) -> str:
    """One pairing's version, parsed by the job as a user runs it; its folder (the job's last line)."""
    argv = [sys.executable, str(PARSE), "--source", "generated", "--out", out, "--formats", fmt,
            "--num-battles", str(num_battles), "--seed", str(seed), "--p1", p1, "--p2", p2, "--shard-size-mb", "16"]
    with open(log, "w") as fh:
        subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, check=True)
    return log.read_text().strip().splitlines()[-1].strip()


def decisions_by_side(version) -> dict[str, int]:
    """Rows with an action (decisions) of each player side of a version."""
    counts: dict[str, int] = {}
    for entry in version.manifest.files:
        table = version.read_table(entry.path, ["player_side", "action"])
        decided = table.filter(pc.greater_equal(table.column("action"), 0)).column("player_side").to_numpy(
            zero_copy_only=False)
        for side, n in zip(*np.unique(decided, return_counts=True), strict=True):
            counts[str(side)] = counts.get(str(side), 0) + int(n)
    return counts


def composition(counted: list[tuple[dict, dict[str, int]]]) -> list[dict]:
    """One row per player over versions given as (manifest config, ``decisions_by_side``): its decisions and share of
    all; a side's player is the policy the version's manifest names for it
    (``benchmarks/advantage_weights.player_of``)."""
    totals: dict[str, int] = {}
    for config, by_side in counted:
        for side, n in by_side.items():
            player = player_of(config, side)
            totals[player] = totals.get(player, 0) + n
    everything = sum(totals.values())
    return [{"player": player, "decisions": n, "share": round(n / everything, 4)} for player, n in totals.items()]


def check_recipe(rows: list[dict], weakest: str) -> list[str]:
    """What the composition breaks of the recipe (empty: it holds): a player above ``MAX_SHARE`` of the decisions,
    fewer than three players, or the ``weakest`` below ``MIN_WEAKEST_SHARE``."""
    problems = [f"{r['player']} holds {r['share']:.1%} of the decisions (at most {MAX_SHARE:.0%})"
                for r in rows if r["share"] > MAX_SHARE]
    if len(rows) < 3:
        problems.append(f"{len(rows)} players; the recipe needs three skill levels")
    share = {r["player"]: r["share"] for r in rows}.get(weakest, 0.0)
    if share < MIN_WEAKEST_SHARE:
        problems.append(f"the weakest player, {weakest}, holds {share:.1%} (at least {MIN_WEAKEST_SHARE:.0%})")
    return problems


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="output root of the parse jobs")
    parser.add_argument("--num-battles", type=int, default=1200, help="battles per pairing")
    parser.add_argument("--seed", type=int, default=500, help="seed of the first pairing (the others add 1, 2)")
    parser.add_argument("--format", default="gen9randombattle")
    parser.add_argument("--versions", nargs="*", default=[],
                        help="versions made before, instead of generating (their composition only)")
    parser.add_argument("--results", default="", help="folder for composition.csv (default: --out)")
    args = parser.parse_args(argv)
    paths = list(args.versions)
    rows_out = []
    if not paths:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        for k, (p1, p2) in enumerate(PAIRINGS):
            path = generate(args.out, p1, p2, args.num_battles, args.seed + k, args.format,
                            Path(args.out) / f"gen-{p1}-{p2}.log")
            print(f"[mixed] {p1} vs {p2} ({args.num_battles} battles, seed {args.seed + k}): {path}")
            paths.append(path)
    counted = []  # (manifest config, decisions by side) of each version: its shards read once
    for path in paths:
        version = open_version(path)
        config, by_side = version.manifest.config, decisions_by_side(version)
        counted.append((config, by_side))
        rows_out.append({"version": path, "p1": config.get("p1", ""), "p2": config.get("p2", ""),
                         "inputs": version.manifest.counts.inputs, "written": version.manifest.counts.written,
                         "player": "", "decisions": sum(by_side.values()), "share": ""})
    players = composition(counted)
    rows_out += [{"version": "", "p1": "", "p2": "", "inputs": "", "written": "", **r} for r in players]
    for r in players:
        print(f"[mixed] {r['player']}: {r['decisions']:,} decisions ({r['share']:.1%})")
    problems = check_recipe(players, weakest="random")
    print("[mixed] recipe: " + ("holds" if not problems else "broken: " + "; ".join(problems)))
    results = Path(args.results or args.out)
    results.mkdir(parents=True, exist_ok=True)
    outputs.write_csv(str(results / "composition.csv"), rows_out)
    print(f"[mixed] wrote {results / 'composition.csv'}")
    if problems:
        sys.exit(1)


if __name__ == "__main__":
    main()

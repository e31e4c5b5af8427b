"""Policies trained only on generated battles, rated on the ladder: each arm (an objective on a choice of versions and
sides) trained with several seeds, then every checkpoint against poke-env's bots in one gauntlet ladder.

    python benchmarks/teacher_experiment.py --out runs/teacher-exp --port 8741 \
        --arm bc-search=bc@<search-vs-search version> \
              bc-mixed=bc@<search-vs-search version>+<search-vs-heuristic version> \
              exp_adv-mixed=exp_adv@<search-vs-search version>+<search-vs-heuristic version> \
        --seeds 0 1 2 --steps 3000 --d-model 128 --action-head slots --results benchmarks/results/teacher-exp

An arm is ``name=objective[,flag=value...]@version[+version...]``: the policy trains on both sides of every battle of
its versions (``--extra-shards`` past the first), with the trainer's flags the arm adds (``sides=p1`` for one side
only, ``critic-target=mc``, ``exp-beta=0.3``: ``--sides p1`` and so on; a list's items are separated by ``/``).
Runs go ``--parallel`` at a time, each a ``replayforge-train-policy`` process with one CPU and one torch thread, with
a validation share for imitation accuracy. The ladder (``--checkpoints-meet``
off: each checkpoint meets the bots, not the other checkpoints) gives every seed's win rate with its Wilson interval;
``runs.csv`` has one row per run (arm, seed, training seconds, validation accuracy, win rate and interval per
opponent) and ``arms.csv`` one per arm (the seeds' mean, their range, and the pooled battles' interval). A run that
already holds its last step's checkpoint under ``--out`` is not trained again, only rated (its seconds left empty).
"""

from __future__ import annotations

import csv
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.cli import command_config
from training import outputs
from training.checkpoints import read_checkpoint
from training.loop import latest_checkpoint
from training.pokemon import ladder
from training.pokemon.evaluate import wilson_interval

TRAINER = Path(__file__).resolve().parents[1] / "training" / "pokemon" / "offline_rl.py"


@dataclass(frozen=True, kw_only=True)
class ExperimentConfig:
    """Configuration of a teacher experiment.

    Attributes:
        out: local folder for the runs (``<arm>-seed<k>``), the ladder (``ladder/``) and the logs.
        port: port of the ladder's local Showdown server (127.0.0.1).
        arm: ``name=objective[,flag=value...]@version[+version...]`` of each arm: what it trains on and how.
        seeds: training seeds of every arm.
        preset: the policy's size preset.
        d_model: the policy's width (0: the preset's).
        action_head: linear or slots.
        steps: optimizer steps of every run.
        batch_size: windows per step.
        context: turns per window.
        lr: learning rate.
        validation_share: battles held out for the validation accuracy.
        parallel: runs trained at once (each one CPU, one torch thread).
        ladder_battles: battles of each checkpoint against each bot (half each side); 0 trains (or reuses) the runs
            and writes ``runs.csv`` without a ladder (pilots whose checkpoints a later experiment rates).
        ladder_players: poke-env bots of the ladder (random is the anchor).
        formats: formats of the ladder.
        results: folder the CSVs are copied to (empty: only under ``out``).
    """

    out: str
    port: int
    arm: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    preset: str = "small"
    d_model: int = 0
    action_head: str = "slots"
    steps: int = 3000
    batch_size: int = 32
    context: int = 32
    lr: float = 3e-4
    validation_share: float = 0.05
    parallel: int = 2
    ladder_battles: int = 200
    ladder_players: list[str] = field(default_factory=lambda: ["random", "heuristic"])
    formats: list[str] = field(default_factory=lambda: ["gen9randombattle"])
    results: str = ""

    def __post_init__(self):
        if not self.arm:
            raise ValueError("give at least one --arm name=objective[,flag=value...]@version[+version...]")
        for arm in self.arm:
            parse_arm(arm)


def parse_arm(text: str) -> tuple[str, str, list[str], dict[str, list[str]]]:
    """``name=objective,flag=value@v1+v2`` → (name, objective, versions, {flag: values}); a flag's values are
    separated by ``/`` (``sides=p1/p2``)."""
    name, sep, rest = text.partition("=")
    spec, at, versions = rest.partition("@")
    objective, *pairs = spec.split(",")
    flags = {}
    for pair in pairs:
        flag, eq, value = pair.partition("=")
        if not (flag and eq and value):
            raise ValueError(f"an arm's flag is flag=value, not {pair!r} (in {text!r})")
        flags[flag] = value.split("/")
    if not (sep and at and name and objective and versions):
        raise ValueError(f"an arm is name=objective[,flag=value...]@version[+version...], not {text!r}")
    return name, objective, versions.split("+"), flags


def finished(run: Path, steps: int) -> bool:
    """Whether ``run`` already holds a checkpoint of its last step (an experiment run again reuses it)."""
    newest = latest_checkpoint(run)
    return newest is not None and read_checkpoint(newest).step >= steps


def train_one(cfg: ExperimentConfig, arm: str, seed: int) -> dict:
    """One run of the trainer as its own process; (arm, seed, run folder, seconds, last validation accuracy).
    A run already finished under ``out`` is reused: its seconds are left empty."""
    name, objective, versions, flags = parse_arm(arm)
    run = Path(cfg.out) / f"{name}-seed{seed}"
    row = {"arm": name, "objective": objective, "flags": " ".join(f"{k}={'/'.join(v)}" for k, v in flags.items()),
           "versions": " ".join(versions), "seed": seed, "run": str(run)}
    if finished(run, cfg.steps):
        return {**row, "train_s": None, "val_accuracy": last_validation(run)}
    argv = [sys.executable, str(TRAINER), "--shards", versions[0], *(["--extra-shards", *versions[1:]]
                                                                      if versions[1:] else []),
            "--out", str(run), "--objective", objective, "--preset", cfg.preset, "--d-model", str(cfg.d_model),
            "--action-head", cfg.action_head, "--steps", str(cfg.steps), "--batch-size", str(cfg.batch_size),
            "--context", str(cfg.context), "--lr", str(cfg.lr), "--seed", str(seed),
            "--validation-share", str(cfg.validation_share), "--eval-every", str(max(1, cfg.steps // 4)),
            "--checkpoint-every", str(cfg.steps), "--log-every", str(max(1, cfg.steps // 20)),
            "--cpus-per-worker", "1", "--torch-threads", "1", "--wandb-mode", "disabled",
            *(item for flag, values in flags.items() for item in (f"--{flag}", *values))]
    start = time.monotonic()
    with open(Path(cfg.out) / f"{name}-seed{seed}.log", "w") as log:
        subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, check=True)
    return {**row, "train_s": round(time.monotonic() - start, 1), "val_accuracy": last_validation(run)}


def last_validation(run: Path) -> float | None:
    """The last ``val_accuracy`` of a run's ``eval.csv`` (None without one)."""
    path = run / "eval.csv"
    if not path.exists():
        return None
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    return round(float(rows[-1]["val_accuracy"]), 4) if rows else None


def summarize(runs: list[dict], matrix: list[dict]) -> tuple[list[dict], list[dict]]:
    """(one row per run with its win rate and interval against each opponent, one row per arm and opponent with the
    seeds' mean, lowest and highest, and the interval of the seeds' battles pooled)."""
    by_run = {r["run"].rstrip("/"): r for r in runs}
    for m in matrix:
        if m["row"] in by_run:
            r = by_run[m["row"]]
            r[f"{m['format']} vs {m['column']}"] = round(m["win_rate"], 4)
            r[f"{m['format']} vs {m['column']} interval"] = f"[{m['ci_low']:.4f}, {m['ci_high']:.4f}]"
            r.setdefault("battles", {})[(m["format"], m["column"])] = (m["win_rate"] * m["battles"], m["battles"])
    arms = []
    for name in dict.fromkeys(r["arm"] for r in runs):
        seeds = [r for r in runs if r["arm"] == name]
        for key in seeds[0].get("battles", {}):
            rates = [r["battles"][key][0] / r["battles"][key][1] for r in seeds]
            score, battles = (sum(r["battles"][key][i] for r in seeds) for i in (0, 1))
            low, high = wilson_interval(score, battles)
            arms.append({"arm": name, "format": key[0], "opponent": key[1], "seeds": len(seeds),
                         "mean": round(sum(rates) / len(rates), 4), "lowest": round(min(rates), 4),
                         "highest": round(max(rates), 4), "pooled_battles": battles,
                         "pooled_interval": f"[{low:.4f}, {high:.4f}]",
                         "val_accuracy_mean": _mean([r["val_accuracy"] for r in seeds])})
    for r in runs:
        r.pop("battles", None)
    return runs, arms


def _mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return round(sum(values) / len(values), 4) if values else None


def main(argv: list[str] | None = None) -> None:
    cfg = command_config(ExperimentConfig, argv)
    Path(cfg.out).mkdir(parents=True, exist_ok=True)
    jobs = [(arm, seed) for arm in cfg.arm for seed in cfg.seeds]
    with ThreadPoolExecutor(cfg.parallel) as pool:
        runs = list(pool.map(lambda job: train_one(cfg, *job), jobs))
    for r in runs:
        took = f"{r['train_s']:.0f} s" if r["train_s"] is not None else "finished before, reused"
        print(f"[experiment] {r['arm']} seed {r['seed']}: {took}, validation accuracy {r['val_accuracy']}")
    matrix = []
    if cfg.ladder_battles:
        matrix = ladder.run(ladder.LadderConfig(
            out=str(Path(cfg.out) / "ladder"), port=cfg.port, checkpoints=[r["run"] for r in runs],
            players=list(cfg.ladder_players), battles_per_pair=cfg.ladder_battles, formats=list(cfg.formats),
            checkpoints_meet=False))["matrix"]
    runs, arms = summarize(runs, matrix)
    for folder in filter(None, (cfg.out, cfg.results)):
        outputs.write_csv(str(Path(folder) / "runs.csv"), runs)
        if arms:
            outputs.write_csv(str(Path(folder) / "arms.csv"), arms)
    for a in arms:
        print(f"[experiment] {a['arm']} vs {a['opponent']} ({a['format']}): mean {a['mean']:.1%} over "
              f"{a['seeds']} seeds (lowest {a['lowest']:.1%}, highest {a['highest']:.1%}), pooled "
              f"{a['pooled_interval']} over {a['pooled_battles']} battles")


if __name__ == "__main__":
    main()

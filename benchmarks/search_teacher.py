"""The `search` teacher against the generator's scripted players: win rates, cost per decision and per battle.

    python benchmarks/search_teacher.py                       # 200 battles per pair per format
    python benchmarks/search_teacher.py --battles 40 --workers 2

Plays, in each format, search vs heuristic, search vs random and the baseline heuristic vs random, all in the same
run, through the real generator (``pipelines/showdown/generate_battles.js``). Each pair plays battle indices
0..N/2-1 twice with the same seed, once with the first player as p1 and once as p2, so both players get both teams
of every battle. A win rate counts a tie as half, with its 95% Wilson interval. A short search vs search run gives
the cost of a battle where both sides search (the costliest teacher set-up).

Cost: each generator process's CPU time comes from ``os.wait4`` (user + system), so battles per CPU-second hold
on a machine shared with other jobs, where wall time does not; the search player reports its own ms per decision
(wall and CPU) on stderr when its process exits. The projection for 5,000 battles on 2 cores is
``5000 * cpu_s_per_battle / 2``. Writes ``benchmarks/results/search-teacher-<date>/results.csv``.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import re
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pipelines.pokemon.dex import REPO_ROOT, node_env
from training.pokemon.evaluate import wilson_interval

GENERATOR = REPO_ROOT / "pipelines" / "showdown" / "generate_battles.js"
FORMATS = ("gen9randombattle", "gen1ou")
PAIRS = (("search", "heuristic"), ("search", "random"), ("heuristic", "random"))
TEACHER_BATTLES = 5000
TEACHER_CORES = 2
SEARCH_TIMING = re.compile(r"search player: decisions=(\d+) ms_per_decision=([\d.]+) cpu_ms_per_decision=([\d.]+)")
PLAYER_FAULTS = ("policy chose illegal", "policy crashed")


def run_generator(fmt: str, p1: str, p2: str, first: int, count: int, seed: int) -> dict:
    """One generator process: its records, stderr and CPU seconds (from ``os.wait4``, so only this process)."""
    cmd = ["node", str(GENERATOR), "--format", fmt, "--num-battles", str(count), "--first-index", str(first),
           "--seed", str(seed), "--p1", p1, "--p2", p2]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=node_env(), cwd=REPO_ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if proc.returncode != 0:
        raise RuntimeError(f"generator failed ({proc.returncode}) for {fmt} {p1} vs {p2}: {stderr[-2000:]}")
    return {"records": [json.loads(line) for line in stdout.splitlines() if line.strip()], "stderr": stderr,
            "cpu_s": usage.ru_utime + usage.ru_stime}


def jobs_for(fmt: str, a: str, b: str, battles: int, seed: int, chunk: int) -> list[tuple]:
    """(format, p1, p2, first index, count, seed, which side `a` plays) for both seatings of battles 0..battles/2-1."""
    half = battles // 2
    out = []
    for first in range(0, half, chunk):
        count = min(chunk, half - first)
        out.append((fmt, a, b, first, count, seed, "p1"))
        out.append((fmt, b, a, first, count, seed, "p2"))
    return out


def summarise(fmt: str, a: str, b: str, results: list[tuple[tuple, dict]]) -> dict:
    wins = losses = ties = errors = turns = 0
    cpu_s = decisions = ms = cpu_ms = faults = 0.0
    for job, res in results:
        side = job[6]
        cpu_s += res["cpu_s"]
        faults += sum(res["stderr"].count(f) for f in PLAYER_FAULTS)
        for m in SEARCH_TIMING.finditer(res["stderr"]):
            n = int(m.group(1))
            decisions += n
            ms += n * float(m.group(2))
            cpu_ms += n * float(m.group(3))
        for r in res["records"]:
            turns += r["num_turns"]
            if r["error"]:
                errors += 1
            elif r["winner"] is None:
                ties += 1
            elif r["winner"] == side:
                wins += 1
            else:
                losses += 1
    played = wins + losses + ties
    battles = played + errors
    low, high = wilson_interval(wins + ties / 2, played)
    cpu_per_battle = cpu_s / max(1, battles)
    return {
        "format": fmt, "player": a, "opponent": b, "battles": battles, "wins": wins, "losses": losses,
        "ties": ties, "errors": errors, "win_rate": round((wins + ties / 2) / max(1, played), 4),
        "ci95_low": round(low, 4), "ci95_high": round(high, 4), "avg_turns": round(turns / max(1, battles), 1),
        "cpu_s_per_battle": round(cpu_per_battle, 3), "battles_per_cpu_s": round(1 / max(cpu_per_battle, 1e-9), 3),
        "search_decisions": int(decisions),
        "search_ms_per_decision": round(ms / decisions, 2) if decisions else "",
        "search_cpu_ms_per_decision": round(cpu_ms / decisions, 2) if decisions else "",
        "hours_for_5000_on_2_cores": round(TEACHER_BATTLES * cpu_per_battle / TEACHER_CORES / 3600, 3),
        "player_faults": int(faults),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--battles", type=int, default=200, help="battles per pair per format (half per seating)")
    parser.add_argument("--mirror-battles", type=int, default=20, help="search vs search battles per format (cost)")
    parser.add_argument("--formats", nargs="+", default=list(FORMATS))
    parser.add_argument("--seed", type=int, default=2811)
    parser.add_argument("--workers", type=int, default=2, help="generator processes at once")
    parser.add_argument("--chunk", type=int, default=25, help="battles per generator process")
    parser.add_argument("--out", type=Path, help="default: benchmarks/results/search-teacher-<date>/")
    args = parser.parse_args()
    if args.battles < 2 or args.battles % 2:
        parser.error("--battles must be even and >= 2 (half are played from each side)")

    pairs = [(fmt, a, b, args.battles) for fmt in args.formats for a, b in PAIRS]
    pairs += [(fmt, "search", "search", args.mirror_battles) for fmt in args.formats if args.mirror_battles >= 2]
    work = {(fmt, a, b): jobs_for(fmt, a, b, n, args.seed, args.chunk) for fmt, a, b, n in pairs}
    flat = [job for jobs in work.values() for job in jobs]
    start = datetime.datetime.now(datetime.UTC)
    with ThreadPoolExecutor(args.workers) as pool:
        done = dict(zip(flat, pool.map(lambda j: run_generator(*j[:6]), flat), strict=True))
    wall_s = (datetime.datetime.now(datetime.UTC) - start).total_seconds()

    rows = [summarise(fmt, a, b, [(j, done[j]) for j in work[(fmt, a, b)]]) for fmt, a, b, _ in pairs]
    out = args.out or REPO_ROOT / "benchmarks" / "results" / f"search-teacher-{start.date().isoformat()}"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)

    print(f"{len(flat)} generator processes, {args.workers} at once, {wall_s:.0f} s wall")
    for r in rows:
        decision = (f"search {r['search_cpu_ms_per_decision']} CPU ms/decision ({r['search_ms_per_decision']} wall), "
                    if r["search_decisions"] else "")
        print(f"{r['format']:>16} {r['player']:>9} vs {r['opponent']:<9} {r['win_rate']:.3f} "
              f"[{r['ci95_low']:.3f}, {r['ci95_high']:.3f}] over {r['battles']} "
              f"(W{r['wins']} L{r['losses']} T{r['ties']} E{r['errors']}), {r['avg_turns']} turns; {decision}"
              f"{r['cpu_s_per_battle']} CPU s/battle = {r['battles_per_cpu_s']} battles/s per core, "
              f"5,000 battles on 2 cores: {r['hours_for_5000_on_2_cores']} h; player faults {r['player_faults']}")
    print(f"wrote {out / 'results.csv'}")


if __name__ == "__main__":
    main()

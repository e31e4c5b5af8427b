"""Spectator-log parse speed per core, side by side with Metamon's own replay parser, in one run.

    METAMON_PYTHON=/path/to/metamon-venv/bin/python python benchmarks/replay_parse_speed.py
    python benchmarks/replay_parse_speed.py --formats gen1ou gen2ou gen4ou   # without Metamon: says so, no ratio

Inputs, in the public replay JSON shape: ``../shared/data/pokemon/bench_replays`` (200 gen1ou + 200 gen9ou simulator
battles) and, for the other formats asked, ``--num-battles`` battles the pinned simulator plays between random
players (seed ``--seed``; needs Node.js and ``make setup``; cached under ``.cache/bench_replays``).

Each format's replays go in blocks of ``--block-size``. In a block, Metamon's parser (a child process under
``METAMON_PYTHON``, ``benchmarks/metamon_parse_worker.py``, which says what its offline stand-ins are) parses the
whole block, then replayforge's parser does, or the other way round (who goes first alternates from block to block;
``--turns block``, the default). ``--turns replay`` makes them take turns replay by replay instead: every switch
between the two processes then starts the next parse with caches the other process filled, which costs our ~6 ms
parse of a replay a larger share than Metamon's ~225 ms one, so it reads lower for us (docs/results.md: both, same
day). Then
replayforge's parser again plus ``turns_table`` of the block's rows: the Arrow conversion with the observation columns
(text, word ids, numbers) derived from the states (what a parse actor does), then the poke-env baseline.

What each parse call makes: ours, each player's states, actions and legal masks (``pokemon_turns`` rows without the
observation columns); Metamon's, each player's ``UniversalState`` list and actions (its observations are made later,
by its data loader). Times are the CPU time (``time.process_time``) of each process around the parse calls only, with
Python's default gc on in every process; outputs are dropped after each replay (the Arrow pass holds one block's
rows, as a parse actor holds its batch). Replays that either parser refuses are excluded from every figure and
counted. Rates are trajectories (one player's view of one battle) per CPU-second, i.e. per core; ratios come from the
same run only.

The poke-env baseline (``poke_env_parse_worker.py``, a child process under this interpreter): poke-env's battle
tracker fed the same logs once per player, with a ``deepcopy`` of its battle object at every turn, the approach of
Metamon's parser (which deep-copies a poke-env-like state per decision). Each parser runs in a process of its own, so
none walks another's objects in its cyclic collections: with poke-env's data in our process, every full collection
during our Arrow pass walked 190k objects instead of 75k.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipelines.errors import InputError
from pipelines.pokemon import generated
from pipelines.pokemon.dex import gen_of_format, load_dex
from pipelines.pokemon.spectator import spectator_trajectories
from pipelines.pokemon.trajectory import turns_table

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_BENCH = REPO_ROOT.parent / "shared" / "data" / "pokemon" / "bench_replays"
CACHE = REPO_ROOT / ".cache" / "bench_replays"
METAMON_WORKER = Path(__file__).resolve().parent / "metamon_parse_worker.py"
POKE_ENV_WORKER = Path(__file__).resolve().parent / "poke_env_parse_worker.py"
METAMON_GENS = range(1, 5)
"""Metamon's replay parser takes Gen 1-4 (its ``--gen`` choices); it is not run on other formats."""


def load_replays(fmt: str, num_battles: int, seed: int) -> list[dict]:
    if (SHARED_BENCH / fmt).is_dir():
        return [json.loads(p.read_text()) for p in sorted((SHARED_BENCH / fmt).glob("*.json"))][:num_battles]
    path = CACHE / f"{fmt}-seed{seed}-{generated.generator_revision()}.json"
    if path.is_file():  # battle i does not depend on how many were played: a longer run's first N are these
        cached = json.loads(path.read_text())
        if len(cached) >= num_battles:
            return cached[:num_battles]
    print(f"{fmt}: playing {num_battles} battles with the simulator (cached in {path.parent})", flush=True)
    chunk = generated.chunks([fmt], num_battles, seed, "random", "random", num_battles)[0]
    replays = []
    for battle_id, payload in generated.generate(chunk):
        record = json.loads(payload)
        replays.append({"id": battle_id, "format": fmt, "players": ["Bot 1", "Bot 2"],
                        "log": "\n".join(record["spectator_log"]), "uploadtime": 1_735_787_400, "formatid": fmt,
                        "rating": None})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(replays))
    return replays


class ParserProcess:
    """Another parser in a child process under an interpreter of its own, timing itself: Metamon's
    (``metamon_parse_worker.py``) or the poke-env baseline (``poke_env_parse_worker.py``)."""

    def __init__(self, python: str, worker: Path):
        self.name = worker.stem
        self.proc = subprocess.Popen([python, str(worker)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        self.replays_file: str | None = None

    def load(self, replays: list[dict]) -> None:
        if self.replays_file:
            os.unlink(self.replays_file)
        fd, self.replays_file = tempfile.mkstemp(suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(replays, f)
        self.proc.stdin.write(json.dumps({"load": self.replays_file}) + "\n")

    def parse(self, indices: list[int]) -> list[tuple[bool, float, int, str | None]]:
        self.proc.stdin.write(json.dumps({"parse": indices}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name} exited ({self.proc.wait()}); its stderr is above")
        return [tuple(r) for r in json.loads(line)]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()
        if self.replays_file:
            os.unlink(self.replays_file)


def metamon_python(arg: str | None) -> tuple[str | None, str]:
    """(interpreter that imports Metamon's replay parser or None, what was found)."""
    python = arg or os.environ.get("METAMON_PYTHON") or sys.executable
    try:
        probe = subprocess.run([python, "-c", "import metamon.data.replay_dataset.parsed_replays.replay_parser."
                                "parse_replays, subprocess; print(subprocess.run(['git', 'rev-parse', '--short', "
                                "'HEAD'], cwd=metamon.__path__[0], capture_output=True, text=True).stdout.strip())"],
                               capture_output=True, text=True)
    except OSError as err:
        return None, f"Metamon is not measured: {python} does not run ({err}); set METAMON_PYTHON (docs/results.md)"
    if probe.returncode != 0:
        return None, (f"Metamon is not measured: it is not importable by {python} "
                      f"({probe.stderr.strip().splitlines()[-1:]}); install it beside the project (docs/results.md) "
                      f"and set METAMON_PYTHON")
    return python, f"Metamon {probe.stdout.strip() or '(commit unknown)'} under {python}"


def ours(replay: dict, dex) -> list[dict]:
    return spectator_trajectories(replay["log"].split("\n"), dex, format_id=replay["formatid"], battle_id=replay["id"])


def timed_parse(replay: dict, dex, refusals: dict[str, int]) -> tuple[bool, float, int]:
    """(parsed, CPU seconds of the parse call, rows) for our parser; a refusal is counted in ``refusals``."""
    t0 = time.process_time()
    try:
        num_rows = len(ours(replay, dex))  # the rows are dropped here
        return True, time.process_time() - t0, num_rows
    except InputError as err:
        kind = f"replayforge {type(err).__name__}"
        refusals[kind] = refusals.get(kind, 0) + 1
        return False, 0.0, 0


def measure(fmt: str, replays: list[dict], metamon: ParserProcess | None, poke_env: ParserProcess, block_size: int,
            turns: str) -> dict:
    gen = gen_of_format(fmt)
    dex = load_dex(gen)
    with_metamon = metamon is not None and gen in METAMON_GENS
    for other in (metamon, poke_env) if with_metamon else (poke_env,):
        other.load(replays)
        other.parse(list(range(min(4, len(replays)))))  # imports and caches warm, not counted
    turns_table([row for replay in replays[:4] for row in ours(replay, dex)])  # lazy imports, caches
    cpu = {"ours": 0.0, "arrow": 0.0, "poke_env": 0.0, "metamon": 0.0}
    states = {"ours": 0, "metamon": 0}
    used, refused = 0, {"metamon": 0, "ours": 0, "both": 0}
    refusals: dict[str, int] = {}
    for start in range(0, len(replays), block_size):
        block = list(range(start, min(start + block_size, len(replays))))
        mine: list[tuple[bool, float, int]] = []
        theirs = [] if with_metamon else [(True, 0.0, 0, None)] * len(block)  # without Metamon: all of ours count
        if turns == "block":  # the whole block by one parser, then by the other; who goes first alternates
            metamon_first = with_metamon and (start // block_size) % 2 == 0
            if metamon_first:
                theirs = metamon.parse(block)
            for i in block:
                mine.append(timed_parse(replays[i], dex, refusals))
            if with_metamon and not metamon_first:
                theirs = metamon.parse(block)
        else:
            for k, i in enumerate(block):  # the two parsers take turns replay by replay, each going first in turn
                if with_metamon and k % 2 == 0:
                    theirs += metamon.parse([i])
                mine.append(timed_parse(replays[i], dex, refusals))
                if with_metamon and k % 2 == 1:
                    theirs += metamon.parse([i])
        common = [i for i, m, t in zip(block, mine, theirs, strict=True) if m[0] and t[0]]
        for m, t in zip(mine, theirs, strict=True):
            if not (m[0] and t[0]):
                refused["both" if not m[0] and not t[0] else "ours" if not m[0] else "metamon"] += 1
            if not t[0]:
                kind = f"Metamon {t[3].split(':')[0]}"
                refusals[kind] = refusals.get(kind, 0) + 1
            if m[0] and t[0]:
                cpu["ours"] += m[1]
                cpu["metamon"] += t[1]
                states["ours"] += m[2]
                states["metamon"] += t[2]
        used += len(common)
        t0 = time.process_time()
        turns_table([row for i in common for row in ours(replays[i], dex)])
        cpu["arrow"] += time.process_time() - t0
        cpu["poke_env"] += sum(cpu_s for _, cpu_s, _, _ in poke_env.parse(common))
    trajectories = 2 * used
    rate = {k: trajectories / v if v else None for k, v in cpu.items()}
    if not with_metamon:
        rate["metamon"] = None
    return {"format": fmt, "battles": len(replays), "used": used, "refused": refused, "refusals": refusals,
            "rate": rate, "states_per_trajectory": {k: v / trajectories if trajectories else 0 for k, v in
                                                    states.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--formats", nargs="+", default=["gen1ou", "gen4ou", "gen9ou"],
                        help="gen1ou/gen9ou come from ../shared; others are played by the simulator")
    parser.add_argument("--num-battles", type=int, default=200, help="battles per format (at most 200 from ../shared)")
    parser.add_argument("--seed", type=int, default=16, help="seed of the simulator's battles")
    parser.add_argument("--block-size", type=int, default=16, help="replays per block (and per Arrow conversion)")
    parser.add_argument("--turns", choices=("block", "replay"), default="block",
                        help="block: each parser parses a whole block in turn (who goes first alternates); replay: "
                             "they take turns replay by replay (each switch between the processes starts the next "
                             "parse with cold caches)")
    parser.add_argument("--repeat", type=int, default=1, help="runs over all formats, each printed")
    parser.add_argument("--metamon-python", help="interpreter where Metamon is importable (default: $METAMON_PYTHON, "
                                                 "else this one)")
    args = parser.parse_args()

    python, found = metamon_python(args.metamon_python)
    print(found)
    metamon = ParserProcess(python, METAMON_WORKER) if python else None
    poke_env = ParserProcess(sys.executable, POKE_ENV_WORKER)
    replays = {fmt: load_replays(fmt, args.num_battles, args.seed) for fmt in args.formats}
    try:
        for run in range(args.repeat):
            print(f"\nrun {run + 1}: CPU time of the parse calls, trajectories per CPU-second, same run, turns by "
                  f"{args.turns} of {args.block_size}")
            print(f"{'format':9s} {'battles':>9s} {'replayforge':>12s} {'+ Arrow':>9s} {'poke-env':>9s} "
                  f"{'Metamon':>8s}  ratios")
            for fmt in args.formats:
                r = measure(fmt, replays[fmt], metamon, poke_env, args.block_size, args.turns)
                rate = r["rate"]
                mm = rate["metamon"]
                ratios = (f"parse {rate['ours'] / mm:.1f}x Metamon, with Arrow {rate['arrow'] / mm:.1f}x; " if mm
                          else "no Metamon ratio (Metamon not measured); " if metamon is None
                          else "no Metamon ratio (its parser takes Gen 1-4 only); ")
                ratios += f"parse {rate['ours'] / rate['poke_env']:.1f}x poke-env+copy"
                print(f"{fmt:9s} {r['used']:4d}/{r['battles']:<4d} {rate['ours']:10.1f}/s {rate['arrow']:7.1f}/s "
                      f"{rate['poke_env']:7.1f}/s {f'{mm:6.2f}/s' if mm else '      -'}  {ratios}")
                spt = r["states_per_trajectory"]
                excluded = sum(r["refused"].values())
                print(f"{'':9s} decisions per trajectory: replayforge {spt['ours']:.1f}"
                      + (f", Metamon {spt['metamon']:.1f}" if mm else "")
                      + (f"; excluded {excluded} ({r['refused']}: {r['refusals']})" if excluded else ""))
    finally:
        for other in (metamon, poke_env):
            if other is not None:
                other.close()
    if metamon is None:
        print("\nMetamon was not measured, so no ratio against it is printed (see the first line).")


if __name__ == "__main__":
    main()

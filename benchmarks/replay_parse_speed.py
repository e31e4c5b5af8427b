"""Spectator-log parse speed per core on the shared bench replays, against baselines measured in the same run.

    python benchmarks/replay_parse_speed.py

Inputs: ``../shared/data/pokemon/bench_replays`` (200 gen1ou + 200 gen9ou simulator battles in the public replay
JSON shape). Rates are trajectories (one player's view of one battle) per CPU-second of this process, i.e. per
core. Printed side by side:
- replayforge: log → both players' first-person states, actions and observations (the parser's output), and the
  same plus conversion to Arrow in batches of 16 battles (what each parse actor does);
- baseline measured here: poke-env's battle tracker fed the same logs, once per player, with a ``deepcopy`` of its
  battle object at every decision point (the approach of Metamon's replay parser, which snapshots a poke-env
  battle per state);
- Metamon's own parser on these files on this machine kind, as recorded in the data's SOURCES.md (5.19 and 3.16
  trajectories/s), for the ratio the goal is stated in.
"""

from __future__ import annotations

import copy
import gc
import json
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines.pokemon.dex import load_dex  # noqa: E402
from pipelines.pokemon.spectator import spectator_trajectories  # noqa: E402
from shards_schema.declare import to_table  # noqa: E402
from shards_schema.pokemon import TURNS_SCHEMA  # noqa: E402

BENCH = Path(__file__).resolve().parents[2] / "shared" / "data" / "pokemon" / "bench_replays"
METAMON_TRAJ_PER_S = {"gen1ou": 5.19, "gen9ou": 3.16}  # SOURCES.md: Metamon v1.4.0, one core of this machine


def cpu_timed(fn):
    gc.collect()
    gc.disable()  # as in the parse actors
    try:
        start = time.process_time()
        out = fn()
        return out, time.process_time() - start
    finally:
        gc.enable()


def ours(replays, dex):
    return [spectator_trajectories(r["log"].split("\n"), dex, format_id=r["formatid"], battle_id=r["id"])
            for r in replays]


def ours_arrow(replays, dex):
    for i in range(0, len(replays), 16):
        to_table([row for rows in ours(replays[i:i + 16], dex) for row in rows], TURNS_SCHEMA)


def poke_env_baseline(replays, gen):
    """poke-env tracking of each player's view with a deepcopy of the battle at each decision point."""
    from poke_env.battle import Battle

    logger = logging.getLogger("baseline")
    logger.setLevel(logging.CRITICAL)
    snapshots = 0
    for replay in replays:
        for player in replay["players"][:2]:
            battle = Battle(replay["id"], player, logger, gen)
            for line in replay["log"].split("\n"):
                parts = line.split("|")
                if len(parts) < 2 or parts[1] in ("", "t:", "c", "j", "l", "raw", "inactive", "html", "win", "tie"):
                    continue
                try:
                    battle.parse_message(parts)
                except Exception:  # noqa: BLE001 - the baseline ignores what it cannot track, as Metamon does
                    continue
                if parts[1] == "turn":
                    copy.deepcopy(battle)
                    snapshots += 1
    return snapshots


def main() -> None:
    if not BENCH.is_dir():
        raise SystemExit(f"{BENCH} is not available")
    print(f"{'format':8s} {'replayforge parse':>18s} {'+ Arrow':>9s} {'poke-env+copy':>14s} {'Metamon':>8s}  ratios")
    for fmt in ("gen1ou", "gen9ou"):
        replays = [json.loads(p.read_text()) for p in sorted((BENCH / fmt).glob("*.json"))]
        gen = int(fmt[3])
        dex = load_dex(gen)
        trajectories = 2 * len(replays)
        ours(replays[:10], dex)  # warm caches (vocabulary, dex)
        _, parse_s = cpu_timed(lambda replays=replays, dex=dex: ours(replays, dex))
        _, arrow_s = cpu_timed(lambda replays=replays, dex=dex: ours_arrow(replays, dex))
        _, base_s = cpu_timed(lambda replays=replays, gen=gen: poke_env_baseline(replays, gen))
        parse, arrow, base = trajectories / parse_s, trajectories / arrow_s, trajectories / base_s
        metamon = METAMON_TRAJ_PER_S[fmt]
        print(f"{fmt:8s} {parse:15.1f}/s {arrow:8.1f}/s {base:12.1f}/s {metamon:7.2f}/s  "
              f"parse {parse / base:.1f}x poke-env+copy, {parse / metamon:.0f}x Metamon; "
              f"with Arrow {arrow / base:.1f}x, {arrow / metamon:.0f}x")


if __name__ == "__main__":
    main()

"""The poke-env baseline of ``benchmarks/replay_parse_speed.py``, timed replay by replay in its own process.

poke-env's battle tracker (this project's environment) is fed each log once per player, with a ``deepcopy`` of its
battle object at every turn: the approach of Metamon's parser, which deep-copies a poke-env-like state per decision.
It runs in a child process, as Metamon's parser does, so that poke-env's data (about 115k objects the cyclic
collector tracks, against our parser's ~75k in all) is not in the heap every full collection of our parser walks.

Protocol (one JSON document a line), as ``metamon_parse_worker.py``: ``{"load": path}`` names a JSON file holding the
replays; ``{"parse": [i, ...]}`` parses those of them, and one line comes back on stdout: ``[[ok, cpu_s,
num_snapshots, error], ...]``, one entry per index. ``cpu_s`` is this process's CPU time of the parse call only
(``time.process_time`` around it); Python's default gc stays on.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import re
import sys
import time


def poke_env_baseline(replay: dict) -> int:
    """The number of deep-copied snapshots (one per turn and player)."""
    from poke_env.battle import Battle

    gen = int(re.match(r"gen(\d)", replay["formatid"]).group(1))
    logger = logging.getLogger("baseline")
    logger.setLevel(logging.CRITICAL)
    snapshots = 0
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
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout = sys.stderr  # anything poke-env prints must not reach the protocol stream
    replays: list[dict] = []
    for line in sys.stdin:
        message = json.loads(line)
        if "load" in message:
            with open(message["load"]) as f:
                replays = json.load(f)
            continue
        results = []
        for i in message["parse"]:
            start = time.process_time()
            snapshots = poke_env_baseline(replays[i])
            results.append([True, time.process_time() - start, snapshots, None])
        out.write(json.dumps(results) + "\n")
        out.flush()


if __name__ == "__main__":
    main()

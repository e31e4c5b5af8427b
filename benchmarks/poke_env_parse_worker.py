"""The poke-env baseline of ``benchmarks/replay_parse_speed.py``, timed replay by replay in its own process.

poke-env's battle tracker (this project's environment) is fed each log once per player, with a ``deepcopy`` of its
battle object at every turn: the approach of Metamon's parser, which deep-copies a poke-env-like state per decision.
It runs in a child process, as Metamon's parser does, so that poke-env's data (about 115k objects the cyclic
collector tracks, against our parser's ~75k in all) is not in the heap every full collection of our parser walks.

Protocol: ``parse_worker_protocol.py``; the count of a parse is the number of snapshots.
"""

from __future__ import annotations

import copy
import logging
import re

from parse_worker_protocol import protocol_stream, serve
from poke_env.battle import Battle


def poke_env_baseline(replay: dict) -> int:
    """The number of deep-copied snapshots (one per turn and player)."""
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
    serve(protocol_stream(), poke_env_baseline)

if __name__ == "__main__":
    main()

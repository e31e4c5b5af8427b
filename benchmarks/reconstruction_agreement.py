"""How well spectator-log reconstruction matches ground truth, field by field, on simulator battles.

    python benchmarks/reconstruction_agreement.py --battles 250

Plays battles with the real simulator (heuristic vs random, the random-battle format of every generation 1-9 by
default: gen 2 exercises sleep, Sleep Talk and Hidden Power, gens 6-7 Mega Evolution, gen 7 Z-moves, gen 8 Dynamax,
gens 5-9 Zoroark's Illusion), builds each player's exact trajectory from its own stream, reconstructs both from the
spectator log alone, and prints how often each field agrees (``pipelines/pokemon/agreement.py``).
``action.visible_identical``: of the actions a spectator can see (those the reconstruction infers, plus those it
left at -1 although the log shows the chosen move or switch in that turn, which count as wrong), the share equal to
the chosen action; ``action.coverage``: of the chosen actions, the share the reconstruction recorded.

    python benchmarks/reconstruction_agreement.py --server-logs --battles 100 --formats gen9randombattle gen1ou

``--server-logs``: the battles written as a Showdown server writes them; the truth is each player's trajectory from
the replayed input log, the reconstruction is read from the log the server recorded (``add_server_logs``).
"""

from __future__ import annotations

import argparse

from pipelines.pokemon.agreement import Agreement, add_generated_battles, add_server_logs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--battles", type=int, default=250, help="battles per format")
    parser.add_argument("--formats", nargs="+", default=[f"gen{g}randombattle" for g in range(1, 10)])
    parser.add_argument("--seed", type=int, default=31)
    parser.add_argument("--server-logs", action="store_true",
                        help="compare server logs' exact trajectories with the reading of their recorded log")
    args = parser.parse_args()
    add = add_server_logs if args.server_logs else add_generated_battles
    for fmt in args.formats:
        agreement = add(Agreement(), fmt, args.battles, args.seed)
        print(f"\n{fmt}: {args.battles} battles, {agreement.trajectories} trajectories")
        print(agreement.report())


if __name__ == "__main__":
    main()

"""How well spectator-log reconstruction matches ground truth, field by field, on simulator battles.

    python benchmarks/reconstruction_agreement.py --battles 250

Plays battles with the real simulator (heuristic vs random, ``gen9randombattle`` and ``gen1ou``), builds each
player's exact trajectory from its own stream, reconstructs both from the spectator log alone, and prints how often
each field agrees (``pipelines/pokemon/agreement.py``). ``action.visible_identical``: of the actions the
reconstruction infers, the share equal to the chosen action; ``action.coverage``: of the chosen actions, the share
a spectator can see at all.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines.pokemon.agreement import Agreement  # noqa: E402
from pipelines.pokemon.dex import load_dex  # noqa: E402
from pipelines.pokemon.spectator import spectator_trajectories  # noqa: E402
from pipelines.sources import generated  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--battles", type=int, default=250, help="battles per format")
    parser.add_argument("--formats", nargs="+", default=["gen9randombattle", "gen1ou"])
    parser.add_argument("--seed", type=int, default=31)
    args = parser.parse_args()
    dexes = {g: load_dex(g) for g in range(1, 10)}
    for fmt in args.formats:
        agreement = Agreement()
        chunk = generated.chunks([fmt], args.battles, args.seed, "heuristic", "random", args.battles)[0]
        for battle_id, payload in generated.generate(chunk):
            record = json.loads(payload)
            truth, _ = generated.parse(battle_id, payload, dexes, None)
            recon = spectator_trajectories(record["spectator_log"], dexes[int(fmt[3])], format_id=fmt,
                                           battle_id=battle_id)
            for side in ("p1", "p2"):
                agreement.add([r for r in truth if r["player_side"] == side],
                              [r for r in recon if r["player_side"] == side])
        print(f"\n{fmt}: {args.battles} battles, {agreement.trajectories} trajectories")
        print(agreement.report())


if __name__ == "__main__":
    main()

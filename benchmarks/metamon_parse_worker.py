"""Metamon's own replay parser, timed replay by replay, for ``benchmarks/replay_parse_speed.py``.

Runs under an interpreter where Metamon (UT-Austin-RPL/metamon) is importable, installed beside this project (it
pins its own poke-env fork, which cannot share the project's environment): the benchmark starts it as a child
process and sends it blocks of replays to alternate with its own parser. It imports nothing from this project but
the protocol beside it (``parse_worker_protocol.py``, standard library only).

    METAMON_PYTHON=/path/to/metamon-venv/bin/python python benchmarks/replay_parse_speed.py

Protocol: ``parse_worker_protocol.py``; the count of a parse is the number of states, and a refusal is one of
Metamon's own typed exceptions.

What the parse call is: ``ReplayParser.parse_replay`` without its file read and write, i.e. the log cleaning, the
forward fill, the backward fill (with team prediction) and ``povreplay_to_seq`` for both players (what
``save_to_disk`` computes before writing): log → both players' ``UniversalState`` lists and action indices.

Offline stand-ins (Metamon downloads Smogon usage statistics for these on first use; without network they fail):
- ``team.moveset_size`` → 4 (Metamon reads how many moves a species can have from the usage statistics);
- the team predictor fills only what the log never reveals and the checks require: an unrevealed item is
  "no item", an unrevealed ability is the species' first ability in poke-env's dex, a Pokémon never sent out is
  the first species of the generation's dex (by number) not already on the team, with no moves; EVs, IVs and
  nature take Metamon's defaults. It predicts no moves, so the parsed states hold fewer moves to copy than with
  Metamon's usage-based predictors: these stand-ins make Metamon's parse faster than in real use.
"""

from __future__ import annotations

import warnings
from datetime import datetime

from parse_worker_protocol import protocol_stream, serve


def _install_stand_ins():
    # Metamon here and in main, not at the top: imported once main has set the protocol stream aside, nothing it
    # prints while importing can reach that stream
    from metamon.data.team_prediction import team as mm_team
    from metamon.data.team_prediction.predictor import TeamPredictor
    from poke_env.data.gen_data import GenData

    mm_team.moveset_size = lambda name, gen: 4

    class DexStandInPredictor(TeamPredictor):
        """Fills what the log never revealed from poke-env's dex; no usage statistics, no predicted moves."""

        def fill_team(self, team):
            gen = int(team.format.split("gen")[1][0])
            dex = GenData.from_gen(gen).pokedex
            taken = {p.name for p in team.pokemon}
            spare = (e["name"] for e in sorted(dex.values(), key=lambda e: e["num"])
                     if e["num"] > 0 and "forme" not in e and e["name"] not in taken)
            for p in team.pokemon:
                if p.name == p.MISSING_NAME:
                    p.name = next(spare)
                    p.moves = [m for m in p.moves if m != p.MISSING_MOVE]
                if p.ability == p.MISSING_ABILITY:
                    entry = dex.get(p.name.lower().replace(" ", "").replace("-", ""), {})
                    p.ability = next(iter(entry.get("abilities", {}).values()), p.NO_ABILITY)
                if p.item == p.MISSING_ITEM:
                    p.item = p.NO_ITEM
                if p.nature == p.MISSING_NATURE:
                    p.nature = "Hardy"
                p.evs = [0 if v == p.MISSING_EV else v for v in p.evs]
                p.ivs = [31 if v == p.MISSING_IV else v for v in p.ivs]
            return team

    return DexStandInPredictor()


def main() -> None:
    out = protocol_stream()  # anything Metamon prints must not reach the protocol stream

    from metamon.data.replay_dataset.parsed_replays.replay_parser import backward, forward
    from metamon.data.replay_dataset.parsed_replays.replay_parser.exceptions import (
        BackwardException,
        ForwardException,
    )
    from metamon.data.replay_dataset.parsed_replays.replay_parser.parse_replays import ReplayParser

    predictor = _install_stand_ins()
    parser = ReplayParser(team_predictor=predictor)
    warnings.simplefilter("ignore")

    def parse(replay: dict) -> int:
        parsed = forward.ParsedReplay(gameid=replay["id"], format=replay["formatid"],
                                      time_played=datetime.fromtimestamp(int(replay["uploadtime"])))
        parsed = forward.forward_fill(parsed, ReplayParser.clean_log(replay), verbose=False)
        from_p1, from_p2 = backward.backward_fill(parsed, team_predictor=predictor)
        return sum(len(parser.povreplay_to_seq(pov)[0]) for pov in (from_p1, from_p2))

    serve(out, parse, refusals=(ForwardException, BackwardException))  # Metamon's own typed refusals


if __name__ == "__main__":
    main()

"""Check spectator reconstruction against ground truth: the first-person trajectories of simulator battles.

For a generated battle the players' own streams give exact states and chosen actions; the spectator log of the same
battle goes through ``spectator_trajectories``. This module aligns the two decision sequences and counts, per
field, how often they agree. Actions are compared by meaning (which move, which switch target, terastallized or
not), since the reconstruction orders move slots by first reveal and the simulator by the real moveset.

The same comparison runs on server battle logs (``add_server_logs``): each player's exact trajectory from the
replayed input log against the reconstruction from the log the server recorded, which is how a server log whose
input log does not replay is read (``pipelines/pokemon/server_logs.py``).

``action.visible_identical`` counts every decision whose action a spectator can see: those the reconstruction
infers, and those where it records -1 although the log shows the chosen move or switch in that turn
(``visible_choices``, its own reading of the log: it shares with the parser only how a ``|cant|`` line names
its mover and move); the latter count as wrong.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

from pipelines.pokemon import generated, input_log, server_logs
from pipelines.pokemon.dex import Dex, UnknownDexEntry, gen_of_format, load_dex, move_id, to_id
from pipelines.pokemon.spectator import cant_actor_and_move, spectator_trajectories
from shards_schema.pokemon import NUM_MOVES, NUM_SWITCHES

HP_TOLERANCE = 0.011
"""Spectators see HP in whole percent; the player's own stream has exact HP."""


def action_meaning(state: dict, action: int) -> tuple | None:
    """``("move", id, tera)``, ``("switch", species)`` or None when not visible."""
    if action < 0:
        return None
    if action < NUM_MOVES or action >= NUM_MOVES + NUM_SWITCHES:
        slot = action % (NUM_MOVES + NUM_SWITCHES) if action >= NUM_MOVES + NUM_SWITCHES else action
        moves = state["player_active"]["moves"]
        name = moves[slot]["name"] if slot < len(moves) else "?"
        # A spectator sees "Hidden Power", not its type (gen 2-7): the type is not part of the choice's meaning.
        name = "hiddenpower" if name.startswith("hiddenpower") else name
        return ("move", name, action >= NUM_MOVES + NUM_SWITCHES)
    switches = state["available_switches"]
    k = action - NUM_MOVES
    return ("switch", switches[k]["name"] if k < len(switches) else "?")


def visible_choices(lines: list[str], dex: Dex) -> dict[tuple[str, int], set[tuple[str, str]]]:
    """(side, turn) → the choices the spectator log shows in that turn: ``("move", id)`` for a move the side used
    that no other move or ability called and no Encore begun in that turn forced (a continuing lock counts: it is
    the request's only choice) and for the
    move a ``|cant|`` names for the Pokémon that could not act; ``("switch", species id)`` for each ``|switch|``
    (``|drag|`` is not chosen; a cosmetic forme such as Gastrodon-East is its dex species). Hidden Power is
    ``hiddenpower`` whatever its type (the log does not say it); a status move used as a Z-move is that move."""
    out: dict[tuple[str, int], set[tuple[str, str]]] = {}
    turn = 0
    encored: set[str] = set()  # sides whose Pokémon an Encore caught this turn before it moved
    for line in lines:
        parts = line.split("|")
        kind = parts[1] if len(parts) > 1 else ""
        if kind == "turn" and len(parts) > 2 and parts[2].isdigit():
            turn = int(parts[2])
            encored.clear()
        elif kind == "-start" and len(parts) > 3 and to_id(parts[3]) == "encore":
            encored.add(parts[2][:2])
        elif kind == "move" and len(parts) > 3:
            if parts[2][:2] in encored:
                encored.discard(parts[2][:2])
            elif not any(p.startswith("[from]") and "lockedmove" not in p for p in parts[5:]):
                out.setdefault((parts[2][:2], turn), set()).add(("move", _move_name(move_id(parts[3]))))
        elif kind == "cant" and len(parts) > 4:
            actor, move = cant_actor_and_move(parts)
            if move is not None and actor == parts[2]:
                out.setdefault((actor[:2], turn), set()).add(("move", _move_name(move)))
        elif kind == "switch" and len(parts) > 3:
            species = parts[3].split(",")[0]
            try:
                species = dex.species_id(species)
            except UnknownDexEntry:
                species = to_id(species)
            out.setdefault((parts[2][:2], turn), set()).add(("switch", species))
    return out


def _move_name(move: str) -> str:
    return "hiddenpower" if move.startswith("hiddenpower") else move


def _mon_fields(prefix: str, truth: dict | None, recon: dict | None, out: dict[str, bool]) -> None:
    if truth is None or recon is None:
        out[f"{prefix}.present"] = (truth is None) == (recon is None)
        return
    out[f"{prefix}.species"] = truth["name"] == recon["name"]
    out[f"{prefix}.hp"] = abs(truth["hp_pct"] - recon["hp_pct"]) <= HP_TOLERANCE
    out[f"{prefix}.status"] = truth["status"] == recon["status"]
    out[f"{prefix}.boosts"] = all(truth[k] == recon[k] for k in truth if k.endswith("_boost"))


@dataclass
class Agreement:
    """Counts of agreeing and compared values per field, over many battles."""

    agree: Counter = field(default_factory=Counter)
    total: Counter = field(default_factory=Counter)
    trajectories: int = 0
    aligned_trajectories: int = 0

    def add(self, truth_rows: list[dict], recon_rows: list[dict],
            shown: dict[tuple[str, int], set[tuple[str, str]]] | None = None) -> None:
        """Compare one player's exact trajectory with its reconstruction; ``shown``: ``visible_choices`` of the
        battle's spectator log (without it, a -1 only lowers ``action.coverage``)."""
        self.trajectories += 1
        if [r["state"]["forced_switch"] for r in truth_rows] != [r["state"]["forced_switch"] for r in recon_rows]:
            self.total["decision_alignment"] += 1
            return
        self.aligned_trajectories += 1
        self.total["decision_alignment"] += 1
        self.agree["decision_alignment"] += 1
        for t, r in zip(truth_rows, recon_rows, strict=True):
            fields: dict[str, bool] = {}
            truth_action = action_meaning(t["state"], t["action"])
            recon_action = action_meaning(r["state"], r["action"])
            in_log = truth_action is not None and shown is not None and truth_action[:2] in shown.get(
                (t["player_side"], t["battle_turn"]), ())
            if recon_action is not None or in_log:
                fields["action.visible_identical"] = recon_action == truth_action
            if truth_action is not None:
                fields["action.coverage"] = recon_action is not None
            if t["zmove"] or r["zmove"]:
                fields["action.zmove"] = t["zmove"] == r["zmove"]
            if t["dynamax"] or r["dynamax"]:
                fields["action.dynamax"] = t["dynamax"] == r["dynamax"]
            ts, rs = t["state"], r["state"]
            _mon_fields("player_active", ts["player_active"], rs["player_active"], fields)
            _mon_fields("opponent_active", ts["opponent_active"], rs["opponent_active"], fields)
            if ts["opponent_active"] and rs["opponent_active"]:
                fields["opponent_active.revealed_moves"] = (
                    sorted(m["name"] for m in ts["opponent_active"]["moves"])
                    == sorted(m["name"] for m in rs["opponent_active"]["moves"]))
                fields["opponent_active.item"] = ts["opponent_active"]["item"] == rs["opponent_active"]["item"]
            if ts["player_active"] and rs["player_active"]:
                truth_moves = {_move_name(m["name"]) for m in ts["player_active"]["moves"]}
                fields["player_active.known_moves_subset"] = {
                    _move_name(m["name"]) for m in rs["player_active"]["moves"]} <= truth_moves
            truth_bench = sorted(m["name"] for m in ts["available_switches"])
            recon_bench = sorted(m["name"] for m in rs["available_switches"])
            # a spectator cannot know benched Pokémon the log never shows: known ones must be right
            fields["switches.known_subset"] = set(recon_bench) <= set(truth_bench)
            fields["switches.all_known"] = recon_bench == truth_bench
            fields["weather"] = ts["weather"] == rs["weather"]
            fields["conditions"] = (ts["player_conditions"], ts["opponent_conditions"]) == (
                rs["player_conditions"], rs["opponent_conditions"])
            for name, ok in fields.items():
                self.total[name] += 1
                self.agree[name] += ok

    def rate(self, name: str) -> float:
        return self.agree[name] / self.total[name] if self.total[name] else float("nan")

    def report(self) -> str:
        lines = [f"{'field':40s} {'agree':>9s} {'of':>9s} {'rate':>8s}"]
        for name in sorted(self.total):
            lines.append(f"{name:40s} {self.agree[name]:9d} {self.total[name]:9d} {self.rate(name):8.2%}")
        return "\n".join(lines)


def add_generated_battles(agreement: Agreement, format_id: str, num_battles: int, seed: int) -> Agreement:
    """Play ``num_battles`` simulator battles (heuristic vs random), then add each player's exact trajectory and
    its reconstruction from the spectator log to ``agreement``."""
    dexes = {g: load_dex(g) for g in range(1, 10)}
    chunk = generated.chunks([format_id], num_battles, seed, "heuristic", "random", num_battles)[0]
    for battle_id, payload in generated.generate(chunk):
        truth, _ = generated.parse(battle_id, payload, dexes, None)
        log = json.loads(payload)["spectator_log"]
        recon = spectator_trajectories(log, dexes[gen_of_format(format_id)], format_id=format_id,
                                       battle_id=battle_id)
        shown = visible_choices(log, dexes[gen_of_format(format_id)])
        for side in ("p1", "p2"):
            agreement.add([r for r in truth if r["player_side"] == side],
                          [r for r in recon if r["player_side"] == side], shown)
    return agreement


def add_server_logs(agreement: Agreement, format_id: str, num_battles: int, seed: int) -> Agreement:
    """Play ``num_battles`` simulator battles (heuristic vs random) written as server logs, then add each player's
    exact trajectory (the log's input log replayed) and its reconstruction from the log the server recorded (both
    sides' exact HP, the room's lines) to ``agreement``."""
    dex = load_dex(gen_of_format(format_id))
    for battle_id, payload in server_logs.generated_server_logs(format_id, num_battles, seed):
        battle = server_logs.normalize(json.loads(payload), battle_id)
        replay = input_log.replay(battle.input_log, battle.teams)
        truth = server_logs.exact_trajectories(battle, replay, dex)
        recon = server_logs.recorded_log_trajectories(battle, dex)
        shown = visible_choices(battle.log, dex)
        for side in ("p1", "p2"):
            agreement.add([r for r in truth if r["player_side"] == side],
                          [r for r in recon if r["player_side"] == side], shown)
    return agreement

"""The live players' audit of their masks against the server's request (``pipelines.pokemon.pov.unmasked_choices``):
every choice the request offers is in the mask, nothing else is, or the difference is named; the choices of other
kinds (Struggle or gen 1's Fight beside switches, Revival Blessing's fainted targets) have actions that the player
turns back into the same choice; and the ``generated`` source's rows agree with their requests
(``benchmarks/mask_audit.py``)."""

from __future__ import annotations

import collections
import json

from conftest import needs_simulator

from pipelines.pokemon import generated
from pipelines.pokemon.dex import load_dex
from pipelines.pokemon.pov import Decision, decisions, unmasked_choices
from pipelines.pokemon.tracker import BattleTracker
from training.pokemon.player import action_choice

TEAM_MOVES = ["thunderbolt", "surf", "icebeam", "recover"]


def _request(moves=None, *, trapped=False, force_switch=False, fainted=0, bench=5):
    team = [{"ident": "p1: A", "active": True, "condition": "100/100", "moves": TEAM_MOVES}]
    team += [{"ident": f"p1: B{i}", "active": False, "condition": "0 fnt" if i < fainted else "50/100",
              "moves": TEAM_MOVES} for i in range(bench)]
    request = {"side": {"pokemon": team}}
    if force_switch:
        request["forceSwitch"] = [True]
    else:
        request["active"] = [{"moves": [{"id": m, "disabled": d} for m, d in (moves or [])],
                              **({"trapped": True} if trapped else {})}]
    return request


def _mask(moves=(), switches=0):
    mask = [False] * 13
    for slot in moves:
        mask[slot] = True
    for k in range(switches):
        mask[4 + k] = True
    return mask


def test_a_mask_built_from_the_request_agrees_with_it():
    request = _request([("thunderbolt", False), ("surf", True), ("icebeam", False), ("recover", False)])
    assert unmasked_choices(request, _mask([0, 2, 3], 5), TEAM_MOVES) == []
    assert unmasked_choices(_request([("thunderbolt", False)], trapped=True), _mask([0]), TEAM_MOVES) == []
    assert unmasked_choices(_request(force_switch=True, fainted=2), _mask(switches=3), TEAM_MOVES) == []


def test_each_difference_is_named():
    request = _request([("thunderbolt", False), ("transform", False), ("surf", False)])
    assert unmasked_choices(request, _mask([0, 1], 5), TEAM_MOVES) == [
        "request move transform is not a team move slot"]
    disabled = _request([("thunderbolt", False), ("surf", True)])
    assert unmasked_choices(disabled, _mask([0, 1], 5), TEAM_MOVES) == [
        "mask opens a move the request does not enable"]
    assert unmasked_choices(_request([("thunderbolt", False)]), _mask([0], 3), TEAM_MOVES) == [
        "request offers 5 switches, mask 3"]
    trapped = _request([("thunderbolt", False), ("surf", False)], trapped=True)
    assert unmasked_choices(trapped, _mask([0, 1], 2), TEAM_MOVES) == ["request offers 0 switches, mask 2"]


def test_a_request_with_one_choice_decides_nothing():
    locked = _request([("recharge", False)], trapped=True)
    assert unmasked_choices(locked, _mask(), TEAM_MOVES) == []
    assert unmasked_choices(_request([("struggle", False)], trapped=True), _mask(), TEAM_MOVES) == []
    revive = _request(force_switch=True, fainted=1)  # Revival Blessing with one fainted ally to revive
    revive["side"]["pokemon"][0]["reviving"] = True
    assert unmasked_choices(revive, _mask(), TEAM_MOVES) == []


def test_hidden_power_of_the_request_is_the_team_s_typed_one():
    team = ["hiddenpowerfire", "surf"]
    request = _request([("hiddenpower", False), ("surf", False)])
    assert unmasked_choices(request, _mask([0, 1], 5), team) == []


def test_struggle_and_gen1_fight_beside_switches_are_move_slot_0():
    for move in ("struggle", "fight"):
        request = _request([(move, False)])
        assert unmasked_choices(request, _mask([0], 5), TEAM_MOVES) == []
        assert unmasked_choices(request, _mask(switches=5), TEAM_MOVES) == [
            "request enables a move the mask does not open"]


def test_revival_blessing_s_targets_are_the_switch_actions():
    revive = _request(force_switch=True, fainted=3)
    revive["side"]["pokemon"][0]["reviving"] = True
    assert unmasked_choices(revive, _mask(switches=3), TEAM_MOVES) == []
    assert unmasked_choices(revive, _mask(), TEAM_MOVES) == ["request offers 3 switches, mask 0"]


# Decisions rendered from hand-made requests, as the live player renders the server's: the mask, the recorded
# choice's action, and the choice the live player sends for that action (``action_choice``).

def _member(name, details, condition, moves, *, active=False, **extra):
    return {"ident": f"p1: {name}", "details": details, "condition": condition, "active": active,
            "moves": moves, "item": "", **extra}


def _decide(fmt, team, request_rest, choice, foe="Snorlax, L80"):
    tracker = BattleTracker(load_dex(int(fmt[3])), fmt)
    active = next(p for p in team if p["active"])
    for line in (f"|switch|p1a: {active['ident'][4:]}|{active['details']}|{active['condition']}",
                 f"|switch|p2a: Foe|{foe}|100/100", "|turn|1"):
        tracker.apply(line)
    decision = Decision(tracker, "p1", {"side": {"name": "a", "id": "p1", "pokemon": team}, **request_rest}, choice)
    state, mask = decision.render_state_and_mask()
    return decision, state, mask


GEN1_MOVES = ["bodyslam", "hyperbeam", "earthquake", "blizzard"]


def _gen1_team(fainted=()):
    team = [_member("Tauros", "Tauros, L80", "250/250 slp", GEN1_MOVES, active=True)]
    team += [_member(f"B{i}", "Snorlax, L80", "0 fnt" if i in fainted else "300/300", GEN1_MOVES) for i in range(5)]
    return team


def test_gen1_fight_while_asleep_or_wrapped_is_action_0_and_back():
    fight = {"active": [{"moves": [{"move": "Fight", "id": "fight"}]}]}
    decision, _, mask = _decide("gen1ou", _gen1_team(fainted=(1,)), fight, "move 1")
    assert mask == _mask([0], 4)
    assert decision.unmasked() == [] and decision.action() == 0
    assert decision.slots() == (["fight"], [1, 3, 4, 5])
    assert action_choice(decision, 0) == "move 1"
    decision, _, _ = _decide("gen1ou", _gen1_team(fainted=(1,)), fight, "switch 4")
    assert decision.action() == 5 and action_choice(decision, 5) == "switch 4"


def test_struggle_beside_switches_is_action_0_and_alone_no_action():
    team = [_member("Pika", "Pikachu, L90", "100/200", TEAM_MOVES, active=True, ability="static")]
    team += [_member(f"B{i}", "Snorlax, L80", "300/300", TEAM_MOVES, ability="thickfat") for i in range(5)]
    struggle = {"active": [{"moves": [{"move": "Struggle", "id": "struggle", "target": "randomNormal",
                                       "disabled": False}]}]}
    decision, _, mask = _decide("gen9randombattle", team, struggle, "move 1")
    assert mask == _mask([0], 5) and decision.unmasked() == [] and decision.action() == 0
    assert action_choice(decision, 0) == "move 1"
    trapped = {"active": [{**struggle["active"][0], "trapped": True}]}
    decision, _, mask = _decide("gen9randombattle", team, trapped, "move 1")
    assert not any(mask) and decision.action() == -1 and decision.unmasked() == []


def test_revival_blessing_targets_are_the_fainted_switches():
    team = [_member("Pawmot", "Pawmot, L85", "150/250", ["revivalblessing", "doubleshock", "closecombat",
                                                         "nuzzle"], active=True, ability="voltabsorb",
                    reviving=True)]
    team += [_member(f"B{i}", "Snorlax, L80", "0 fnt" if i in (0, 2, 3) else "300/300", TEAM_MOVES,
                     ability="thickfat") for i in range(5)]
    decision, state, mask = _decide("gen9randombattle", team, {"forceSwitch": [True]}, "switch 4")
    assert mask == _mask(switches=3) and decision.unmasked() == []
    assert [s["hp_pct"] for s in state["available_switches"]] == [0.0, 0.0, 0.0]
    assert decision.action() == 5 and action_choice(decision, 5) == "switch 4"


@needs_simulator
def test_the_generated_source_s_masks_are_its_requests():
    """Real battles: every row's mask is its request's choices and every recorded action is inside it (what
    ``benchmarks/mask_audit.py`` counts over many battles); the gen 1 battles include Fight beside switches (a
    sleeping, frozen or wrapped Pokémon)."""
    sole_moves = collections.Counter()
    for fmt, num_battles in (("gen1ou", 4), ("gen9randombattle", 3)):
        dex, decided = load_dex(int(fmt[3])), 0
        for chunk in generated.chunks([fmt], num_battles, 0, "heuristic", "random", num_battles):
            for battle_id, payload in generated.generate(chunk):
                for side in ("p1", "p2"):
                    _, steps, turns = decisions(json.loads(payload), side, dex)
                    for (_, mask, decision), turn in zip(steps, turns, strict=True):
                        where = (battle_id, side, turn, decision.choice)
                        assert decision.unmasked() == [], where
                        action = decision.action()
                        assert action == -1 or mask[action], where
                        sole_moves[decision.sole] += 1
                        decided += 1
        assert decided > 50
    assert sole_moves["fight"] > 0

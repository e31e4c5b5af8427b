"""The live players' audit of their masks against the server's request (``pipelines.pokemon.pov.unmasked_choices``):
every choice the request offers is in the mask, nothing else is, or the difference is named."""

from __future__ import annotations

from pipelines.pokemon.pov import unmasked_choices

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
    revive = _request(force_switch=True, fainted=3)  # Revival Blessing: the targets are fainted, no action
    assert unmasked_choices(revive, _mask(), TEAM_MOVES, reviving=True) == []


def test_hidden_power_of_the_request_is_the_team_s_typed_one():
    team = ["hiddenpowerfire", "surf"]
    request = _request([("hiddenpower", False), ("surf", False)])
    assert unmasked_choices(request, _mask([0, 1], 5), team) == []

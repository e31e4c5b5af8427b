"""The generated source: the real simulator, deterministic bytes, first-person trajectories at the right moment."""

from __future__ import annotations

import json

import pytest
from conftest import needs_simulator

from pipelines.errors import InputError, InvalidRecordError, TruncatedBattleError
from pipelines.pokemon import generated
from pipelines.pokemon.dex import load_dex

pytestmark = needs_simulator
DEXES = {g: load_dex(g) for g in range(1, 10)}


@pytest.fixture(scope="module")
def battles():
    out = {}
    for fmt in ("gen9randombattle", "gen1ou"):
        chunk = generated.chunks([fmt], 8, 11, "heuristic", "random", 8)[0]
        out[fmt] = list(generated.generate(chunk))
    return out


def test_same_seed_same_bytes(battles):
    chunk = generated.chunks(["gen9randombattle"], 8, 11, "heuristic", "random", 8)[0]
    assert list(generated.generate(chunk)) == battles["gen9randombattle"]
    # a chunk starting mid-run reproduces the same battles
    later = {**chunk, "first_index": 5, "num_battles": 3}
    assert list(generated.generate(later)) == battles["gen9randombattle"][5:]


def test_trajectories_are_first_person_and_timed(battles):
    agree = total = 0
    for records in battles.values():
        for battle_id, payload in records:
            rows, reason = generated.parse(battle_id, payload, DEXES, None)
            assert reason is None
            record = json.loads(payload)
            for side in ("p1", "p2"):
                traj = [r for r in rows if r["player_side"] == side]
                first = traj[0]
                # the first decision is made after turn 1 starts and before anyone moved
                assert first["battle_turn"] == 1
                assert first["state"]["player_prev_move"] is None and first["state"]["opponent_prev_move"] is None
                assert first["state"]["opponent_active"] is not None
                expected = "win" if record["winner"] == side else "loss"
                assert {r["result"] for r in traj} == {expected}
                assert traj[-1]["reward"] == (1.0 if expected == "win" else -1.0)
                for now, nxt in zip(traj, traj[1:], strict=False):
                    assert nxt["battle_turn"] >= now["battle_turn"]
                    a = now["action"]
                    if 0 <= a < 4 and nxt["battle_turn"] == now["battle_turn"] + 1:
                        total += 1
                        chosen = now["state"]["player_active"]["moves"][a]["name"]
                        agree += (nxt["state"]["player_prev_move"] or {}).get("name") == chosen
                assert all(r["legal_mask_exact"] for r in traj)
    # the move chosen at one decision is the side's previous move at the next turn's decision, unless it was
    # prevented (sleep, paralysis, flinch, fainting first): true for most decisions, never for none
    assert total > 100 and agree / total > 0.7


def test_truncated_and_broken_records_raise_typed_errors(battles):
    battle_id, payload = battles["gen1ou"][0]
    record = json.loads(payload)
    cut = {**record, "streams": {s: ev[: len(ev) // 2] for s, ev in record["streams"].items()}}
    with pytest.raises(TruncatedBattleError):
        generated.parse(battle_id, json.dumps(cut).encode(), DEXES, None)
    unanswered = json.loads(payload)
    first_request = next(e for e in unanswered["streams"]["p1"] if e["kind"] == "request")
    first_request["choice"] = None
    with pytest.raises(InvalidRecordError):
        generated.parse(battle_id, json.dumps(unanswered).encode(), DEXES, None)
    with pytest.raises(InputError):
        generated.parse(battle_id, payload[: len(payload) // 3], DEXES, None)
    rows, reason = generated.parse(battle_id, payload, DEXES, frozenset({"gen9ou"}))
    assert rows == [] and reason == "format_not_requested"

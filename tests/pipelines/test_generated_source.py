"""The generated source: the real simulator, deterministic bytes, first-person trajectories at the right moment."""

from __future__ import annotations

import json

import pytest
from conftest import TEACHER_BATTLES, needs_simulator

from pipelines.errors import InputError, InvalidRecordError, TruncatedBattleError
from pipelines.job.parse import ParseInputs
from pipelines.pokemon import generated
from pipelines.pokemon.dex import load_dex
from pipelines.stages import SourceInputs
from shards_schema.reader import open_version

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


def _without_teacher(record: dict) -> dict:
    """A record with what a teacher adds taken out: its name in ``players`` and each request's ``teacher_choice``."""
    record = json.loads(json.dumps(record))
    for slot in ("p1", "p2"):
        record["players"][slot].pop("teacher", None)
        for event in record["streams"][slot]:
            event.pop("teacher_choice", None)
    return record


@pytest.fixture(scope="module")
def taught(battles):
    """The first two gen1ou battles of ``battles`` again, p2 (random) labelled by the search player."""
    chunk = generated.chunks(["gen1ou"], 2, 11, "heuristic", "random", 2, p2_teacher="search")[0]
    return list(generated.generate(chunk))


def test_a_teacher_labels_every_request_and_changes_nothing_else(battles, taught):
    """The slot's own player still decides: the battle with a teacher is the one without, and the slots without a
    teacher write what they wrote before teachers existed (not a byte of ``teacher`` in them)."""
    assert len(taught) == 2
    for (battle_id, line), (plain_id, plain) in zip(taught, battles["gen1ou"][:2], strict=True):
        assert battle_id == plain_id and b"teacher" not in plain
        record = json.loads(line)
        assert record["players"]["p2"]["teacher"] == "search" and "teacher" not in record["players"]["p1"]
        assert _without_teacher(record) == json.loads(plain)
        requests = [e for e in record["streams"]["p2"] if e["kind"] == "request"]
        assert all(isinstance(e["teacher_choice"], str) for e in requests if not e["request"].get("wait"))
        assert not any("teacher_choice" in e for e in record["streams"]["p1"])


def _parse_one(record: dict) -> tuple:
    """(the input's record, its rows) as the parse job's actor parses one generated battle."""
    source = generated.GeneratedSource(SourceInputs(formats=("gen1ou",)),
                                       generated.GeneratedConfig(p2_teacher="search"))
    batch = ParseInputs(source).parse_rows([(record["battle_id"], json.dumps(record).encode(), None, None, None,
                                             None)])
    return batch.records[0], batch.rows


@pytest.mark.parametrize("bad,reason", [
    ("move 1 terastallize", "illegal_action"),  # gen 1: no tera, the mask holds no tera move
    ("switch 1", "illegal_action"),  # the active Pokémon is team slot 1: not a switch target
    ("move 9", "illegal_action"),
    (7, "invalid_record"),
])
def test_a_bad_teacher_choice_quarantines_the_battle(taught, bad, reason):
    record = json.loads(taught[0][1])
    parsed, table = _parse_one(record)
    assert parsed.status == "written" and table.num_rows == parsed.num_rows
    teacher = [r for r, side in zip(table.column("teacher_action").to_pylist(),
                                    table.column("player_side").to_pylist(), strict=True) if side == "p2"]
    assert max(teacher) >= 0 and min(table.column("teacher_action").to_pylist()) == -1
    move_request = next(e for e in record["streams"]["p2"] if e["kind"] == "request" and e["request"].get("active")
                        and not e["request"].get("forceSwitch"))
    move_request["teacher_choice"] = bad
    parsed, table = _parse_one(record)
    assert (parsed.status, parsed.reason, table.num_rows) == ("quarantined", reason, 0), parsed.message
    assert "teacher" in parsed.message


def test_the_parse_job_writes_the_teachers_labels(teacher_generated):
    """``--p1-teacher search`` through the job: each p1 decision carries the search player's label, legal under the
    row's mask; a random p1 disagrees with it often; p2 (no teacher) and the closing rows carry -1."""
    cfg, published = teacher_generated
    version = open_version(published.path)
    assert version.manifest.config["p1_teacher"] == "search" and "p2_teacher" not in version.manifest.config
    assert version.manifest.counts.written == TEACHER_BATTLES and "teacher_action" in version.row_columns
    rows = version.table(["player_side", "action", "teacher_action", "legal_mask", "done"]).to_pylist()
    p1 = [r for r in rows if r["player_side"] == "p1" and not r["done"]]
    assert all(r["teacher_action"] == -1 for r in rows if r["player_side"] == "p2" or r["done"])
    labelled = [r for r in p1 if r["teacher_action"] >= 0]
    assert all(r["legal_mask"][r["teacher_action"]] for r in labelled)
    assert len(labelled) >= 0.9 * len(p1) > 20  # every decision but those with no choice in the 13 (Recharge)
    disagree = sum(r["teacher_action"] != r["action"] for r in labelled)
    assert 0.2 * len(labelled) < disagree < len(labelled)


def test_without_a_teacher_every_row_is_unlabelled(tiny_generated):
    _, published, _ = tiny_generated
    version = open_version(published.path)
    assert "p1_teacher" not in version.manifest.config
    teacher = version.table(["teacher_action"]).column("teacher_action").to_pylist()
    assert teacher and set(teacher) == {-1}

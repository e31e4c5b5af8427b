"""Showdown server battle logs (``--source showdown-server``): the input log replayed gives the generated source's own
trajectories, row for row; the recorded log's reading agrees with them; forfeits, the timer and staff ends; no input
lost, counts that reconcile and byte-identical re-runs through the job as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, damaged_copies, needs_simulator

from pipelines.errors import InputError, InvalidRecordError, ReplayMismatchError
from pipelines.pokemon import generated, input_log, server_logs
from pipelines.pokemon.agreement import Agreement, add_server_logs
from pipelines.pokemon.dex import known_formats, load_dex
from pipelines.pokemon.replays import ReplayFilters
from pipelines.pokemon.trajectory import turns_table
from shards_schema.reader import open_version

DEXES = {g: load_dex(g) for g in range(1, 10)}
KNOWN = known_formats()
SEED = 41
ENDED_SEED = 43
FORMATS = {"gen9randombattle": 3, "gen1ou": 2}
"""Battles per format of the module's battles: a random format (teams from the log's seeds) and one with teams."""


@pytest.fixture(scope="module")
def battles():
    """format → [(battle id, generated record, server log)] of the same battles, played once each way."""
    out = {}
    for fmt, n in FORMATS.items():
        records = list(generated.generate(generated.chunks([fmt], n, SEED, "heuristic", "random", n)[0]))
        logs = server_logs.generated_server_logs(fmt, n, SEED)
        assert [b for b, _ in records] == [b for b, _ in logs]
        out[fmt] = [(b, record, log) for (b, record), (_, log) in zip(records, logs, strict=True)]
    return out


@pytest.fixture(scope="module")
def ended():
    """end → a gen9randombattle server log of a battle ended at turn 3 that way (p2 leaves battle 0 and 2, p1 battle
    1)."""
    return {end_by: server_logs.generated_server_logs("gen9randombattle", 1, ENDED_SEED, first_index=index,
                                                      end_by=end_by, end_turn=3)[0][1]
            for end_by, index in (("forfeit", 0), ("timer", 1), ("forcetie", 2))}


def _read(payload: bytes, name: str = "x.log.json", on_mismatch: str = "spectator", **filters):
    """A server log's parse as the job does it: the read task's replay, then the parser."""
    flt = ReplayFilters(**filters)
    battle = server_logs.to_replay(payload, name, flt, KNOWN)
    facts = {"replay": input_log.replay(battle.input_log, battle.teams)} if battle is not None else {}
    return server_logs.parse(name, payload, DEXES, flt, KNOWN, facts, on_mismatch)


def _edited(payload: bytes, **changes) -> bytes:
    record = json.loads(payload)
    for key, value in changes.items():
        if value is None:
            record.pop(key, None)
        else:
            record[key] = value
    return json.dumps(record).encode()


# ---------------------------------------------------------------------------- exact trajectories
@needs_simulator
def test_server_logs_give_the_generated_sources_own_trajectories(battles):
    for items in battles.values():
        for battle_id, record, log in items:
            truth, _ = generated.parse(battle_id, record, DEXES, None)
            parsed = _read(log, f"{battle_id}.log.json")
            assert parsed.filter_reason is None
            assert parsed.rows == truth, f"{battle_id}: the server log's rows are not the generated source's"
            assert all(r["legal_mask_exact"] for r in parsed.rows)
            # and so is every column the job writes, observations included
            assert turns_table(parsed.rows).equals(turns_table(truth))


@needs_simulator
def test_the_recorded_log_reads_as_the_spectator_reconstruction_agreement(battles):
    """What a server log whose input log does not replay becomes: its recorded log read as a spectator's. The
    agreement figure of those rows with the exact ones, on the module's battles and more of the same kind."""
    agreement = Agreement()
    for fmt in FORMATS:
        add_server_logs(agreement, fmt, 6, seed=SEED + 1)
    print(agreement.report())
    assert agreement.trajectories == 24 and agreement.rate("decision_alignment") == 1.0
    assert agreement.rate("action.visible_identical") >= 0.99 and agreement.rate("action.coverage") >= 0.8
    for name in ("player_active.hp", "opponent_active.hp", "opponent_active.species", "switches.known_subset",
                 "weather", "conditions"):
        assert agreement.rate(name) >= 0.99, name
    # the reading itself: a replay that fails falls back to it, and says so in every row's mask flag
    battle_id, _, log = battles["gen9randombattle"][0]
    fallback = _read(_edited(log, inputLog=json.loads(log)["inputLog"] + [">eval 1"]))
    assert fallback.rows and not any(r["legal_mask_exact"] for r in fallback.rows)
    assert {r["battle_id"] for r in fallback.rows} == {battle_id}


# ---------------------------------------------------------------------------- how battles end
@needs_simulator
def test_forfeit_timer_and_staff_ends(ended):
    for end_by, payload in ended.items():
        record = json.loads(payload)
        leaver = "p1" if end_by == "timer" else "p2"
        assert record["endType"] == ("forced" if end_by == "forcetie" else "forfeit")
        assert record["inputLog"][-1] == (">forcetie" if end_by == "forcetie" else f">forcelose {leaver}")
        rows = _read(payload).rows
        assert rows and all(r["legal_mask_exact"] for r in rows)
        for side in ("p1", "p2"):
            traj = [r for r in rows if r["player_side"] == side]
            expected = "tie" if end_by == "forcetie" else ("loss" if side == leaver else "win")
            assert {r["result"] for r in traj} == {expected}
            # the decision both players faced when it ended is a row, unanswered (-1), then the terminal row
            assert traj[-2]["battle_turn"] == 3 and traj[-2]["action"] == -1 and any(traj[-2]["legal_mask"])
            assert traj[-1]["done"] and traj[-1]["action"] == -1
    timer_log = json.loads(ended["timer"])["log"]
    assert any("lost due to inactivity" in line for line in timer_log)


# ---------------------------------------------------------------------------- the record, read
@needs_simulator
def test_a_record_is_read_from_what_it_holds(battles):
    battle_id, record, log = battles["gen1ou"][0]
    truth, _ = generated.parse(battle_id, record, DEXES, None)
    name = f"{battle_id}.log.json"
    # what a live server adds: its version lines, the room's clock (`|:|`) and the simulator's (`|t:|`), chat
    live = json.loads(log)
    live["inputLog"] = [">version 5a6b7c8", ">version-origin 5a6b7c8", *live["inputLog"]]
    live["log"] = ["|:|1704067200", *[out for line in live["log"] for out in (
        (line, "|t:|1704067260", "|c|☆Random Bot 2|gg") if line.startswith("|turn|") else (line,))], ""]
    assert _read(json.dumps(live).encode(), name).rows == truth
    # no log: the input log alone, checked by winner and turns
    assert _read(_edited(log, log=None), name).rows == truth
    # no input log: the recorded log, as a spectator's
    spectator = _read(_edited(log, inputLog=None), name).rows
    assert spectator and not spectator[0]["legal_mask_exact"]
    # a recorded log the replay does not match (another simulator would differ so): read from the log...
    lines = json.loads(log)["log"]
    at = next(i for i, line in enumerate(lines) if line.startswith("|-damage|"))
    changed = _edited(log, log=lines[:at] + [lines[at] + "|[silent]"] + lines[at + 1:])
    assert not _read(changed, name).rows[0]["legal_mask_exact"]
    # ...or quarantined, for a version of exact trajectories only
    with pytest.raises(ReplayMismatchError, match="is not its log: line"):
        _read(changed, name, on_mismatch="quarantine")
    with pytest.raises(ReplayMismatchError, match="winner"):
        _read(_edited(log, winner="Someone Else"), name, on_mismatch="quarantine")
    # an input log that cannot be replayed and no log to read instead
    with pytest.raises(ReplayMismatchError, match="not a battle input"):
        _read(_edited(log, log=None, inputLog=json.loads(log)["inputLog"] + [">eval process.exit(1)"]), name)
    # bytes that hold no battle
    with pytest.raises(InvalidRecordError, match="neither `log` nor `inputLog`"):
        _read(_edited(log, log=None, inputLog=None), name)
    # the replay filters
    assert _read(log, name, formats=frozenset({"gen9ou"})).filter_reason == "format_not_requested"
    assert _read(log, name, min_rating=1000).filter_reason == "unrated"
    assert _read(log, name, date_from="2024-01-02").filter_reason == "before_date_from"


def test_ids_ratings_and_days():
    record = {"inputLog": [">start {\"formatid\":\"gen9ou\"}", ">player p1 {\"name\":\"A\",\"rating\":1500}",
                           ">player p2 {\"name\":\"B\"}"],
              "p2rating": {"elo": 1311.6, "oldelo": "1290.2", "gxe": 55}, "format": "gen9ou",
              "timestamp": "Tue Mar 05 2024 21:34:56 GMT-0500 (Eastern Standard Time)"}
    battle = server_logs.normalize({**record, "roomid": "battle-gen9ou-123"}, "logs/x.log.json")
    assert (battle.battle_id, battle.format, battle.players) == ("gen9ou-123", "gen9ou", {"p1": "A", "p2": "B"})
    assert battle.ratings == {"p1": 1500, "p2": 1290} and battle.as_replay().rating == 1290
    assert battle.date == "2024-03-06"  # 21:34 in New York is 02:34 the next day in UTC
    assert server_logs.normalize(record, "2024-03/gen9ou/2024-03-05/gen9ou-77.log.json").battle_id == "gen9ou-77"
    local = server_logs.normalize({**record, "p1rating": 1612.4, "timestamp": "not a date"}, "a.json")
    assert local.ratings["p1"] == 1500 and local.date is None  # the >player rating comes first; no day, no drop
    assert server_logs.normalize({**record, "inputLog": record["inputLog"][:1] + [">player p1 {\"name\":\"A\"}"],
                                  "p1rating": 1612.4}, "a.json").ratings["p1"] == 1612


def test_log_divergence_skips_the_rooms_lines_only():
    replayed = ["|gametype|singles", "|player|p1|A||", "|player|p2|B||", "|turn|1", "|move|p1a: X|Tackle|p2a: Y",
                "|-damage|p2a: Y|50/100", "|", "|win|A"]
    recorded = ["|:|1709692496", "|j|☆A", "|player|p1|A||", "|gametype|singles", "|t:|1709692496", *replayed[1:4],
                "|c|☆A|gl hf", "|inactive|B has 30 seconds left.", *replayed[4:6], "|-message|B forfeited.",
                *replayed[6:], "|raw|A's rating: 1500 &rarr; <strong>1516</strong>", ""]
    assert input_log.log_divergence(recorded, replayed) is None
    assert "the replay has" in input_log.log_divergence(
        [line.replace("50/100", "49/100") for line in recorded], replayed)
    assert "ends where the replay goes on" in input_log.log_divergence(recorded[:-4], replayed)


@needs_simulator
def test_a_replayer_that_dies_on_an_input_is_its_error_and_one_that_cannot_start_is_an_outage(
        tmp_path, monkeypatch):
    battle = {"input_log": [">start {\"formatid\":\"gen1ou\"}"], "teams": None}
    dies = tmp_path / "dies.js"
    dies.write_text("process.stdin.on('data', () => process.exit(3));\n")
    monkeypatch.setattr(input_log, "REPLAYER", dies)
    answer = input_log.InputLogReplayer().replay(**battle)
    assert "twice" in answer["error"] and "exited (exit code 3)" in answer["error"]
    silent = tmp_path / "silent.js"
    silent.write_text("process.stdin.on('data', () => {});\n")
    monkeypatch.setattr(input_log, "REPLAYER", silent)
    assert "took longer than 1 s" in input_log.InputLogReplayer(timeout_s=1).replay(**battle)["error"]
    monkeypatch.setenv("PATH", str(tmp_path))  # no node
    with pytest.raises(RuntimeError, match="cannot start the input-log replayer"):
        input_log.InputLogReplayer().replay(**battle)


@needs_simulator
def test_damaged_server_logs_give_rows_or_typed_errors(battles):
    """Damaged bytes become rows, a filter reason or a typed error (anything else fails the test), and a damaged
    record that still decodes is still read where its battle is (from the log, where the replay no longer matches)."""
    _, _, log = battles["gen1ou"][1]
    outcomes = []
    for damaged in damaged_copies(log, seed=7, count=16, max_changes=4):
        try:
            parsed = _read(damaged)
            outcomes.append("ok" if parsed.rows else parsed.filter_reason)
        except InputError as err:
            outcomes.append(err.reason)
    assert "ok" in outcomes and "invalid_json" in outcomes, outcomes


# ---------------------------------------------------------------------------- the job, as a user runs it
def _job(input_dir: Path, out: Path) -> Path:
    proc = subprocess.run([sys.executable, "pipelines/parse_replays.py", "--source", "showdown-server", "--input",
                           str(input_dir), "--out", str(out), "--num-cpus", "2", "--progress-every-s", "60"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return Path(proc.stdout.splitlines()[-1])


@needs_simulator
@pytest.mark.ray  # the job starts a local Ray of its own, as a user's does
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_job_reads_every_server_log_and_reruns_byte_identical(battles, ended, tmp_path):
    folder = tmp_path / "logs"
    exact = {}
    for items in battles.values():
        for battle_id, record, log in items:
            (folder / "exact").mkdir(parents=True, exist_ok=True)
            (folder / "exact" / f"{battle_id}.log.json").write_bytes(log)  # the name a server gives it
            exact[battle_id] = generated.parse(battle_id, record, DEXES, None)[0]
    for end_by, payload in ended.items():
        (folder / "ended" / f"{end_by}.log.json").parent.mkdir(parents=True, exist_ok=True)
        (folder / "ended" / f"{end_by}.log.json").write_bytes(payload)
    battle_id, record, log = battles["gen9randombattle"][0]
    other = folder / "other"
    other.mkdir()
    (other / "copy.log.json").write_bytes(log)  # the same battle again: a duplicate
    (other / "log-only.log.json").write_bytes(_edited(log, roomid="battle-log-only-1", inputLog=None))
    (other / "no-log.log.json").write_bytes(_edited(log, roomid="battle-no-log-1", log=None))
    (other / "eval.log.json").write_bytes(  # cannot be replayed, and no log to read instead
        _edited(log, roomid="battle-eval-1", log=None, inputLog=[*json.loads(log)["inputLog"], ">eval 1"]))
    (other / "empty.log.json").write_bytes(_edited(log, log=None, inputLog=None))  # no battle in its bytes
    (other / "cut.log.json").write_bytes(log[:len(log) // 2])  # not JSON
    spectator = json.loads(record)
    (other / "replay.json").write_text(json.dumps({  # a public replay of another battle, beside the server logs
        "id": "public-1", "format": "[Gen 9] Random Battle", "formatid": "gen9randombattle", "players": ["A", "B"],
        "log": "\n".join(spectator["spectator_log"]), "uploadtime": 1704067200, "rating": None}))

    first = open_version(_job(folder, tmp_path / "out1"))
    c = first.manifest.counts
    assert c.reconciles() and (c.inputs, c.written) == (15, 11)
    assert c.filtered == {"duplicate": 1}
    assert c.quarantined == {"invalid_json": 1, "invalid_record": 1, "replay_mismatch": 1}
    quarantine = {r["input_id"]: r for r in first.quarantine().to_pylist()}
    assert quarantine["other/eval.log.json"]["reason"] == "replay_mismatch"
    assert "not a battle input" in quarantine["other/eval.log.json"]["message"]
    assert quarantine["other/empty.log.json"]["reason"] == "invalid_record"
    rows = first.table().to_pylist()
    by_battle: dict[str, list[dict]] = {}
    for row in rows:
        by_battle.setdefault(row["battle_id"], []).append(row)
    assert set(by_battle) == {*exact, "gen9randombattle-43-0", "gen9randombattle-43-1", "gen9randombattle-43-2",
                              "log-only-1", "no-log-1", "public-1"}
    for battle_id, truth in exact.items():  # the exact trajectories as written: the generated source's rows
        assert by_battle[battle_id] == turns_table(truth).to_pylist(), battle_id
    assert {r["legal_mask_exact"] for r in by_battle["log-only-1"] + by_battle["public-1"]} == {False}
    assert {r["legal_mask_exact"] for r in by_battle["no-log-1"]} == {True}

    # the same inputs again, into another folder: the same version, byte for byte
    one, two = Path(first.path), _job(folder, tmp_path / "out2")
    assert two.name == one.name
    names = sorted(p.name for p in one.iterdir())
    assert names == sorted(p.name for p in two.iterdir()) and "manifest.json" in names
    for name in names:
        assert (one / name).read_bytes() == (two / name).read_bytes(), name

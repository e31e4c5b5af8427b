"""Melee pipeline: golden values on the shared real replays, exact values on synthetic ones, the job on Ray."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import peppi_py
import py7zr
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import SHARED_DATA, shared_data

from pipelines.melee import archives
from pipelines.melee.slp import ATTACHED_TYPES, HELD_STATES, SlpError, SlpFilters, UnsupportedSlpError, parse_slp
from pipelines.melee.synthetic import FOX_LASER, SHYGUY, SyntheticGame, lasers, position, write_slp
from pipelines.parse_replays import ParseConfig, run
from shards_schema.melee import SLOT_NAMES
from shards_schema.reader import open_version

ALL = SlpFilters(min_frames=0, allow_cpu=True)
REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference" / "melee_enums"


def _summary() -> list[dict]:
    """The shared replays' golden values (SUMMARY.tsv), none when ../shared/data is absent: collection never fails,
    and the test is then skipped for an empty parameter set."""
    summary = SHARED_DATA / "melee" / "slp" / "SUMMARY.tsv"
    if not summary.is_file():
        return []
    rows = []
    lines = summary.read_text().splitlines()
    header = lines[0].split("\t")
    for line in lines[1:]:
        rows.append(dict(zip(header, line.split("\t"), strict=True)))
    return rows


def _enum(name: str, key: str) -> dict[str, int]:
    path = REFERENCE / f"{name}.json"
    if not path.exists():
        pytest.skip(f"{path} is not available")
    values = json.loads(path.read_text())[key]["known_values"]
    return {v["ident"]: int(k) for k, v in values.items()}


def _parse_shared(name: str):
    path = shared_data("melee", "slp", name)
    return parse_slp(path.read_bytes(), input_id=name, source="slp", filters=ALL)


@pytest.mark.parametrize("entry", _summary(), ids=lambda e: e["file"])
def test_golden_shared_replays(entry):
    table, game = _parse_shared(entry["file"])
    frames = dict(part.split("=") for part in entry["frames"].split())
    assert game["num_frames"] == int(frames["unique_frames"]) == table.num_rows
    assert game["rollback_frames"] == int(frames["rows"]) - int(frames["unique_frames"])
    assert game["slippi_version"] == entry["slippi_version"].lstrip("v")
    assert game["stage"] == _enum("stage", "Stage")[entry["stage"]]
    external = _enum("character", "External")
    players = [p.split(":")[1].split("(")[0] for p in entry["players(H=human,C=cpu)"].split(",")]
    assert game["characters_external"] == [external[c] for c in players]
    assert game["player_types"] == [1 if "(C)" in p else 0 for p in entry["players(H=human,C=cpu)"].split(",")]
    frame_ids = table.column("frame").to_numpy()
    assert np.all(np.diff(frame_ids) == 1) and frame_ids[0] == -123
    # a named frame equals peppi's own reading (its last copy of that frame id, as rollback keeps)
    ref = peppi_py.read_slippi(str(shared_data("melee", "slp", entry["file"])))
    ids = ref.frames.id.to_numpy()
    target = int(frame_ids[len(frame_ids) // 2])
    k = int(np.nonzero(ids == target)[0][-1])
    row = table.slice(len(frame_ids) // 2, 1).to_pylist()[0]
    for slot, port in zip(("p0", "p1"), ref.frames.ports, strict=False):
        post = port.leader.post
        assert row[slot]["leader"]["x"] == pytest.approx(post.position.x[k].as_py())
        assert row[slot]["leader"]["y"] == pytest.approx(post.position.y[k].as_py())
        assert row[slot]["leader"]["percent"] == pytest.approx(post.percent[k].as_py())
    version = tuple(int(x) for x in game["slippi_version"].split("."))
    projectiles = table.column("num_projectiles")
    if version < (3, 0):
        assert projectiles.null_count == table.num_rows  # no item data: null, not zero
    else:
        assert projectiles.null_count == 0
    leader = pc.struct_field(table.column("p0"), "leader")
    assert (pc.struct_field(leader, "hitlag").null_count == table.num_rows) == (version < (3, 8))
    assert (pc.struct_field(leader, "vel_self_y").null_count == table.num_rows) == (version < (3, 5))
    assert (pc.struct_field(leader, "airborne").null_count == table.num_rows) == (version < (2, 0))
    pq.write_table(table, io.BytesIO())  # every value fits the declared schema, nulls included


@pytest.mark.parametrize("name", ["peppi__ics.slp", "slippijs__PichuVSelf-All-22.slp"])
def test_nana_is_carried(name):
    table, game = _parse_shared(name)
    ics = game["characters_external"].index(14)  # Ice Climbers (CSS id)
    nana = table.column(f"p{ics}")
    nana = pc.struct_field(nana, "nana")
    assert nana.null_count < table.num_rows
    assert pc.struct_field(table.column(f"p{1 - ics}"), "nana").null_count == table.num_rows


# Before parser 3.0.0 items in hand counted too: 513 (193 frames of a turnip in Peach's hand), 360 (240 of the Fox
# blaster), 528 (Pichu's thunder, all in flight), 22 (19 of the blaster).
@pytest.mark.parametrize("name,count", [("peppi__items.slp", 320), ("slippijs__NessVFox-Absorb.slp", 120),
                                        ("slippijs__PichuVSelf-All-22.slp", 528), ("peppi__v3.16.slp", 3)])
def test_projectile_counts(name, count):
    table, _ = _parse_shared(name)
    assert pc.sum(table.column("num_projectiles")).as_py() == count
    types = set()
    for slot in SLOT_NAMES:
        types |= set(pc.struct_field(table.column("projectiles"), [slot, "type"]).drop_null().to_pylist())
    assert types and SHYGUY not in types  # stage entities are not projectiles


def test_fox_lasers_reach_the_opponent_features():
    table, game = _parse_shared("slippijs__NessVFox-Absorb.slp")
    fox = game["characters_external"].index(2)  # Fox fires; the other player sees the nearest laser
    other = "p1" if fox == 0 else "p0"
    near = pc.struct_field(table.column(other), "nearest_projectile_type").drop_null().to_pylist()
    assert near and set(near) == {FOX_LASER}  # never the blaster in Fox's hand


def test_items_in_hand_are_not_projectiles():
    """A blaster, Sheik's held needle, her smoke, a turnip in hand (all at the owner's position) are not
    projectiles; the same turnip thrown is. Types and states from the game's item tables (see slp.py)."""
    held = ((74, 1), (80, 0), (85, 0), (99, 0), (99, 4), (94, 0))  # blaster, needle, smoke, turnip x2, charge shot
    thrown = ((99, 2), (94, 3))  # a turnip thrown, a charge shot fired
    assert all(t in ATTACHED_TYPES or s in HELD_STATES.get(t, ()) for t, s in held)
    game = SyntheticGame(num_frames=300, laser_every=25, held_items=held + thrown)
    table, _ = parse_slp(write_slp(game), input_id="held", source="slp", filters=ALL)
    rows = table.to_pylist()
    for row in rows:
        live = lasers(row["frame"], game)
        assert row["num_projectiles"] == len(live) + len(thrown)
        slots = [row["projectiles"][name] for name in SLOT_NAMES if row["projectiles"][name]]
        assert {(s["type"], s["state"]) for s in slots} <= {(FOX_LASER, 1), *thrown}
        assert row["p1"]["nearest_projectile_type"] in {FOX_LASER, 99, 94}
        x0, y0 = position(0, row["frame"])
        p1x, p1y = position(1, row["frame"])
        if not live:  # only the thrown items, at port 0's position, remain
            assert row["p1"]["nearest_projectile_dx"] == pytest.approx(x0 - p1x, abs=1e-3)
            assert row["p1"]["nearest_projectile_dy"] == pytest.approx(y0 - p1y, abs=1e-3)


def test_synthetic_exact_values_rollback_and_filters():
    game = SyntheticGame(num_frames=400, rollback_frames=(5, 6, 7), shyguys=True, laser_every=25)
    table, info = parse_slp(write_slp(game), input_id="syn", source="slp", filters=ALL)
    assert info["num_frames"] == 400 and info["rollback_frames"] == 3
    rows = table.to_pylist()
    for row in rows[::37] + [r for r in rows if r["frame"] in (5, 6, 7)]:
        for slot, port in (("p0", 0), ("p1", 1)):
            x, y = position(port, row["frame"])
            assert row[slot]["leader"]["x"] == pytest.approx(x, abs=1e-4)  # the kept copy is the last one
            assert row[slot]["leader"]["y"] == pytest.approx(y, abs=1e-4)
        live = lasers(row["frame"], game)
        assert row["num_projectiles"] == len(live)
        slots = [row["projectiles"][name] for name in SLOT_NAMES]
        assert [s["spawn_id"] for s in slots if s] == [spawn for spawn, _, _ in live][:4]
        assert all(s is None for s in slots[len(live):])
        if live:
            p1x, p1y = position(1, row["frame"])
            nearest = min(live, key=lambda s: (s[1] - p1x) ** 2 + (s[2] - p1y) ** 2)
            assert row["p1"]["nearest_projectile_dx"] == pytest.approx(nearest[1] - p1x, abs=1e-3)
            assert row["p1"]["nearest_projectile_type"] == FOX_LASER
        assert row["p0"]["nearest_projectile_dx"] is None  # port 1 fires nothing
    assert parse_slp(write_slp(SyntheticGame(num_frames=200, cpu=(1,))), input_id="c", source="slp",
                     filters=SlpFilters(min_frames=0)) == (None, "cpu_player")
    assert parse_slp(write_slp(SyntheticGame(num_frames=200)), input_id="s", source="slp",
                     filters=SlpFilters(min_frames=1000)) == (None, "too_short")


@pytest.mark.parametrize("method,lras,placements,winner", [
    (7, 0, (0, 1, -1, -1), 1),  # Slippi 3.13+ places the quitter first: the other player won
    (7, 1, (0, 1, -1, -1), 0),
    (7, -1, (0, 1, -1, -1), None),  # a no contest nobody quit (e.g. the game was reset): no winner
    (2, -1, (1, 0, -1, -1), 1),  # a finished game: its placements
])
def test_winner_of_no_contest_is_the_player_who_did_not_quit(method, lras, placements, winner):
    game = SyntheticGame(num_frames=200, end_method=method, lras_initiator=lras, placements=placements)
    _, info = parse_slp(write_slp(game), input_id="end", source="slp", filters=ALL)
    assert (info["end_method"], info["winner_port"]) == (method, winner)


@pytest.mark.parametrize("name,winner", [("slippijs__unranked_game1.slp", 1),  # P1 quit; placements say P1
                                         ("slippijs__ranked_game1_tiebreak.slp", 0),  # P2 quit
                                         ("peppi__v3.13.slp", 2)])  # a finished game: P3 placed first
def test_winner_golden(name, winner):
    assert _parse_shared(name)[1]["winner_port"] == winner


def test_garbage_and_files_cut_before_a_whole_frame_are_typed_errors():
    """A file cut after whole frames is read up to them (tests/pipelines/test_melee_salvage.py); one cut before its
    first whole frame, or bytes that are no replay, are ``unreadable_slp``."""
    data = write_slp(SyntheticGame(num_frames=300))
    first_bookend = data.index(bytes([0x3C, 0xFF, 0xFF, 0xFF, 0x85]))  # the Frame Bookend of frame -123
    for damaged in (b"not a replay", data[:15], data[:400], data[:first_bookend + 5]):
        with pytest.raises(SlpError) as caught:
            parse_slp(damaged, input_id="bad", source="slp", filters=ALL)
        assert caught.value.reason == "unreadable_slp"
    table, game = parse_slp(data[:first_bookend + 9], input_id="one frame", source="slp", filters=ALL)
    assert (table.num_rows, game["complete"]) == (1, False)


def test_complete_replay_peppi_rejects_has_its_own_reason():
    """A well-formed file with content peppi does not know is not damaged bytes: ``unsupported_slp``."""
    unknown_end = write_slp(SyntheticGame(num_frames=300, end_method=5))  # methods are 0-3 and 7
    game_start = write_slp(SyntheticGame(num_frames=300))
    at = game_start.find(bytes([0x36, 3, 18, 0]))  # Game Start of 3.18.0; +0x2BD is the language (0 JP, 1 EN)
    unknown_language = game_start[:at + 0x2BD] + bytes([7]) + game_start[at + 0x2BE:]
    for data in (unknown_end, unknown_language):
        with pytest.raises(UnsupportedSlpError) as caught:
            parse_slp(data, input_id="odd", source="slp", filters=ALL)
        assert caught.value.reason == "unsupported_slp" and "invalid" in str(caught.value)


def test_slp_job_on_archives(ray_local, tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    games = [write_slp(SyntheticGame(num_frames=300 + 10 * i, seed=i, rollback_frames=(3,))) for i in range(9)]
    (root / "a.slp").write_bytes(games[0])
    with zipfile.ZipFile(root / "b.zip", "w") as archive:
        archive.writestr("x/one.slp", games[1])
        archive.writestr("x/two.slp", games[2])
        archive.writestr("x/notes.txt", b"not a replay")
    with zipfile.ZipFile(root / "e.zip", "w") as archive:  # the middle member gets a bad CRC below
        for name, data in (("g6.slp", games[6]), ("g7.slp", games[7]), ("g8.slp", games[8])):
            archive.writestr(name, data)
    raw = bytearray((root / "e.zip").read_bytes())
    raw[raw.find(games[7][:64]) + 5000] ^= 0xFF
    (root / "e.zip").write_bytes(bytes(raw))
    (root / "LOUD.SLP").write_bytes(write_slp(SyntheticGame(num_frames=300, seed=99)))
    (root / "notes.txt").write_text("not a replay")
    with tarfile.open(root / "c.tar.gz", "w:gz") as archive:
        for name, data in (("three.slp", games[3]), ("dup.slp", games[0])):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    with py7zr.SevenZipFile(root / "d.7z", "w") as archive:
        archive.writestr(games[4], "four.slp")
    (root / "cut.slp").write_bytes(games[5][:len(games[5]) * 2 // 3])  # a stopped recording: its whole frames
    (root / "cut_early.slp").write_bytes(games[5][:2000])  # stopped before its 100th frame
    (root / "cut_in_game_start.slp").write_bytes(games[5][:400])  # no whole frame
    (root / "cpu.slp").write_bytes(write_slp(SyntheticGame(num_frames=300, cpu=(0,))))
    cfg = ParseConfig.tiny(source="slp", input=str(root), out=str(tmp_path / "out"), min_frames=100)
    version = open_version(run(cfg, log=lambda *_: None).path)
    c = version.manifest.counts
    assert (c.inputs, c.written) == (16, 9) and c.reconciles()
    assert c.filtered == {"cpu_player": 1, "duplicate": 1, "not_a_replay": 2, "too_short": 1}
    assert sum(c.quarantined.values()) == 2
    index = version.index().to_pylist()
    assert {r["input_id"] for r in index} == {"a.slp", "b.zip::x/one.slp", "b.zip::x/two.slp",
                                              "c.tar.gz::three.slp", "d.7z::four.slp", "e.zip::g6.slp",
                                              "e.zip::g8.slp", "LOUD.SLP", "cut.slp"}
    cut = next(r for r in index if r["input_id"] == "cut.slp")
    assert not cut["complete"] and "raw_cut" in cut["incomplete_reasons"] and 100 < cut["num_frames"] < 350
    assert all(r["complete"] for r in index if r["input_id"] != "cut.slp")
    quarantined = {r["input_id"]: r["reason"] for r in version.quarantine().to_pylist()}
    assert quarantined["e.zip::g7.slp"] == "corrupt_input" and quarantined["cut_in_game_start.slp"] == "unreadable_slp"
    assert quarantined["cut_early.slp"] == "too_short"
    assert {i for i, reason in quarantined.items() if reason == "not_a_replay"} == {"notes.txt",
                                                                                  "b.zip::x/notes.txt"}
    game = index[2]
    window = version.window(game["game_id"], first_frame=50, num_frames=30)
    assert window.column("frame").to_pylist() == list(range(50, 80))
    assert set(window.column("game_id").to_pylist()) == {game["game_id"]}
    assert version.manifest.schema_name == "melee_frames" and Path(version.path).parent.name == "melee_frames"


def test_hub_download_pins_and_filters(monkeypatch, tmp_path):
    """The hub call is the network's; what we own: the revision resolved to a commit, only matching archives."""
    class FakeApi:
        def dataset_info(self, repo, revision):
            return type("Info", (), {"sha": "abc123"})()

        def list_repo_files(self, repo, repo_type, revision):
            return ["README.md", "FOX.tar.gz", "MARTH.tar.gz", "misc/one.slp"]

    fetched = []
    monkeypatch.setattr(archives, "HfApi", FakeApi)
    monkeypatch.setattr(archives, "hf_hub_download", lambda **kw: fetched.append((kw["filename"], kw["revision"])))
    assert archives.download("erickfm/melee-ranked-replays", tmp_path, "v2", ["*FOX*"]) == \
        "erickfm/melee-ranked-replays@abc123"
    assert fetched == [("FOX.tar.gz", "abc123")]


def test_garbage_physical_triggers_are_null_not_values():
    table, game = _parse_shared("peppi__v0.1.slp")  # Slippi 0.1 files carry 3.78e22 as the physical R trigger
    for player in ("p0", "p1"):
        trigger_r = pc.struct_field(table.column(player), ["controller", "trigger_r"])
        assert trigger_r.null_count == table.num_rows
        trigger_l = pc.struct_field(table.column(player), ["controller", "trigger_l"]).drop_null().to_numpy()
        assert len(trigger_l) and trigger_l.min() >= 0 and trigger_l.max() <= 1


@pytest.mark.parametrize("name,l_frames", [("peppi__v0.1.slp", 1743), ("peppi__v2.0.slp", 2253)])
def test_physical_l_of_early_files_is_null_while_l_is_pressed(name, l_frames):
    """Slippi 0.1-1.x write 0.0 as the physical L trigger on every frame digital L is pressed; 2.0 on holds it."""
    table, game = _parse_shared(name)
    early = game["slippi_version"] < "2"
    pressed_total = 0
    for player in ("p0", "p1"):
        controller = pc.struct_field(table.column(player), "controller")
        pressed = (pc.struct_field(controller, "buttons").to_numpy() & 0x40) != 0
        null = pc.is_null(pc.struct_field(controller, "trigger_l")).to_numpy(zero_copy_only=False)
        pressed_total += int(pressed.sum())
        assert np.array_equal(null, pressed) if early else not null.any()
    assert pressed_total == l_frames

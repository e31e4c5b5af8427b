"""Melee recordings that stopped early: a raw element of length 0 (the file was never closed), a file cut inside its
events, its metadata or its closing brace. Every whole frame before the cut is read and equals the same frame of the
whole file; the game is written incomplete with what it lacks; only a file without a whole frame is quarantined.
Real shared replays cut byte by byte (``slp_format.md`` §1.1-1.2), and synthetic games whose values are known."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, damaged_copies, shared_data
from test_melee_versions import relabel

from pipelines.errors import InputError
from pipelines.melee.slp import INCOMPLETE_REASONS, SlpError, SlpFilters, parse_slp
from pipelines.melee.synthetic import SyntheticGame, position, write_slp
from shards_schema.reader import open_version

ALL = SlpFilters(min_frames=0, allow_cpu=True)
HEADER = b"{U\x03raw[$U#l"
RAW_AT = len(HEADER) + 4  # the raw element's first byte


def _parts(data: bytes) -> tuple[int, list[int], int]:
    """(raw element's length, the offset in the file where each event ends, where the first frame event starts)."""
    raw_len = int.from_bytes(data[len(HEADER):RAW_AT], "big")
    raw = data[RAW_AT:RAW_AT + raw_len]
    sizes = {raw[at]: int.from_bytes(raw[at + 1:at + 3], "big") for at in range(2, 1 + raw[1], 3)}
    ends, at, first_frame = [], 1 + raw[1], None
    while at < raw_len:
        if first_frame is None and raw[at] in (0x37, 0x3A):
            first_frame = RAW_AT + at
        at += 1 + sizes[raw[at]]
        ends.append(RAW_AT + at)
    return raw_len, ends, first_frame


def _never_closed(data: bytes) -> bytes:
    """The file as a console leaves it until the game ends: raw length 0."""
    return data[:len(HEADER)] + bytes(4) + data[RAW_AT:]


def _parse(data: bytes, name: str = "cut.slp"):
    return parse_slp(data, input_id=name, source="slp", filters=ALL)


def _same_frames(table, whole) -> bool:
    """``table`` is the first frames of ``whole``, value for value (game ids differ with the bytes)."""
    return table.drop_columns(["game_id"]).equals(whole.drop_columns(["game_id"]).slice(0, table.num_rows))


# pre-3.0 without bookends (Ice Climbers: follower events; v2.0), netplay with a Gecko List, rollback with items
# (v3.16), rollback whose last frames are not finalized (the tiebreak)
FILES = ["peppi__ics.slp", "peppi__v2.0.slp", "peppi__netplay.slp", "peppi__v3.16.slp",
         "slippijs__ranked_game1_tiebreak.slp"]


@pytest.mark.parametrize("closed", [True, False], ids=["cut", "never_closed"])
@pytest.mark.parametrize("name", FILES)
def test_every_whole_frame_before_a_cut_is_read_and_equals_the_whole_file(name, closed):
    data = shared_data("melee", "slp", name).read_bytes()
    whole, whole_game = _parse(data, name)
    raw_len, ends, first_frame = _parts(data)
    source = data if closed else _never_closed(data)
    # cuts 3 bytes before the end of the events (in or at Game End), at three other places, and at an event boundary
    cuts = [RAW_AT + raw_len - 3, *(first_frame + int(f * (RAW_AT + raw_len - first_frame)) for f in (0.9, 0.5, 0.2)),
            ends[len(ends) * 2 // 3]]
    seen = set()
    for cut in cuts:
        table, game = _parse(source[:cut], name)
        assert 0 < table.num_rows <= whole.num_rows and _same_frames(table, whole), cut
        assert game["game_id"] == hashlib.sha256(source[:cut]).hexdigest()
        reasons = game["incomplete_reasons"]
        assert not game["complete"] and reasons[0] == ("raw_cut" if closed else "raw_length_zero"), cut
        assert ("partial_event" in reasons) == (cut not in ends), cut
        assert {"no_game_end", "no_metadata"} <= set(reasons) and set(reasons) <= set(INCOMPLETE_REASONS)
        assert (game["end_method"], game["start_time"], game["repaired_events"]) == (None, None, 0)
        assert game["num_frames"] == table.num_rows and game["first_frame"] == -123
        for key in ("characters_internal", "ports", "stage", "slippi_version"):
            assert game[key] == whole_game[key], key
        seen |= set(reasons)
    assert "partial_frame" in seen
    if name == "slippijs__ranked_game1_tiebreak.slp":  # its last 7 frames are never finalized (rollback)
        assert "unfinalized_frames" in seen


@pytest.mark.parametrize("closed", [True, False], ids=["cut", "never_closed"])
def test_a_file_cut_after_its_events_keeps_every_frame(closed):
    """Cut in the metadata, after the raw element or at the closing brace: every frame and Game End are there."""
    data = shared_data("melee", "slp", "peppi__v3.13.slp").read_bytes()
    source = data if closed else _never_closed(data)
    whole, whole_game = _parse(data)
    raw_end = RAW_AT + _parts(data)[0]
    for cut, lacks in ((len(data) - 1, ("no_closing_brace",)), (len(data) - 5, ("no_metadata",)),
                       (raw_end + 3, ("no_metadata",)), (raw_end, ("no_metadata",))):
        table, game = _parse(source[:cut])
        assert _same_frames(table, whole) and table.num_rows == whole.num_rows, cut
        assert (game["complete"], game["incomplete_reasons"]) == (False, lacks), cut
        assert (game["end_method"], game["winner_port"]) == (whole_game["end_method"], whole_game["winner_port"])
        assert game["start_time"] == (whole_game["start_time"] if lacks == ("no_closing_brace",) else None)


def test_a_whole_recording_whose_length_was_never_written_is_complete():
    """peppi reads a raw element of length 0 to Game End: such a file, otherwise whole, needs nothing."""
    data = shared_data("melee", "slp", "peppi__v3.13.slp").read_bytes()
    table, game = _parse(_never_closed(data))
    whole, _ = _parse(data)
    assert table.num_rows == whole.num_rows and _same_frames(table, whole)
    assert (game["complete"], game["incomplete_reasons"]) == (True, ())


@pytest.mark.parametrize("name", ["peppi__netplay.slp", "peppi__ics.slp"])
def test_a_recording_without_a_whole_frame_is_quarantined(name):
    """Cut in the payload table, in Game Start, in the Gecko List (netplay), or before the first frame is whole."""
    data = shared_data("melee", "slp", name).read_bytes()
    _, ends, first_frame = _parts(data)
    last_of_first_frame = next(end for end in ends if end > first_frame + 30)  # a few events into frame -123
    for cut in (RAW_AT + 5, RAW_AT + 40, first_frame - 100, first_frame + 1, last_of_first_frame):
        for source in (data, _never_closed(data)):
            with pytest.raises(SlpError) as caught:
                _parse(source[:cut])
            assert caught.value.reason == "unreadable_slp", cut
            assert "no whole frame" in str(caught.value) or "before its first whole frame" in str(caught.value)


def test_synthetic_games_cut_anywhere_keep_their_exact_values():
    game = SyntheticGame(num_frames=300, laser_every=25, rollback_frames=(40,))
    data = write_slp(game)
    for truncate in (1, 7, 3000, 20_000, 60_000):
        cut = write_slp(SyntheticGame(**{**game.__dict__, "truncate_bytes": truncate}))
        assert cut == data[:-truncate]
        table, info = _parse(cut)
        assert not info["complete"] and 0 < table.num_rows <= 300
        for row in table.to_pylist()[::23]:
            for slot, port in (("p0", 0), ("p1", 1)):
                x, y = position(port, row["frame"])
                assert row[slot]["leader"]["x"] == pytest.approx(x, abs=1e-4)
                assert row[slot]["leader"]["y"] == pytest.approx(y, abs=1e-4)


def _job_inputs(root: Path) -> dict[str, str]:
    """The job's inputs: file name → what it must become (``written:<reasons>``, ``quarantined:<reason>``)."""
    root.mkdir()
    netplay = shared_data("melee", "slp", "peppi__netplay.slp").read_bytes()
    v316 = shared_data("melee", "slp", "peppi__v3.16.slp").read_bytes()
    ics = shared_data("melee", "slp", "peppi__ics.slp").read_bytes()
    _, v316_ends, v316_first = _parts(v316)
    files = {
        "whole.slp": (netplay, "written:"),
        "v3.3.slp": (relabel(netplay, 3), "written:"),
        "v3.6.slp": (relabel(v316, 6), "written:"),
        "crashed.slp": (_never_closed(v316)[:len(v316) * 3 // 4], "written:raw_length_zero,partial_event,"
                                                                  "partial_frame,no_game_end,no_metadata"),
        "no_metadata.slp": (ics[:RAW_AT + _parts(ics)[0]], "written:no_metadata"),
        "cut_mid_event.slp": (v316[:v316_ends[len(v316_ends) // 2] - 5], "written:raw_cut,partial_event,"
                                                                        "partial_frame,no_game_end,no_metadata"),
        "cut_before_a_frame.slp": (v316[:v316_first + 50], "quarantined:unreadable_slp"),
        "v3.3_crashed.slp": (_never_closed(relabel(netplay, 3))[:-2000], "written:raw_length_zero,partial_event,"
                                                                        "partial_frame,no_game_end,no_metadata"),
    }
    for name, (data, _) in files.items():
        (root / name).write_bytes(data)
    return {name: outcome for name, (_, outcome) in files.items()}


@pytest.mark.ray  # the command starts a local Ray of its own, as a user's does
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_job_writes_slippi_3_0_to_3_6_and_stopped_recordings(tmp_path):
    """``python pipelines/parse_replays.py --source slp`` as a user runs it, twice: every input is written (with
    what it lacks in the games index) or quarantined only when its bytes hold no whole frame; counts reconcile, and
    the re-run publishes the same version byte for byte."""
    expected = _job_inputs(tmp_path / "in")
    published = []
    for out in ("out1", "out2"):
        proc = subprocess.run(
            [sys.executable, "pipelines/parse_replays.py", "--source", "slp", "--input", str(tmp_path / "in"),
             "--out", str(tmp_path / out), "--min-frames", "0", "--allow-cpu", "--num-cpus", "2"],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
        published.append(Path(proc.stdout.splitlines()[-1]))
    version = open_version(published[0])
    counts = version.manifest.counts
    written = {name for name, outcome in expected.items() if outcome.startswith("written")}
    assert (counts.inputs, counts.written) == (len(expected), len(written)) and counts.reconciles()
    assert counts.quarantined == {"unreadable_slp": 1} and not counts.filtered
    index = {row["input_id"]: row for row in version.index().to_pylist()}
    assert index.keys() == written
    for name in written:
        reasons = expected[name].split(":")[1]
        assert ",".join(index[name]["incomplete_reasons"]) == reasons, name
        assert index[name]["complete"] == (not reasons), name
    assert index["v3.3.slp"]["slippi_version"] == "3.3.0" and index["v3.6.slp"]["slippi_version"] == "3.6.0"
    assert {r["input_id"]: r["reason"] for r in version.quarantine().to_pylist()} == {
        "cut_before_a_frame.slp": "unreadable_slp"}
    frames = version.table()
    assert frames.num_rows == sum(row["num_rows"] for row in index.values())
    # the second run: the same version, the same bytes in every file
    m = version.manifest
    assert published[1].name == published[0].name
    for entry in [*m.files, m.index_file, m.quarantine_file]:
        assert (published[0] / entry.path).read_bytes() == (published[1] / entry.path).read_bytes(), entry.path


@pytest.mark.parametrize("name", ["peppi__ics.slp", "peppi__v3.16.slp"])
def test_fuzzed_stopped_recordings_give_rows_or_typed_errors(name):
    """Random byte damage to recordings that stopped (never closed, and cut): a row or a typed input error (a
    quarantine row), never another exception."""
    data = shared_data("melee", "slp", name).read_bytes()
    outcomes = set()
    for source in (_never_closed(data)[:len(data) * 3 // 4], data[:len(data) * 2 // 3]):
        for damaged in damaged_copies(source, name, 30, max_changes=6):
            try:
                table, _ = _parse(damaged)
                outcomes.add("row" if table is not None else "filtered")
            except InputError as err:
                outcomes.add(err.reason)
    assert "row" in outcomes, outcomes

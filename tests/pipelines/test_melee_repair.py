"""Melee files peppi refuses: events it does not support are dropped by the payload table and the game parsed, a
game without Game End is flagged incomplete, and a peppi panic is a quarantine row with peppi's message. Real shared
replays edited byte by byte (``slp_format.md`` §1.1-1.2: a UBJSON wrapper, the raw element's length, Event
Payloads first, then events each one command byte and a payload of the size the table gives). Recordings that
stopped early are tests/pipelines/test_melee_salvage.py's."""

from __future__ import annotations

import hashlib
import struct

import pytest
from conftest import damaged_copies, shared_data

from pipelines.errors import InputError
from pipelines.melee.slp import SlpError, SlpFilters, UnsupportedSlpError, parse_slp

ALL = SlpFilters(min_frames=0, allow_cpu=True)
HEADER = b"{U\x03raw[$U#l"
FRAME_EVENTS = (0x37, 0x38, 0x3A, 0x3B, 0x3C)  # payloads that start with the frame id
UNKNOWN = 0x50  # no Slippi version has written it


def _split(data: bytes) -> tuple[dict[int, int], list[bytes], bytes]:
    """(payload sizes by code, the events in order, each its command byte and payload, the bytes after the raw
    element)."""
    assert data.startswith(HEADER)
    raw_len = int.from_bytes(data[len(HEADER):len(HEADER) + 4], "big")
    raw, rest = data[len(HEADER) + 4:len(HEADER) + 4 + raw_len], data[len(HEADER) + 4 + raw_len:]
    table_end = 1 + raw[1]
    sizes = {raw[at]: int.from_bytes(raw[at + 1:at + 3], "big") for at in range(2, table_end, 3)}
    events, at = [], table_end
    while at < len(raw):
        events.append(raw[at:at + 1 + sizes[raw[at]]])
        at += 1 + sizes[raw[at]]
    assert at == len(raw)
    return sizes, events, rest


def _join(sizes: dict[int, int], events: list[bytes], rest: bytes) -> bytes:
    """A file from its parts: the payload table rebuilt from ``sizes``, the raw element's length fixed."""
    table = b"".join(struct.pack(">BH", code, size) for code, size in sizes.items())
    raw = bytes([0x35, len(table) + 1]) + table + b"".join(events)
    return HEADER + struct.pack(">I", len(raw)) + raw + rest


def _with_events(name: str, code: int, size: int, *, every: int = 50, before_start: bool = False
                 ) -> tuple[bytes, bytes, int]:
    """(original, edited, events inserted): ``code`` declared with ``size`` in the payload table and an event of it
    after every ``every``-th post-frame update (its payload the frame id, then zeros), and one right after the
    payload table when ``before_start``."""
    original = shared_data("melee", "slp", name).read_bytes()
    sizes, events, rest = _split(original)
    out, inserted = [], 0
    if before_start:
        out.append(bytes([code]) + bytes(size))
        inserted += 1
    posts = 0
    for event in events:
        out.append(event)
        if event[0] == 0x38:
            posts += 1
            if posts % every == 0:
                out.append(bytes([code]) + (event[1:5] + bytes(size))[:size])
                inserted += 1
    return original, _join({**sizes, code: size}, out, rest), inserted


def _peppi(data: bytes, tmp_path):
    import peppi_py._peppi as peppi

    path = tmp_path / "replay.slp"
    path.write_bytes(data)
    return peppi.read_slippi(str(path), False)


def _parse(data: bytes):
    return parse_slp(data, input_id="edited.slp", source="slp", filters=ALL)


def _frames_equal(a, b) -> bool:
    """Equal frames; the game ids differ with the bytes (each is the sha256 of its file)."""
    return a.drop_columns(["game_id"]).equals(b.drop_columns(["game_id"]))


# Each refusal measured with peppi-py-vladfi 0.9.2 (vladfi1/peppi@f0f8688), and the same with peppi-py 0.8.6:
REFUSED = {
    "unknown event before Game Start": (  # OSError: invalid data: Invalid event before start: 0x50
        "peppi__v3.12.slp", UNKNOWN, 4, True, "Invalid event before start"),
    "unknown event of size 0": ("peppi__v3.12.slp", UNKNOWN, 0, False, "zero-size event payload"),
    # the stage events of 3.18 in an older file, and items before 3.0: events peppi knows, but keeps in columns that
    # files of that version do not have, a panic (`Option::unwrap()` on a `None` value)
    "FoD platform events in a v3.16 file": ("peppi__v3.16.slp", 0x3F, 9, False, "Option::unwrap()"),
    "item events in a v2.0 file": ("peppi__v2.0.slp", 0x3B, 42, False, "Option::unwrap()"),
}


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_events_peppi_refuses_are_dropped_and_the_frames_are_the_originals(case, tmp_path):
    name, code, size, before_start, refusal = REFUSED[case]
    original, edited, inserted = _with_events(name, code, size, before_start=before_start)
    assert inserted >= 3
    with pytest.raises(BaseException, match=refusal.replace("(", r"\(").replace(")", r"\)")):
        _peppi(edited, tmp_path)
    table, game = _parse(edited)
    expected, expected_game = _parse(original)
    assert _frames_equal(table, expected)
    assert (game["repaired_events"], game["repaired_codes"], game["complete"]) == (inserted, [code], True)
    assert game["game_id"] == hashlib.sha256(edited).hexdigest()  # the file as it came, not the repaired bytes
    for key in ("end_method", "winner_port", "num_frames", "rollback_frames", "characters_internal"):
        assert game[key] == expected_game[key], key


def test_unknown_events_peppi_skips_need_no_repair(tmp_path):
    """peppi skips a code it does not know when the payload table sizes it: the file is read as it is."""
    original, edited, inserted = _with_events("peppi__v3.18.slp", UNKNOWN, 4)
    assert inserted >= 3 and len(_peppi(edited, tmp_path).frames) == len(_peppi(original, tmp_path).frames)
    table, game = _parse(edited)
    assert _frames_equal(table, _parse(original)[0])
    assert (game["repaired_events"], game["repaired_codes"], game["complete"]) == (0, [], True)


@pytest.mark.parametrize("name", ["peppi__v0.1.slp", "peppi__netplay.slp", "peppi__v3.18.slp"])
def test_a_normal_file_is_complete_and_not_repaired(name):
    _, game = _parse(shared_data("melee", "slp", name).read_bytes())
    assert (game["complete"], game["repaired_events"], game["repaired_codes"]) == (True, 0, [])


def test_a_game_without_game_end_is_incomplete_and_still_parses(tmp_path):
    original = shared_data("melee", "slp", "peppi__v3.13.slp").read_bytes()
    sizes, events, rest = _split(original)
    assert events[-1][0] == 0x39 and sum(e[0] == 0x39 for e in events) == 1
    cut = _join(sizes, events[:-1], rest)  # Game End out, its size still in the table (peppi requires the entry)
    assert _peppi(cut, tmp_path).end is None
    table, game = _parse(cut)
    expected, expected_game = _parse(original)
    assert _frames_equal(table, expected)
    assert (game["complete"], game["end_method"], expected_game["complete"]) == (False, None, True)
    assert (game["incomplete_reasons"], expected_game["incomplete_reasons"]) == (("no_game_end",), ())
    assert expected_game["end_method"] == 2 and game["repaired_events"] == 0  # 2: GAME


def test_corrupt_files_stay_quarantined_and_are_not_repaired():
    """A file that needs repair but is damaged too keeps peppi's own refusal: its stream cannot be walked by the
    payload table, so nothing is dropped. (A file that is only cut is a stopped recording: read up to its last whole
    frame, test_melee_salvage.py.)"""
    _, edited, _ = _with_events("peppi__v3.16.slp", 0x3F, 9)
    sizes, events, rest = _split(edited)
    at = len(HEADER) + 4 + 1 + 3 * len(sizes) + 1 + sum(len(e) for e in events[:40])
    damaged = {
        # bytes taken out of the last event, the metadata after it: the declared raw length now ends inside the
        # metadata, and what follows is neither the metadata nor the closing brace
        "bytes missing in the last event": (edited[:-len(rest) - 3] + rest, "unreadable_slp"),
        # the outer structure is whole, so this is unsupported_slp (as before repairs): _well_formed does not walk
        # the events, which would cost every refused file ~0.7 µs per event
        "an event the table does not size": (edited[:at] + bytes([0x77]) + edited[at + 1:], "unsupported_slp"),
    }
    for what, (data, reason) in damaged.items():
        with pytest.raises(SlpError) as caught:
            _parse(data)
        assert caught.value.reason == reason, what
        assert "after dropping" not in str(caught.value), what  # quarantined with peppi's own refusal


def test_a_cut_file_that_needs_repair_is_repaired_and_read_up_to_the_cut():
    original, edited, _ = _with_events("peppi__v3.16.slp", 0x3F, 9)
    table, game = _parse(edited[:len(edited) // 2])
    expected, _ = _parse(original)
    assert 0 < table.num_rows < expected.num_rows and _frames_equal(table, expected.slice(0, table.num_rows))
    assert game["repaired_codes"] == [0x3F] and game["repaired_events"] > 0 and not game["complete"]
    assert {"raw_cut", "partial_event", "no_game_end", "no_metadata"} <= set(game["incomplete_reasons"])


def test_a_peppi_panic_is_a_quarantine_row_with_its_message(tmp_path):
    """peppi asserts that a stage event belongs to the frame it is in: a FoD platform event of the v3.18 file given
    another frame id (4 bytes) is a Rust panic, which pyo3 raises as ``PanicException`` (a ``BaseException``)."""
    original = shared_data("melee", "slp", "peppi__v3.18.slp").read_bytes()
    sizes, events, rest = _split(original)
    at = next(k for k, e in enumerate(events) if e[0] == 0x3F)
    frame = struct.unpack(">i", events[at][1:5])[0]
    moved = events[at][:1] + struct.pack(">i", frame + 1000) + events[at][5:]
    edited = _join(sizes, [*events[:at], moved, *events[at + 1:]], rest)
    with pytest.raises(BaseException) as panic:
        _peppi(edited, tmp_path)
    assert type(panic.value).__name__ == "PanicException" and not isinstance(panic.value, Exception)
    with pytest.raises(UnsupportedSlpError) as caught:
        _parse(edited)
    assert caught.value.reason == "unsupported_slp"
    assert f"PanicException: assertion `left == right` failed\n  left: {frame + 1000}\n right: {frame}" in \
        str(caught.value)
    assert _parse(original)[1]["num_frames"] > 0  # peppi reads the next file after a panic


def test_a_second_gecko_list_is_dropped(tmp_path):
    """peppi-py-vladfi refuses a second Gecko List (``Multiple Gecko List events found``; peppi-py 0.8.6 read it):
    the Message Splitter events that carry it are dropped, the first list stays, and the frames are the original's.
    The v3.7 netplay replay with its Gecko List's 61 splitter events sent twice."""
    original = shared_data("melee", "slp", "peppi__netplay.slp").read_bytes()
    sizes, events, rest = _split(original)
    splitters = [k for k, e in enumerate(events) if e[0] == 0x10]
    assert splitters == list(range(splitters[0], splitters[-1] + 1)) and events[splitters[-1]][516] == 1  # last
    twice = _join(sizes, [*events[:splitters[-1] + 1], *(events[k] for k in splitters), *events[splitters[-1] + 1:]],
                  rest)
    with pytest.raises(OSError, match="Multiple Gecko List events found"):
        _peppi(twice, tmp_path)
    table, game = _parse(twice)
    expected, expected_game = _parse(original)
    assert _frames_equal(table, expected)
    assert (game["repaired_events"], game["repaired_codes"], game["complete"]) == (len(splitters), [0x10], True)
    assert game["end_method"] == expected_game["end_method"] and game["start_time"] == expected_game["start_time"]


@pytest.mark.parametrize("case", ["FoD platform events in a v3.16 file", "unknown event before Game Start"])
def test_fuzzed_repairable_files_give_rows_or_typed_errors(case):
    """Random byte damage to a file that needs repair: a row or a typed input error (a quarantine row), never
    another exception."""
    name, code, size, before_start, _ = REFUSED[case]
    _, edited, _ = _with_events(name, code, size, before_start=before_start)
    outcomes = set()
    for damaged in damaged_copies(edited, case, 40, max_changes=6):
        try:
            table, _ = _parse(damaged)
            outcomes.add("row" if table is not None else "filtered")
        except InputError as err:
            outcomes.add(err.reason)
    assert {"row", "unreadable_slp"} <= outcomes, outcomes  # damage in values still repairs; cuts are quarantined

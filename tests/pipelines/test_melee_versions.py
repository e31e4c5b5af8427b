"""Slippi versions peppi-py 0.8.6 could not read: 3.0-3.6 (every such file panicked) and 3.17 with stage events.

No real 3.0-3.6 replay is in ../shared/data, so the 3.0-3.6 files are real 3.7+ replays relabelled: the 3 version
bytes of their Game Start set to 3.x.0, every other byte as it was. peppi reads an event by the file's version, so a
relabelled file is what a 3.x console writes except for the bytes a later version appended to each event, which
peppi then leaves unread; the fields those versions added are null in the rows, as for a real 3.x file.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import shared_data

from pipelines.melee.slp import SlpFilters, parse_slp

ALL = SlpFilters(min_frames=0, allow_cpu=True)
HEADER = b"{U\x03raw[$U#l"
RECORDED_SINCE = {"vel_self_x_air": (3, 5), "vel_self_y": (3, 5), "vel_attack_x": (3, 5), "vel_attack_y": (3, 5),
                  "vel_self_x_ground": (3, 5), "owner": (3, 6), "nearest_projectile_dx": (3, 6),
                  "nearest_projectile_dy": (3, 6), "nearest_projectile_type": (3, 6), "hitlag": (3, 8)}
"""Leaf columns a Slippi 3.x file records only from a version (shards_schema/melee.py; the nearest opponent
projectile needs the item owner)."""


def relabel(data: bytes, minor: int) -> bytes:
    """``data`` with its Game Start version set to 3.``minor``.0 (Game Start follows the Event Payloads table)."""
    start = len(HEADER) + 4 + 1 + data[len(HEADER) + 5]
    assert data[start] == 0x36 and data[start + 1] == 3
    return data[:start + 1] + bytes([3, minor, 0]) + data[start + 4:]


def _leaves(table: pa.Table) -> dict[str, pa.Array]:
    """Every leaf column by its path, a parent's nulls folded in."""
    out = {}

    def walk(array, path):
        if pa.types.is_struct(array.type):
            for i, field in enumerate(array.type):
                child = array.field(i)
                if array.null_count:
                    child = pc.if_else(pc.is_valid(array), child, pa.nulls(len(array), child.type))
                walk(child, f"{path}.{field.name}")
        else:
            out[path] = array

    for name in table.column_names:
        walk(table.column(name).combine_chunks(), name)
    return out


def test_the_peppi_build_is_peppi_py_vladfi():
    """Both packages install the module ``peppi_py``: with both installed, uninstalling one deletes its files."""
    assert version("peppi-py-vladfi") == "0.9.2"
    with pytest.raises(PackageNotFoundError):
        # fix: `pip uninstall -y peppi-py && pip install --force-reinstall --no-deps peppi-py-vladfi==0.9.2`
        version("peppi-py")


@pytest.mark.parametrize("minor", [0, 3, 5, 6])
@pytest.mark.parametrize("name", ["peppi__netplay.slp", "slippijs__NessVFox-Absorb.slp", "peppi__v3.16.slp"])
def test_slippi_3_0_to_3_6_files_are_read(name, minor):
    """Rows of a replay relabelled 3.x equal the original's, but for the fields 3.x does not record, which are null
    (velocities before 3.5, item owners and so the nearest opponent projectile before 3.6, hitlag before 3.8). The
    three files: netplay, projectiles with owners (Fox lasers), rollback and a Shy Guy."""
    original = shared_data("melee", "slp", name).read_bytes()
    expected, expected_game = parse_slp(original, input_id=name, source="slp", filters=ALL)
    table, game = parse_slp(relabel(original, minor), input_id=name, source="slp", filters=ALL)
    assert game["slippi_version"] == f"3.{minor}.0" and table.num_rows == expected.num_rows > 0
    assert (game["complete"], game["repaired_events"]) == (expected_game["complete"], 0)
    for key in ("num_frames", "rollback_frames", "characters_internal", "end_method", "winner_port", "stage"):
        assert game[key] == expected_game[key], key
    mine, theirs = _leaves(table.drop_columns(["game_id"])), _leaves(expected.drop_columns(["game_id"]))
    assert mine.keys() == theirs.keys()
    for path, column in mine.items():
        since = RECORDED_SINCE.get(path.rsplit(".", 1)[-1])
        if since is not None and (3, minor) < since:
            assert column.null_count == len(column), path  # not recorded: null, never zero
        else:
            assert column.equals(theirs[path]), path
    if name == "slippijs__NessVFox-Absorb.slp":  # the lasers are projectiles in every version, with owners from 3.6
        assert pc.sum(table.column("num_projectiles")).as_py() == 120


def test_stage_events_of_3_17_are_read_without_repair():
    """peppi-py 0.8.6 panicked on stage events (FoD platforms, Whispy, Stadium) before 3.18 and they were dropped;
    this build reads them from 3.17, so the v3.18 file (on Fountain of Dreams) relabelled 3.17 needs no repair."""
    original = shared_data("melee", "slp", "peppi__v3.18.slp").read_bytes()
    assert b"\x3f\x00\x09" in original[:100]  # the payload table sizes FoD platform events
    expected, _ = parse_slp(original, input_id="v3.18", source="slp", filters=ALL)
    table, game = parse_slp(relabel(original, 17), input_id="v3.17", source="slp", filters=ALL)
    assert table.drop_columns(["game_id"]).equals(expected.drop_columns(["game_id"]))
    assert (game["slippi_version"], game["repaired_events"], game["repaired_codes"]) == ("3.17.0", 0, [])

"""Melee inputs: every file and archive member is one input, read, filtered or quarantined under its own name
(the archive reader itself is tested in tests/pipelines/test_archives.py)."""

from __future__ import annotations

from conftest import archive_rows, write_zip

from pipelines.inputs import NOT_A_REPLAY, list_files
from pipelines.melee.archives import REPLAY

GAMES = [bytes([i]) * 3000 + b"replay %d" % i for i in range(3)]  # what the reader sees; parsing is not its job


def test_not_a_replay_is_counted_and_suffixes_ignore_case(tmp_path):
    write_zip(tmp_path / "set.ZIP", {"notes.txt": b"gg", "dir/": b"", "dir/GAME.SLP": GAMES[0], "x.Slp": GAMES[1]})
    (tmp_path / "LOUD.SLP").write_bytes(GAMES[2])
    (tmp_path / "readme.md").write_text("hi")
    (tmp_path / ".cache" / "huggingface" / "download").mkdir(parents=True)  # --download's own bookkeeping
    (tmp_path / ".cache" / "huggingface" / "download" / "x.slp.metadata").write_text("sha")
    listed = [p.split("/")[-1] for p in list_files(str(tmp_path), None)]
    assert listed == ["LOUD.SLP", "readme.md", "set.ZIP"]  # every file, sorted
    rows = {}
    for path in list_files(str(tmp_path), None):
        rows |= archive_rows(path, tmp_path, REPLAY)
    assert rows == {
        "LOUD.SLP": (GAMES[2], None, None),
        "readme.md": (None, None, NOT_A_REPLAY),
        "set.ZIP::dir/GAME.SLP": (GAMES[0], None, None),  # the directory entry is not an input
        "set.ZIP::notes.txt": (None, None, NOT_A_REPLAY),
        "set.ZIP::x.Slp": (GAMES[1], None, None),
    }


def test_list_files_matches_suffixes_in_any_case_in_a_stable_order(tmp_path):
    for name in ("b.json", "A.JSON", "c.Json", "d.txt"):
        (tmp_path / name).write_text("{}")
    assert [p.split("/")[-1] for p in list_files(tmp_path, (".json",))] == ["A.JSON", "b.json", "c.Json"]
    assert len(list_files(tmp_path, None)) == 4

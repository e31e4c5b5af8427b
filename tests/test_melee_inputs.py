"""Melee inputs: every file and archive member is one input, read, filtered or quarantined under its own name."""

from __future__ import annotations

import gzip
import io
import tarfile
import zipfile

import pytest
from conftest import damaged_copies

from pipelines.inputs import list_files
from pipelines.melee.archives import NOT_A_REPLAY, REST, iter_path, list_inputs

GAMES = [bytes([i]) * 3000 + b"replay %d" % i for i in range(3)]  # what the reader sees; parsing is not its job


def _rows(path, root) -> dict[str, tuple]:
    """input id → (bytes, read error, filter reason), in the order read."""
    rows = {}
    for m in iter_path(str(path), str(root)):
        assert m.input_id not in rows, f"{m.input_id} read twice"
        rows[m.input_id] = (m.data, m.read_error, m.filter_reason)
    return rows


def _zip(path, members: dict[str, bytes], compression=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compression=compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)


def _corrupt_at(path, needle: bytes, offset: int = 100):
    raw = bytearray(path.read_bytes())
    at = raw.find(needle)
    assert at >= 0
    raw[at + offset] ^= 0xFF
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_zip_bad_member_is_its_own_input_and_the_rest_are_read(tmp_path, compression):
    path = tmp_path / "set.zip"
    _zip(path, {"a.slp": GAMES[0], "b.slp": GAMES[1], "c.slp": GAMES[2]}, compression)
    if compression == zipfile.ZIP_STORED:
        _corrupt_at(path, GAMES[1][:50])  # bad CRC
    else:  # damage the deflate stream of the middle member
        with zipfile.ZipFile(path) as archive:
            info = archive.getinfo("b.slp")
        raw = bytearray(path.read_bytes())
        start = info.header_offset + 30 + len("b.slp")
        raw[start:start + 8] = bytes(b ^ 0x5A for b in raw[start:start + 8])
        path.write_bytes(bytes(raw))
    rows = _rows(path, tmp_path)
    assert list(rows) == ["set.zip::a.slp", "set.zip::b.slp", "set.zip::c.slp"]
    assert rows["set.zip::a.slp"] == (GAMES[0], None, None)
    assert rows["set.zip::c.slp"] == (GAMES[2], None, None)
    data, error, _ = rows["set.zip::b.slp"]
    expected = "BadZipFile: Bad CRC-32 for file 'b.slp'" if compression == zipfile.ZIP_STORED else "error: Error -3 "
    assert data is None and error.startswith(expected), error


def test_not_a_replay_is_counted_and_suffixes_ignore_case(tmp_path):
    _zip(tmp_path / "set.ZIP", {"notes.txt": b"gg", "dir/": b"", "dir/GAME.SLP": GAMES[0], "x.Slp": GAMES[1]})
    (tmp_path / "LOUD.SLP").write_bytes(GAMES[2])
    (tmp_path / "readme.md").write_text("hi")
    (tmp_path / ".cache" / "huggingface" / "download").mkdir(parents=True)  # --download's own bookkeeping
    (tmp_path / ".cache" / "huggingface" / "download" / "x.slp.metadata").write_text("sha")
    listed = [p.split("/")[-1] for p in list_inputs(tmp_path)]
    assert listed == ["LOUD.SLP", "readme.md", "set.ZIP"]  # every file, sorted
    rows = {}
    for path in list_inputs(tmp_path):
        rows |= _rows(path, tmp_path)
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


def _tar(path, members: dict[str, bytes], mode="w") -> dict[str, int]:
    """Write the members; return each one's header offset in the uncompressed stream."""
    offsets = {}
    with tarfile.open(path, mode, format=tarfile.USTAR_FORMAT) as archive:
        for name, data in members.items():
            offsets[name] = archive.offset
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return offsets


@pytest.mark.parametrize("where", ["middle", "last"])
def test_tar_damaged_header_is_its_own_input_and_the_rest_are_read(tmp_path, where):
    path = tmp_path / "set.tar"
    names = ["a.slp", "b.slp", "c.slp"]
    offsets = _tar(path, dict(zip(names, GAMES, strict=True)))
    bad = "b.slp" if where == "middle" else "c.slp"
    raw = bytearray(path.read_bytes())
    raw[offsets[bad] + 148] ^= 0x07  # the header checksum field: tarfile used to end the archive here silently
    path.write_bytes(bytes(raw))
    rows = _rows(path, tmp_path)
    assert set(rows) == {f"set.tar::{n}" for n in names}
    for name, game in zip(names, GAMES, strict=True):
        data, error, _ = rows[f"set.tar::{name}"]
        assert (data, error is None) == ((None, False) if name == bad else (game, True))


def test_tar_header_without_a_readable_name_is_recorded_by_offset(tmp_path):
    path = tmp_path / "set.tar"
    offsets = _tar(path, {"a.slp": GAMES[0], "b.slp": GAMES[1], "c.slp": GAMES[2]})
    raw = bytearray(path.read_bytes())
    raw[offsets["b.slp"]:offsets["b.slp"] + 512] = bytes([0xEE]) * 512
    path.write_bytes(bytes(raw))
    rows = _rows(path, tmp_path)
    assert list(rows) == ["set.tar::a.slp", f"set.tar::<damaged header at byte {offsets['b.slp']}>",
                          "set.tar::c.slp"]
    assert rows["set.tar::c.slp"][0] == GAMES[2]


def test_cut_tar_gz_records_the_member_it_cut_and_the_rest(tmp_path):
    path = tmp_path / "set.tar.gz"
    big = [bytes(range(256)) * 400 + bytes([i]) for i in range(3)]  # compresses little less than the cut
    offsets = _tar(path, {"a.slp": big[0], "b.slp": big[1], "c.slp": big[2]})
    raw = path.read_bytes()  # written uncompressed; compressed below
    cut = offsets["b.slp"] + 512 + len(big[1]) // 2  # inside b's data
    stream = gzip.compress(raw)
    # the compressed prefix that decodes to just past the cut: a truncated download
    keep = next(k for k in range(64, len(stream), 64) if len(_inflate_prefix(stream[:k])) > cut)
    path.write_bytes(stream[:keep])
    rows = _rows(path, tmp_path)
    assert list(rows) == ["set.tar.gz::a.slp", "set.tar.gz::b.slp", f"set.tar.gz::{REST}"]
    assert rows["set.tar.gz::a.slp"][0] == big[0]
    assert rows["set.tar.gz::b.slp"][0] is None and rows["set.tar.gz::b.slp"][1].startswith("EOFError: ")
    assert rows[f"set.tar.gz::{REST}"][1].startswith("the archive cannot be read past this point: EOFError: ")


def _inflate_prefix(data: bytes) -> bytes:
    import zlib

    return zlib.decompressobj(31).decompress(data)


def _7z(path, members: dict[str, bytes], filters=None):
    import py7zr

    with py7zr.SevenZipFile(path, "w", **({"filters": filters} if filters else {})) as archive:
        for name, data in members.items():
            archive.writestr(data, name)


def test_7z_bad_crc_member_is_its_own_input_and_the_rest_are_read(tmp_path):
    import py7zr

    path = tmp_path / "set.7z"
    _7z(path, {"a.slp": GAMES[0], "b.slp": GAMES[1], "notes.txt": b"gg", "c.slp": GAMES[2]},
        filters=[{"id": py7zr.FILTER_COPY}])  # stored: a flipped byte is a CRC mismatch, the stream still decodes
    _corrupt_at(path, GAMES[1][:50])
    rows = _rows(path, tmp_path)
    assert set(rows) == {"set.7z::a.slp", "set.7z::b.slp", "set.7z::c.slp", "set.7z::notes.txt"}
    assert rows["set.7z::a.slp"] == (GAMES[0], None, None)
    assert rows["set.7z::c.slp"] == (GAMES[2], None, None)
    assert rows["set.7z::notes.txt"] == (None, None, NOT_A_REPLAY)
    assert rows["set.7z::b.slp"][0] is None and "CrcError" in rows["set.7z::b.slp"][1]


def test_7z_undecodable_stream_records_each_member_it_loses(tmp_path):
    path = tmp_path / "set.7z"
    _7z(path, {"a.slp": GAMES[0], "b.slp": GAMES[1], "c.slp": GAMES[2]})  # one solid LZMA2 block
    raw = bytearray(path.read_bytes())
    for k in range(40, 60):  # early in the packed stream, past the 32-byte signature header
        raw[k] ^= 0xA5
    path.write_bytes(bytes(raw))
    rows = _rows(path, tmp_path)
    assert set(rows) == {"set.7z::a.slp", "set.7z::b.slp", "set.7z::c.slp"}
    assert all(data is None and error.startswith("the 7z data cannot be decoded up to this member: ")
               for data, error, _ in rows.values()), rows


def test_unopenable_archive_is_one_input(tmp_path):
    for name in ("x.zip", "x.tar", "x.7z", "x.tar.gz"):
        (tmp_path / name).write_bytes(b"not an archive at all" * 10)
        rows = _rows(tmp_path / name, tmp_path)
        kind = {"x.zip": "zip", "x.7z": "7z"}.get(name, "archive")
        assert list(rows) == [f"{name}::{REST}"], rows
        assert rows[f"{name}::{REST}"][1].startswith(f"the {kind} cannot be opened: "), rows


@pytest.mark.parametrize("kind", ["zip", "tar", "tar.gz", "7z"])
def test_fuzzed_archives_never_stop_the_reader(tmp_path, kind):
    """Random byte damage: the reader yields rows (read, filtered or with a read error), never raises, and names
    each input once."""
    clean = tmp_path / f"clean.{kind}"
    members = {"a.slp": GAMES[0], "notes.txt": b"gg", "b.slp": GAMES[1]}
    if kind == "zip":
        _zip(clean, members, zipfile.ZIP_DEFLATED)
    elif kind == "7z":
        _7z(clean, members)
    else:
        _tar(clean, members, "w" if kind == "tar" else "w:gz")
    for trial, damaged in enumerate(damaged_copies(clean.read_bytes(), kind, 40, max_changes=8)):
        path = tmp_path / f"fuzz{trial}.{kind}"
        path.write_bytes(damaged)
        rows = _rows(path, tmp_path)
        assert rows and all((data is None) != (error is None and reason is None)
                            for data, error, reason in rows.values())

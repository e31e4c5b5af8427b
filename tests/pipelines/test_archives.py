"""The archive reader every file source shares (``pipelines/archives.py``): every loose file and archive member is
one input, read, filtered or recorded with a read error under its own name; damage is charged to the member it hits;
a store that fails raises instead; a tar.gz is read once."""

from __future__ import annotations

import gzip
import io
import random
import tarfile
import tracemalloc
import zipfile
import zlib

import py7zr
import pytest
from conftest import CutFile, archive_rows, damaged_copies, write_zip

from pipelines.archives import REST, iter_path
from pipelines.inputs import NOT_A_REPLAY
from shards_schema import storage

REPLAY = (".rep",)
"""The replay suffix of these tests: the reader knows no game."""
GAMES = [bytes([i]) * 3000 + b"replay %d" % i for i in range(3)]  # what the reader sees; parsing is not its job


def _corrupt_at(path, needle: bytes, offset: int = 100):
    raw = bytearray(path.read_bytes())
    at = raw.find(needle)
    assert at >= 0
    raw[at + offset] ^= 0xFF
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_zip_bad_member_is_its_own_input_and_the_rest_are_read(tmp_path, compression):
    path = tmp_path / "set.zip"
    write_zip(path, {"a.rep": GAMES[0], "b.rep": GAMES[1], "c.rep": GAMES[2]}, compression)
    if compression == zipfile.ZIP_STORED:
        _corrupt_at(path, GAMES[1][:50])  # bad CRC
    else:  # damage the deflate stream of the middle member
        with zipfile.ZipFile(path) as archive:
            info = archive.getinfo("b.rep")
        raw = bytearray(path.read_bytes())
        start = info.header_offset + 30 + len("b.rep")
        raw[start:start + 8] = bytes(b ^ 0x5A for b in raw[start:start + 8])
        path.write_bytes(bytes(raw))
    rows = archive_rows(path, tmp_path, REPLAY)
    assert list(rows) == ["set.zip::a.rep", "set.zip::b.rep", "set.zip::c.rep"]
    assert rows["set.zip::a.rep"] == (GAMES[0], None, None)
    assert rows["set.zip::c.rep"] == (GAMES[2], None, None)
    data, error, _ = rows["set.zip::b.rep"]
    expected = "BadZipFile: Bad CRC-32 for file 'b.rep'" if compression == zipfile.ZIP_STORED else "error: Error -3 "
    assert data is None and error.startswith(expected), error


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
    names = ["a.rep", "b.rep", "c.rep"]
    offsets = _tar(path, dict(zip(names, GAMES, strict=True)))
    bad = "b.rep" if where == "middle" else "c.rep"
    raw = bytearray(path.read_bytes())
    raw[offsets[bad] + 148] ^= 0x07  # the header checksum field: tarfile used to end the archive here silently
    path.write_bytes(bytes(raw))
    rows = archive_rows(path, tmp_path, REPLAY)
    assert set(rows) == {f"set.tar::{n}" for n in names}
    for name, game in zip(names, GAMES, strict=True):
        data, error, _ = rows[f"set.tar::{name}"]
        assert (data, error is None) == ((None, False) if name == bad else (game, True))


def test_tar_header_without_a_readable_name_is_recorded_by_offset(tmp_path):
    path = tmp_path / "set.tar"
    offsets = _tar(path, {"a.rep": GAMES[0], "b.rep": GAMES[1], "c.rep": GAMES[2]})
    raw = bytearray(path.read_bytes())
    raw[offsets["b.rep"]:offsets["b.rep"] + 512] = bytes([0xEE]) * 512
    path.write_bytes(bytes(raw))
    rows = archive_rows(path, tmp_path, REPLAY)
    assert list(rows) == ["set.tar::a.rep", f"set.tar::<damaged header at byte {offsets['b.rep']}>",
                          "set.tar::c.rep"]
    assert rows["set.tar::c.rep"][0] == GAMES[2]


def test_cut_tar_gz_records_the_member_it_cut_and_the_rest(tmp_path):
    path = tmp_path / "set.tar.gz"
    big = [bytes(range(256)) * 400 + bytes([i]) for i in range(3)]  # compresses little less than the cut
    offsets = _tar(path, {"a.rep": big[0], "b.rep": big[1], "c.rep": big[2]})
    raw = path.read_bytes()  # written uncompressed; compressed below
    cut = offsets["b.rep"] + 512 + len(big[1]) // 2  # inside b's data
    stream = gzip.compress(raw)
    # the compressed prefix that decodes to just past the cut: a truncated download
    keep = next(k for k in range(64, len(stream), 64) if len(_inflate_prefix(stream[:k])) > cut)
    path.write_bytes(stream[:keep])
    rows = archive_rows(path, tmp_path, REPLAY)
    assert list(rows) == ["set.tar.gz::a.rep", "set.tar.gz::b.rep", f"set.tar.gz::{REST}"]
    assert rows["set.tar.gz::a.rep"][0] == big[0]
    assert rows["set.tar.gz::b.rep"][0] is None and rows["set.tar.gz::b.rep"][1].startswith("EOFError: ")
    assert rows[f"set.tar.gz::{REST}"][1].startswith("the archive cannot be read past this point: EOFError: ")


def _inflate_prefix(data: bytes) -> bytes:
    return zlib.decompressobj(31).decompress(data)


def _7z(path, members: dict[str, bytes], filters=None):
    with py7zr.SevenZipFile(path, "w", **({"filters": filters} if filters else {})) as archive:
        for name, data in members.items():
            archive.writestr(data, name)


def test_7z_bad_crc_member_is_its_own_input_and_the_rest_are_read(tmp_path):
    path = tmp_path / "set.7z"
    _7z(path, {"a.rep": GAMES[0], "b.rep": GAMES[1], "notes.txt": b"gg", "c.rep": GAMES[2]},
        filters=[{"id": py7zr.FILTER_COPY}])  # stored: a flipped byte is a CRC mismatch, the stream still decodes
    _corrupt_at(path, GAMES[1][:50])
    rows = archive_rows(path, tmp_path, REPLAY)
    assert set(rows) == {"set.7z::a.rep", "set.7z::b.rep", "set.7z::c.rep", "set.7z::notes.txt"}
    assert rows["set.7z::a.rep"] == (GAMES[0], None, None)
    assert rows["set.7z::c.rep"] == (GAMES[2], None, None)
    assert rows["set.7z::notes.txt"] == (None, None, NOT_A_REPLAY)
    assert rows["set.7z::b.rep"][0] is None and "CrcError" in rows["set.7z::b.rep"][1]


def test_7z_undecodable_stream_records_each_member_it_loses(tmp_path):
    path = tmp_path / "set.7z"
    _7z(path, {"a.rep": GAMES[0], "b.rep": GAMES[1], "c.rep": GAMES[2]})  # one solid LZMA2 block
    raw = bytearray(path.read_bytes())
    for k in range(40, 60):  # early in the packed stream, past the 32-byte signature header
        raw[k] ^= 0xA5
    path.write_bytes(bytes(raw))
    rows = archive_rows(path, tmp_path, REPLAY)
    assert set(rows) == {"set.7z::a.rep", "set.7z::b.rep", "set.7z::c.rep"}
    assert all(data is None and error.startswith("the 7z data cannot be decoded up to this member: ")
               for data, error, _ in rows.values()), rows


def test_unopenable_archive_is_one_input(tmp_path):
    for name in ("x.zip", "x.tar", "x.7z", "x.tar.gz"):
        (tmp_path / name).write_bytes(b"not an archive at all" * 10)
        rows = archive_rows(tmp_path / name, tmp_path, REPLAY)
        kind = {"x.zip": "zip", "x.7z": "7z"}.get(name, "archive")
        assert list(rows) == [f"{name}::{REST}"], rows
        assert rows[f"{name}::{REST}"][1].startswith(f"the {kind} cannot be opened: "), rows


@pytest.mark.parametrize("kind", ["zip", "tar", "tar.gz", "7z"])
def test_fuzzed_archives_never_stop_the_reader(tmp_path, kind):
    """Random byte damage: the reader yields rows (read, filtered or with a read error), never raises, and names
    each input once."""
    clean = tmp_path / f"clean.{kind}"
    members = {"a.rep": GAMES[0], "notes.txt": b"gg", "b.rep": GAMES[1]}
    if kind == "zip":
        write_zip(clean, members, zipfile.ZIP_DEFLATED)
    elif kind == "7z":
        _7z(clean, members)
    else:
        _tar(clean, members, "w" if kind == "tar" else "w:gz")
    for trial, damaged in enumerate(damaged_copies(clean.read_bytes(), kind, 40, max_changes=8)):
        path = tmp_path / f"fuzz{trial}.{kind}"
        path.write_bytes(damaged)
        rows = archive_rows(path, tmp_path, REPLAY)
        assert rows and all((data is None) != (error is None and reason is None)
                            for data, error, reason in rows.values())


def test_ids_are_paths_below_the_input_and_an_archive_in_a_folder_carries_it(tmp_path):
    (tmp_path / "sub").mkdir()
    _tar(tmp_path / "sub" / "set.tar.gz", {"games/a.rep": GAMES[0], "games/notes.txt": b"gg"}, "w:gz")
    (tmp_path / "sub" / "b.REP").write_bytes(GAMES[1])
    (tmp_path / "readme.md").write_text("hi")
    rows = {}
    for name in ("sub/set.tar.gz", "sub/b.REP", "readme.md"):
        rows |= archive_rows(tmp_path / name, tmp_path, REPLAY)
    assert rows == {"sub/set.tar.gz::games/a.rep": (GAMES[0], None, None),
                    "sub/set.tar.gz::games/notes.txt": (None, None, NOT_A_REPLAY),
                    "sub/b.REP": (GAMES[1], None, None), "readme.md": (None, None, NOT_A_REPLAY)}


class _CountingFile:
    """A store file that counts the bytes read from it."""

    def __init__(self, inner):
        self.inner, self.bytes_read = inner, 0

    def read(self, size: int = -1) -> bytes:
        data = self.inner.read(size)
        self.bytes_read += len(data)
        return data

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_tar_gz_is_decompressed_once_with_one_member_in_memory(tmp_path, monkeypatch):
    """A tar is read front to back: its compressed bytes are read once (the zero blocks after the last member are
    not read again, which for gzip would mean decompressing the archive a second time), and memory holds about one
    member, not the archive."""
    members = {f"m{i}.rep": random.Random(i).randbytes(1_000_000) for i in range(8)}  # gzip cannot shrink them
    path = tmp_path / "big.tar.gz"
    _tar(path, members, "w:gz")
    opened = []
    open_input = storage.open_input

    def counted(uri):
        opened.append(_CountingFile(open_input(uri)))
        return opened[-1]

    monkeypatch.setattr(storage, "open_input", counted)
    size = path.stat().st_size
    tracemalloc.start()
    try:
        largest = 0
        for m in iter_path(str(path), str(tmp_path), REPLAY):
            assert m.data == members[m.input_id.split("::")[1]]
            largest = max(largest, len(m.data))
            del m
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sum(f.bytes_read for f in opened) <= size + (1 << 20)  # one pass, plus at most one read-ahead buffer
    # the 1 MiB read buffer and a member with its copies while tarfile reads it (measured: 3.2 MB), not 8 MB
    assert peak < (1 << 20) + 3 * largest < sum(map(len, members.values())), (peak, largest)


@pytest.mark.parametrize("kind", ["zip", "tar", "tar.gz", "7z"])
def test_a_store_that_fails_mid_archive_raises_instead_of_damaging_it(tmp_path, monkeypatch, kind):
    """The same cut made by the store raises ``StorageError`` (the job re-reads the work item, or stops); made in
    the file itself it is damage, recorded on rows."""
    path = tmp_path / f"set.{kind}"
    members = {name: bytes(range(256)) * 64 + bytes([i]) for i, name in enumerate(("a.rep", "b.rep", "c.rep"))}
    if kind == "zip":
        write_zip(path, members)
    elif kind == "7z":
        _7z(path, members, filters=[{"id": py7zr.FILTER_COPY}])
    else:
        _tar(path, members, "w" if kind == "tar" else "w:gz")
    data = path.read_bytes()
    limit = len(data) // 2
    no_wait = storage.RetryPolicy(attempts=2, base_s=0.0, cap_s=0.0)
    monkeypatch.setattr(storage, "open_input", lambda uri: storage._Guarded(CutFile(data, limit), uri, no_wait))
    with pytest.raises(storage.StorageError, match=f"read .*set.{kind} failed after 2 attempts: OSError: AWS Error"):
        list(iter_path(str(path), str(tmp_path), REPLAY))
    monkeypatch.undo()
    path.write_bytes(data[:limit])
    rows = archive_rows(path, tmp_path, REPLAY)
    assert any(error is not None for _, error, _ in rows.values()), rows

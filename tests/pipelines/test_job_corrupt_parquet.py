"""Corrupt replay tables (hf-raw, pokechamp): a bad footer, a damaged data page, a bad string, a page whose
checksum fails each become named quarantined inputs; the job finishes and its counts reconcile."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from conftest import shared_data

from pipelines.parse_replays import ParseConfig, run
from pipelines.pokemon.replays import read_row_group
from shards_schema.reader import open_version

REPLAYS = ("smogtours-gen1ou-733374.json", "smogtours-gen9ou-733546.json")


def _battles(prefix: str, n: int) -> pa.Table:
    """``n`` hf-raw rows made from the shared replays, with ids ``<prefix>-<i>``."""
    root = shared_data("pokemon", "showdown_replays")
    replays = [json.loads((root / name).read_text()) for name in REPLAYS]
    rows = []
    for i in range(n):
        data = replays[i % 2]
        rows.append({"id": f"{prefix}-{i}", "format": data["format"], "players": data["players"],
                     "log": data["log"], "uploadtime": data["uploadtime"], "formatid": data["formatid"],
                     "rating": 1500})
    return pa.Table.from_pylist(rows)


def _chunk(path: Path, row_group: int, column: str):
    meta = pq.ParquetFile(path).metadata.row_group(row_group)
    return next(meta.column(c) for c in range(meta.num_columns) if meta.column(c).path_in_schema == column)


def _damage(path: Path, at: int, new: bytes) -> None:
    data = bytearray(path.read_bytes())
    data[at:at + len(new)] = new
    path.write_bytes(bytes(data))


def _bad_string_row(path: Path, table: pa.Table) -> None:
    """Uncompressed pages, no statistics: the log chunk of row group 1 is a tiny header, then the two logs.
    0xFF is never UTF-8: the first log of row group 1 (row 2) no longer decodes."""
    pq.write_table(table, path, row_group_size=2, compression="none", use_dictionary=False,
                   write_statistics=False)
    chunk = _chunk(path, 1, "log")
    _damage(path, chunk.data_page_offset + chunk.total_compressed_size // 4, b"\xff" * 16)


def _bad_compressed_page(path: Path, table: pa.Table) -> None:
    pq.write_table(table, path, row_group_size=2, compression="zstd", use_dictionary=False)
    chunk = _chunk(path, 1, "log")  # one data page: its middle is zstd frame content
    data = bytearray(path.read_bytes())
    middle = chunk.data_page_offset + chunk.total_compressed_size // 2
    data[middle:middle + 16] = bytes(b ^ 0xFF for b in data[middle:middle + 16])
    path.write_bytes(bytes(data))


def test_corrupt_tables_are_quarantined_and_the_job_finishes(ray_local, tmp_path):
    root = tmp_path / "tables"
    root.mkdir()
    _bad_string_row(root / "a.parquet", _battles("a", 4))
    _bad_compressed_page(root / "b.parquet", _battles("b", 4))
    pq.write_table(_battles("c", 2), root / "c.parquet")
    (root / "c.parquet").write_bytes((root / "c.parquet").read_bytes()[:-100])  # truncated: no footer
    pq.write_table(_battles("d", 2), root / "d.parquet")
    size = (root / "d.parquet").stat().st_size
    _damage(root / "d.parquet", size - 60, b"A" * 52)  # magic bytes kept, footer metadata overwritten
    published = run(ParseConfig.tiny(source="hf-raw", input=str(root), out=str(tmp_path / "out")),
                    log=lambda *_: None)
    version = open_version(published.path)
    c = version.manifest.counts
    # a: 3 battles + 1 bad row; b: 2 battles + its row group 1; c and d: one input each
    assert (c.inputs, c.written, c.quarantined) == (9, 5, {"corrupt_input": 4}) and c.reconciles()
    quarantine = {r["input_id"]: r for r in version.quarantine().to_pylist()}
    assert sorted(quarantine) == ["a.parquet::a-2", "b.parquet#rg1", "c.parquet", "d.parquet"]
    assert {r["stage"] for r in quarantine.values()} == {"read"}
    assert "UTF8" in quarantine["a.parquet::a-2"]["message"] and "log" in quarantine["a.parquet::a-2"]["message"]
    assert "ZSTD" in quarantine["b.parquet#rg1"]["message"]
    assert "footer" in quarantine["c.parquet"]["message"] and "footer" in quarantine["d.parquet"]["message"]
    written = set(version.index().column("input_id").to_pylist())
    assert written == {"a.parquet::a-0", "a.parquet::a-1", "a.parquet::a-3", "b.parquet::b-0", "b.parquet::b-1"}


def _item(path: Path, row_group: int, formats=()) -> dict:
    return {"uri": str(path), "row_group": row_group, "source": "hf-raw", "formats": list(formats),
            "read_error": None}


def _small_table(path: Path, formats: list[str], **write_options) -> None:
    """hf-raw columns, row i with id ``x<i>`` and log ``|log<i>``; uncompressed plain pages so bytes can be
    found and damaged in place."""
    n = len(formats)
    table = pa.table({"id": [f"x{i}" for i in range(n)], "format": ["f"] * n, "players": [["p", "q"]] * n,
                      "log": [f"|log{i}" for i in range(n)], "uploadtime": [0] * n, "formatid": formats,
                      "rating": [1] * n})
    pq.write_table(table, path, row_group_size=2, compression="none", use_dictionary=False, write_statistics=False,
                   **write_options)


def _damage_value(path: Path, row_group: int, column: str, value: bytes, offset: int, new: bytes) -> None:
    _damage(path, path.read_bytes().index(value, _chunk(path, row_group, column).data_page_offset) + offset, new)


def test_a_row_whose_id_does_not_decode_is_named_by_its_place(tmp_path):
    path = tmp_path / "t.parquet"
    _small_table(path, ["gen1ou"] * 4)
    _damage_value(path, 1, "id", b"x3", 0, b"\xff")
    rows = read_row_group(_item(path, 1))
    assert [(r["input_id"], r["read_error"] is None) for r in rows] == [("t.parquet::x2", True),
                                                                        ("t.parquet#rg1:row1", False)]
    assert "column id" in rows[1]["read_error"] and rows[1]["payload"] is None


def test_a_bad_row_of_a_format_not_asked_for_is_not_an_input(tmp_path):
    """Like a good row of another format: the job reads the table for the asked formats only."""
    path = tmp_path / "t.parquet"
    _small_table(path, ["gen1ou", "gen1ou", "gen1ou", "gen9ou"])
    _damage_value(path, 1, "log", b"|log3", 1, b"\xff")
    assert [r["input_id"] for r in read_row_group(_item(path, 1, ["gen1ou"]))] == ["t.parquet::x2"]
    bad = read_row_group(_item(path, 1, ["gen9ou"]))
    assert [r["input_id"] for r in bad] == ["t.parquet::x3"] and "column log" in bad[0]["read_error"]


def test_page_checksums_are_verified(tmp_path):
    """Damage that still decodes (a letter changed) is caught where the writer stored page checksums."""
    path = tmp_path / "t.parquet"
    _small_table(path, ["gen1ou"] * 2, write_page_checksum=True)
    _damage_value(path, 0, "log", b"|log1", 1, b"b")
    rows = read_row_group(_item(path, 0))
    assert [r["input_id"] for r in rows] == ["t.parquet#rg0"] and "CRC" in rows[0]["read_error"]

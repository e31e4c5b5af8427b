"""Fuzzed inputs: mutated bytes, truncations and garbled protocol lines never crash and always reconcile."""

from __future__ import annotations

import json
import random
import shutil
import tarfile
import zipfile

import lz4.frame
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import damaged_copies, needs_simulator, shared_data

from pipelines.errors import InputError
from pipelines.job.parse import ParseInputs
from pipelines.parse_replays import ParseConfig, run
from pipelines.pokemon import generated, metamon
from pipelines.pokemon.dex import known_formats, load_dex
from pipelines.pokemon.replays import plan_row_groups, read_row_group
from pipelines.stages import read_row

DEXES = {g: load_dex(g) for g in range(1, 10)}


def _outcome(fn, *args):
    """'ok', 'filtered' or the InputError reason; anything else propagates and fails the test."""
    try:
        rows, reason = fn(*args)
    except InputError as err:
        return err.reason
    return "filtered" if reason else "ok"


def _mutations(data: bytes, rng: random.Random, n: int):
    for _ in range(n):
        buf = bytearray(data)
        kind = rng.randrange(3)
        if kind == 0:  # flip bytes
            for _ in range(rng.randint(1, 8)):
                buf[rng.randrange(len(buf))] = rng.randrange(256)
        elif kind == 1:  # truncate
            del buf[rng.randrange(1, len(buf)):]
        else:  # splice a chunk elsewhere
            a, b = sorted(rng.sample(range(len(buf)), 2))
            buf[rng.randrange(len(buf)):rng.randrange(len(buf))] = buf[a:b]
        yield bytes(buf)


def test_metamon_fuzz():
    sample = next(iter(sorted(shared_data("pokemon", "metamon_parsed").glob("*gen1ou*WIN*"))))
    raw = sample.read_bytes()
    text = lz4.frame.decompress(raw)
    rng = random.Random(0)
    outcomes = []
    for mutated in _mutations(raw, rng, 150):
        outcomes.append(_outcome(metamon.parse, sample.name, mutated, None, known_formats()))
    for mutated in _mutations(text, rng, 150):  # valid lz4 around damaged JSON
        outcomes.append(_outcome(metamon.parse, sample.name, lz4.frame.compress(mutated), None, known_formats()))
    assert "corrupt_lz4" in outcomes and "invalid_json" in outcomes


@pytest.mark.parametrize("kind", ["tar.gz", "zip"])
def test_fuzzed_metamon_archives_are_read_and_parsed_without_a_crash(tmp_path, kind):
    """Damaged archives through the Metamon source's read and its parse stage: each member is one row (bytes, a
    read error or a filter reason), and every row ends written, filtered or quarantined, never a parser bug."""
    files = sorted(shared_data("pokemon", "metamon_parsed").glob("*.json.lz4"))
    clean = tmp_path / f"clean.{kind}"
    if kind == "zip":
        with zipfile.ZipFile(clean, "w", zipfile.ZIP_DEFLATED) as out:
            for f in files:
                out.write(f, arcname=f"gen1ou/{f.name}")
    else:
        with tarfile.open(clean, "w:gz") as out:
            for f in files:
                out.add(f, arcname=f"gen1ou/{f.name}")
    source = ParseConfig(source="metamon", input=str(tmp_path), out="unused").make_source()
    parse = ParseInputs(source)
    outcomes = set()
    for trial, damaged in enumerate(damaged_copies(clean.read_bytes(), kind, 12, max_changes=8)):
        path = tmp_path / f"fuzz{trial}.{kind}"
        path.write_bytes(damaged)
        rows = source.read({"uri": str(path), "root": str(tmp_path)})
        assert rows and all(r["input_id"].startswith(f"{path.name}::") for r in rows)
        assert all((r["payload"] is None) != (r["read_error"] is None and r["filter_reason"] is None) for r in rows)
        records = parse.parse_batch(pa.Table.from_pylist(rows)).records
        assert len(records) == len(rows) and "parser_bug" not in {r.reason for r in records}
        outcomes |= {r.status for r in records}
    assert {"written", "quarantined"} <= outcomes


def _garble(line: str, rng: random.Random) -> str:
    parts = line.split("|")
    kind = rng.randrange(5)
    if kind == 0 and len(parts) > 2:
        del parts[rng.randrange(2, len(parts))]
    elif kind == 1:
        parts.insert(rng.randrange(1, len(parts) + 1), rng.choice(["", "p3a: Ghost", "999/0", "nonsense", "L"]))
    elif kind == 2:
        return line[: rng.randrange(len(line) + 1)]
    elif kind == 3:
        return f"|{rng.choice(['-unknownmsg', 'bigerror', 'raw', 'c'])}|{rng.random()}"
    else:
        parts = [p[::-1] if rng.random() < 0.3 else p for p in parts]
    return "|".join(parts)


@needs_simulator
def test_generated_protocol_fuzz():
    chunk = generated.chunks(["gen9randombattle"], 3, 5, "random", "random", 3)[0]
    records = [json.loads(p) for _, p in generated.generate(chunk)]
    rng = random.Random(1)
    outcomes = []
    for i in range(150):
        record = json.loads(json.dumps(records[i % len(records)]))
        for side in ("p1", "p2"):
            for event in record["streams"][side]:
                if event["kind"] == "update":
                    event["lines"] = [_garble(x, rng) if rng.random() < 0.002 else x for x in event["lines"]]
        outcomes.append(_outcome(generated.parse, record["battle_id"], json.dumps(record).encode(), DEXES, None))
    assert "protocol_error" in outcomes and "ok" in outcomes


def test_fuzzed_inputs_through_the_job_reconcile(ray_local, tmp_path):
    sample = sorted(shared_data("pokemon", "metamon_parsed").glob("*.json.lz4"))[0]
    root = tmp_path / "in"
    root.mkdir()
    rng = random.Random(2)
    for i, mutated in enumerate(_mutations(sample.read_bytes(), rng, 24)):
        (root / sample.name.replace("smogtours-gen1ou-733374", f"fuzz-gen1ou-{i}")).write_bytes(mutated)
    shutil.copy(sample, root / sample.name)
    published = run(ParseConfig.tiny(source="metamon", input=str(root), out=str(tmp_path / "out")),
                    log=lambda *_: None)
    counts = published.manifest.counts
    assert counts.inputs == 25 and counts.reconciles() and counts.written >= 1
    assert "parser_bug" not in counts.quarantined


def test_unexpected_exceptions_are_recorded_not_fatal(monkeypatch):
    """A parser bug on one input becomes a loud quarantine record, never a crashed job."""
    actor = ParseInputs(ParseConfig(source="metamon", input="unused", out="unused").make_source())

    def broken(*_):
        raise ZeroDivisionError("bug")

    monkeypatch.setattr(actor.parser, "parse", broken)
    [out] = actor.parse_batch(pa.Table.from_pylist([read_row("x", b"1")])).records
    assert out.status == "quarantined" and out.reason == "parser_bug"
    assert "ZeroDivisionError" in out.message


@pytest.mark.parametrize("compression", ["none", "zstd", "snappy"])
def test_fuzzed_parquet_tables_never_crash_the_read_stage(tmp_path, compression):
    """Mutated replay tables: every planned read task returns inputs (rows or named read errors), never an
    exception; a file that fails to plan is one input under its own name."""
    n = 6
    table = pa.table({"id": [f"b{i}" for i in range(n)], "format": ["[Gen 1] OU"] * n,
                      "players": [["p", "q"]] * n, "log": [f"|j|p{i}\n|turn|1\n" * 20 for i in range(n)],
                      "uploadtime": list(range(n)), "formatid": ["gen1ou"] * n, "rating": [1500] * n})
    clean = tmp_path / "clean.parquet"
    pq.write_table(table, clean, row_group_size=2, compression=compression)
    rng = random.Random(3)
    outcomes = set()
    for i, mutated in enumerate(_mutations(clean.read_bytes(), rng, 60)):
        path = tmp_path / f"m{i}.parquet"
        path.write_bytes(mutated)
        items = plan_row_groups(str(path), [(str(path), path.stat().st_size)], "hf-raw", [])
        rows = [row for item in items for row in read_row_group(item)]
        assert all((r["payload"] is None) != (r["read_error"] is None) for r in rows)
        assert all(r["input_id"].startswith(path.name) for r in rows)
        outcomes.add("footer" if items and items[0]["row_group"] is None else
                     "read_error" if any(r["read_error"] for r in rows) else "read")
    assert {"footer", "read_error"} <= outcomes

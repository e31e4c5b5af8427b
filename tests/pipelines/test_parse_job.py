"""The parse job end to end on Ray: generated battles, Metamon files with bad inputs, byte-identical re-runs."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import lz4.frame
import pyarrow.compute as pc
import pytest
from conftest import shared_data

from pipelines.parse_replays import ParseConfig, run
from shards_schema.reader import ShardIntegrityError, open_version

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_generated_end_to_end(tiny_generated):
    cfg, published, logs = tiny_generated
    assert logs[-1] == str(published.path)
    assert any("inputs 12 = written 12" in line for line in logs)
    version = open_version(published.path)
    m = version.manifest
    assert (m.counts.inputs, m.counts.written, m.counts.trajectories) == (12, 12, 24)
    assert m.source == "generated" and m.source_revision.startswith("pokemon-showdown@0.11.11")
    assert m.counts.unknown_words == 0
    table = version.table()
    assert set(table.column("format").to_pylist()) == {"gen9randombattle", "gen1ou"}
    rows = table.select(["trajectory_id", "turn_index", "action", "legal_mask", "done", "result", "reward"]).to_pylist()
    by_traj: dict[str, list[dict]] = {}
    for r in rows:
        by_traj.setdefault(r["trajectory_id"], []).append(r)
    assert len(by_traj) == 24
    for traj in by_traj.values():
        assert [r["turn_index"] for r in traj] == list(range(len(traj)))
        assert [r["done"] for r in traj] == [False] * (len(traj) - 1) + [True]
        assert all(r["legal_mask"][r["action"]] for r in traj if r["action"] >= 0)
        assert sum(r["action"] >= 0 for r in traj) >= len(traj) - 5  # almost every decision is visible
    results = Counter((tid.rsplit(":", 1)[0], t[0]["result"]) for tid, t in by_traj.items())
    for battle in {tid.rsplit(":", 1)[0] for tid in by_traj}:
        assert results[(battle, "win")] == 1 and results[(battle, "loss")] == 1
    # the index points at each trajectory's rows
    index = version.index().to_pylist()
    assert len(index) == 24
    some = index[5]
    traj = version.trajectory(some["trajectory_id"])
    assert traj.num_rows == some["num_rows"]
    assert set(traj.column("trajectory_id").to_pylist()) == {some["trajectory_id"]}


def test_rerun_is_byte_identical_and_never_duplicates(tiny_generated, tmp_path):
    cfg, published, _ = tiny_generated
    again = run(ParseConfig.tiny(source="generated", out=str(tmp_path)), log=lambda *_: None)
    assert again.path.name == published.path.name
    for entry in published.manifest.files + [published.manifest.index_file, published.manifest.quarantine_file]:
        assert (again.path / entry.path).read_bytes() == (published.path / entry.path).read_bytes()
    # files of a killed run or of a run with other contents (no manifest names them) are removed by the next run of
    # the version, which says so; the published files are not rewritten
    stale = ["part-00000-000-00-0123456789ab.parquet", ".part-00000-000-00-0123456789ab.parquet.tmp-00aa"]
    for name in stale:
        (again.path / name).write_bytes(b"left by a killed run")
    before = {p.name: p.stat().st_mtime_ns for p in again.path.iterdir() if p.name not in stale}
    logs: list[str] = []
    third = run(ParseConfig.tiny(source="generated", out=str(tmp_path)), log=logs.append)
    assert third.reused and third.path == again.path and sorted(third.removed) == sorted(stale)
    assert {p.name: p.stat().st_mtime_ns for p in again.path.iterdir()} == before
    assert all(any(f"removed {name}" in line for line in logs) for name in stale)


def _metamon_inputs(tmp_path: Path) -> Path:
    samples = shared_data("pokemon", "metamon_parsed")
    root = tmp_path / "metamon_in"
    root.mkdir()
    files = sorted(samples.glob("*.json.lz4"))
    for f in files[:2]:
        shutil.copy(f, root / f.name)
    good = files[0].read_bytes()
    bad_name = "gen1ou-9{n}_Unrated_a b_vs_c_01-01-2024_WIN.json.lz4"
    (root / bad_name.format(n=1)).write_bytes(b"\x04\x22\x4d\x18garbage")  # corrupt lz4 frame
    (root / bad_name.format(n=2)).write_bytes(lz4.frame.compress(b'{"states": [1, 2'))  # invalid JSON
    (root / bad_name.format(n=3)).write_bytes(good[: len(good) // 2])  # truncated file
    (root / bad_name.format(n=4)).write_bytes(lz4.frame.compress(
        lz4.frame.decompress(good).replace(b'"format": "gen1ou"', b'"format": "gen0nonsense"')))
    (root / bad_name.format(n=5)).write_bytes(lz4.frame.compress(
        lz4.frame.decompress(good).replace(b'"actions": [4, 1, 1,', b'"actions": [12, 1, 1,')))
    with tarfile.open(root / "gen9ou.tar.gz", "w:gz") as tar:
        for f in files[2:]:
            tar.add(f, arcname=f"gen9ou/{f.name}")
    return root


def test_metamon_job_quarantines_and_reconciles(ray_local, tmp_path):
    root = _metamon_inputs(tmp_path)
    cfg = ParseConfig.tiny(source="metamon", out=str(tmp_path / "out"), input=str(root))
    published = run(cfg, log=lambda *_: None)
    m = open_version(published.path).manifest
    c = m.counts
    assert c.inputs == 9 and c.written == 4 and c.reconciles()
    q = open_version(published.path).quarantine()
    assert Counter(q.column("reason").to_pylist()) == {
        "corrupt_lz4": 2, "invalid_json": 1, "unknown_format": 1, "illegal_action": 1}
    assert c.quarantined == {"corrupt_lz4": 2, "illegal_action": 1, "invalid_json": 1, "unknown_format": 1}
    assert "parser_bug" not in c.quarantined
    table = open_version(published.path).table(["trajectory_id", "format"])
    assert pc.count_distinct(table["trajectory_id"]).as_py() == 4
    assert any("gen9ou.tar.gz::" in i for i in open_version(published.path).index().column("input_id").to_pylist())


def test_metamon_format_filter_is_counted(ray_local, tmp_path):
    samples = shared_data("pokemon", "metamon_parsed")
    cfg = ParseConfig(source="metamon", input=str(samples), out=str(tmp_path), formats=["gen9ou"],
                      shard_size_mb=0.5, progress_every_s=60)
    m = run(cfg, log=lambda *_: None).manifest
    assert (m.counts.inputs, m.counts.written, m.counts.filtered) == (4, 2, {"format_not_requested": 2})


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="--source"):
        ParseConfig(source="nope", out="x")
    with pytest.raises(ValueError, match="--input"):
        ParseConfig(source="metamon", out="x")


def test_cli_refuses_a_dataset_outside_out(tmp_path, capsys):
    """`--dataset ../x` is a usage error that says why, before anything is written."""
    from pipelines.cli import parse_config

    out = tmp_path / "out"
    for flag, value in (("--dataset", "../x"), ("--dataset", "a/b"), ("--formats", "../../etc")):
        with pytest.raises(SystemExit) as err:
            parse_config(ParseConfig, ["--source", "metamon", "--input", str(tmp_path), "--out", str(out), flag,
                                       value])
        assert err.value.code == 2
        assert f"{flag} must be a single folder or file name" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    cfg = parse_config(ParseConfig, ["--tiny", "--out", str(out), "--dataset", "mine"])
    assert (cfg.dataset, cfg.options.num_battles) == ("mine", 6)


def _job_in_a_process(out: Path, num_games: int) -> subprocess.Popen:
    """The parse job as a user runs it (its own local Ray), on synthetic Melee games in groups of about one game."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]);"
            "from pipelines.parse_replays import ParseConfig, run;"
            "run(ParseConfig.tiny(source='slp', out=sys.argv[2], num_battles=int(sys.argv[3]), shard_size_mb=0.05))")
    return subprocess.Popen([sys.executable, "-c", code, str(REPO_ROOT), str(out), str(num_games)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the job and every process it started (its Ray: GCS, raylet, workers), as a lost machine would end it."""
    import psutil

    parent = psutil.Process(proc.pid)
    try:
        family = [parent, *parent.children(recursive=True)]
    except psutil.NoSuchProcess:  # a process of the tree exited while it was listed (seen once under load): again
        family = [parent, *parent.children(recursive=True)]
    for p in family:
        try:
            p.kill()
        except psutil.NoSuchProcess:  # a worker may exit between the listing and its kill
            pass
    psutil.wait_procs(family, timeout=30)


def test_a_job_killed_half_way_leaves_no_version_and_the_rerun_equals_a_clean_run(ray_local, tmp_path):
    num_games = 40
    killed = tmp_path / "killed"
    cfg = dict(source="slp", num_battles=num_games, shard_size_mb=0.05)
    # the clean run on the session's Ray, from a thread, beside the job killed in its own process (its own Ray):
    # it needs nothing of that job, whose start-up is most of its time; sharing the cores only slows the killed job,
    # which then has even less of its version written when it is killed
    with ThreadPoolExecutor(1) as pool:
        clean_run = pool.submit(run, ParseConfig.tiny(out=str(tmp_path / "clean"), **cfg), log=lambda *_: None)
        proc = _job_in_a_process(killed, num_games)
        try:
            deadline = time.monotonic() + 120
            while not list(killed.glob("melee_frames/*/part-*.parquet")):
                assert proc.poll() is None and time.monotonic() < deadline, "the job ended before writing a shard"
                time.sleep(0.05)
        finally:
            _kill_tree(proc)
        clean = clean_run.result()
    [folder] = killed.glob("melee_frames/*")
    assert not (folder / "manifest.json").exists()  # the job was killed before it published
    with pytest.raises(ShardIntegrityError, match="has no manifest.json"):
        open_version(folder)
    rerun = run(ParseConfig.tiny(out=str(killed), **cfg), log=lambda *_: None)
    assert rerun.path == folder and len(rerun.manifest.files) > 1
    assert {p.name: p.read_bytes() for p in rerun.path.iterdir()} == {p.name: p.read_bytes()
                                                                     for p in clean.path.iterdir()}


def test_a_read_task_cut_into_many_groups_writes_each_input_once(ray_local, tmp_path):
    """One row group of 40 battles is one read task; small shards cut it into several groups, which Ray Data hands
    on in shared blocks: every battle is written once, in input order, as with one group."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    logs = sorted(shared_data("pokemon", "bench_replays").rglob("*.json"))[:40]
    rows = [json.loads(p.read_text()) for p in logs]
    root = tmp_path / "table"
    root.mkdir()
    pq.write_table(pa.Table.from_pylist([{k: r.get(k) for k in ("id", "format", "players", "log", "uploadtime",
                                                                  "formatid", "rating")} for r in rows]),
                   root / "replays.parquet", row_group_size=len(rows))
    versions = [run(ParseConfig.tiny(source="hf-raw", input=str(root), out=str(tmp_path / f"out{mb}"),
                                     shard_size_mb=mb), log=lambda *_: None) for mb in (0.1, 64.0)]
    many, one = (open_version(p.path) for p in versions)
    assert len(many.manifest.files) > 2 and len(one.manifest.files) == 1
    c = many.manifest.counts
    assert (c.inputs, c.written, c.filtered, c.quarantined) == (40, 40, {}, {})
    assert many.table().equals(one.table())
    assert many.index().column("trajectory_id").to_pylist() == one.index().column("trajectory_id").to_pylist()

"""Incremental versions (``--reuse-from``): a job over more inputs than an earlier version of the same code and config
copies that version's shards for the read tasks it already parsed, parses only the others, and publishes the
version a run from scratch publishes, byte for byte, on local disk and on the local S3 server."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import random
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines.melee.synthetic import SyntheticGame, write_slp
from pipelines.parse_replays import ParseConfig, run
from pipelines.stages import pack_tasks, task_key, work_item
from pipelines.writer.reuse import ReuseError, reuse_differences
from shards_schema import storage
from shards_schema.manifest import MANIFEST_NAME, Manifest
from shards_schema.reader import open_version

QUIET = {"log": lambda *_: None}
SHARD_MB = 0.015
"""Groups of ~256 KiB of .slp (``SlpSource.shard_bytes_per_input_byte`` 0.06): each archive of two ~170 KB games is
a read task of its own."""


# ---------------------------------------------------------------------------- read tasks cut by their items
def _keys(items: list[dict], budget: float) -> list[str]:
    return [task_key(t) for t in pack_tasks(items, budget)]


@pytest.mark.parametrize("seed", range(5))
def test_an_inserted_item_changes_only_the_task_that_holds_it(seed):
    """Items of random sizes, one inserted at a random place (the middle of the sorted order, not only the end) or
    removed: every task that does not hold it keeps its items, so its key, groups and shards."""
    rng = random.Random(seed)
    budget = 1000.0
    items = [work_item(f"f{i:05d}", rng.choice([10, 50, 200, 1500])) for i in range(0, 3000, 2)]
    before = pack_tasks(items, budget)
    assert sum(map(len, before)) == len(items) and 30 < len(before) < len(items)
    where = rng.randrange(1, len(items) - 1)
    for new in (work_item(f"f{2 * where - 1:05d}", 120), work_item(f"f{2 * where - 1:05d}", 5000)):
        grown = [*items[:where], new, *items[where:]]
        after = pack_tasks(grown, budget)
        assert sum(map(len, after)) == len(grown)
        kept = {task_key(t) for t in after}
        lost = [t for t in before if task_key(t) not in kept]
        # only the task the item went into and, at most, the one before it (its last item is now followed by the
        # new one) differ; every other task is the same, before and after the insertion point
        assert len(lost) <= 2 and all(items[where - 1] in t or items[where] in t for t in lost), lost
        assert len(after) - len(kept & {task_key(t) for t in before}) <= 3
    appended = pack_tasks([*items, work_item("g", 100)], budget)
    assert [task_key(t) for t in appended[:len(before) - 1]] == [task_key(t) for t in before[:-1]]
    # a large item is a task of its own; a task's key is its items'
    assert [len(t) for t in pack_tasks([work_item("a", 10), work_item("b", 2000), work_item("c", 10)], budget)][1] == 1
    assert task_key(items[:3]) == task_key([dict(i) for i in items[:3]]) != task_key(items[1:4])


def test_task_sizes_average_the_budget():
    rng = random.Random(7)
    items = [work_item(f"x{i:06d}", rng.randint(1, 100)) for i in range(20_000)]
    tasks = pack_tasks(items, 5_000.0)
    mean = sum(sum(i["bytes"] for i in t) for t in tasks) / len(tasks)
    assert 3_500 < mean < 7_000, mean


# ---------------------------------------------------------------------------- whole jobs
def _games(first: int, count: int) -> dict[str, bytes]:
    """Short synthetic games (400 frames: parsed ~6x faster than the 2,400 of ``synthetic_game``)."""
    return {f"games/g{first + i:04d}.slp": write_slp(SyntheticGame(num_frames=400 + first + i, seed=first + i))
            for i in range(count)}


def _archives(root: Path, names: list[str]) -> Path:
    """Melee archives under ``root``: ``a0``..``a5`` of 2 games each, ``a1`` with a member that is no replay
    (filtered) and a damaged one (quarantined); ``a4`` holds a copy of a game of ``a0`` (a duplicate across read
    tasks, so the earlier driver rewrote a4's shard), ``a2`` one of ``a5``'s (so a reused shard of a5 loses a game
    when a2 comes first)."""
    root.mkdir(parents=True)
    members = {f"a{i}": _games(10 * i, 2) for i in range(6)}
    members["a1"] |= {"games/readme.txt": b"hi", "games/broken.slp": b"not a replay at all" * 50}
    members["a4"] |= {"games/copy.slp": members["a0"]["games/g0000.slp"]}
    members["a2"] |= {"games/copy.slp": members["a5"]["games/g0051.slp"]}
    for name in names:
        with zipfile.ZipFile(root / f"{name}.zip", "w", zipfile.ZIP_STORED) as archive:
            for member, data in members[name].items():
                archive.writestr(member, data)
    return root


def _config(inputs: str, out: str, **overrides) -> ParseConfig:
    return ParseConfig.tiny(**{"source": "slp", "input": inputs, "out": out, "shard_size_mb": SHARD_MB, "min_frames": 0,
                               **overrides})


def _files(uri: str) -> dict[str, bytes]:
    """Every file of a version by name; the manifest without its ``git_commit`` (others commit to this checkout
    between the runs a test compares)."""
    out = {storage.relative(u, uri): storage.read_bytes(u) for u in storage.list_files(uri)}
    manifest = Manifest.from_json(out[MANIFEST_NAME].decode())
    out[MANIFEST_NAME] = dataclasses.replace(manifest, git_commit="-").to_json().encode()
    return out


ALL = ["a0", "a1", "a2", "a3", "a4", "a5"]


@pytest.fixture(scope="module")
def all_from_scratch(ray_local, tmp_path_factory):
    """The six archives on local disk and the version a run from scratch publishes of them, parsed once for the two
    tests that compare an incremental run with it (on local disk and on S3); neither writes to either."""
    root = tmp_path_factory.mktemp("incremental")
    inputs = _archives(root / "in", ALL)
    return inputs, run(_config(str(inputs), str(root / "scratch")), **QUIET)


def test_an_incremental_run_publishes_the_version_a_run_from_scratch_does(all_from_scratch, tmp_path):
    """The earlier version lacks ``a2``, in the middle of the sorted order: the job over all six archives reuses the
    four read tasks whose shards the earlier version published as written (a4's was rewritten there to drop a
    duplicate of a0's game, so a4 is parsed again), parses a2 and a4, drops a5's game that a2 now holds first
    from a5's copied shard, and publishes every file of the run from scratch, byte for byte: shards, index,
    quarantine (a1's damaged and non-replay members, from the reused task), tasks file, card and manifest."""
    earlier = run(_config(str(_archives(tmp_path / "in-old", [a for a in ALL if a != "a2"])), str(tmp_path / "old")),
                  **QUIET)
    inputs, scratch = str(all_from_scratch[0]), all_from_scratch[1]
    logs: list[str] = []
    grown = run(_config(inputs, str(tmp_path / "grown"), reuse_from=str(earlier.path)), log=logs.append)
    assert any("reusing 4 of 6 read tasks" in line and "reading and parsing 2" in line for line in logs), logs
    assert grown.path.name == scratch.path.name != earlier.path.name
    assert _files(str(grown.path)) == _files(str(scratch.path))
    c = grown.manifest.counts
    assert c.reconciles() and sum(c.quarantined.values()) == 1, c
    assert c.filtered["duplicate"] == 2 and c.filtered["not_a_replay"] == 1, c
    assert (c.inputs, c.written) == (16, 12), c
    # each archive is a read task of its own: the shards of all but a2's and a4's are the earlier version's files
    # (hard links on local disk), never parsed again
    items = {i["id"]: i for i in _config(inputs, "unused").make_source().plan().items}
    parsed_again = {task_key([items["a2.zip"]]), task_key([items["a4.zip"]])}
    for f in grown.manifest.files:
        old = earlier.path / f.path
        linked = old.exists() and os.stat(old).st_ino == os.stat(grown.path / f.path).st_ino
        assert linked == (f.path.split("-")[1] not in parsed_again), f.path
    open_version(earlier.path), open_version(grown.path)  # every file checked against its sha256
    # the grown version can be reused in turn: all but a4 and a5, whose shards its driver rewrote (each lost a game
    # to a duplicate in an earlier archive)
    logs.clear()
    again = run(_config(inputs, str(tmp_path / "again"), reuse_from=str(grown.path)), log=logs.append)
    assert any("reusing 4 of 6 read tasks" in line for line in logs), logs
    assert _files(str(again.path)) == _files(str(scratch.path))


def test_an_incremental_run_on_s3_equals_the_local_run_from_scratch(all_from_scratch, s3_server, s3_bucket):
    """The same on the local S3 server: inputs, the earlier version and the new one in a bucket, the reused shards
    copied server-side and checked."""
    local, scratch = all_from_scratch
    for path in sorted(local.iterdir()):
        storage.write_bytes(f"{s3_bucket}/in/{path.name}", path.read_bytes())
    old_in = f"{s3_bucket}/in-old"
    for name in ("a0", "a1", "a3"):
        storage.copy(f"{s3_bucket}/in/{name}.zip", f"{old_in}/{name}.zip")
    earlier = run(_config(old_in, f"{s3_bucket}/old"), **QUIET)
    logs: list[str] = []
    grown = run(_config(f"{s3_bucket}/in", f"{s3_bucket}/grown", reuse_from=earlier.uri), log=logs.append)
    assert any("reusing 3 of 6 read tasks" in line for line in logs), logs
    assert grown.uri.endswith("/" + scratch.path.name)
    assert _files(grown.uri) == _files(str(scratch.path))
    assert grown.manifest.counts == scratch.manifest.counts


def test_a_version_of_other_code_or_config_is_refused_with_what_differs(ray_local, tmp_path):
    inputs = str(_archives(tmp_path / "in", ["a0", "a3"]))
    earlier = run(_config(inputs, str(tmp_path / "old")), **QUIET)
    with pytest.raises(ReuseError, match=r"config min_frames=0 \(this job: 100\).*Run without --reuse-from"):
        run(_config(inputs, str(tmp_path / "new"), reuse_from=str(earlier.path), min_frames=100), **QUIET)
    with pytest.raises(ReuseError, match=r"config shard_size_mb=0.015 \(this job: 0.5\)"):
        run(_config(inputs, str(tmp_path / "new"), reuse_from=str(earlier.path), shard_size_mb=0.5), **QUIET)
    assert not (tmp_path / "new").exists() or not list((tmp_path / "new").rglob(MANIFEST_NAME))
    cfg = _config(inputs, str(tmp_path / "new"))
    from pipelines.job.config import version_spec

    spec = version_spec(cfg, cfg.make_source().plan())
    code = dataclasses.replace(spec.code, parser="9.0.0")
    assert reuse_differences(earlier.manifest, dataclasses.replace(spec, code=code)) == [
        f"parser version {earlier.manifest.parser_version} (this job: 9.0.0)"]
    assert reuse_differences(earlier.manifest, spec) == []
    # a hub dataset that grew is a new commit of the same repository; a generator's revision must be equal
    old = dataclasses.replace(earlier.manifest, source_revision="o/n@" + "a" * 40)
    assert reuse_differences(old, dataclasses.replace(spec, source_revision="o/n@" + "b" * 40)) == []
    assert reuse_differences(old, dataclasses.replace(spec, source_revision="o/m@" + "b" * 40))
    gen = dataclasses.replace(earlier.manifest, source_revision="pokemon-showdown@0.11.9+generator-aaa")
    assert reuse_differences(gen, dataclasses.replace(spec, source_revision="pokemon-showdown@0.11.10+generator-aaa"))
    # not a version; a version without a tasks file
    with pytest.raises(ReuseError, match="is not a published version"):
        run(_config(inputs, str(tmp_path / "new"), reuse_from=str(tmp_path)), **QUIET)
    manifest = Manifest.load(earlier.path)
    bare = dataclasses.replace(manifest, extra={k: v for k, v in manifest.extra.items() if k != "tasks"})
    (earlier.path / MANIFEST_NAME).write_text(bare.to_json())
    with pytest.raises(ReuseError, match="has no tasks file"):
        run(_config(inputs, str(tmp_path / "new"), reuse_from=str(earlier.path)), **QUIET)


def test_a_damaged_reused_shard_stops_the_job_before_it_publishes(ray_local, tmp_path):
    earlier = run(_config(str(_archives(tmp_path / "in-old", ["a0", "a3"])), str(tmp_path / "old")), **QUIET)
    shard = earlier.path / earlier.manifest.files[0].path
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))  # same size, other bytes: only the sha256 tells
    with pytest.raises(Exception, match=r"does not match the sha256 and size the manifest of .* gives") as err:
        run(_config(str(_archives(tmp_path / "in", ["a0", "a3", "a5"])), str(tmp_path / "new"),
                    reuse_from=str(earlier.path)), **QUIET)
    assert "ReuseError" in repr(err.value) or isinstance(err.value, ReuseError)
    assert not list((tmp_path / "new").rglob(MANIFEST_NAME))


def test_a_grown_replay_table_reuses_its_unchanged_row_groups(ray_local, tmp_path):
    """Pokémon replay tables (``hf-raw``): a Parquet file added between two others (sorted order); its row groups
    are small items, several to a read task, so the cut by items is what keeps the other tasks."""
    import json

    import pyarrow as pa
    from conftest import shared_data

    logs = sorted(shared_data("pokemon", "bench_replays").rglob("*.json"))[:90]
    rows = [json.loads(p.read_text()) for p in logs]
    table = pa.Table.from_pylist([{k: r.get(k) for k in ("id", "format", "players", "log", "uploadtime", "formatid",
                                                          "rating")} for r in rows])
    old, new = tmp_path / "old-in", tmp_path / "in"
    old.mkdir()
    new.mkdir()
    for name, part in (("p0", table.slice(0, 30)), ("p1", table.slice(30, 30)), ("p2", table.slice(60, 30))):
        pq.write_table(part, new / f"{name}.parquet", row_group_size=3)
        if name != "p1":
            pq.write_table(part, old / f"{name}.parquet", row_group_size=3)
    cfg = {"source": "hf-raw", "shard_size_mb": 0.03}
    earlier = run(ParseConfig.tiny(input=str(old), out=str(tmp_path / "old"), **cfg), **QUIET)
    scratch = run(ParseConfig.tiny(input=str(new), out=str(tmp_path / "scratch"), **cfg), **QUIET)
    seen: list[str] = []
    grown = run(ParseConfig.tiny(input=str(new), out=str(tmp_path / "grown"), reuse_from=str(earlier.path), **cfg),
                log=seen.append)
    [line] = [s for s in seen if "reusing" in s]
    reused, total = (int(w) for w in line.split("reusing ")[1].split(" read tasks")[0].split(" of "))
    assert 0 < reused < total and total > 3, line
    assert _files(str(grown.path)) == _files(str(scratch.path))
    assert grown.manifest.counts.written == 90


def test_the_tasks_file_is_named_and_checked(ray_local, tmp_path):
    published = run(_config(str(_archives(tmp_path / "in", ["a0"])), str(tmp_path / "out")), **QUIET)
    entry = published.manifest.tasks
    data = (published.path / entry.path).read_bytes()
    assert hashlib.sha256(data).hexdigest() == entry.sha256 and entry.path.startswith("tasks-")
    tasks = pq.read_table(published.path / entry.path)
    assert tasks.num_rows == entry.rows >= 1 and set(tasks.column("lost").to_pylist()) == {0}
    (published.path / entry.path).write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(ReuseError, match="tasks-.*does not match the sha256"):
        run(_config(str(tmp_path / "in"), str(tmp_path / "new"), reuse_from=str(published.path)), **QUIET)

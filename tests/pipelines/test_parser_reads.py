"""Work items the parse actor reads itself (``Source.read_by_parser``: loose ``.slp`` files): the read task passes
the item on instead of its bytes, and the job publishes what it published when the read task read them; a store
that will not deliver such an item stops the job, or is an accepted loss, as a read task's failure is (through
Ray: ``tests/pipelines/test_store_failures.py``)."""

from __future__ import annotations

import functools
import json
from types import SimpleNamespace

import pyarrow as pa
import pytest
from conftest import shared_data

from pipelines import stages
from pipelines.job import parse as parse_module
from pipelines.job.parse import ParseInputs
from pipelines.job.read import ReadProgress, read_groups
from pipelines.melee.source import SlpSource
from pipelines.parse_replays import ParseConfig
from pipelines.writer.wire import GroupResult
from shards_schema import storage

NO_WAIT = storage.RetryPolicy(attempts=2, base_s=0.0, cap_s=0.0)


class ReadByTask(SlpSource):
    """The same source with every item read in its read task."""

    def read_by_parser(self, item: dict) -> bool:
        return False


def _tasks(source: stages.Source, group_bytes: float) -> pa.Table:
    items = source.plan().items
    tasks = stages.pack_tasks(items, group_bytes)
    return pa.table({"task": [stages.task_key(t) for t in tasks], "items": [json.dumps(t) for t in tasks]})


def _parse(groups: list[pa.Table], source: stages.Source, version_uri: str, **kwargs) -> pa.Table:
    actor = ParseInputs(source, version_uri, shard_size_mb=1.0, **kwargs)
    return pa.concat_tables([actor(group) for group in groups])


def _counter() -> tuple[ReadProgress, SimpleNamespace]:
    """A progress counter and a stand-in for its actor handle (``.add.remote``, ``.add_items.remote``)."""
    counter = ReadProgress()
    return counter, SimpleNamespace(add=SimpleNamespace(remote=counter.add),
                                    add_items=SimpleNamespace(remote=counter.add_items))


def test_deferred_items_give_the_groups_and_shards_of_items_the_read_task_read(tmp_path):
    """Loose replays and two files that are not replays, in groups of ~1.2 MB: the same groups of the same inputs,
    and the same records, placements and shard bytes, whoever reads the replays; the progress counter ends with
    every item and input told once either way."""
    cfg = ParseConfig.tiny(source="slp", input=str(shared_data("melee", "slp")), out=str(tmp_path), min_frames=0)
    by_parser, by_task = cfg.make_source(), ReadByTask(cfg.inputs, cfg.make_source().options)
    group_bytes = 1.2 * 2 ** 20
    tasks = _tasks(by_parser, group_bytes)
    told, told_handle = _counter()
    read_told, read_handle = _counter()
    deferred = list(read_groups(tasks, source=by_parser, group_bytes=group_bytes, progress=told_handle))
    read = list(read_groups(tasks, source=by_task, group_bytes=group_bytes, progress=read_handle))
    assert told.snapshot()[1] == 2  # the two files that are not replays; the replays are the actor's to tell

    def ids(groups):
        return [(g["group"][0].as_py(), [r["input_id"] for r in g["inputs"][0].as_py()]) for g in groups]

    assert ids(deferred) == ids(read) and len(deferred) >= 3
    rows = [r for g in deferred for r in g["inputs"][0].as_py()]
    assert {r["input_id"].endswith(".slp") for r in rows if r["item_json"]} == {True}
    assert all(r["payload"] is None for r in rows) and sum(r["item_json"] is not None for r in rows) >= 5

    got = _parse(deferred, by_parser, str(tmp_path / "deferred"), progress=told_handle)
    want = _parse(read, by_task, str(tmp_path / "read"))
    assert got.equals(want)
    assert told.snapshot() == read_told.snapshot() and told.items == read_told.items
    assert sum(len(f) for f in got["files"].to_pylist()) >= 3
    for entry in (f for files in got["files"].to_pylist() for f in files):
        assert (tmp_path / "deferred" / entry["path"]).read_bytes() == (tmp_path / "read" / entry["path"]).read_bytes()


def test_a_deferred_item_the_store_will_not_deliver_is_raised_or_an_accepted_loss(tmp_path, monkeypatch):
    """As ``read_item`` in a read task: retried, then the ``StorageError`` naming the input, or with
    ``max_unreadable`` one ``lost`` row quarantined as unreadable at stage ``read``; the other inputs are parsed."""
    monkeypatch.setattr(parse_module, "read_item", functools.partial(parse_module.read_item, policy=NO_WAIT))
    root = tmp_path / "in"
    root.mkdir()
    for name in ("peppi__netplay.slp", "peppi__short_game_tbh10.slp"):
        (root / name).write_bytes(shared_data("melee", "slp", name).read_bytes())
    cfg = ParseConfig.tiny(source="slp", input=str(root), out=str(tmp_path), min_frames=0)
    source = cfg.make_source()
    groups = list(read_groups(_tasks(source, 2 ** 30), source=source, group_bytes=2 ** 30))
    (root / "peppi__netplay.slp").unlink()  # listed and grouped, gone before the actor reads it
    with pytest.raises(storage.StorageError, match=r"read of input peppi__netplay.slp from .*FileNotFoundError"):
        _parse(groups, source, str(tmp_path / "a"))
    [result] = GroupResult.from_arrow(_parse(groups, source, str(tmp_path / "b"), max_unreadable=1))
    lost, kept = result.records
    assert (lost.input_id, lost.stage, lost.reason, lost.lost) == ("peppi__netplay.slp", "read", "unreadable", True)
    assert (kept.input_id, kept.status) == ("peppi__short_game_tbh10.slp", "written")

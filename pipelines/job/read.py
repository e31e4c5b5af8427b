"""The read stage: read tasks read their work items by URI (a store failure retried, then a loss accepted or
raised) and cut them into groups of consecutive inputs of about a shard's input bytes, one Arrow row per group;
``ReadProgress`` counts what was read for the progress line."""

from __future__ import annotations

import json
import time

import numpy as np
import pyarrow as pa

from pipelines import stages
from pipelines.writer.naming import BYTES_PER_MIB
from shards_schema.storage import RetryPolicy, StorageError

MAX_GROUP_INPUT_BYTES = 512 << 20
"""A group's raw inputs travel as one Ray object and are held by its parse actor beside their rows: bounded, so a
node's actors fit in memory. Melee inputs shrink ~16x (``SlpSource.shard_bytes_per_input_byte``): their shards come
out at ~32 MiB at most, whatever --shard-size-mb above that."""


READ_ROW = pa.struct([("input_id", pa.string()), ("payload", pa.large_binary()), ("read_error", pa.string()),
                       ("filter_reason", pa.string()), ("facts_json", pa.string()), ("lost", pa.string()),
                       ("item_json", pa.string())])


ITEM_RETRY = RetryPolicy(attempts=3, base_s=1.0, cap_s=10.0)
"""Re-reads of a whole work item after a ``StorageError`` (each store operation inside is already retried): a
stream cut mid-body, which no decoder can resume, is read again from its start."""


def read_item(source: stages.Source, item: dict, *, max_unreadable: int,
              policy: RetryPolicy = ITEM_RETRY) -> list[dict]:
    """The ``read_row`` of each input of one work item, the item re-read whole while the store fails. When it keeps
    failing: one row marked ``lost`` under the item's id if the job accepts losses (``max_unreadable > 0``: the
    driver counts them against the limit), else the ``StorageError`` itself, naming the item, which fails the read
    task and so the job, before anything is published."""
    for attempt in range(1, policy.attempts + 1):
        try:
            return source.read(item)
        except StorageError as err:
            failure = err
            if attempt < policy.attempts:
                time.sleep(policy.wait_s(attempt))
    lost = StorageError(f"read of input {item['id']} from", failure.uri,
                        f"{failure.why} (the work item read {policy.attempts} times)", failure.attempts)
    if max_unreadable > 0:
        return [stages.read_row(item["id"], lost=str(lost))]
    raise lost from failure


def read_groups(tasks: pa.Table, *, source: stages.Source, group_bytes: float, progress=None,
                max_unreadable: int = 0, heartbeat_s: float | None = None):
    """A read task: reads its work items in order and yields their inputs in groups of consecutive inputs of about
    ``group_bytes`` input bytes (an input is never split; a group never spans tasks), one row per group named
    ``<task>-<group>`` (the task's ``stages.task_key``). Cut by the bytes read, the groups are the same on every run
    and in every plan that holds the task: shard boundaries and names follow. A work item the parse actor reads
    itself (``Source.read_by_parser``) is not read here: it is passed on as one deferred row and counts its listed
    bytes, which are the bytes it holds.

    Each item read is told to ``progress`` (a ``ReadProgress`` actor), for the driver's progress line: reads go on
    while a group fills, so the line moves before the first group is parsed. A work item the store will not deliver
    is ``read_item``'s.

    With ``heartbeat_s``, a group that has taken that long so far is announced by an empty row (``HEARTBEAT``)
    after each further item, so Ray Data's no-progress guard sees the task move: a group of generated battles takes
    as long as its simulator does (3,000 search battles in one 128 MiB group ran past the guard's 30 minutes on a
    loaded machine while every work item was read in turn)."""
    last = time.monotonic()
    for task, items_json in zip(tasks.column("task").to_pylist(), tasks.column("items").to_pylist(), strict=True):
        rows, size, number = [], 0, 0
        for item in json.loads(items_json):
            if source.read_by_parser(item):  # its bytes are its listed size, read by the parse actor
                read = [(stages.read_row(item["id"], deferred=item), item["bytes"])]  # progress: the actor's
            else:
                read = ((row, len(row["payload"] or b"")) for row in read_item(source, item,
                                                                                 max_unreadable=max_unreadable))
            count = 0
            for row, num_bytes in read:
                rows.append(row)
                count += 1
                size += num_bytes
                if size >= group_bytes:
                    yield group_row(f"{task}-{number:03d}", rows)
                    rows, size, number, last = [], 0, number + 1, time.monotonic()
            if progress is not None and not source.read_by_parser(item):
                progress.add.remote(item["id"], stages.planned_bytes(item, group_bytes), count)
            if heartbeat_s is not None and time.monotonic() - last >= heartbeat_s:
                yield group_row(HEARTBEAT, [])
                last = time.monotonic()
        if rows:
            yield group_row(f"{task}-{number:03d}", rows)
            last = time.monotonic()


class ReadProgress:
    """What the read tasks have read so far (a Ray actor the driver polls): planned bytes of the items read and the
    inputs they held. An item read again (its read task retried after a node was lost) counts once."""

    def __init__(self):
        self.planned_bytes, self.inputs = 0.0, 0
        self.items: set[str] = set()

    def add_items(self, items: list[tuple[str, float, int]]) -> None:
        """``add`` of each ``(item_id, planned_bytes, inputs)``."""
        for item in items:
            self.add(*item)

    def add(self, item_id: str, planned_bytes: float, inputs: int) -> None:
        if item_id in self.items:
            return
        self.items.add(item_id)
        self.planned_bytes += planned_bytes
        self.inputs += inputs

    def snapshot(self) -> tuple[float, int]:
        return self.planned_bytes, self.inputs


HEARTBEAT = ""
"""The name of ``read_groups``' empty rows that only tell Ray Data a read task is alive; no group has it (a group's
name starts with its task's key)."""


def group_row(group: str, rows: list[dict]) -> pa.Table:
    """The group's inputs as one Arrow row. The payloads are joined into one buffer (one copy) and wrapped:
    ``pa.array`` over the row dicts converted them value by value, 3.1 ms of CPU per MB of .slp against 0.7
    (benchmarks/job_overhead.py; the same table)."""
    payloads = [row["payload"] for row in rows]
    present = [p is not None for p in payloads]
    offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum([len(p) if p is not None else 0 for p in payloads], out=offsets[1:])
    validity = None if all(present) else pa.array(present, pa.bool_()).buffers()[1]
    payload = pa.Array.from_buffers(pa.large_binary(), len(rows), [validity, pa.py_buffer(offsets),
                                    pa.py_buffer(b"".join(p for p in payloads if p is not None))],
                                    null_count=present.count(False))
    columns = [payload if f.name == "payload" else pa.array([row.get(f.name) for row in rows], f.type)
               for f in READ_ROW]
    inputs = pa.ListArray.from_arrays(pa.array([0, len(rows)], pa.int32()),
                                      pa.StructArray.from_arrays(columns, fields=list(READ_ROW)))
    return pa.table({"group": [group], "inputs": inputs})


def group_input_bytes(shard_size_mb: float, source: stages.Source) -> float:
    """Input bytes of a group, and so a read task's budget: what makes a shard of ``shard_size_mb`` of this source's
    rows, at most ``MAX_GROUP_INPUT_BYTES``."""
    return min(shard_size_mb * BYTES_PER_MIB / source.shard_bytes_per_input_byte, MAX_GROUP_INPUT_BYTES)

"""``--reuse-from`` on the driver: the reused tasks' shards copied ahead of the publisher (``ReusedCopies``) and
every group handed over in the plan's order, reused or parsed (``in_plan_order``)."""

from __future__ import annotations

from pipelines import stages

COPY_BATCH_FILES = 64
"""Reused shards copied (and checked) per Ray task: a task's start costs about what checking one shard does."""
COPIES_IN_FLIGHT = 4
"""Copy tasks running at once. They ask for no CPU (they wait on the store; a sha256 reads ~1 GB/s), so that they
never hold back the parse actors and read tasks, whose CPUs Ray Data plans with (a copy task at a quarter CPU held
an incremental job's one read task back for a minute on 2 cores); the window bounds them instead."""


class ReusedCopies:
    """The reused tasks' shards copied into the version in input order, ``COPY_BATCH_FILES`` to a task,
    ``COPIES_IN_FLIGHT`` tasks at a time, running ahead of the driver, which waits (``ready``) only for the copies of
    the task it is about to hand the publisher. ``copy(earlier_uri, version_uri, entries)`` starts a copy
    (``writer.reuse.copy_reused`` as a Ray task) and returns its handle; ``wait(handles)`` returns once they are done
    and raises what a copy raised."""

    def __init__(self, copy, wait, earlier_uri: str, version_uri: str, keys: list[str], reused: dict[str, list]):
        self.copy, self.wait, self.earlier_uri, self.version_uri = copy, wait, earlier_uri, version_uri
        self.batches: list[list] = [[]]
        self.last_batch: dict[str, int] = {}  # task → the batch holding its last shard
        for key in keys:
            for entry in reused.get(key, ()):
                if len(self.batches[-1]) == COPY_BATCH_FILES:
                    self.batches.append([])
                self.batches[-1].append(entry)
                self.last_batch[key] = len(self.batches) - 1
        self.refs: list = []
        self.done = 0  # batches known to be copied
        self._launch(COPIES_IN_FLIGHT)

    def _launch(self, upto: int) -> None:
        while len(self.refs) < min(upto, len(self.batches)) and self.batches[len(self.refs)]:
            self.refs.append(self.copy(self.earlier_uri, self.version_uri, self.batches[len(self.refs)]))

    def ready(self, key: str) -> None:
        """Return once every shard of task ``key`` is copied and checked (raises what a copy raised)."""
        if key not in self.last_batch:
            return
        need = self.last_batch[key] + 1
        self._launch(need + COPIES_IN_FLIGHT)
        if need > self.done:
            self.wait(self.refs[self.done:need])
            self.done = need
        self._launch(self.done + COPIES_IN_FLIGHT)


def in_plan_order(keys: list[str], reused: dict, stored, parsed, ready):
    """``(GroupResult, reused)`` of every group in the plan's order: a reused task's groups from the earlier version
    (``stored``: ``(task, groups)`` of the reused tasks, in order) once ``ready(task)`` returns (its shards are
    copied), every other task's from ``parsed`` (the job's groups, in order) as they come. The first parsed group
    is waited for first, so the copies and the parsing run at once."""
    pending = next(parsed, None)
    for key in keys:
        if key in reused:
            task, groups = next(stored)
            if task != key:
                raise AssertionError(f"the earlier version gave task {task} where {key} was expected")
            ready(key)
            for group in groups:
                yield group, True
            continue
        while pending is not None and stages.task_of(pending.group) == key:
            yield pending, False
            pending = next(parsed, None)
    if pending is not None:
        raise AssertionError(f"group {pending.group} is of no planned read task, or out of order")

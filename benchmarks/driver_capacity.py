"""How many parse cores one parse-job driver serves, by simulation: the real driver loop and publisher, fed by
stand-in parse actors that replay recorded group records at the rate N parse cores would make them, N raised until
the driver stops following; and how long the driver takes to plan 10^5-10^6 work items.

    python benchmarks/driver_capacity.py                  # both schemas at 128 MiB (default) and 2 MiB shards
    python benchmarks/driver_capacity.py --quick          # smoke run: tiny shards, a short ladder, 10^3-10^4 items
    python benchmarks/driver_capacity.py --profile        # also py-spy the driver at the first step it cannot follow
    python benchmarks/driver_capacity.py --parts planning # only the planning times
    python benchmarks/driver_capacity.py --work-dir DIR   # keep inputs and recordings; a later run reuses them

1. Recording (per schema, at ``--record-mb``, 2 MiB shards by default). Real inputs: Pokémon, the 400 spectator logs
   of ``../shared/data/pokemon/bench_replays`` under new battle ids in an ``hf-raw`` table (row groups of 64, as the
   hub's); Melee, synthetic games (``pipelines.melee.archives.synthetic_game``, ~2,500 frames, each its own seed) as
   ``.slp`` files; made until the job's plan holds enough full groups (``inputs_for_full_groups``: how read tasks are
   cut is ``pack_tasks``'s). One input in 97 is damaged (a log cut to one line; garbage bytes), so the records carry
   quarantine rows as a real job's do. The job's own pieces run in this process, without Ray: the source's ``plan``
   → ``stages.pack_tasks`` → ``job.read.read_groups`` → ``job.parse.ParseInputs`` (parser, table, Parquet
   encode, and the shard written to a local folder), which returns each group's ``GroupResult`` row, as the job's
   actors do. Kept: six full groups (a read task's last, smaller group is read, not parsed) with the CPU time
   (``time.process_time``) of ``ParseInputs`` on each: the parse core-seconds per group. The reads' CPU is printed
   beside it but not counted (a cluster spends it too, so the cores figure is the lower of the two). A larger shard
   size's groups are made of the recorded ones (``tile``: as many consecutive recorded groups as a full group of that
   size holds inputs, by their bytes; their shard files merged into one; CPU summed): a real 128 MiB Pokémon group
   costs ~2.5 CPU minutes to parse, too long for one run on a loaded 2-core machine. The loop alone
   (``from_arrow`` + ``add_group`` in this process, no Ray) is timed on them too.
2. Replay. A local Ray of many logical CPUs (``--logical-cpus``) runs the job's pipeline shape with the job's Ray Data
   settings: ``from_items`` (one task per group) → a read stage → an actor pool (``ActorPoolStrategy``) →
   ``iter_batches`` on the driver → ``GroupResult.from_arrow`` → ``VersionPublisher.add_group`` → ``publish()``: the
   loop of ``pipelines/job/ray_data.py`` ``run()``, with the production classes. The read stage yields a small row
   per group (no payload: the driver never touches payloads, and they travel between workers, not through it); the
   stand-in actors return a recorded group's Arrow row with its input ids, dedupe keys, group and file names
   renamed (Arrow compute, ~ms), so each replayed group is a new group of new inputs and no input is a duplicate of
   another. A stand-in paces itself to (N / parse CPU s per group) / actors groups/s. ``publish()`` does not read
   the shards (it writes index, quarantine, card and manifest; it copies shards only for a version with accepted
   lost inputs, and rewrites a shard only when a later group repeats an earlier one's dedupe key, which renamed
   groups never do: the benchmark's rewrite hook raises), so the shard files the records name are not written: the
   published version is checked for its counts (inputs = written + filtered + quarantined, and equal to the replayed
   records), not readable. The job's progress thread (a poll every 10 s) is left out.
   Per step: groups/s achieved between the arrival of the first tenth of the groups and the last (the driver's
   steady state), the driver process's CPU in that window (``getrusage``: every thread, Ray Data's executor
   included; Ray's other processes not), of which the main thread, and the share of wall time spent in the loop
   (``from_arrow`` + ``add_group``). A step follows when it achieves ≥ 90% of its target; the ladder doubles N from
   ``--start-cores`` and stops at the first step that does not follow. Saturating groups/s = the most any step
   achieved; parse cores per driver = that × parse CPU s per group. The machine is shared: the load average is
   printed per step, and a driver that does not follow while it uses well under a core is held back by the machine
   (the stand-ins, Ray's processes, other jobs), not by itself; the line "a core of its own" then gives the driver's
   bound from its CPU alone: parse CPU s per group / driver CPU s per group (both measured in this run).
3. Planning. ``source.plan()`` on a local folder of hard links (real listing, real footers: Melee, N links to one
   .slp file; Pokémon, N / 1,000 links to one ``hf-raw`` Parquet file of 1,000 one-row row groups, so N row groups),
   then ``pack_tasks`` at both shard sizes, ``Plan.identity()``, and ``ray.data.from_items`` of the default-size
   tasks (the job's dataset of tasks).

Nothing is asserted about speed; ``tests/benchmarks/test_driver_capacity.py`` records, renames and replays groups as
the quick run does and checks that each published version reconciles and holds exactly the replayed records. Ray's
start waits 30 s for its raylet, which a machine at load 50 does not always give: the start is retried.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import pickle
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

# benchmarks/ is not a package: the checkout's root on the path imports this folder's helpers as ``benchmarks.*``
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipelines import registry, stages  # noqa: E402
from pipelines.job.parse import ParseInputs  # noqa: E402
from pipelines.job.ray_data import configure_data_context  # noqa: E402
from pipelines.job.read import group_input_bytes, read_groups  # noqa: E402
from pipelines.parse_replays import ParseConfig  # noqa: E402
from pipelines.writer.files import PARQUET_OPTIONS  # noqa: E402
from pipelines.writer.naming import VersionSpec  # noqa: E402
from pipelines.writer.publish import (  # noqa: E402
    Moved,
    PublishResult,
    VersionPublisher,
    WrittenKeys,
    group_tables,
    group_tables_reference,
)
from pipelines.writer.wire import INDEX_COLUMN, GroupResult, task_rows  # noqa: E402
from shards_schema.manifest import FileEntry  # noqa: E402

SCHEMAS = {"pokemon": "hf-raw", "melee": "slp"}
"""schema → the source whose real inputs are recorded."""
DAMAGED_EVERY = 97
"""One input in this many is damaged (quarantined or filtered), so the records carry quarantine rows."""
FOLLOWS = 0.9
"""A step follows its target rate when it achieves at least this share of it."""


# ---------------------------------------------------------------------------- inputs
def make_inputs(schema: str, num_inputs: int, folder: Path, damaged_every: int = DAMAGED_EVERY,
                first: int = 0) -> list[str]:
    """Real inputs ``first`` to ``first + num_inputs`` of ``schema`` in ``folder`` (the job's ``--input``; call again
    to add more), one in ``damaged_every`` damaged; the formats to ask for."""
    folder.mkdir(parents=True, exist_ok=True)
    numbers = range(first, first + num_inputs)
    if schema == "melee":
        from pipelines.melee.archives import synthetic_game

        for i in numbers:
            data = b"\x00 not a Slippi replay" if i % damaged_every == damaged_every - 1 else synthetic_game(i, 7)
            (folder / f"game-{i:06d}.slp").write_bytes(data)
        return []
    from benchmarks.pokemon_scale import base_battles

    battles = base_battles()
    rows = []
    for i in numbers:
        b = battles[i % len(battles)]
        log = b["log"].split("\n", 1)[0] if i % damaged_every == damaged_every - 1 else b["log"]
        rows.append({"id": f"{b['id']}-r{i}", "format": b["format"], "players": b["players"], "log": log,
                     "uploadtime": b["uploadtime"], "formatid": b["formatid"], "rating": b["rating"]})
    per_file = 10_000
    for start in range(0, len(rows), per_file):
        pq.write_table(pa.Table.from_pylist(rows[start:start + per_file]),
                       folder / f"part-{first + start:08d}.parquet", row_group_size=64, compression="zstd")
    return sorted({b["formatid"] for b in battles})


def inputs_for_full_groups(schema: str, folder: Path, shard_size_mb: float, full_groups: int, *, start: int,
                           more: int, most: int) -> tuple[list[str], int]:
    """Make inputs in ``folder`` (``start`` of them, then ``more`` at a time, at most ``most``) until the job's plan
    has read tasks of at least a group's bytes for ``full_groups`` groups: how read tasks are cut (``pack_tasks``) is
    the job's, so how many inputs hold a full group is found, not assumed. The formats and the inputs made."""
    made, formats = start, make_inputs(schema, start, folder)
    while True:
        cfg = job_config(schema, folder, formats, shard_size_mb, "unused")
        source = cfg.make_source()
        budget = group_input_bytes(cfg.shard_size_mb, source)
        tasks = stages.pack_tasks(source.plan().items, budget)
        # a task's full groups: at least its planned bytes // budget (its payload is at least its planned bytes for
        # these sources: files as listed, row groups compressed)
        full = sum(int(sum(stages.planned_bytes(i, budget) for i in task) // budget) for task in tasks)
        if full >= full_groups or made >= most:
            return formats, made
        make_inputs(schema, more, folder, first=made)
        made += more


def job_config(schema: str, input_dir: Path, formats: list[str], shard_size_mb: float, out: str) -> ParseConfig:
    return ParseConfig(source=SCHEMAS[schema], input=str(input_dir), out=out, formats=formats,
                       shard_size_mb=shard_size_mb)


# ---------------------------------------------------------------------------- 1. recording
@dataclass
class Recording:
    """Full groups of a real job, as its parse actors returned them, with the CPU each took."""

    schema: str
    source: str
    shard_size_mb: float
    rows: list[pa.Table]
    parse_cpu_s: list[float]
    read_cpu_s: list[float]
    counts: list[dict] = field(default_factory=list)
    payload_bytes: list[int] = field(default_factory=list)
    tiled_from: float | None = None  # the recorded shard size its groups are made of (``tile``), or None

    @property
    def parse_cpu_s_per_group(self) -> float:
        return sum(self.parse_cpu_s) / len(self.parse_cpu_s)

    @property
    def read_cpu_s_per_group(self) -> float:
        return sum(self.read_cpu_s) / len(self.read_cpu_s)

    def totals(self, groups: int) -> dict:
        """Counts of ``groups`` replayed groups (the recorded ones in turn)."""
        out = {"inputs": 0, "written": 0, "filtered": 0, "quarantined": 0, "rows": 0, "trajectories": 0}
        for k in range(groups):
            for key, n in self.counts[k % len(self.counts)].items():
                out[key] += n
        return out


def group_counts(row: pa.Table) -> dict:
    [result] = GroupResult.from_arrow(row)
    status = [r.status for r in result.records]
    return {"inputs": len(status), "written": status.count("written"), "filtered": status.count("filtered"),
            "quarantined": status.count("quarantined"), "rows": sum(r.num_rows for r in result.records),
            "trajectories": sum(len(r.index_rows or ()) for r in result.records if r.status == "written")}


def input_bytes(read_row: dict) -> int:
    """An input's bytes in a read task's group: its payload's, or, for a work item the parse actor reads itself
    (``Source.read_by_parser``: a loose ``.slp`` file), its listed size."""
    if read_row.get("item_json"):
        return json.loads(read_row["item_json"])["bytes"]
    return len(read_row["payload"] or b"")


def record(schema: str, input_dir: Path, formats: list[str], shard_size_mb: float, groups: int, out: Path, *,
           full_only: bool = True) -> Recording:
    """``groups`` groups of the job on ``input_dir`` at ``shard_size_mb``, read and parsed in this process by the
    job's code; shards go to ``out``. ``full_only``: full groups only (a read task's last, smaller group is read but
    not parsed); else the first groups whatever their size."""
    cfg = job_config(schema, input_dir, formats, shard_size_mb, str(out))
    source = cfg.make_source()
    budget = group_input_bytes(cfg.shard_size_mb, source)
    tasks = stages.pack_tasks(source.plan().items, budget)
    parse = ParseInputs(source, str(out / "version"), shard_size_mb)
    rec = Recording(schema, cfg.source, shard_size_mb, [], [], [])
    for number, task in enumerate(tasks):
        found = read_groups(pa.table({"task": [number], "items": [json.dumps(task)]}), source=source,
                            group_bytes=budget)
        while len(rec.rows) < groups:
            start = time.process_time()
            row = next(found, None)
            read_s = time.process_time() - start
            if row is None:
                break
            payload = sum(map(input_bytes, row.column("inputs")[0].as_py()))
            if full_only and payload < budget:
                continue  # not parsed
            start = time.process_time()
            result = parse(row)
            rec.parse_cpu_s.append(time.process_time() - start)
            rec.payload_bytes.append(payload)
            rec.rows.append(result)
            rec.read_cpu_s.append(read_s)
            rec.counts.append(group_counts(result))
        if len(rec.rows) >= groups:
            break
    if not rec.rows:
        raise ValueError(f"no {'full ' if full_only else ''}group in {input_dir} at {shard_size_mb:g} MiB shards")
    return rec


def tile(rec: Recording, shard_size_mb: float) -> Recording:
    """Groups of a larger shard size made of recorded groups: each holds the inputs a full group at
    ``shard_size_mb`` holds (the group's input bytes / the recorded inputs' mean payload bytes, in whole recorded
    groups), as consecutive recorded groups renamed apart, their shard files merged into one (the file a group of
    that size writes; rows and bytes summed, row starts moved on). Records, index rows and quarantine rows stay the
    recorded ones; parse and read CPU are the pieces' sums. Parsing a 128 MiB group for real takes ~2.5 CPU min per
    Pokémon group: on a loaded 2-core machine, too long for one run."""
    cfg = job_config(rec.schema, Path("."), [], shard_size_mb, "unused")
    budget = group_input_bytes(cfg.shard_size_mb, cfg.make_source())
    inputs = sum(c["inputs"] for c in rec.counts)
    per_input = sum(rec.payload_bytes) / inputs
    pieces = max(1, round(budget / per_input / (inputs / len(rec.counts))))
    out = Recording(rec.schema, rec.source, shard_size_mb, [], [], [], tiled_from=rec.shard_size_mb)
    for j in range(len(rec.rows)):
        name = f"{90_000 + j:05d}-000"
        records, placements, rows, files_bytes = [], [], 0, 0
        order = [(j + i) % len(rec.rows) for i in range(pieces)]
        for i, k in enumerate(order):
            [piece] = GroupResult.from_arrow(renamed(rec.rows[k], name, f"~p{i}"))
            offset, at = {}, rows
            for f in piece.files:
                offset[f.path] = at
                at += f.rows
                files_bytes += f.bytes
            records += piece.records
            placements += [dataclasses.replace(p, file=f"part-{name}-00", row_start=offset[p.file] + p.row_start)
                           if p else None for p in piece.placements]
            rows = at
        sha = hashlib.sha256(name.encode()).hexdigest()
        path = f"part-{name}-00-{sha[:12]}.parquet"
        placements = [dataclasses.replace(p, file=path) if p else None for p in placements]
        row = GroupResult(name, records, placements, [FileEntry(path=path, rows=rows, bytes=files_bytes,
                                                                sha256=sha)]).to_arrow()
        out.rows.append(row)
        out.parse_cpu_s.append(sum(rec.parse_cpu_s[k] for k in order))
        out.read_cpu_s.append(sum(rec.read_cpu_s[k] for k in order))
        out.payload_bytes.append(sum(rec.payload_bytes[k] for k in order))
        out.counts.append(group_counts(row))
    return out


# ---------------------------------------------------------------------------- 2. replay
def renamed(row: pa.Table, group: str, suffix: str) -> pa.Table:
    """A recorded group's row (``GroupResult.to_arrow``) as group ``group`` of new inputs: ``suffix`` appended to
    every input id and dedupe key, the group's name in its file names replaced; its index rows as recorded (the
    driver adds input ids and files to them). Arrow compute only."""
    old = row.column("group")[0].as_py()

    def files_renamed(paths: pa.Array) -> pa.Array:
        return pc.replace_substring(paths, pattern=f"part-{old}-", replacement=f"part-{group}-")

    records = row.column("records").combine_chunks()
    values = records.values.slice(records.offsets[0].as_py(), len(records.values))
    columns = dict(zip([f.name for f in values.type], values.flatten(), strict=True))
    for name in ("input_id", "dedupe_key"):
        columns[name] = pc.binary_join_element_wise(columns[name], pa.scalar(suffix), "")
    placement = columns["placement"]
    parts = dict(zip([f.name for f in placement.type], placement.flatten(), strict=True))
    parts["file"] = files_renamed(parts["file"])
    columns["placement"] = pa.StructArray.from_arrays(list(parts.values()), fields=list(placement.type),
                                                      mask=placement.is_null())
    structs = pa.StructArray.from_arrays(list(columns.values()), fields=list(values.type))
    files = row.column("files").combine_chunks()
    file_values = files.values
    file_columns = dict(zip([f.name for f in file_values.type], file_values.flatten(), strict=True))
    file_columns["path"] = files_renamed(file_columns["path"])
    file_structs = pa.StructArray.from_arrays(list(file_columns.values()), fields=list(file_values.type))
    return pa.Table.from_arrays(
        [pa.array([group]), pa.ListArray.from_arrays(pa.array([0, len(structs)], pa.int32()), structs),
         pa.ListArray.from_arrays(pa.array([0, len(file_structs)], pa.int32()), file_structs),
         row.column(INDEX_COLUMN)],  # the index rows hold no input id or file name: the driver adds them
        schema=row.schema)


def stand_in_read(tasks: pa.Table):
    """The read stage: one small row per group (its name and which replay it is)."""
    for task in tasks.column("task").to_pylist():
        yield pa.table({"group": [f"{task:05d}-000"], "replay": [task]})


class StandInParse:
    """A parse actor that parses nothing: it returns recorded group rows, renamed, at ``groups_per_s`` (None: as
    fast as it can)."""

    def __init__(self, rows: list[pa.Table], groups_per_s: float | None):
        self.rows = [r.combine_chunks() for r in rows]
        self.period_s = 1.0 / groups_per_s if groups_per_s else 0.0
        self.next_s: float | None = None

    def __call__(self, batch: pa.Table) -> pa.Table:
        out = []
        for group, replay in zip(batch.column("group").to_pylist(), batch.column("replay").to_pylist(), strict=True):
            now = time.monotonic()
            if self.next_s is None:
                self.next_s = now
            if self.next_s > now:
                time.sleep(self.next_s - now)
            self.next_s = max(self.next_s, time.monotonic()) + self.period_s
            out.append(renamed(self.rows[replay % len(self.rows)], group, f"~{replay}"))
        return pa.concat_tables(out)


def _no_rewrite(*args):
    raise AssertionError("a replayed group repeated an earlier group's dedupe key: the stand-ins rename every key")


def _cpu_s(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Step:
    """One replay at one target rate."""

    cores: float | None
    target_groups_s: float | None
    groups: int
    achieved_groups_s: float
    driver_cpu: float  # CPU s of the driver process per wall s, in the steady window
    main_cpu: float  # of which the main thread
    loop_share: float  # wall share in from_arrow + add_group
    driver_cpu_s_per_group: float
    publish_s: float
    wall_s: float
    load: float
    counts: dict
    expected: dict
    published: PublishResult

    @property
    def follows(self) -> bool:
        return self.target_groups_s is None or self.achieved_groups_s >= FOLLOWS * self.target_groups_s


def replay(rec: Recording, *, cores: float | None, groups: int, out_root: str, num_actors: int = 4,
           actor_cpus: float = 1.0, read_cpus: float = 0.5, profile: Path | None = None) -> Step:
    """Replay ``groups`` groups of ``rec`` through the job's pipeline shape and publisher at the rate ``cores``
    parse cores would make them (None: as fast as the stand-ins go); publish and check the counts."""
    import ray
    import ray.data

    configure_data_context(ray.data.DataContext.get_current())  # the job's settings
    cfg = job_config(rec.schema, Path("."), [], rec.shard_size_mb, out_root)
    parser = cfg.parser
    target = cores / rec.parse_cpu_s_per_group if cores else None
    spec = VersionSpec(out_root=out_root, dataset=parser.schema_name(), code=parser.versions, source=rec.source,
                       source_revision=None, config={"benchmark": "driver_capacity", "cores": cores, "groups": groups,
                                                     "shard_size_mb": rec.shard_size_mb},
                       planned_inputs=f"stand-in replay of {groups} groups")
    ds = ray.data.from_items([{"task": i} for i in range(groups)], override_num_blocks=groups)
    # two read tasks at a time: they only name groups, and each task slot is a worker process (with the default,
    # Ray Data ran one per logical CPU: ~50 processes on the 2-core machine)
    ds = ds.map_batches(stand_in_read, batch_size=1, batch_format="pyarrow", num_cpus=read_cpus,
                        compute=ray.data.TaskPoolStrategy(size=2))
    ds = ds.map_batches(StandInParse, batch_format="pyarrow", batch_size=1,
                        compute=ray.data.ActorPoolStrategy(size=num_actors), num_cpus=actor_cpus,
                        fn_constructor_kwargs={"rows": rec.rows,
                                               "groups_per_s": target / num_actors if target else None})
    publisher = VersionPublisher(spec, schema=parser.schema, index_schema=parser.index_schema,
                                 parquet_options=parser.parquet_options, rewrite=_no_rewrite,
                                 license=registry.source_license(rec.source), keep_tasks=True)
    arrivals = []  # (monotonic s, groups so far, process CPU s, main-thread CPU s, loop s so far)
    loop_s, n, spy = 0.0, 0, None
    start = time.monotonic()
    load0 = os.getloadavg()[0]
    try:
        for block in ds.iter_batches(batch_format="pyarrow", batch_size=None):
            t0 = time.monotonic()
            if spy is None and profile is not None:
                spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--pid",
                                        str(os.getpid()), "--format", "raw", "--output", str(profile), "--rate",
                                        "200", "--threads", "--nonblocking"], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
            for result in GroupResult.from_arrow(block):
                publisher.add_group(result)
                n += 1
            t1 = time.monotonic()
            loop_s += t1 - t0
            arrivals.append((t1, n, _cpu_s(resource.RUSAGE_SELF), _cpu_s(resource.RUSAGE_THREAD), loop_s))
        if spy is not None:
            spy.send_signal(2)  # SIGINT: py-spy writes its samples and exits
            spy.wait(timeout=60)
        t0 = time.monotonic()
        published = publisher.publish()
        publish_s = time.monotonic() - t0
    except BaseException:
        publisher.abort()
        raise
    wall_s = time.monotonic() - start
    first = next(a for a in arrivals if a[1] >= max(1, groups // 10))
    last = arrivals[-1]
    span = max(last[0] - first[0], 1e-9)
    window_groups = last[1] - first[1]
    c = published.manifest.counts
    counts = {"inputs": c.inputs, "written": c.written, "filtered": sum(c.filtered.values()),
              "quarantined": sum(c.quarantined.values()), "rows": c.rows, "trajectories": c.trajectories}
    return Step(cores=cores, target_groups_s=target, groups=groups,
                achieved_groups_s=window_groups / span if window_groups else float("nan"),
                driver_cpu=(last[2] - first[2]) / span, main_cpu=(last[3] - first[3]) / span,
                loop_share=(last[4] - first[4]) / span,
                driver_cpu_s_per_group=(last[2] - first[2]) / max(window_groups, 1), publish_s=publish_s,
                wall_s=wall_s, load=(load0 + os.getloadavg()[0]) / 2, counts=counts, expected=rec.totals(groups),
                published=published)


def ladder(rec: Recording, *, start_cores: float, step_s: float, min_groups: int, max_groups: int, out_root: str,
           num_actors: int, actor_cpus: float, read_cpus: float, log=print, profile: Path | None = None,
           max_steps: int = 12) -> list[Step]:
    """Steps at ``start_cores``, twice that, ... until one does not follow (or ``max_steps``)."""
    steps, cores = [], start_cores
    for _ in range(max_steps):
        rate = cores / rec.parse_cpu_s_per_group
        groups = int(min(max(min_groups, math.ceil(rate * step_s)), max_groups))
        step = replay(rec, cores=cores, groups=groups, out_root=f"{out_root}/{len(steps)}", num_actors=num_actors,
                      actor_cpus=actor_cpus, read_cpus=read_cpus)
        if step.counts != step.expected:
            raise AssertionError(f"published counts {step.counts} are not the replayed records' {step.expected}")
        steps.append(step)
        log(step_line(step), flush=True)
        if not step.follows:
            if profile is not None:  # the same step again, under py-spy
                replay(rec, cores=cores, groups=groups, out_root=f"{out_root}/profile", num_actors=num_actors,
                       actor_cpus=actor_cpus, read_cpus=read_cpus, profile=profile)
            break
        cores *= 2
    return steps


def step_line(s: Step) -> str:
    target = f"{s.cores:>6,.0f} cores = {s.target_groups_s:8.2f} groups/s" if s.cores else "unpaced" + " " * 25
    return (f"    {target} → {s.achieved_groups_s:8.2f} groups/s ({'follows' if s.follows else 'does not follow'}); "
            f"{s.groups} groups, driver CPU {s.driver_cpu:.2f} core (main thread {s.main_cpu:.2f}, loop busy "
            f"{100 * s.loop_share:.0f}%), {1000 * s.driver_cpu_s_per_group:.1f} ms CPU/group; publish "
            f"{s.publish_s:.2f}s; load {s.load:.1f}; inputs {s.counts['inputs']:,} = {s.counts['written']:,} written "
            f"+ {s.counts['filtered']} filtered + {s.counts['quarantined']} quarantined")


def loop_cost(rec: Recording, *, groups: int, out_root: str, profile: bool = False) -> tuple[float, list[str]]:
    """CPU s per group of the driver loop's own work (``GroupResult.from_arrow`` + ``add_group``) in this process,
    without Ray: what the driver spends per group beside Ray Data's executor and Ray's threads. With ``profile``,
    cProfile's top functions by own time."""
    import cProfile
    import io
    import pstats

    cfg = job_config(rec.schema, Path("."), [], rec.shard_size_mb, out_root)
    parser = cfg.parser
    spec = VersionSpec(out_root=out_root, dataset=parser.schema_name(), code=parser.versions, source=rec.source,
                       source_revision=None, config={"benchmark": "driver_capacity loop"}, planned_inputs="loop")
    publisher = VersionPublisher(spec, schema=parser.schema, index_schema=parser.index_schema,
                                 parquet_options=parser.parquet_options, rewrite=_no_rewrite, keep_tasks=True)
    rows = [renamed(rec.rows[k % len(rec.rows)], f"{k:05d}-000", f"~{k}") for k in range(groups)]
    cpu_s = 0.0
    try:
        for row in rows:
            start = time.process_time()
            for result in GroupResult.from_arrow(row):
                publisher.add_group(result)
            cpu_s += time.process_time() - start
    finally:
        publisher.abort()
    lines = []
    if profile:  # again under cProfile, whose overhead is left out of the time above
        publisher = VersionPublisher(spec, schema=parser.schema, index_schema=parser.index_schema,
                                     parquet_options=parser.parquet_options, rewrite=_no_rewrite, keep_tasks=True)
        prof = cProfile.Profile()
        try:
            prof.enable()
            for row in rows:
                for result in GroupResult.from_arrow(row):
                    publisher.add_group(result)
            prof.disable()
        finally:
            publisher.abort()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(12)
        lines = [line for line in out.getvalue().splitlines() if line.strip()][-13:]
    return cpu_s / groups, lines


def loop_breakdown(rec: Recording) -> dict[str, float]:
    """CPU µs per input of the loop's parts on one (renamed) recorded group, best of 3: the row's columns, the
    dedupe claims, ``group_tables`` (index, quarantine, counts, digest by Arrow kernels), the tasks-file row and the
    Parquet writes of the index, quarantine and tasks rows; and, for comparison, the Python form of the group
    (``records``) and ``group_tables_reference``, the record-by-record loop the driver ran before."""
    row = renamed(rec.rows[0], "00001-000", "~x")
    [group] = GroupResult.from_arrow(row)
    records, index_lists = group.record_columns(), group.index_lists()
    inputs = records.num_rows
    index_schema = job_config(rec.schema, Path("."), [], rec.shard_size_mb, "unused").parser.index_schema
    args = (records, index_lists, {}, Moved({}, {}), index_schema)
    tables, tasks = group_tables(*args), task_rows(group)

    def best_us(fn) -> float:
        times = []
        for _ in range(3):
            start = time.process_time()
            fn()
            times.append(time.process_time() - start)
        return 1e6 * min(times) / inputs

    def claims():
        keys = WrittenKeys()
        written = pc.equal(records.column("status"), "written")
        for key, input_id in zip(records.column("dedupe_key").filter(written).to_pylist(),
                                 records.column("input_id").filter(written).to_pylist(), strict=True):
            if key is not None:
                keys.claim(key, input_id)

    def written(table: pa.Table) -> None:
        with pq.ParquetWriter(pa.BufferOutputStream(), table.schema, **PARQUET_OPTIONS) as out:
            out.write_table(table)

    return {"from_arrow": best_us(lambda: GroupResult.from_arrow(row)),
            "the row's columns (record_columns, index_lists)": best_us(
                lambda: (group.record_columns(), group.index_lists())),
            "WrittenKeys.claim": best_us(claims), "group_tables": best_us(lambda: group_tables(*args)),
            "task_rows": best_us(lambda: task_rows(group)),
            "Parquet writes (index, quarantine, tasks)": best_us(
                lambda: [written(t) for t in (tables.index, tables.quarantine, tasks)]),
            "before: records in Python": best_us(lambda: GroupResult.from_arrow(row)[0].records),
            "before: group_tables_reference": best_us(lambda: group_tables_reference(*args))}


# ---------------------------------------------------------------------------- 3. planning
def planning_inputs(schema: str, items: int, folder: Path, work: Path) -> list[str]:
    """A folder whose listing plans ``items`` work items: hard links to one real input file."""
    folder.mkdir(parents=True)
    if schema == "melee":
        from pipelines.melee.archives import synthetic_game

        game = synthetic_game(0, 7)
        for i in range(items):
            sub = folder / f"{i // 10_000:04d}"
            if i % 10_000 == 0:
                sub.mkdir()
            target = work / f"one-{i // 50_000}.slp"  # a file takes at most 65,000 links (ext4)
            if not target.exists():
                target.write_bytes(game)
            os.link(target, sub / f"game-{i:07d}.slp")
        return []
    per_file = 1_000
    target = work / "one.parquet"
    if not target.exists():
        rows = [{"id": f"gen9randombattle-{i}", "format": "gen9randombattle", "players": ["a", "b"],
                 "log": "|", "uploadtime": 1_700_000_000, "formatid": "gen9randombattle", "rating": None}
                for i in range(per_file)]
        pq.write_table(pa.Table.from_pylist(rows), target, row_group_size=1, compression="zstd")
    for i in range(math.ceil(items / per_file)):
        os.link(target, folder / f"part-{i:06d}.parquet")
    return ["gen9randombattle"]


def time_planning(schema: str, items: int, shard_sizes_mb: list[float], work: Path) -> dict:
    import ray.data

    folder = work / f"plan-{schema}-{items}"
    start = time.monotonic()
    formats = planning_inputs(schema, items, folder, work)
    made_s = time.monotonic() - start
    out = {"schema": schema, "made_s": made_s}
    for i, size in enumerate(shard_sizes_mb):
        cfg = job_config(schema, folder, formats, size, str(work / "unused-out"))
        source = cfg.make_source()
        if i == 0:
            t0 = time.perf_counter()
            plan = source.plan()
            out["plan_s"] = time.perf_counter() - t0
            out["items"] = len(plan.items)
            t0 = time.perf_counter()
            plan.identity()
            out["identity_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        tasks = stages.pack_tasks(plan.items, group_input_bytes(cfg.shard_size_mb, source))
        out[f"pack_s@{size:g}"] = time.perf_counter() - t0
        out[f"tasks@{size:g}"] = len(tasks)
        if i == 0:
            t0 = time.perf_counter()
            ray.data.from_items([{"task": i, "items": json.dumps(t)} for i, t in enumerate(tasks)],
                                override_num_blocks=max(1, len(tasks)))
            out["from_items_s"] = time.perf_counter() - t0
    shutil.rmtree(folder, ignore_errors=True)
    return out


# ---------------------------------------------------------------------------- main
def profile_summary(raw: Path, top: int = 15) -> list[str]:
    """The functions most often on a stack (inclusive) and most often on top (exclusive) in py-spy's raw output,
    across the driver's threads, as shares of the samples."""
    inclusive, exclusive, total = {}, {}, 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        for f in set(frames[1:]):  # the first is the thread
            inclusive[f] = inclusive.get(f, 0) + n
        exclusive[frames[-1]] = exclusive.get(frames[-1], 0) + n
    lines = [f"    {total} samples; exclusive (on top):"]
    for f, n in sorted(exclusive.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"      {100 * n / total:5.1f}%  {f}")
    lines.append("    inclusive (anywhere on the stack):")
    for f, n in sorted(inclusive.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"      {100 * n / total:5.1f}%  {f}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny shards, few inputs, a short ladder")
    parser.add_argument("--schemas", nargs="+", default=list(SCHEMAS), choices=list(SCHEMAS))
    parser.add_argument("--shard-sizes-mb", type=float, nargs="+", default=None,
                        help="shard sizes to replay; the first is the default size (128 2; quick 1 0.25)")
    parser.add_argument("--record-mb", type=float, default=None, help="shard size the real groups are recorded at "
                        "(2; quick 0.25); larger sizes are tiled of them")
    parser.add_argument("--start-cores", type=float, default=None, help="first step of the ladder (100; quick 200)")
    parser.add_argument("--step-s", type=float, default=None, help="seconds of groups per step at its target (10; "
                        "quick 2)")
    parser.add_argument("--logical-cpus", type=int, default=32, help="CPUs the local Ray pretends to have")
    parser.add_argument("--num-actors", type=int, default=4, help="stand-in parse actors")
    parser.add_argument("--plan-items", type=int, nargs="+", default=None,
                        help="work items to plan (100000 1000000; quick 1000 10000)")
    parser.add_argument("--parts", nargs="+", default=["replay", "planning"], choices=["replay", "planning"],
                        help="what to run: the recordings and their replays, the planning times, or both")
    parser.add_argument("--profile", action="store_true", help="py-spy the driver at each ladder's first step that "
                        "does not follow, and print where its samples are")
    parser.add_argument("--work-dir", type=Path, default=None, help="where inputs and outputs go (default: temp)")
    args = parser.parse_args()
    quick = args.quick
    sizes = args.shard_sizes_mb or ([1.0, 0.25] if quick else [128.0, 2.0])
    start_cores = args.start_cores or (200.0 if quick else 100.0)
    step_s = args.step_s or (2.0 if quick else 10.0)
    plan_items = args.plan_items or ([1_000, 10_000] if quick else [100_000, 1_000_000])
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="rf-driver-capacity-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"driver_capacity.py, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, load "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; commit {_commit()}; local Ray of {args.logical_cpus} "
          f"logical CPUs, {args.num_actors} stand-in actors", flush=True)
    started = time.monotonic()
    recordings: dict[tuple[str, float], tuple[Recording, float]] = {}
    record_mb = args.record_mb or (0.25 if quick else 2.0)
    # 1. recordings, before Ray starts (its start is what a loaded machine times out)
    for schema in args.schemas if "replay" in args.parts else []:
        print(f"\n{schema} ({SCHEMAS[schema]}), recorded at {record_mb:g} MiB shards", flush=True)
        saved = work / f"rec-{schema}-{record_mb:g}.pickle"
        t0 = time.monotonic()
        want = 3 if quick else 6
        if saved.exists():  # a --work-dir of an earlier run: its recording again
            recorded = pickle.loads(saved.read_bytes())
        else:
            per_group = {"melee": 640, "pokemon": 9_000}[schema] * record_mb / 128  # about
            formats, made = inputs_for_full_groups(
                schema, work / f"in-{schema}", record_mb, want, start=max(20, int(want * per_group * 1.5)),
                more=max(10, int(per_group)), most=max(200, int(want * per_group * 8)))
            print(f"  {made:,} inputs made in {time.monotonic() - t0:.0f}s", flush=True)
            t0 = time.monotonic()
            recorded = record(schema, work / f"in-{schema}", formats, record_mb, want, work / f"rec-{schema}")
            saved.write_bytes(pickle.dumps(recorded))
        print(f"  recorded {len(recorded.rows)} full groups in {time.monotonic() - t0:.0f}s")
        for size in sizes:
            rec = recorded if size == record_mb else tile(recorded, size)
            c = rec.counts[0]
            made_of = f"tiled of {rec.tiled_from:g} MiB groups" if rec.tiled_from else "recorded"
            print(f"  {size:g} MiB shards ({made_of}): a group: {c['inputs']:,} inputs ({c['written']:,} written, "
                  f"{c['filtered']} filtered, {c['quarantined']} quarantined), {c['rows']:,} rows, "
                  f"{c['trajectories']:,} index rows, "
                  f"{sum(r.nbytes for r in rec.rows) / len(rec.rows) / 1024:,.0f} KiB of records; parse CPU "
                  f"{rec.parse_cpu_s_per_group:.2f} s/group (reads {rec.read_cpu_s_per_group:.2f} s more)")
            loop_s, hot = loop_cost(rec, groups=len(rec.rows) if rec.tiled_from else 40,
                                    out_root=str(work / f"loop-{schema}-{size:g}"), profile=args.profile)
            print(f"    the loop alone (from_arrow + add_group, in process): {1000 * loop_s:.1f} ms CPU/group "
                  f"→ {rec.parse_cpu_s_per_group / loop_s:,.0f} parse cores per driver core", flush=True)
            if args.profile:
                parts = loop_breakdown(rec)
                print("    its parts, CPU µs per input (best of 3): " + "; ".join(f"{k} {v:.1f}" for k, v in
                                                                             parts.items()))
            if hot:
                print("    cProfile of the loop, by own time:\n      " + "\n      ".join(hot))
            recordings[(schema, size)] = (rec, loop_s)
    start_ray_retrying(args.logical_cpus)
    import ray

    try:
        results = {}
        for (schema, size), (rec, loop_s) in recordings.items():
            if not results:
                print("\nReplays (the ladder; each step publishes a version whose counts are checked)")
            print(f"  {schema}, {size:g} MiB shards", flush=True)
            spy = work / f"spy-{schema}-{size:g}.txt" if args.profile else None
            steps = ladder(rec, start_cores=start_cores, step_s=step_s, min_groups=4 if quick else 6,
                           max_groups=60 if quick else 3_000, out_root=str(work / f"out-{schema}-{size:g}"),
                           num_actors=args.num_actors, actor_cpus=1.0, read_cpus=0.5, profile=spy)
            results[(schema, size)] = (rec, steps, loop_s)
            if spy is not None and spy.exists():
                print(f"  py-spy of the driver at {steps[-1].cores:,.0f} cores:")
                print("\n".join(profile_summary(spy)))
        print_results(results)
        if "planning" in args.parts:
            print_planning(args.schemas, plan_items, sizes, work)
        print(f"\ntotal {time.monotonic() - started:.0f}s; load {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    finally:
        ray.shutdown()
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)


def print_results(results: dict) -> None:
    """The cores table of the ladders."""
    if not results:
        return
    print("\nParse cores per driver (saturating groups/s × parse CPU s per group; 'a core of its own' = parse CPU "
          "s per group / the driver's CPU s per group at the busiest step that followed, or the last step)")
    print("| schema | shard size | inputs per group | parse CPU s per group | saturating groups/s | parse cores "
          "per driver | driver CPU ms per group | a core of its own | the loop alone | last step |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (schema, size), (rec, steps, loop_s) in results.items():
        best = max(steps, key=lambda s: s.achieved_groups_s)
        following = [s for s in steps if s.follows]
        ref = following[-1] if following else steps[-1]
        capped = "≥ " if all(s.follows for s in steps) else ""
        own = rec.parse_cpu_s_per_group / ref.driver_cpu_s_per_group
        last = steps[-1]
        cores = best.achieved_groups_s * rec.parse_cpu_s_per_group
        print(f"| {schema} | {size:g} MiB | {rec.counts[0]['inputs']:,} | {rec.parse_cpu_s_per_group:.2f} | "
              f"{capped}{best.achieved_groups_s:.2f} | **{capped}{cores:,.0f}** | "
              f"{1000 * ref.driver_cpu_s_per_group:.1f} | {own:,.0f} | {rec.parse_cpu_s_per_group / loop_s:,.0f} | "
              f"{last.cores:,.0f} cores: "
              f"{last.achieved_groups_s:.2f} of {last.target_groups_s:.2f} groups/s, driver {last.driver_cpu:.2f} "
              "core |")


def print_planning(schemas: list[str], plan_items: list[int], sizes: list[float], work: Path) -> None:
    print("\nPlanning on the driver (plan(): listing + work items; pack_tasks at each shard size; Plan.identity; "
          "ray.data.from_items of the default size's tasks)")
    print("| schema | work items | plan() | pack_tasks | tasks | identity | from_items |")
    print("|---|---|---|---|---|---|---|")
    for items in plan_items:
        for schema in schemas:
            p = time_planning(schema, items, sizes, work)
            pack = " / ".join(f"{p[f'pack_s@{s:g}']:.2f}s" for s in sizes)
            tasks = " / ".join(f"{p[f'tasks@{s:g}']:,}" for s in sizes)
            print(f"| {schema} | {p['items']:,} | {p['plan_s']:.2f}s | {pack} | {tasks} | {p['identity_s']:.2f}s | "
                  f"{p['from_items_s']:.2f}s |", flush=True)


def start_ray_retrying(num_cpus: int, attempts: int = 5) -> None:
    """``start_ray``, again after a start that timed out (Ray waits 30 s for its raylet and its dashboard, which a
    machine at load 50 does not always give): the failed start's processes (this process's children) are ended by
    PID first."""
    import psutil

    from pipelines.ray_start import start_ray

    for attempt in range(1, attempts + 1):
        try:
            start_ray(num_cpus=num_cpus, log_to_driver=False)
            return
        except Exception as err:  # noqa: BLE001 - Ray raises a bare Exception for a start that timed out
            # a bare Exception is Ray's for a raylet or dashboard that did not start in time (seen at load 50-80)
            if type(err) is not Exception or attempt == attempts:
                raise
            print(f"[ray] start {attempt} timed out (load {os.getloadavg()[0]:.0f}); again", flush=True)
            for child in psutil.Process().children(recursive=True):
                try:
                    child.kill()
                except psutil.NoSuchProcess:
                    pass
            time.sleep(5)


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


if __name__ == "__main__":
    main()

"""Where the parse job's time goes: the same inputs through (a) the bare parse + Arrow table + Parquet encode, one
process per core, and (b) the Ray job (``pipelines/parse_replays.py`` ``run()``) on the same 2 cores, alternated in
one run; the job's core-seconds broken down (parse actors by phase, read tasks, driver, Ray, idle, other work).

    python benchmarks/job_overhead.py                      # Pokémon (hf-raw) and Melee (slp), 2 repetitions
    python benchmarks/job_overhead.py --quick              # smoke run: small inputs and 8 MiB shards, 1 repetition
    python benchmarks/job_overhead.py --schemas pokemon --repeat 3 --variants as-is whole-groups

Inputs (the shard size is the job's default, 128 MiB, unless ``--shard-size-mb``):
- Pokémon: the 400 spectator logs of ``../shared/data/pokemon/bench_replays`` replicated under new battle ids into an
  ``hf-raw`` Parquet table (``benchmarks/pokemon_scale.py``'s ``write_table``; row groups of 64 battles), sized by
  default to two read groups of 128 MiB shards (one per parse actor): ~16,000 battles, ~32,000 trajectories.
- Melee: synthetic 8,000-frame games (``pipelines.melee.synthetic``, the length of a ranked game, ~2.8 MB each;
  seeds 0.., so no game is another's duplicate) as ``.slp`` files read with ``--source slp --input DIR``, by default
  four read groups (a Melee group is 512 MiB of .slp, ``MAX_GROUP_INPUT_BYTES``). Made once and kept under
  ``.cache/job_overhead/`` (git-ignored; ~0.17 CPU s a game).

(a) bare: two processes at once (one per core, at the parse actors' niceness: ``BARE_NICE``), each with half of the
work items, read before the clock starts; on
its inputs in order each runs the source's ``Parser.parse``, builds Arrow tables of ``--inputs-per-batch`` inputs
(``Parser.table``; Melee's parser returns tables, concatenated) and encodes Parquet shards of the shard size with the
writer's ``encode_parquet`` and its size rule (``GroupWriter``: first flush at 4× the target in Arrow bytes, then the
learned ratio), gc paused while parsing as the job's actors do. Nothing is written to a store.
(b) job: ``run(ParseConfig(...))`` in a fresh process with a local 2-CPU Ray (started before the clock), the job's
defaults (2 parse actors of 0.5 CPU, read tasks of 0.25), ``--input`` and ``--out`` on local disk. Variants
(``--variants``) change one thing each, by a subclass or wrapper set into ``pipelines.parse_replays`` in the job's
process only; no project file is edited:
- ``as-is``: the code as it is (instrumented only);
- ``whole-groups``: each group parsed in one ``parse_batch`` and one Arrow table instead of
  ``INPUTS_PER_PARSE_BATCH`` (16) inputs at a time (the constant raised in the job's processes). The published
  versions' file hashes are compared with ``as-is``'s: Melee's shards are the same bytes; Pokémon's hold the same
  rows and index rows, but their boundaries can move by an input (the writer sizes shards by ``Table.nbytes`` of
  each input's slice, whose validity and boolean bitmaps round by the slice's bit offset in the table it was cut
  from), which is why the batch size is part of the shard layout.

Rates: units (Pokémon trajectories, Melee frames) per core: "wall" = units / (wall seconds × 2 cores), both arms on
the same 2 cores at the same load, which is what the job delivers; "CPU" = units / CPU seconds of every process of the
arm (bare: the two workers' CPU while working; job: the driver and every process of its Ray instance, sampled by
this script from ``/proc`` every 0.25 s, Ray's start-up excluded), which leaves out other work on the machine. The
machine is shared (a training run takes ~1 core at times): the load average and the CPU the rest of the machine used
during each measurement are printed, arms alternate (order rotated every repetition), and only ratios within a run
are compared.

Breakdown of (b), in core-seconds of the 2 × wall the job had (the ledger adds up to it):
- parse actors, timed inside the actor (the main thread's CPU, ``time.thread_time``): ``parse`` (``Parser.parse``:
  JSON or peppi decode, state tracking, rows), ``table`` (``ParseInputs._to_table``: Arrow table, observation
  columns), ``encode`` (``encode_parquet``), ``write`` (``put_named``: sha256 and the file write), ``writer`` (the
  rest of ``GroupWriter.add_batch`` / ``close``: slicing, casts, index rows, unknown words), ``inputs and records``
  (the rest of ``parse_batch``: payloads to Python, sha256 of each input, its record), ``other`` (the rest of a call:
  the group's decode, ``GroupWriter`` set-up, the result row);
- parse actors' other threads during their calls (the reads of deferred work items, ``Source.read_by_parser``: loose
  ``.slp`` files; Ray's threads meanwhile);
- parse actors' processes outside their calls (Ray's worker threads: receiving blocks, scheduling, start-up);
- read tasks (their processes; the share inside ``read_groups`` is printed beside it);
- driver (the ``run()`` process: Ray Data's streaming executor, the result loop, the publisher);
- Ray (raylet, GCS, dashboard and agents, Ray Data's own actors, the progress actor, idle workers);
- other work on the machine (system-wide busy CPU minus this job's);
- idle: what is left, cores nobody used. Per actor, the idle time is also split into before its first group
  (start-up, waiting for the first read), between groups, and after its last group (the tail).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import resource
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.compute as pc

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: the checkout's root, so the Ray workers import this module too
    sys.path.insert(0, str(REPO))

import pipelines.job.parse as parse_module  # noqa: E402 - after the path above
import pipelines.job.ray_data as job_module  # noqa: E402
import pipelines.writer.groups as writer_module  # noqa: E402 - GroupWriter's module: its encode and put are timed
from pipelines import stages  # noqa: E402
from pipelines.job.parse import ParseInputs  # noqa: E402
from pipelines.job.read import read_groups  # noqa: E402
from pipelines.writer.groups import GroupWriter  # noqa: E402

CACHE = REPO / ".cache" / "job_overhead"
CORES = 2
RESULT_PREFIX = "JOB_OVERHEAD_RESULT "
LOG_DIR_VAR = "JOB_OVERHEAD_LOG_DIR"
WHOLE_GROUPS_VAR = "JOB_OVERHEAD_WHOLE_GROUPS"
VARIANTS = ("as-is", "whole-groups")
UNITS = {"pokemon": "trajectories", "melee": "frames"}
BARE_NICE = 15
"""The bare workers' niceness: Ray's raylet starts every worker (the parse actors, the read tasks) at niceness 15
(``RAY_worker_niceness``), so on a shared machine the job's parse yields to any other work; the bare arm at the same
niceness competes for the cores as the job's actors do."""


# ---------------------------------------------------------------------------- inside the job's Ray workers
class _Clock:
    """Main-thread CPU (``time.thread_time``) and wall per phase, nested phases subtracted from their parent, so the
    phases of a call add up to the call."""

    def __init__(self):
        self.cpu: dict[str, float] = {}
        self.stack: list[list[float]] = []  # per open phase: CPU of its nested phases

    def wrap(self, name: str, fn):
        def timed(*args, **kwargs):
            start = time.thread_time()
            self.stack.append([0.0])
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.thread_time() - start
                nested = self.stack.pop()[0]
                self.cpu[name] = self.cpu.get(name, 0.0) + spent - nested
                if self.stack:
                    self.stack[-1][0] += spent
        return timed

    def take(self) -> dict[str, float]:
        out, self.cpu = self.cpu, {}
        return out


_CLOCK = _Clock()


def _log(kind: str, record: dict) -> None:
    folder = os.environ.get(LOG_DIR_VAR)
    if folder:
        with open(Path(folder) / f"{kind}-{os.getpid()}.jsonl", "a") as fh:
            fh.write(json.dumps(record) + "\n")


def _instrument_writer() -> None:
    """The writer's encode and put, and GroupWriter's methods, timed (in this worker process only)."""
    if getattr(writer_module, "_job_overhead_timed", False):
        return
    writer_module._job_overhead_timed = True
    writer_module.encode_parquet = _CLOCK.wrap("encode", writer_module.encode_parquet)
    writer_module.put_named = _CLOCK.wrap("write", writer_module.put_named)
    GroupWriter.add_batch = _CLOCK.wrap("writer", GroupWriter.add_batch)
    GroupWriter.close = _CLOCK.wrap("writer", GroupWriter.close)


class TimedParseInputs(ParseInputs):
    """The job's parse actor, its phases timed into ``$JOB_OVERHEAD_LOG_DIR/actor-<pid>.jsonl`` (one line a call).
    With ``$JOB_OVERHEAD_WHOLE_GROUPS`` set: the ``whole-groups`` variant (one parse batch per group)."""

    def __init__(self, source: stages.Source, version_uri: str = "", shard_size_mb: float = 128.0, **kwargs):
        born = time.time()
        super().__init__(source, version_uri, shard_size_mb, **kwargs)
        _instrument_writer()
        self.parse_rows = _CLOCK.wrap("inputs and records", self.parse_rows)
        self.parser.parse = _CLOCK.wrap("parse", self.parser.parse)
        self._to_table = _CLOCK.wrap("table", self._to_table)
        if os.environ.get(WHOLE_GROUPS_VAR):  # this actor's process only
            parse_module.INPUTS_PER_PARSE_BATCH = sys.maxsize
        _CLOCK.take()
        _log("actor", {"pid": os.getpid(), "born": born, "ready": time.time()})

    def __call__(self, groups: pa.Table) -> pa.Table:
        start, thread0, process0 = time.time(), time.thread_time(), time.process_time()
        out = super().__call__(groups)
        thread_s = time.thread_time() - thread0
        phases = _CLOCK.take()
        phases["other"] = phases.get("other", 0.0) + thread_s - sum(phases.values())
        _log("actor", {"pid": os.getpid(), "start": start, "end": time.time(), "thread_cpu_s": thread_s,
                       "process_cpu_s": time.process_time() - process0, "phases": phases,
                       "groups": groups.num_rows, "inputs": _inputs_of(groups)})
        return out


def _inputs_of(groups: pa.Table) -> int:
    return sum(len(groups.column("inputs")[i].values) for i in range(groups.num_rows))


def timed_read_groups(tasks: pa.Table, **kwargs):
    """``read_groups``, the CPU and wall spent inside it (not while Ray Data holds a yielded group) logged into
    ``$JOB_OVERHEAD_LOG_DIR/read-<pid>.jsonl``, one line per read task."""
    start, cpu_in, wall_in, groups, nbytes = time.time(), 0.0, 0.0, 0, 0
    inner = read_groups(tasks, **kwargs)
    while True:
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            block = next(inner)
        except StopIteration:
            break
        finally:
            cpu_in += time.thread_time() - c0
            wall_in += time.perf_counter() - t0
        groups += 1
        nbytes += block.nbytes
        yield block
    _log("read", {"pid": os.getpid(), "start": start, "end": time.time(), "cpu_in_s": cpu_in, "wall_in_s": wall_in,
                  "groups": groups, "bytes": nbytes})


# ---------------------------------------------------------------------------- children (fresh processes)
def _config(spec: dict):
    from pipelines.parse_replays import ParseConfig

    return ParseConfig(source=spec["source"], input=spec["input"], out=spec.get("out", "unused"),
                       formats=spec["formats"], shard_size_mb=spec["shard_size_mb"], num_cpus=CORES,
                       progress_every_s=1e9)


def _units(schema: str, table: pa.Table) -> int:
    return pc.count_distinct(table.column("trajectory_id")).as_py() if schema == "pokemon" else table.num_rows


def _child_bare(spec: dict) -> dict:
    """One bare worker: its share of the work items read, then (after the parent's go) parse, tables, shards."""
    cfg = _config(spec)
    source = cfg.make_source()
    items = source.plan().items
    share = items[spec["part"] * len(items) // spec["parts"]:(spec["part"] + 1) * len(items) // spec["parts"]]
    cpu0 = time.process_time()
    rows = [row for item in share for row in source.read(item)]
    read_cpu_s = time.process_time() - cpu0
    parser = source.make_parser()
    os.nice(spec.get("nice", 0))  # the job's parse actors run at Ray's worker niceness (RAY_worker_niceness, 15)
    Path(spec["ready"]).touch()
    while not Path(spec["go"]).exists():
        time.sleep(0.01)
    start, cpu = time.time(), {"parse": 0.0, "table": 0.0, "encode": 0.0}
    per_batch, shard_bytes = spec["inputs_per_batch"], spec["shard_size_mb"] * (1 << 20)
    pending, pending_bytes, ratio, units, shards = [], 0, 0.25, 0, []

    def encode():
        nonlocal pending, pending_bytes, ratio
        c0 = time.process_time()
        table = pa.concat_tables(pending)
        data = writer_module.encode_parquet(table, parser.parquet_options)
        cpu["encode"] += time.process_time() - c0
        ratio = max(len(data) / max(pending_bytes, 1), 1e-3)
        shards.append((table, len(data)))
        pending, pending_bytes = [], 0

    for at in range(0, len(rows), per_batch):
        gc.disable()  # as the job's actors do while parsing
        c0 = time.process_time()
        parsed = []
        for row in rows[at:at + per_batch]:
            sha = hashlib.sha256(row["payload"]).hexdigest()
            result = parser.parse(row["input_id"], row["payload"], sha, {})
            if result.rows is not None and len(result.rows):
                parsed.append(result.rows)
        c1 = time.process_time()
        if parsed:
            table = pa.concat_tables(parsed) if isinstance(parsed[0], pa.Table) else \
                parser.table([r for rows_ in parsed for r in rows_])
            pending.append(table)
            pending_bytes += table.nbytes
        gc.enable()
        cpu["parse"] += c1 - c0
        cpu["table"] += time.process_time() - c1
        if pending_bytes * ratio >= shard_bytes:
            encode()
    if pending:
        encode()
    end = time.time()
    for table, _ in shards:
        units += _units(spec["schema"], table)
    return {"start": start, "end": end, "cpu": cpu, "cpu_s": sum(cpu.values()), "units": units,
            "inputs": len(rows), "read_cpu_s": read_cpu_s, "shards": len(shards),
            "shard_mib": [round(n / (1 << 20), 1) for _, n in shards]}


def _child_job(spec: dict) -> dict:
    from benchmarks import job_overhead as timed  # by its module path: Ray's workers import it from there

    os.environ[LOG_DIR_VAR] = spec["log_dir"]
    if spec["variant"] == "whole-groups":
        os.environ[WHOLE_GROUPS_VAR] = "1"
    cfg = _config(spec)
    job_module.init_ray(cfg)  # before the clock; workers inherit the variables above
    import ray

    job_module.ParseInputs, job_module.read_groups = timed.TimedParseInputs, timed.timed_read_groups
    Path(spec["ready"]).touch()
    while not Path(spec["go"]).exists():
        time.sleep(0.01)
    logs: list[str] = []
    usage0, start = resource.getrusage(resource.RUSAGE_SELF), time.time()
    published = job_module.run(cfg, log=logs.append)
    end, usage1 = time.time(), resource.getrusage(resource.RUSAGE_SELF)
    Path(spec["done"]).touch()
    c = published.manifest.counts
    ray.shutdown()
    return {"start": start, "end": end,
            "driver_cpu_s": usage1.ru_utime + usage1.ru_stime - usage0.ru_utime - usage0.ru_stime,
            "units": c.trajectories if spec["schema"] == "pokemon" else c.rows, "inputs": c.inputs,
            "written": c.written, "shards": len(published.manifest.files),
            "shard_mib": [round(f.bytes / (1 << 20), 1) for f in published.manifest.files],
            "files": sorted(f.sha256 for f in published.manifest.files), "log": logs[:1]}


# ---------------------------------------------------------------------------- parent side
def categorize(cmdline: list[str], pid: int, driver: int) -> str:
    if pid == driver:
        return "driver"
    head = cmdline[0] if cmdline else ""
    if "ParseInputs" in head:
        return "parse actors"
    if "read_groups" in head:
        return "read tasks"
    if head.startswith("ray::IDLE"):
        return "Ray: idle workers"
    if any(name in head for name in ("_StatsActor", "Autoscaling", "ActorLocationTracker", "ReadProgress",
                                     "SplitCoordinator")):
        return "Ray: Ray Data's and the job's small actors"
    return "Ray: raylet, GCS, dashboard, agents"


class Sampler(threading.Thread):
    """CPU seconds of a process tree by category (``categorize``; a process's CPU between two samples goes to the
    category its title had at the later one), and the whole machine's busy CPU, every ``interval_s``."""

    def __init__(self, roots: list[int], driver: int, interval_s: float = 0.25):
        super().__init__(daemon=True)
        self.roots, self.driver, self.interval_s = roots, driver, interval_s
        self.stop = threading.Event()
        self.by_category: dict[str, float] = {}
        self.by_title: dict[str, float] = {}
        self.last: dict[int, float] = {}
        self.window: tuple[float, float] | None = None  # only CPU inside (start, end) wall times counts
        self.machine0 = self.machine1 = None
        self.ours_in_window = 0.0

    def sample(self) -> None:
        now = time.time()
        inside = self.window is not None and self.window[0] <= now
        procs = []
        for root in self.roots:
            try:
                proc = psutil.Process(root)
                procs += [proc, *proc.children(recursive=True)]
            except psutil.Error:
                continue
        for proc in procs:
            try:
                times = proc.cpu_times()
                cmdline = proc.cmdline()
            except psutil.Error:
                continue
            total = times.user + times.system
            delta = total - self.last.get(proc.pid, total if proc.pid not in self.last and not inside else 0.0)
            self.last[proc.pid] = total
            if inside and delta > 0:
                key = categorize(cmdline, proc.pid, self.driver)
                self.by_category[key] = self.by_category.get(key, 0.0) + delta
                title = Path(cmdline[0]).name if cmdline and not cmdline[0].startswith("ray::") else \
                    (cmdline[0] if cmdline else "?")
                if title.startswith("python") and len(cmdline) > 1:  # dashboard.py, log_monitor.py, agents
                    title = Path(next((a for a in cmdline[1:] if a.endswith(".py")), cmdline[1])).name
                self.by_title[title] = self.by_title.get(title, 0.0) + delta

    def begin(self) -> None:
        """Start counting: every process's CPU so far is the baseline."""
        self.sample()
        self.window = (time.time(), float("inf"))
        self.machine0 = psutil.cpu_times()

    def end(self) -> None:
        self.sample()
        self.machine1 = psutil.cpu_times()
        self.stop.set()

    def machine_busy_s(self) -> float:
        def busy(t):
            return t.user + t.nice + t.system + t.irq + t.softirq + t.steal

        return busy(self.machine1) - busy(self.machine0)

    def run(self):
        while not self.stop.wait(self.interval_s):
            self.sample()


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32), PYTHONPATH=str(REPO))
    showdown = REPO / "node_modules" / "pokemon-showdown"
    if showdown.is_dir():
        env.setdefault("REPLAYFORGE_SHOWDOWN_DIR", str(showdown))
    return env


def _spawn(spec: dict, scratch: Path) -> tuple[subprocess.Popen, Path]:
    out = scratch / f"child-{secrets.token_hex(4)}.out"
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)]
    return subprocess.Popen(argv, cwd=scratch, env=base_env(), stdout=out.open("w"), stderr=subprocess.STDOUT), out


def _result(proc: subprocess.Popen, out: Path, timeout_s: float) -> dict:
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    text = out.read_text()
    for line in reversed(text.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):])
    raise RuntimeError(f"child failed (exit {proc.returncode}): " + "\n".join(text.strip().splitlines()[-15:]))


def _wait_for(paths: list[Path], procs: list[subprocess.Popen], timeout_s: float) -> None:
    start = time.monotonic()
    while not all(p.exists() for p in paths):
        if any(p.poll() is not None for p in procs) or time.monotonic() - start > timeout_s:
            return
        time.sleep(0.05)


def measure_bare(spec: dict, scratch: Path, timeout_s: float) -> dict:
    tag = secrets.token_hex(4)
    go = scratch / f"go-{tag}"
    ready = [scratch / f"ready-{tag}-{i}" for i in range(CORES)]
    children = [_spawn({**spec, "kind": "bare", "nice": BARE_NICE, "part": i, "parts": CORES, "ready": str(ready[i]),
                        "go": str(go)}, scratch) for i in range(CORES)]
    procs = [p for p, _ in children]
    _wait_for(ready, procs, timeout_s)
    sampler = Sampler([p.pid for p in procs], driver=-1)
    sampler.begin()
    sampler.start()
    load0 = os.getloadavg()[0]
    go.touch()
    results = [_result(p, out, timeout_s) for p, out in children]
    sampler.end()
    sampler.join()
    start, end = min(r["start"] for r in results), max(r["end"] for r in results)
    wall = end - start
    cpu_s = sum(r["cpu_s"] for r in results)
    units = sum(r["units"] for r in results)
    ours = sum(sampler.by_category.values())
    return {"arm": "bare", "wall_s": wall, "cpu_s": cpu_s, "units": units, "inputs": sum(r["inputs"] for r in results),
            "phases": {k: sum(r["cpu"][k] for r in results) for k in results[0]["cpu"]},
            "read_cpu_s": sum(r["read_cpu_s"] for r in results), "shards": sum(r["shards"] for r in results),
            "shard_mib": [m for r in results for m in r["shard_mib"]],
            "finish_gap_s": abs(results[0]["end"] - results[1]["end"]),
            "load": (load0, os.getloadavg()[0]), "others_cpu_s": max(sampler.machine_busy_s() - ours, 0.0)}


def measure_job(spec: dict, scratch: Path, timeout_s: float) -> dict:
    """The job in a fresh process; once more when its local Ray did not start (a loaded machine: "timed out during
    startup")."""
    try:
        return _measure_job(spec, scratch, timeout_s)
    except RuntimeError as err:
        if "during startup" not in str(err):
            raise
        print("  (Ray did not start on the loaded machine: measured again)", flush=True)
        return _measure_job(spec, scratch, timeout_s)


def _measure_job(spec: dict, scratch: Path, timeout_s: float) -> dict:
    tag = secrets.token_hex(4)
    log_dir = scratch / f"logs-{tag}"
    log_dir.mkdir()
    out_dir = scratch / f"out-{tag}"
    ready, go, done = scratch / f"ready-{tag}", scratch / f"go-{tag}", scratch / f"done-{tag}"
    proc, out = _spawn({**spec, "kind": "job", "out": str(out_dir), "log_dir": str(log_dir), "ready": str(ready),
                        "go": str(go), "done": str(done)}, scratch)
    _wait_for([ready], [proc], timeout_s)
    sampler = Sampler([proc.pid], driver=proc.pid)
    sampler.begin()
    sampler.start()
    load0 = os.getloadavg()[0]
    go.touch()
    _wait_for([done], [proc], timeout_s)
    sampler.end()
    sampler.join()
    load1 = os.getloadavg()[0]
    result = _result(proc, out, timeout_s)
    shutil.rmtree(out_dir, ignore_errors=True)
    wall = result["end"] - result["start"]
    actors = _jsonl(log_dir, "actor")
    reads = _jsonl(log_dir, "read")
    shutil.rmtree(log_dir, ignore_errors=True)
    cats = dict(sampler.by_category)
    cats["driver"] = result["driver_cpu_s"]  # getrusage of the driver over run() exactly
    ours = sum(cats.values())
    phases: dict[str, float] = {}
    calls = [a for a in actors if "start" in a]
    for call in calls:
        for k, v in call["phases"].items():
            phases[k] = phases.get(k, 0.0) + v
    idle = _actor_idle(actors, result["start"], result["end"])
    return {"arm": spec["variant"], "wall_s": wall, "cpu_s": ours, "units": result["units"],
            "inputs": result["inputs"], "written": result["written"], "shards": result["shards"],
            "shard_mib": result["shard_mib"], "files": result["files"], "categories": cats, "phases": phases,
            "titles": dict(sorted(sampler.by_title.items(), key=lambda kv: -kv[1])[:12]),
            "actor_calls": len(calls), "groups": sum(c["groups"] for c in calls),
            "actor_process_cpu_in_calls_s": sum(c["process_cpu_s"] for c in calls),
            "read_tasks": len(reads), "read_cpu_in_s": sum(r["cpu_in_s"] for r in reads),
            "read_wall_in_s": sum(r["wall_in_s"] for r in reads), "idle": idle, "load": (load0, load1),
            "others_cpu_s": max(sampler.machine_busy_s() - sum(sampler.by_category.values()), 0.0)}


def _jsonl(folder: Path, kind: str) -> list[dict]:
    return [json.loads(line) for path in sorted(folder.glob(f"{kind}-*.jsonl"))
            for line in path.read_text().splitlines()]


def _actor_idle(actors: list[dict], start: float, end: float) -> dict:
    """Per parse actor: seconds of the job before its first call, between calls, after its last, and busy."""
    out = []
    for pid in sorted({a["pid"] for a in actors}):
        calls = sorted((a for a in actors if a["pid"] == pid and "start" in a), key=lambda a: a["start"])
        if not calls:
            out.append({"before": end - start, "between": 0.0, "after": 0.0, "busy": 0.0, "calls": 0})
            continue
        between = sum(b["start"] - a["end"] for a, b in zip(calls, calls[1:], strict=False))
        out.append({"before": max(calls[0]["start"] - start, 0.0), "between": between,
                    "after": max(end - calls[-1]["end"], 0.0), "busy": sum(c["end"] - c["start"] for c in calls),
                    "calls": len(calls)})
    return {"actors": out}


# ---------------------------------------------------------------------------- inputs
def pokemon_inputs(work: Path, battles: int) -> tuple[str, list[str], dict]:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from pokemon_scale import SHARED_BENCH, base_battles, write_table

    logs = base_battles()
    table = work / f"pokemon-{battles}"
    if not table.is_dir():
        write_table(logs, battles, table)
    return str(table), sorted({b["formatid"] for b in logs}), {
        "logs": len(logs), "from": str(SHARED_BENCH) if SHARED_BENCH.is_dir() else "the simulator"}


def _write_games(args: tuple[Path, list[int], int]) -> None:
    from pipelines.melee.synthetic import SyntheticGame, write_slp

    folder, seeds, frames = args
    for seed in seeds:
        (folder / f"game-{seed:05d}.slp").write_bytes(write_slp(SyntheticGame(num_frames=frames, seed=seed)))


def melee_inputs(games: int, frames: int) -> str:
    folder = CACHE / f"melee-{games}x{frames}"
    if folder.is_dir():
        return str(folder)
    import multiprocessing

    tmp = CACHE / f".tmp-melee-{games}x{frames}-{os.getpid()}"
    tmp.mkdir(parents=True)
    with multiprocessing.Pool(CORES) as pool:
        pool.map(_write_games, [(tmp, list(range(i, games, CORES)), frames) for i in range(CORES)])
    tmp.rename(folder)
    return str(folder)


# ---------------------------------------------------------------------------- report
def rate(r: dict, how: str) -> float:
    """Units per core: "wall" per core-second of the 2 × wall; "net" per core-second left by the machine's other
    work (2 × wall − its CPU); "cpu" per CPU second of the arm's own processes."""
    if how == "wall":
        return r["units"] / (r["wall_s"] * CORES)
    if how == "net":
        return r["units"] / max(r["wall_s"] * CORES - r["others_cpu_s"], 1e-9)
    return r["units"] / r["cpu_s"]


def median(values: list[float]) -> float:
    values = sorted(values)
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def spread(values: list[float], fmt: str = "{:,.0f}") -> str:
    text = fmt.format(median(values))
    return text if len(values) == 1 else f"{text} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def report(schema: str, runs: list[dict], arms: list[str]) -> None:
    unit = UNITS[schema]
    print(f"\n== {schema}: {unit} per core (median [min-max] over {len(runs) // len(arms)} repetitions) ==")
    bare = [r for r in runs if r["arm"] == "bare"]
    hows = ("wall", "net", "cpu")
    print(f"{'arm':14s} " + " ".join(f"{how + ' rate':>20s} {'/bare':>12s}" for how in hows) + f" {'wall s':>16s}")
    for arm in arms:
        mine = [r for r in runs if r["arm"] == arm]
        cells = []
        for how in hows:
            ratios = [rate(j, how) / rate(b, how) for j, b in zip(mine, bare, strict=True)]
            cells.append(f"{spread([rate(r, how) for r in mine]):>20s} "
                         f"{spread(ratios, '{:.0%}') if arm != 'bare' else '':>12s}")
        print(f"{arm:14s} " + " ".join(cells) + f" {spread([r['wall_s'] for r in mine], '{:.1f}'):>16s}")
    print("wall: per core-second of 2 × wall; net: per core-second the machine's other work left (2 × wall − its "
          "CPU); cpu: per CPU second of the arm's own processes")
    b = bare[-1]
    print(f"bare, last repetition: {b['units']:,} {unit} from {b['inputs']:,} inputs, {b['shards']} shards "
          f"{b['shard_mib']} MiB; CPU s: " + ", ".join(f"{k} {v:.1f}" for k, v in b["phases"].items())
          + f" (read beforehand, not counted: {b['read_cpu_s']:.1f}); the two workers ended {b['finish_gap_s']:.1f} s "
          f"apart; load {b['load'][0]:.2f}→{b['load'][1]:.2f}, other work on the machine {b['others_cpu_s']:.1f} CPU s")
    for arm in arms:
        if arm == "bare":
            continue
        j = [r for r in runs if r["arm"] == arm][-1]
        total = CORES * j["wall_s"]
        cats = j["categories"]
        actor_calls_cpu = sum(j["phases"].values())
        ledger = [(f"parse actors, in calls: {k}", v) for k, v in sorted(j["phases"].items(), key=lambda kv: -kv[1])]
        in_calls = j["actor_process_cpu_in_calls_s"]
        ledger.append(("parse actors, in calls: other threads (deferred reads)", in_calls - actor_calls_cpu))
        ledger.append(("parse actors, outside calls (Ray's threads, start-up)",
                       cats.get("parse actors", 0.0) - in_calls))
        ledger.append((f"read tasks ({j['read_tasks']}; in read_groups {j['read_cpu_in_s']:.1f} CPU s)",
                       cats.get("read tasks", 0.0)))
        ledger.append(("driver", cats.get("driver", 0.0)))
        for k in sorted(cats):
            if k.startswith("Ray"):
                ledger.append((k, cats[k]))
        ledger.append(("other work on the machine", j["others_cpu_s"]))
        used = sum(v for _, v in ledger)
        ledger.append(("idle (2 × wall − all of the above)", total - used))
        print(f"\n{arm}, last repetition: {j['units']:,} {unit}, {j['inputs']:,} inputs, {j['groups']} groups in "
              f"{j['actor_calls']} actor calls, {j['shards']} shards {j['shard_mib']} MiB, wall {j['wall_s']:.1f} s, "
              f"load {j['load'][0]:.2f}→{j['load'][1]:.2f}")
        print(f"  {'core-seconds of the 2 × wall = ' + format(total, '.1f'):60s} {'s':>7s} {'share':>6s}")
        for name, v in ledger:
            print(f"  {name:60s} {v:7.1f} {v / total:6.1%}")
        print("  CPU s by process title: " + ", ".join(f"{k} {v:.1f}" for k, v in j["titles"].items()))
        daemons = sum(v for k, v in cats.items() if k.startswith("Ray"))
        print(f"  per 1,000 {unit}: job CPU {1000 * j['cpu_s'] / j['units']:.3f} s (actors in calls "
              f"{1000 * actor_calls_cpu / j['units']:.3f}), bare CPU {1000 * b['cpu_s'] / b['units']:.3f} s; "
              f"Ray's daemons and small actors {daemons / j['wall_s']:.2f} cores while the job ran")
        for i, a in enumerate(j["idle"]["actors"]):
            print(f"  actor {i}: {a['calls']} calls, busy {a['busy']:.1f} s; idle before its first group "
                  f"{a['before']:.1f} s, between groups {a['between']:.1f} s, after its last {a['after']:.1f} s")
    same = {tuple(r["files"]) for r in runs if r["arm"] in VARIANTS}
    if len({r["arm"] for r in runs if r["arm"] in VARIANTS}) > 1:
        print(f"\nshards of every job run: {'the same bytes' if len(same) == 1 else 'DIFFERENT bytes'} "
              f"({len(same)} distinct sets of file hashes)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: small inputs, 8 MiB shards, 1 repetition")
    parser.add_argument("--schemas", nargs="+", default=["pokemon", "melee"], choices=sorted(UNITS))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS,
                        help="job variants measured beside the bare arm")
    parser.add_argument("--repeat", type=int, default=None, help="repetitions (2; quick 1)")
    parser.add_argument("--shard-size-mb", type=float, default=None, help="the job's --shard-size-mb (128; quick 8)")
    parser.add_argument("--pokemon-battles", type=int, default=None,
                        help="battles in the hf-raw table (16,000: two 128 MiB groups; quick 1,000)")
    parser.add_argument("--melee-games", type=int, default=None,
                        help="synthetic games (8,000 frames, 2.8 MB each; 760: four 512 MiB groups; quick 12)")
    parser.add_argument("--inputs-per-batch", type=int, default=parse_module.INPUTS_PER_PARSE_BATCH,
                        help="inputs per Arrow table in the bare arm (the job's INPUTS_PER_PARSE_BATCH)")
    parser.add_argument("--work-dir", type=Path, default=None, help="inputs and outputs (default: a temp folder)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        spec = json.loads(args.child)
        result = {"bare": _child_bare, "job": _child_job}[spec["kind"]](spec)
        print(RESULT_PREFIX + json.dumps(result), flush=True)
        return
    repeat = args.repeat or (1 if args.quick else 2)
    shard_mb = args.shard_size_mb or (8.0 if args.quick else 128.0)
    battles = args.pokemon_battles or (1_000 if args.quick else 16_000)
    games = args.melee_games or (12 if args.quick else 760)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="rf-job-overhead-"))
    work.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "-C", str(REPO), "log", "-1", "--format=%h"], capture_output=True,
                            text=True).stdout.strip()
    print(f"job_overhead: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}, {CORES} cores "
          f"(machine: {psutil.cpu_count()} CPUs), shard size {shard_mb:g} MiB, {repeat} repetition(s), "
          f"load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    arms = ["bare", *args.variants]
    try:
        for schema in args.schemas:
            if schema == "pokemon":
                path, formats, made = pokemon_inputs(work, battles)
                print(f"pokemon: {battles:,} battles ({made['logs']} distinct logs from {made['from']}) in {path}")
                spec = {"schema": schema, "source": "hf-raw", "input": path, "formats": formats}
            else:
                path = melee_inputs(games, 8000)
                print(f"melee: {games} synthetic 8,000-frame games in {path}")
                spec = {"schema": schema, "source": "slp", "input": path, "formats": []}
            spec |= {"shard_size_mb": shard_mb, "inputs_per_batch": args.inputs_per_batch}
            runs = []
            for rep in range(repeat):
                order = arms[rep % len(arms):] + arms[:rep % len(arms)]
                for arm in order:
                    timeout_s = 3600.0
                    r = measure_bare(spec, work, timeout_s) if arm == "bare" else \
                        measure_job({**spec, "variant": arm}, work, timeout_s)
                    runs.append(r)
                    print(f"  {schema} rep {rep + 1} {arm:14s} wall {r['wall_s']:6.1f} s, "
                          f"{rate(r, 'wall'):,.1f} {UNITS[schema]}/s per core (wall), {rate(r, 'cpu'):,.1f} (CPU), "
                          f"load {r['load'][0]:.2f}, other work {r['others_cpu_s']:.1f} CPU s", flush=True)
            runs.sort(key=lambda r: arms.index(r["arm"]))
            report(schema, runs, arms)
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

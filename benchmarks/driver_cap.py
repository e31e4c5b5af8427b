"""How many parse cores one parse-job driver can serve: the driver's CPU per unit of output, the parser's CPU per
unit on one core, and their ratio, for the current checkout and a baseline checkout (e15c47f, where the driver
encodes every Parquet shard) measured in the same run; then the job's throughput on local disk and on a local S3
server.

    python benchmarks/driver_cap.py                 # the full run (about 15 minutes on 2 cores)
    python benchmarks/driver_cap.py --quick         # smoke run: small inputs, one repetition
    python benchmarks/driver_cap.py --baseline-repo ../other-checkout --repeat 5

Every measurement runs in a fresh Python subprocess whose ``sys.path`` and ``PYTHONPATH`` start with the checkout
being measured (the job's local Ray hands its workers that checkout too: ``pipelines/ray_start.py``); the child
checks that ``pipelines`` was imported from there. The baseline is a ``git worktree`` of e15c47f made in a temporary
folder and removed at the end, unless ``--baseline-repo`` names one.

Inputs (made once per run by the current checkout, in a temporary folder):
- Melee: synthetic games (``pipelines.melee.archives.synthetic_game``, the games ``--source slp`` makes without
  ``--input``, ~2,500 frames each) written as ``.slp`` files and read with ``--source slp --input DIR``. Files
  rather than the no-input synthetic source so that the read tasks do not spend ~55 ms of CPU per game making them
  (on 2 cores that CPU is taken from the parse actors) and so that the same files can be put on the S3 server.
  Each game has its own seed, so no game is a duplicate (the writer drops games with the same bytes).
- Pokémon: the 400 spectator logs of ``../shared/data/pokemon/bench_replays`` replicated under new battle ids into
  a Parquet table in the hub raw-replay shape, read with ``--source hf-raw`` (``benchmarks/pokemon_scale.py``'s
  helpers). The writer drops duplicate battle ids only, so every copy is written; the table scales to any size
  without the Node simulator (the ``generated`` source makes ~17 battles/s per core, slower than parsing), and it
  is read in row groups of 64 battles like the real hub table. ``showdown-json`` files would work as well but
  cost one file and one read task per battle.

1. Driver CPU per unit. The driver is the child process that calls ``run(cfg)``; its CPU is
   ``resource.getrusage(RUSAGE_SELF)`` (user + system, every thread of that process, no child process: Ray's GCS,
   raylet and workers are separate processes and are not counted). Ray is started first (``init_ray``) and the CPU
   is read just before and just after ``run``, so Ray's start-up is out; what remains fixed per job (planning, Ray
   Data's set-up, publishing the manifest, the first imports inside ``run``) is removed by running each job on two
   input sizes and taking the marginal cost, (CPU(large) - CPU(small)) / (units(large) - units(small)), which is
   what the driver spends per additional frame or row and so what bounds a long job. Timing only the result loop
   would need a patch of ``run``; the marginal cost needs none and is the same method for both checkouts.
   Current and baseline alternate (order flipped every repetition) and the median over repetitions is printed,
   with the spread; the main thread's share (the result loop: decoding blocks, the writer) is printed beside it.
   Shards are small (``--shard-size-mb``, default 2, both checkouts) so that the inputs make many shards and
   groups, as a long job does; per-shard and per-group costs are thereby over-counted against 128 MiB shards.
   The marginal cost also holds what the driver spends per second of waiting (Ray Data's scheduling loop, Ray's
   threads), and on 2 cores a job takes ~100x longer per unit than on a 200-core cluster, so on this machine that
   term can dominate once the per-unit work is gone. It is measured in the same run: a pipeline of the job's shape
   (read tasks → a pool of two 0.5-CPU actors → ``iter_batches``) whose actors only sleep, driver CPU / wall
   (``idle``). "Net of waiting" subtracts idle × the marginal wall time per unit. Model of a cluster: the driver
   needs (net CPU per unit) × (units/s) + idle ≤ 1 core, so one driver sustains (1 - idle) / net units/s.
2. Parse CPU per unit on one core: ``ParseInputs(source).parse_batch(table)`` in a child process on the read rows of
   the small input set, twice (read first, untimed), in batches of ``inputs_per_batch`` inputs, ``time.process_time()``
   around the parse calls only, after one warm-up batch. The cap is the number of parse cores whose output one driver
   keeps up with: "measured" = (parse CPU s per unit) / (driver CPU s per unit), as this machine's slow job costs the
   driver; "cluster" = (parse CPU s per unit) × (1 - idle) / (net driver CPU s per unit). In the current design the
   parse actors also encode and write the shards, so a parse core makes fewer units per second than ``parse_batch``
   alone and one driver serves more cores than printed: both caps are lower bounds there. When the net cost is at or
   below zero the run cannot tell the driver's per-unit work from noise; the cluster cap prints as unbounded.
3. Throughput of the current checkout: wall time of ``run(cfg)`` (after Ray's start-up) on the large inputs with 1
   and 2 parse actors of 0.5 CPU each, ``--input`` and ``--out`` both on local disk, then both on a local S3 server
   (moto's server mode on 127.0.0.1, started and stopped by its PID; the keys are moto's ``testing`` and are in the
   child's environment before Ray starts, as on a node). A run that fails is printed as failed with its error.

Ratios are against the baseline measured in the same run; nothing is compared with a constant and nothing is
asserted about speed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.fs as pafs

# tools/ is not an installed package (pyproject's packages.find): the checkout's root on the path imports it. The
# project's own modules are imported inside the child-side functions, after _child puts the measured checkout first.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.local_s3 import LocalS3Server

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
BASELINE_COMMIT = "e15c47f"
RESULT_PREFIX = "DRIVER_CAP_RESULT "
SCHEMAS = {
    # schema: (job source, unit name, units per printed figure)
    "melee": ("slp", "frames", 1_000_000, "1M frames"),
    "pokemon": ("hf-raw", "rows", 100_000, "100k rows"),
}


# ---------------------------------------------------------------------------- child side (inside a checkout)
def _child(spec: dict) -> dict:
    repo = spec["repo"]
    sys.path.insert(0, repo)
    import pipelines

    where = Path(pipelines.__file__).resolve()
    if not where.is_relative_to(Path(repo).resolve()):
        raise RuntimeError(f"pipelines was imported from {where}, not from the checkout {repo}")
    return {"prepare": _child_prepare, "job": _child_job, "parse": _child_parse,
            "idle": _child_idle}[spec["kind"]](spec)


def _cpu_s(who: str = "process") -> float:
    """CPU seconds (user + system) of this process (every thread, ended ones included) or of the calling thread."""
    usage = resource.getrusage(resource.RUSAGE_SELF if who == "process" else resource.RUSAGE_THREAD)
    return usage.ru_utime + usage.ru_stime


def _thread_cpu_s() -> dict[str, float]:
    """CPU seconds of this process's live threads by name (Linux /proc), for the breakdown of the driver's CPU."""
    out: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path("/proc/self/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def _config(spec: dict):
    """The job's ``ParseConfig`` for a spec; only fields the checkout's config has are passed."""
    from pipelines.parse_replays import ParseConfig

    known = {f.name for f in dataclasses.fields(ParseConfig)}
    fields = {"source": spec["source"], "input": spec["input"], "out": spec["out"], "formats": spec["formats"],
              "num_parse_actors": spec.get("num_parse_actors", 2), "cpus_per_actor": 0.5, "num_cpus": 2,
              "shard_size_mb": spec["shard_size_mb"], "progress_every_s": 1e9}
    return ParseConfig(**{k: v for k, v in fields.items() if k in known})


def _child_prepare(spec: dict) -> dict:
    """Writes the Melee .slp folders and the Pokémon tables of both sizes; returns what they hold."""
    sys.path.insert(0, str(Path(spec["repo"]) / "benchmarks"))
    import pokemon_scale
    from pokemon_scale import base_battles, write_table

    pokemon_scale.SHARED_BENCH = Path(spec["shared_bench"])  # this script's ../shared, wherever the checkout is

    from pipelines.melee.archives import synthetic_game

    work = Path(spec["work"])
    small, large = spec["melee_games"]
    folder = work / "melee-large"
    folder.mkdir(parents=True)
    for i in range(large):
        (folder / f"game-{i:05d}.slp").write_bytes(synthetic_game(i, 7))
    (work / "melee-small").mkdir()
    for i in range(small):
        shutil.copyfile(folder / f"game-{i:05d}.slp", work / "melee-small" / f"game-{i:05d}.slp")
    battles = base_battles()
    small, large = spec["pokemon_battles"]
    write_table(battles, small, work / "pokemon-small")
    write_table(battles, large, work / "pokemon-large")
    return {"pokemon_formats": sorted({b["formatid"] for b in battles}), "pokemon_logs": len(battles),
            "pokemon_logs_from": str(pokemon_scale.SHARED_BENCH) if pokemon_scale.SHARED_BENCH.is_dir()
            else "the simulator (no shared bench_replays)"}


def _child_job(spec: dict) -> dict:
    from pipelines.parse_replays import init_ray, run

    cfg = _config(spec)
    init_ray(cfg)
    import ray

    logs: list[str] = []
    cpu0, main0, threads0, start = _cpu_s(), _cpu_s("thread"), _thread_cpu_s(), time.monotonic()
    published = run(cfg, log=logs.append)
    wall_s, cpu1, main1, threads1 = time.monotonic() - start, _cpu_s(), _cpu_s("thread"), _thread_cpu_s()
    c = published.manifest.counts
    ray.shutdown()
    threads = {k: round(v - threads0.get(k, 0.0), 2) for k, v in threads1.items() if v - threads0.get(k, 0.0) > 0.05}
    return {"driver_cpu_s": cpu1 - cpu0, "main_thread_cpu_s": main1 - main0, "threads": threads,
            "published": str(published.path), "driver_cpu_total_s": cpu1, "wall_s": wall_s, "inputs": c.inputs,
            "written": c.written, "rows": c.rows, "trajectories": c.trajectories,
            "shards": len(published.manifest.files), "quarantined": sum(c.quarantined.values()),
            "filtered": sum(c.filtered.values())}


class _Wait:
    """A parse actor that only waits (the idle pipeline of ``_child_idle``)."""

    def __init__(self, wait_s: float):
        self.wait_s = wait_s

    def __call__(self, batch):
        time.sleep(self.wait_s)
        return batch


def _pass(batch):
    return batch


def _child_idle(spec: dict) -> dict:
    """The driver's CPU per second while a pipeline of the job's shape (read tasks → an actor pool of parse actors
    → ``iter_batches`` on the driver) only waits: Ray Data's scheduling loop and Ray's threads, no data."""
    from pipelines.ray_start import start_ray

    start_ray(num_cpus=2, log_to_driver=False)
    import ray.data

    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = False
    items = spec["items"]
    ds = ray.data.from_items([{"item": i} for i in range(items)], override_num_blocks=items)
    ds = ds.map_batches(_pass, batch_size=1, batch_format="pyarrow", num_cpus=0.5)
    ds = ds.map_batches(_Wait, batch_size=1, batch_format="pyarrow", compute=ray.data.ActorPoolStrategy(size=2),
                        num_cpus=0.5, fn_constructor_kwargs={"wait_s": spec["wait_s"]})
    cpu0, start = _cpu_s(), time.monotonic()
    for _ in ds.iter_batches(batch_format="pyarrow", batch_size=None):
        pass
    wall_s, cpu_s = time.monotonic() - start, _cpu_s() - cpu0
    ray.shutdown()
    return {"driver_cpu_s": cpu_s, "wall_s": wall_s}


def _child_parse(spec: dict) -> dict:
    from pipelines.parse_replays import ParseInputs

    cfg = _config(spec)
    source = cfg.make_source()
    rows = [row for item in source.plan().items for row in source.read(item)]
    columns = pa.schema([("input_id", pa.string()), ("payload", pa.large_binary()), ("read_error", pa.string()),
                         ("filter_reason", pa.string()), ("facts_json", pa.string())])
    table = pa.Table.from_pylist(rows, schema=columns)
    per_batch = spec["inputs_per_batch"]
    batches = [table.slice(i, per_batch) for i in range(0, table.num_rows, per_batch)]
    parse = ParseInputs(cfg.make_source(), shard_size_mb=cfg.shard_size_mb)
    parse.parse_batch(batches[0])  # warm-up: dex, vocabulary, caches
    units, cpu_s = 0, 0.0
    for _ in range(spec["repeat"]):
        for batch in batches:
            start = time.process_time()
            parsed = parse.parse_batch(batch)
            cpu_s += time.process_time() - start
            units += parsed.rows.num_rows
    return {"parse_cpu_s": cpu_s, "units": units, "inputs": table.num_rows * spec["repeat"]}


# ---------------------------------------------------------------------------- parent side
class ChildFailed(RuntimeError):
    pass


class Quiet:
    """Other test runs on the machine (``pytest`` processes not started by this script): measurements wait for
    them to end, and a measurement during which one ran is run again once."""

    enabled = True
    max_wait_s = 3600.0
    waited_s = 0.0
    overlapped = 0
    rerun = 0

    @staticmethod
    def busy() -> bool:
        mine = {os.getpid(), *(p.pid for p in psutil.Process().children(recursive=True))}
        for proc in psutil.process_iter(["pid", "cmdline"]):
            cmdline = proc.info["cmdline"] or []
            if proc.info["pid"] not in mine and any(a == "pytest" or a.endswith("/pytest") for a in cmdline):
                return True
        return False

    @classmethod
    def wait(cls) -> None:
        start = time.monotonic()
        while cls.enabled and cls.busy() and time.monotonic() - start < cls.max_wait_s:
            time.sleep(5)
        cls.waited_s += time.monotonic() - start


def run_child(repo: Path, spec: dict, env: dict[str, str], cwd: Path, timeout_s: float) -> dict:
    """Runs ``spec`` in a fresh Python with ``repo`` first on its path, in the scratch folder ``cwd`` (a checkout that
    takes ``s3://b/x`` for a local path writes a folder ``s3:`` there, not in a repository), once no other test run
    is on the machine; again once if one started meanwhile. Returns its result or raises ChildFailed with the end of
    its output."""
    for attempt in range(2):
        Quiet.wait()
        result, disturbed = _run_child_once(repo, spec, env, cwd, timeout_s)
        if not disturbed:
            return result
        Quiet.overlapped += 1
        Quiet.rerun += attempt == 0
    return result


def _run_child_once(repo: Path, spec: dict, env: dict[str, str], cwd: Path, timeout_s: float) -> tuple[dict, bool]:
    child_env = {**env, "PYTHONPATH": str(repo)}
    cwd.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps({**spec, "repo": str(repo)})]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, cwd=cwd, env=child_env, stdout=out, stderr=err, text=True)
        start, disturbed = time.monotonic(), False
        try:
            while proc.poll() is None:
                if time.monotonic() - start > timeout_s:
                    raise subprocess.TimeoutExpired(argv, timeout_s)
                disturbed = disturbed or (Quiet.enabled and Quiet.busy())
                time.sleep(2)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):]), disturbed
    tail = (stdout + stderr).strip().splitlines()
    errors = [line for line in tail if "Error" in line or "Exception" in line]
    raise ChildFailed((errors[-1] if errors else (tail[-1] if tail else f"exit {proc.returncode}"))[:300])


def base_env() -> dict[str, str]:
    """The environment of every child: token auth with a fresh token (nothing written to ~/.ray), a local Ray, and
    this checkout's ``pokemon-showdown`` (a fresh worktree has no node_modules; the dex reads its version)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32), WANDB_MODE="offline")
    showdown = REPO / "node_modules" / "pokemon-showdown"
    if showdown.is_dir():
        env.setdefault("REPLAYFORGE_SHOWDOWN_DIR", str(showdown))
    return env


def describe(repo: Path) -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True).stdout.strip()

    dirty = " + uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else ""
    return f"{repo} @ {git('log', '-1', '--format=%h %s')[:100]}{dirty}"


class MotoServer(LocalS3Server):
    """The project's local S3 server (tools/local_s3.py), with the settings a job's environment needs."""

    def env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing"}

    def filesystem(self):
        return pafs.S3FileSystem(endpoint_override=self.endpoint.split("://", 1)[1], scheme="http",
                                 region="us-east-1", access_key="testing", secret_key="testing",
                                 allow_bucket_creation=True)


def make_baseline(commit: str, into: Path) -> Path:
    path = into / "baseline"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(path), commit], check=True,
                   capture_output=True)
    return path


def remove_baseline(path: Path) -> None:
    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)], check=False,
                   capture_output=True)


def marginal(small: list[dict], large: list[dict], key: str, per: int) -> list[float]:
    """Per repetition: (key(large) - key(small)) / (units(large) - units(small)) × ``per``."""
    return [(b[key] - a[key]) / (b["rows"] - a["rows"]) * per for a, b in zip(small, large, strict=True)]


def ratio_text(a: float, b: float) -> str:
    """a / b, or why not (a net cost at or below zero, an unbounded cap)."""
    if a <= 0 or b <= 0 or a == float("inf") or b == float("inf"):
        return "n/a (a value is ≤ 0 or unbounded)"
    return f"{a / b:.3f}"


def median_spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: small inputs, one repetition")
    parser.add_argument("--repeat", type=int, default=None, help="repetitions of the driver measurement (3; quick 1)")
    parser.add_argument("--current-repo", type=Path, default=REPO, help="the checkout measured as current "
                        "(default: the one holding this script)")
    parser.add_argument("--baseline-repo", type=Path, default=None, help="an existing baseline checkout (default: "
                        f"a temporary git worktree of {BASELINE_COMMIT})")
    parser.add_argument("--baseline-commit", default=BASELINE_COMMIT, help="commit of the temporary baseline worktree")
    parser.add_argument("--melee-games", type=int, nargs=2, default=None, metavar=("SMALL", "LARGE"),
                        help="synthetic games (~2,500 frames each) of the two Melee input sets (40 400; quick 6 24)")
    parser.add_argument("--pokemon-battles", type=int, nargs=2, default=None, metavar=("SMALL", "LARGE"),
                        help="battles (2 trajectories, ~110 rows) of the two Pokémon input sets (200 1600; quick "
                        "40 160)")
    parser.add_argument("--shard-size-mb", type=float, default=2.0, help="shard size of every job, both checkouts")
    parser.add_argument("--skip-throughput", action="store_true", help="leave out part 3 (local vs S3 throughput)")
    parser.add_argument("--work-dir", type=Path, default=None, help="where inputs and outputs go (default: temp)")
    parser.add_argument("--no-wait", action="store_true", help="measure even while other pytest runs are on the "
                        "machine (default: wait for them to end, and measure again once when one started meanwhile)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        result = _child(json.loads(args.child))
        print(RESULT_PREFIX + json.dumps(result), flush=True)
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the finally below removes the worktree and temp files
    Quiet.enabled = not args.no_wait
    repeat = args.repeat or (1 if args.quick else 3)
    parse_repeat = min(repeat, 3)  # the parse is timed alone in its process: steadier than a job
    melee_games = args.melee_games or ([6, 24] if args.quick else [40, 400])
    pokemon_battles = args.pokemon_battles or ([40, 160] if args.quick else [200, 1600])
    timeout_s = 900
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="rf-driver-cap-"))
    work.mkdir(parents=True, exist_ok=True)
    baseline = args.baseline_repo
    made_baseline = baseline is None
    current = args.current_repo.resolve()
    env = base_env()
    scratch = work / "cwd"
    server = None
    try:
        if made_baseline:
            baseline = make_baseline(args.baseline_commit, work)
        baseline = baseline.resolve()
        print(f"driver_cap.py, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs")
        print(f"current:  {describe(current)}")
        print(f"baseline: {describe(baseline)}")
        start = time.monotonic()
        inputs = work / "inputs"
        made = run_child(current, {"kind": "prepare", "work": str(inputs), "melee_games": melee_games,
                                   "pokemon_battles": pokemon_battles,
                                   "shared_bench": str(SHARED / "pokemon" / "bench_replays")}, env, scratch, timeout_s)
        formats = {"melee": [], "pokemon": made["pokemon_formats"]}
        print(f"inputs: Melee {melee_games[0]} / {melee_games[1]} synthetic games as .slp files (--source slp); "
              f"Pokémon {pokemon_battles[0]} / {pokemon_battles[1]} battles ({made['pokemon_logs']} distinct "
              f"logs of {made['pokemon_logs_from']} under new ids, --source hf-raw, formats "
              f"{','.join(made['pokemon_formats'])}); shards of {args.shard_size_mb} MiB; made in "
              f"{time.monotonic() - start:.0f}s")

        def spec(schema: str, size: str, out: str, **extra) -> dict:
            return {"kind": "job", "source": SCHEMAS[schema][0], "input": str(inputs / f"{schema}-{size}"),
                    "out": out, "formats": formats[schema], "shard_size_mb": args.shard_size_mb, **extra}

        # 1. driver CPU, marginal per unit, alternating checkouts; the waiting driver's CPU per second
        checkouts = {"current": current, "baseline": baseline}
        runs: dict[tuple[str, str, str], list[dict]] = {}
        idle: list[float] = []
        n = 0
        for rep in range(repeat):
            order = ["current", "baseline"] if rep % 2 == 0 else ["baseline", "current"]
            for schema in SCHEMAS:
                for size in ("small", "large"):
                    for name in order:
                        n += 1
                        result = run_child(checkouts[name], spec(schema, size, str(work / f"out-{n}")), env,
                                           scratch, timeout_s)
                        shutil.rmtree(work / f"out-{n}", ignore_errors=True)
                        runs.setdefault((name, schema, size), []).append(result)
            waited = run_child(current, {"kind": "idle", "items": 8, "wait_s": 1.0 if args.quick else 2.5}, env,
                               scratch, timeout_s)
            idle.append(waited["driver_cpu_s"] / waited["wall_s"])
        idle_rate = statistics.median(idle)
        print(f"\n1. Driver CPU per unit: marginal between the two input sizes, CPU of the driver process only "
              f"(every thread), median [min-max] of {repeat}; of which the main thread (the result loop); net of "
              "waiting = the marginal less the waiting driver's CPU per second × the marginal wall time")
        print(f"  a waiting driver (the job's pipeline shape, actors that only sleep): {median_spread(idle)} CPU s "
              "per wall second")
        driver: dict[tuple[str, str], float] = {}
        driver_net: dict[tuple[str, str], float] = {}
        for schema, (_, unit, per, per_name) in SCHEMAS.items():
            for name in checkouts:
                small, large = runs[(name, schema, "small")], runs[(name, schema, "large")]
                total = marginal(small, large, "driver_cpu_s", per)
                main_thread = marginal(small, large, "main_thread_cpu_s", per)
                net = [t - idle_rate * w for t, w in zip(total, marginal(small, large, "wall_s", per), strict=True)]
                driver[(name, schema)], driver_net[(name, schema)] = statistics.median(total), statistics.median(net)
                fixed = statistics.median([a["driver_cpu_s"] - m / per * a["rows"]
                                           for a, m in zip(small, total, strict=True)])
                wall = statistics.median([r["wall_s"] for r in large])
                c = large[0]
                print(f"  {schema:8s} {name:9s} {median_spread(total)} s per {per_name} (main thread "
                      f"{median_spread(main_thread)}; net of waiting {median_spread(net)}); fixed {fixed:.2f}s per "
                      f"job; large set: {c['inputs']} inputs = {c['written']} written + {c['filtered']} filtered + "
                      f"{c['quarantined']} quarantined, {c['rows']:,} {unit}, {c['shards']} shards, wall {wall:.1f}s")
            counts = {name: {k: runs[(name, schema, "large")][0][k] for k in ("inputs", "written", "filtered",
                                                                             "quarantined", "rows")}
                      for name in checkouts}
            if counts["current"] != counts["baseline"]:
                print(f"  {schema:8s} WARNING: the checkouts disagree on the same inputs ({counts}): the per-unit "
                      "figures below compare different work")
            ratio = driver[("current", schema)] / driver[("baseline", schema)]
            print(f"  {schema:8s} current / baseline = {ratio:.3f} (baseline / current = {1 / ratio:.1f}); net of "
                  f"waiting {ratio_text(driver_net[('current', schema)], driver_net[('baseline', schema)])}")

        # 2. parse CPU per unit on one core, and the cap
        print("\n2. Parse CPU per unit on one core (ParseInputs.parse_batch in process, small input set twice, "
              f"median of {parse_repeat}); cap = parse cores one driver serves: measured = parse CPU per unit / "
              "driver CPU per unit (this machine's slow job: waiting included); cluster = parse CPU per unit × "
              "(1 - waiting CPU per second) / net driver CPU per unit")
        for schema, (_, unit, per, per_name) in SCHEMAS.items():
            parse: dict[str, list[float]] = {name: [] for name in checkouts}
            for rep in range(parse_repeat):
                for name in (["current", "baseline"] if rep % 2 == 0 else ["baseline", "current"]):
                    result = run_child(checkouts[name], {**spec(schema, "small", str(work / "parse-out")),
                                                         "kind": "parse", "inputs_per_batch": 16, "repeat": 2},
                                       env, scratch, timeout_s)
                    parse[name].append(result["parse_cpu_s"] / result["units"] * per)
            caps, cluster_caps = {}, {}
            c = runs[("current", schema, "large")][0]
            units_per_trajectory = c["rows"] / c["trajectories"]
            # at the cap the driver is the bound: a job takes at least its units × net driver CPU per unit / (1 - idle)
            job_units, job_name = ((4e6 * units_per_trajectory, "4M trajectories") if schema == "pokemon"
                                   else (1e9, "1B frames"))
            for name in checkouts:
                parse_s, net_s = statistics.median(parse[name]), driver_net[(name, schema)]
                caps[name] = parse_s / driver[(name, schema)]
                cluster_caps[name] = parse_s * (1 - idle_rate) / net_s if net_s > 0 else float("inf")
                if net_s > 0:
                    cluster = (f"cluster {cluster_caps[name]:,.1f} parse cores per driver; at that cap {job_name} take "
                               f"{job_units / per * net_s / (1 - idle_rate) / 60:,.1f} min (the driver's bound)")
                else:
                    cluster = "cluster: unbounded here (net driver cost ≤ 0, below this run's resolution)"
                print(f"  {schema:8s} {name:9s} parse {median_spread(parse[name])} CPU s per {per_name} "
                      f"({per / parse_s:,.0f} {unit}/s per core) → cap measured {caps[name]:,.1f} parse cores per "
                      f"driver, {cluster}")
            print(f"  {schema:8s} cap current / baseline: measured {caps['current'] / caps['baseline']:.1f}x, "
                  f"cluster {ratio_text(cluster_caps['current'], cluster_caps['baseline'])} "
                  f"({units_per_trajectory:,.0f} {unit} per trajectory here)")

        # 3. throughput, current checkout, local disk vs local S3 server
        if not args.skip_throughput:
            print("\n3. Job throughput, current checkout, large input sets, wall time of run() after Ray's start-up "
                  "(2 CPUs, parse actors of 0.5 CPU, one run each)")
            server = MotoServer(work / "moto.log")
            fs = server.filesystem()
            fs.create_dir("bench")
            for schema in SCHEMAS:
                pafs.copy_files(str(inputs / f"{schema}-large"), f"bench/{schema}-large",
                                source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)
            s3_env = {**env, **server.env()}
            for schema, (_, unit, _, _) in SCHEMAS.items():
                for store in ("local", "s3"):
                    for actors in (1, 2):
                        n += 1
                        if store == "local":
                            job = spec(schema, "large", str(work / f"out-{n}"), num_parse_actors=actors)
                        else:
                            job = {**spec(schema, "large", f"s3://bench/out-{n}", num_parse_actors=actors),
                                   "input": f"s3://bench/{schema}-large"}
                        label = f"  {schema:8s} {store:5s} {actors} actor{'s' if actors > 1 else ' '}"
                        try:
                            r = run_child(current, job, s3_env if store == "s3" else env, scratch, timeout_s)
                        except (ChildFailed, subprocess.TimeoutExpired) as err:
                            print(f"{label}: failed: {err}")
                            continue
                        finally:
                            shutil.rmtree(work / f"out-{n}", ignore_errors=True)
                        if not r["published"].startswith(job["out"]):
                            print(f"{label}: failed: published to {r['published']}, not under {job['out']}")
                            continue
                        print(f"{label}: {r['rows'] / r['wall_s']:,.0f} {unit}/s, {r['inputs'] / r['wall_s']:.1f} "
                              f"inputs/s ({r['inputs']} inputs, {r['rows']:,} {unit}, {r['shards']} shards, "
                              f"{r['wall_s']:.1f}s; driver CPU {r['driver_cpu_s']:.1f}s)")
        print(f"\ntotal {time.monotonic() - start:.0f}s, of which {Quiet.waited_s:.0f}s waiting for other pytest runs "
              f"to end; measurements during which one ran: {Quiet.overlapped} ({Quiet.rerun} run again)")
    finally:
        if server is not None:
            server.stop()
        if made_baseline and baseline is not None:
            remove_baseline(baseline)
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

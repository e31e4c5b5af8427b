"""Scale: ≥ 100k battles through the Ray parse job in bounded memory, as battles/s per core and peak memory.

    python benchmarks/pokemon_scale.py                       # 100,000 battles
    python benchmarks/pokemon_scale.py --battles 5000        # quick look

Input: spectator logs of real simulator battles (``../shared/data/pokemon/bench_replays`` when present, else battles
generated here) replicated under new battle ids into a Parquet table in the hub raw-replay shape, read by the
``hf-raw`` source. While the job runs, the resident memory of the driver and every Ray process it started is
sampled; peak memory is compared between the first fifth of the run and the whole run (flat = bounded).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.parse_replays import ParseConfig, run
from pipelines.pokemon import generated

SHARED_BENCH = Path(__file__).resolve().parents[2] / "shared" / "data" / "pokemon" / "bench_replays"
CPUS = 2


def base_battles() -> list[dict]:
    if SHARED_BENCH.is_dir():
        return [json.loads(p.read_text()) for p in sorted(SHARED_BENCH.rglob("*.json"))]
    out = []
    for fmt in ("gen1ou", "gen9randombattle"):
        chunk = generated.chunks([fmt], 200, 99, "random", "random", 200)[0]
        for battle_id, payload in generated.generate(chunk):
            rec = json.loads(payload)
            out.append({"id": battle_id, "format": fmt, "players": ["Random Bot 1", "Random Bot 2"],
                        "log": "\n".join(rec["spectator_log"]), "uploadtime": 1_700_000_000, "formatid": fmt,
                        "rating": None})
    return out


def write_table(battles: list[dict], total: int, out_dir: Path, rows_per_file: int = 10_000) -> None:
    out_dir.mkdir(parents=True)
    for start in range(0, total, rows_per_file):
        rows = []
        for i in range(start, min(start + rows_per_file, total)):
            b = battles[i % len(battles)]
            rows.append({"id": f"{b['id']}-r{i}", "format": b["format"], "players": b["players"], "log": b["log"],
                         "uploadtime": b["uploadtime"], "formatid": b["formatid"], "rating": b["rating"]})
        pq.write_table(pa.Table.from_pylist(rows), out_dir / f"part-{start // rows_per_file:05d}.parquet",
                       row_group_size=64, compression="zstd")


class MemorySampler(threading.Thread):
    """Samples the summed PSS of this process and all its descendants (Ray GCS, raylet, workers)."""

    def __init__(self, interval_s: float = 0.5):
        super().__init__(daemon=True)
        self.interval_s, self.samples, self.stop = interval_s, [], threading.Event()

    def run(self):
        me = psutil.Process()
        while not self.stop.is_set():
            total = 0
            for proc in [me, *me.children(recursive=True)]:
                try:
                    total += proc.memory_full_info().pss  # shared object-store pages counted once
                except psutil.Error:
                    pass
            self.samples.append((time.monotonic(), total))
            self.stop.wait(self.interval_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--battles", type=int, default=100_000)
    parser.add_argument("--work-dir", default=None, help="where the table and shards go (default: a temp dir)")
    args = parser.parse_args()
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="rf-scale-"))
    try:
        battles = base_battles()
        t0 = time.monotonic()
        write_table(battles, args.battles, work / "table")
        print(f"input table: {args.battles} battles ({len(battles)} distinct logs, new ids) "
              f"written in {time.monotonic() - t0:.0f}s")
        cfg = ParseConfig(source="hf-raw", input=str(work / "table"), out=str(work / "out"),
                          formats=sorted({b["formatid"] for b in battles}), num_cpus=CPUS, progress_every_s=60)
        sampler = MemorySampler()
        sampler.start()
        start = time.monotonic()
        published = run(cfg)
        elapsed = time.monotonic() - start
        sampler.stop.set()
        sampler.join()
        c = published.manifest.counts
        early = [m for t, m in sampler.samples if t - start <= elapsed / 5]
        peak, early_peak = max(m for _, m in sampler.samples), max(early or [0])
        per_core = c.written / elapsed / CPUS
        print(f"battles: {c.inputs} in, {c.written} written, {c.trajectories} trajectories, {c.rows} rows, "
              f"{len(published.manifest.files)} shards")
        print(f"throughput: {c.written / elapsed:.1f} battles/s on {CPUS} CPUs = {per_core:.1f} battles/s per core "
              f"({2 * per_core:.1f} trajectories/s per core), {elapsed:.0f}s")
        print(f"peak memory (driver + Ray processes): {peak / 2**30:.2f} GiB; in the first fifth of the run: "
              f"{early_peak / 2**30:.2f} GiB")
        hours = 4_000_000 / (2 * per_core * 64) / 3600
        print(f"projection: 4M trajectories on a 64-core cluster at this per-core rate: {hours:.2f} h")
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Melee parse speed per core: peppi's bare parse vs replayforge's full parse → Parquet, same files, one run.

    python benchmarks/melee_parse_speed.py [--repeat 5]

Inputs, each measured: the 20 real replays of ``../shared/data/melee/slp`` (many are a few hundred frames, so
per-file costs weigh), and 20 synthetic games of 8,000 frames (about 2 minutes, the length of a ranked game).
Bare: peppi's ``read_slippi`` into Arrow frames. Full: the same read, rollback dedupe, version gating, projectile
summaries, the declared schema, and zstd Parquet bytes written as the shard writer does (many games per file).
Frames/s are unique frames per CPU-second of this process.
"""

from __future__ import annotations

import argparse
import io
import os
import tempfile
import time
from pathlib import Path

import peppi_py._peppi as peppi
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.melee.slp import FRAME_PARQUET_OPTIONS, SlpFilters, parse_slp
from pipelines.melee.synthetic import SyntheticGame, write_slp

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "melee" / "slp"


def input_sets() -> dict[str, list[bytes]]:
    sets = {}
    if SHARED.is_dir():
        sets["shared real replays"] = [p.read_bytes() for p in sorted(SHARED.glob("*.slp"))]
    sets["synthetic 8k-frame games"] = [write_slp(SyntheticGame(num_frames=8000, seed=i)) for i in range(20)]
    return sets


def measure(games: list[bytes], repeat: int) -> tuple[float, float, float, float]:
    """(bare, full, Parquet encoding alone) frames/s per core and Parquet bytes per frame."""
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as tmp:
        paths = []
        for i, data in enumerate(games):
            path = Path(tmp) / f"{i}.slp"
            path.write_bytes(data)
            paths.append(str(path))
        for path in paths:  # warm up
            peppi.read_slippi(path, False)
        frames = 0
        start = time.process_time()
        for _ in range(repeat):
            for path in paths:
                frames += len(peppi.read_slippi(path, False).frames)
        bare = frames / (time.process_time() - start)
    filters = SlpFilters(min_frames=0, allow_cpu=True)
    parse_slp(games[0], input_id="warm", source="bench", filters=filters)
    frames, parquet_bytes, parse_s, write_s = 0, 0, 0.0, 0.0
    for _ in range(repeat):
        start = time.process_time()
        tables = [parse_slp(data, input_id=str(i), source="bench", filters=filters)[0] for i, data in enumerate(games)]
        table = pa.concat_tables(tables)
        parsed = time.process_time()
        sink = io.BytesIO()
        pq.write_table(table, sink, row_group_size=16_384, **FRAME_PARQUET_OPTIONS)
        parse_s, write_s = parse_s + parsed - start, write_s + time.process_time() - parsed
        frames += table.num_rows
        parquet_bytes += sink.tell()
    return bare, frames / (parse_s + write_s), frames / write_s, parquet_bytes / frames


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for name, games in input_sets().items():
        bare, full, encode, per_frame = measure(games, args.repeat)
        print(f"{name}: peppi bare parse {bare:,.0f} frames/s per core; replayforge parse + Parquet {full:,.0f} "
              f"frames/s per core = {full / bare:.0%} of bare ({per_frame:.0f} B/frame); Parquet encoding alone "
              f"{encode:,.0f} frames/s = {encode / bare:.0%} of bare")


if __name__ == "__main__":
    main()

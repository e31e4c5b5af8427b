"""Pokémon pipeline throughput, measured in one run on the same inputs (ratios, not timed assertions).

    python benchmarks/pokemon_pipeline.py                 # 200 battles per format (gen9randombattle, gen1ou)
    python benchmarks/pokemon_pipeline.py --battles 20    # quick look

Prints:
1. the Ray job end to end (simulate → parse → shards) on 2 local CPUs;
2. parse trajectories/s per core for the generated source (simulator records) and the metamon source
   (Metamon-format .json.lz4 files written from the same trajectories), with one table of each 16 inputs' rows
   and their observation columns (``turns_table``, what a parse actor does with a batch), in one process on one core;
3. turns/s into training batches from the shards vs a naive per-file ``lz4 + json.loads`` loader (what public
   Pokémon training code does), with and without featurizing states into observation tokens.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import lz4.frame
import numpy as np

from pipelines.parse_replays import ParseConfig, run
from pipelines.pokemon import generated, metamon
from pipelines.pokemon.dex import known_formats, load_dex
from pipelines.pokemon.generated import GeneratedConfig
from pipelines.pokemon.observation import observe
from pipelines.pokemon.trajectory import turns_table
from shards_schema.reader import open_version

BATCH_COLUMNS = ["obs_tokens", "obs_numeric", "action", "legal_mask", "reward", "done"]


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def in_tables(rows_of_inputs, inputs_per_table: int = 16) -> list:
    """``turns_table`` of each ``inputs_per_table`` inputs' rows."""
    tables, batch = [], []
    for k, rows in enumerate(rows_of_inputs, 1):
        batch += rows
        if k % inputs_per_table == 0:
            tables.append(turns_table(batch))
            batch = []
    return tables + ([turns_table(batch)] if batch else [])


def write_metamon_files(version, out_dir: Path) -> list[Path]:
    """One Metamon-format file per trajectory of the shard version."""
    table = version.table(["trajectory_id", "battle_id", "format", "player_name", "opponent_name", "state",
                           "action", "result"])
    paths, rows = [], table.to_pylist()
    start = 0
    while start < len(rows):
        end = start
        while end < len(rows) and rows[end]["trajectory_id"] == rows[start]["trajectory_id"]:
            end += 1
        traj = rows[start:end]
        won = traj[0]["result"] == "win"
        states = [metamon.to_universal_state(r["state"], r["format"]) for r in traj]
        states[-1].update(battle_won=won, battle_lost=not won)
        payload = json.dumps({"states": states, "actions": [r["action"] for r in traj]}).encode()
        name = metamon.file_name(traj[0]["battle_id"], None, traj[0]["player_name"], traj[0]["opponent_name"],
                                 "01-01-2026", won)
        path = out_dir / name
        path.write_bytes(lz4.frame.compress(payload))
        paths.append(path)
        start = end
    return paths


def naive_loader(paths: list[Path], featurize: bool) -> int:
    """Per-file decompress + json.loads (+ state → observation), stacked into batches; returns turns."""
    turns = 0
    for path in paths:
        data = json.loads(lz4.frame.decompress(path.read_bytes()))
        if featurize:
            obs = [observe(metamon.universal_state(s), s["format"]) for s in data["states"]]
            np.asarray([o[1] for o in obs], dtype=np.int32)
            np.asarray([o[2] for o in obs], dtype=np.float32)
        np.asarray(data["actions"], dtype=np.int64)
        turns += len(data["states"])
    return turns


def shard_loader(version, batch_size: int = 4096) -> int:
    turns = 0
    for batch in version.iter_batches(BATCH_COLUMNS, batch_size=batch_size):
        n = batch.num_rows
        tokens = batch.column("obs_tokens").values.to_numpy().reshape(n, -1)
        numeric = batch.column("obs_numeric").values.to_numpy().reshape(n, -1)
        mask = batch.column("legal_mask").values.to_numpy(zero_copy_only=False).reshape(n, -1)
        action = batch.column("action").to_numpy()
        assert tokens.shape[1] == 87 and numeric.shape[1] == 48 and mask.shape[1] == 13 and len(action) == n
        turns += n
    return turns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--battles", type=int, default=200, help="battles per format")
    parser.add_argument("--parse-battles", type=int, default=60, help="battles per format for the per-core parse")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rf-bench-"))
    try:
        cfg = ParseConfig(source="generated", out=str(work / "shards"),
                          options=GeneratedConfig(num_battles=args.battles, seed=123), progress_every_s=30)
        published, job_s = _timed(lambda: run(cfg, log=lambda *_: None))
        c = published.manifest.counts
        print(f"ray job (simulate + parse + write, 2 CPUs): {c.inputs} battles, {c.trajectories} trajectories, "
              f"{c.rows} turns in {job_s:.1f}s = {c.trajectories / job_s:.1f} trajectories/s")
        version = open_version(published.path)

        dexes = {g: load_dex(g) for g in range(1, 10)}
        records = []
        sim_s = 0.0
        for fmt in cfg.effective_formats:
            chunk = generated.chunks([fmt], args.parse_battles, 7, "heuristic", "random", args.parse_battles)[0]
            recs, secs = _timed(lambda chunk=chunk: list(generated.generate(chunk)))
            records += recs
            sim_s += secs
        parsed, gen_s = _timed(lambda: in_tables(generated.parse(b, p, dexes, None)[0] for b, p in records))
        gen_traj = 2 * len(records)
        print(f"simulator (node, 1 core): {len(records) / sim_s:.1f} battles/s")
        print(f"generated source parse (1 core): {gen_traj / gen_s:.1f} trajectories/s "
              f"({sum(t.num_rows for t in parsed) / gen_s:.0f} turns/s)")

        files_dir = work / "metamon"
        files_dir.mkdir()
        paths = write_metamon_files(version, files_dir)
        formats = known_formats()
        _, meta_s = _timed(lambda: in_tables(metamon.parse(p.name, p.read_bytes(), None, formats)[0] for p in paths))
        print(f"metamon source parse (1 core, {len(paths)} files): {len(paths) / meta_s:.1f} trajectories/s")

        for path in paths:  # warm the page cache so both loaders read from memory
            path.read_bytes()
        shard_loader(version)
        shard_turns, shard_s = _timed(lambda: shard_loader(version))
        naive_turns, naive_s = _timed(lambda: naive_loader(paths, featurize=False))
        feat_turns, feat_s = _timed(lambda: naive_loader(paths, featurize=True))
        assert shard_turns == naive_turns == feat_turns
        shard_rate, naive_rate, feat_rate = shard_turns / shard_s, naive_turns / naive_s, feat_turns / feat_s
        print(f"shards -> batches: {shard_rate:,.0f} turns/s")
        print(f"naive lz4+json.loads per file: {naive_rate:,.0f} turns/s  (shards {shard_rate / naive_rate:.1f}x)")
        print(f"naive lz4+json.loads+featurize: {feat_rate:,.0f} turns/s  (shards {shard_rate / feat_rate:.1f}x)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

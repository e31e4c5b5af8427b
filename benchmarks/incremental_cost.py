"""What adding one archive to a hundred costs with ``--reuse-from``, against parsing all of them again: one run.

    python benchmarks/incremental_cost.py                  # 100 + 1 archives of 40 games (~3 min on 2 cores)
    python benchmarks/incremental_cost.py --games 160      # 4x the parsing per archive (15 GB of inputs, ~12 min)
    python benchmarks/incremental_cost.py --quick          # smoke run: 20 + 1 archives of 4 games

Inputs (made first, in a temporary folder, untimed): Melee archives (``.zip``, stored) of synthetic games of 2,400 to
2,640 frames (``pipelines.melee.archives.synthetic_game``, ~0.95 MB each: the games ``--source slp`` makes without
``--input``). A few distinct games are made and each archive member is one of them with its ``startAt`` stamp
rewritten, so every member has other bytes (the writer drops games with the same bytes) at no generation cost; the
parse reads every frame either way. The earlier version is made from archives ``a000``..``a100`` without ``a050``;
then ``a050`` is added, in the middle of the sorted order, not at its end.

Timed (wall time of ``run(cfg)`` in this process, on one local Ray started before either, ``--input`` and ``--out``
on local disk, 2 parse actors of 0.5 CPU):
1. **full**: all 101 archives parsed from scratch.
2. **incremental**: the same 101 archives with ``--reuse-from`` the earlier version: the 100 read tasks it holds are
   hard-linked and checked against their sha256, one archive is parsed, and index, quarantine, tasks file and
   manifest are written for all 101.
The printed ratio is incremental / full; the two versions are compared file by file (they must be the same bytes).
Beyond the one archive's parse, what the incremental run spends is mostly the job's fixed start (Ray Data's executor
and two new parse actors, 8-10 s on a loaded 2-core machine), which the full run pays too: the ratio falls as the
archives grow (docs/pipeline.md, "Growing a version").

``--shard-size-mb`` (default: a group's input bytes are 90% of an archive's, 1.96 MiB for 40 games: a group is
--shard-size-mb / ``SlpSource.shard_bytes_per_input_byte`` 0.06) makes each archive a read task of its own, as an
archive of a group or more is (512 MiB of .slp at the default 128 MiB shards). With items smaller than a group,
a read task holds several and adding one item re-parses the whole task that takes it: the run also prints, from the
plans alone (no parsing), the share of the input bytes the incremental run would parse at other shard sizes.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import tempfile
import time
import zipfile
from pathlib import Path

from pipelines.job.read import group_input_bytes
from pipelines.melee.archives import synthetic_game
from pipelines.melee.source import SlpSource
from pipelines.parse_replays import ParseConfig, run
from pipelines.ray_start import start_ray
from pipelines.stages import pack_tasks, task_key
from pipelines.writer.naming import BYTES_PER_MIB
from shards_schema.manifest import MANIFEST_NAME, Manifest

STAMP = b"2026-01-02T03:04:05Z"
"""The ``startAt`` of every synthetic game (``pipelines/melee/synthetic.py``): rewritten per member."""
CPUS = 2


def make_archives(root: Path, archives: int, games: int, distinct: int) -> list[str]:
    """``a000.zip``.. in ``root``, each of ``games`` members with bytes of their own; returns the archive names."""
    root.mkdir(parents=True)
    base = [synthetic_game(i, 3) for i in range(distinct)]
    assert all(b.count(STAMP) == 1 for b in base)
    names = []
    for a in range(archives):
        name = f"a{a:03d}.zip"
        with zipfile.ZipFile(root / name, "w", zipfile.ZIP_STORED) as zf:
            for g in range(games):
                stamp = f"2026-01-{1 + a % 28:02d}T{g // 60 % 24:02d}:{g % 60:02d}:{a // 28:02d}Z".encode()
                zf.writestr(f"games/{a:03d}-{g:03d}.slp", base[(a * games + g) % distinct].replace(STAMP, stamp))
        names.append(name)
    return names


def link_all(src: Path, dst: Path, names: list[str]) -> None:
    dst.mkdir(parents=True)
    for name in names:
        os.link(src / name, dst / name)


def planned_share(old: str, new: str, shard_size_mb: float) -> tuple[float, int]:
    """Of the grown inputs' bytes, the share in read tasks the earlier plan lacks (what ``--reuse-from`` parses),
    at ``shard_size_mb``; and the number of read tasks."""
    def tasks(root: str):
        source = SlpSource(ParseConfig(source="slp", input=root, out="unused").inputs)
        return pack_tasks(source.plan().items, group_input_bytes(shard_size_mb, source))

    before = {task_key(t) for t in tasks(old)}
    after = tasks(new)
    total = sum(i["bytes"] for t in after for i in t)
    return sum(i["bytes"] for t in after if task_key(t) not in before for i in t) / total, len(after)


def files(folder: Path) -> dict[str, bytes]:
    """Every file of a version by name; the manifest without its ``git_commit`` (a commit made by someone else
    between the two runs changes it, not the version)."""
    out = {p.name: p.read_bytes() for p in folder.iterdir()}
    manifest = Manifest.from_json(out[MANIFEST_NAME].decode())
    out[MANIFEST_NAME] = dataclasses.replace(manifest, git_commit="-").to_json().encode()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--archives", type=int, default=100, help="archives of the earlier version")
    parser.add_argument("--games", type=int, default=40, help="games per archive")
    parser.add_argument("--distinct", type=int, default=16, help="distinct games generated (members rewrite them)")
    parser.add_argument("--shard-size-mb", type=float, default=None,
                        help="default: a group's input bytes are 90%% of an archive's")
    parser.add_argument("--quick", action="store_true", help="20 + 1 archives of 4 games, 0.2 MiB shards")
    parser.add_argument("--work-dir", default=None, help="where inputs and versions go (default: a temp dir, removed)")
    args = parser.parse_args()
    if args.quick:
        args.archives, args.games, args.distinct = 20, 4, 8
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="rf-incremental-"))
    try:
        t0 = time.monotonic()
        names = make_archives(work / "all", args.archives + 1, args.games, args.distinct)
        added = names[len(names) // 2]
        link_all(work / "all", work / "earlier-in", [n for n in names if n != added])
        input_mb = sum((work / "all" / n).stat().st_size for n in names) / 1e6
        if args.shard_size_mb is None:
            archive_bytes = min((work / "all" / n).stat().st_size for n in names)
            args.shard_size_mb = round(0.9 * archive_bytes * SlpSource.shard_bytes_per_input_byte / BYTES_PER_MIB, 3)
        print(f"inputs: {len(names)} archives of {args.games} games ({input_mb:.0f} MB), earlier version without "
              f"{added}; made in {time.monotonic() - t0:.0f}s")

        def config(inputs: str, out: str, **extra) -> ParseConfig:
            return ParseConfig(source="slp", input=inputs, out=out, shard_size_mb=args.shard_size_mb,
                               num_cpus=CPUS, num_parse_actors=2, cpus_per_actor=0.5, progress_every_s=1e9, **extra)

        start_ray(num_cpus=CPUS, log_to_driver=False)
        quiet = {"log": lambda *_: None}
        t = time.monotonic()
        earlier = run(config(str(work / "earlier-in"), str(work / "earlier")), **quiet)
        earlier_s = time.monotonic() - t
        t = time.monotonic()
        full = run(config(str(work / "all"), str(work / "full")), **quiet)
        full_s = time.monotonic() - t
        logs: list[str] = []
        t = time.monotonic()
        grown = run(config(str(work / "all"), str(work / "incremental"), reuse_from=str(earlier.path)),
                    log=logs.append)
        incremental_s = time.monotonic() - t
        identical = files(full.path) == files(grown.path)
        c = full.manifest.counts
        print(f"earlier version ({len(names) - 1} archives): {earlier_s:.1f}s; {c.written} games, {c.rows:,} frames "
              f"in the full version, {len(full.manifest.files)} shards at --shard-size-mb {args.shard_size_mb}")
        print(next((line for line in logs if "reusing" in line), "no reuse line"))
        print(f"full run:        {full_s:7.1f}s  ({c.rows / full_s:,.0f} frames/s)")
        print(f"incremental run: {incremental_s:7.1f}s  (--reuse-from the earlier version)")
        print(f"incremental / full = {incremental_s / full_s:.3f} ({100 * incremental_s / full_s:.1f}%); "
              f"versions byte-identical: {'yes' if identical else 'NO'}")
        print("planned share of the input bytes parsed again, by --shard-size-mb (from the plans; no parsing):")
        for mb in sorted({args.shard_size_mb, 8.0, 32.0, 128.0}):
            share, num_tasks = planned_share(str(work / "earlier-in"), str(work / "all"), mb)
            print(f"  {mb:6g} MiB: {100 * share:5.1f}% ({num_tasks} read tasks)")
        if not identical:
            raise SystemExit("the incremental version differs from the full run's")
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

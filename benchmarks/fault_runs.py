"""Seeded fault-injected parse jobs against a clean run: do store faults cost retries, or inputs?

    python benchmarks/fault_runs.py                    # 4 fault kinds x 5 seeds + an outage, ~10 min on 2 cores
    python benchmarks/fault_runs.py --seeds 2 --battles 8   # smoke run

Run it from a checkout nothing commits to while it runs (``git worktree add ../fault-runs HEAD``): the manifest
records the git commit (with ``-dirty`` for uncommitted changes), so a commit between the clean run and a fault run
makes their manifests differ.

A local S3 server (moto, 127.0.0.1) holds ``--battles`` per format of ``../shared/data/pokemon/bench_replays`` as
``showdown-json`` files; the job reads them and writes its version to the same server. The clean run goes through
the fault proxy with no faults (its request count is the baseline); every other run goes through the proxy with a
seeded share of faults on every request, reads and writes alike (``tools/fault_proxy.py``: ``503 SlowDown``, a
connection reset mid-body, a stall). ``outage`` throttles nine requests in ten for the inputs' objects (not their
listing), so some read keeps failing after every retry: the right outcome there is a job that stops without
publishing.

Per run it prints the faults injected, the requests beyond the clean run's (the retries they caused), the outcome,
and whether the published version equals the clean one byte for byte (every file the manifest names, and the
manifest). A partial version is one published with fewer inputs written than the clean run's: the count must be 0.
``--csv`` writes the rows.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

# tools/ is not an installed package (pyproject's packages.find): the checkout's root on the path imports it
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_REGION="us-east-1")

from pipelines.parse_replays import ParseConfig, run, store_failure
from pipelines.ray_start import start_ray
from shards_schema import storage
from shards_schema.reader import open_version
from tools.fault_proxy import FaultProxy, Faults
from tools.local_s3 import LocalS3Server, create_bucket

REPO_ROOT = Path(__file__).resolve().parents[1]
BENCH = REPO_ROOT.parent / "shared" / "data" / "pokemon" / "bench_replays"
KINDS = {
    "throttle": dict(slow_down=0.3),
    "reset": dict(reset=0.2),
    "stall": dict(stall=0.05, stall_s=2.0),
    "mixed": dict(slow_down=0.15, reset=0.1, stall=0.02, stall_s=2.0),
}
OUTAGE = dict(slow_down=0.9, keys="/inputs/.+[.]json$")
"""The inputs' objects throttled nine times in ten, their listing not: the job plans, then some read keeps failing."""


def version_bytes(uri: str) -> dict[str, bytes]:
    """Every file of a published version by name, manifest included, read straight from the store."""
    m = open_version(uri).manifest
    names = [e.path for e in (*m.files, m.index_file, m.quarantine_file)] + ["manifest.json"]
    names += [m.card.path] if m.card is not None else []
    return {name: storage.read_bytes(storage.join(uri, name)) for name in names}


def one_run(name: str, seed: int, faults: Faults, upstream: str, inputs: str, out: str) -> dict:
    with FaultProxy(upstream, faults) as proxy:
        os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint
        start = time.monotonic()
        try:
            published, failure = run(ParseConfig.tiny(source="showdown-json", input=inputs, out=out),
                                     log=lambda *_: None), None
        except Exception as err:  # noqa: BLE001 - the outcome being measured; anything but a store failure re-raises
            published, failure = None, store_failure(err)
            if failure is None:
                raise
        finally:
            os.environ["AWS_ENDPOINT_URL"] = upstream
        elapsed_s = time.monotonic() - start
    counts = proxy.counts()
    manifests = [u for u in storage.list_files(out) if u.endswith("/manifest.json")] if storage.exists(out) else []
    return {"kind": name, "seed": seed, "seconds": round(elapsed_s, 1), "requests": counts["requests"],
            **{k: counts[k] for k in ("slow_down", "reset", "stall")},
            "outcome": "published" if published else "failed, nothing published" if not manifests else "PARTIAL",
            "written": published.manifest.counts.written if published else None,
            "version": published.path.rsplit("/", 1)[-1] if published else "",
            "failure": str(failure)[:160] if failure else "", "_uri": published.path if published else None}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5, help="seeded runs per fault kind")
    parser.add_argument("--battles", type=int, default=24, help="battles per format (gen1ou, gen9ou)")
    parser.add_argument("--kinds", nargs="+", default=[*KINDS, "outage"], choices=[*KINDS, "outage"],
                        help="fault kinds to run (the clean run always runs)")
    parser.add_argument("--csv", type=Path, help="write the rows here")
    args = parser.parse_args(argv)
    if not BENCH.exists():
        sys.exit(f"{BENCH} is not available")
    start_ray(num_cpus=2, log_to_driver=False)
    with tempfile.TemporaryDirectory() as tmp:
        server = LocalS3Server(Path(tmp) / "moto.log")
        try:
            os.environ["AWS_ENDPOINT_URL"] = server.endpoint
            create_bucket(server.endpoint, "faults")
            inputs = "s3://faults/inputs"
            for fmt in ("gen1ou", "gen9ou"):
                for path in sorted((BENCH / fmt).glob("*.json"))[:args.battles]:
                    storage.write_bytes(f"{inputs}/{fmt}/{path.name}", path.read_bytes())
            clean = one_run("clean", 0, Faults(), server.endpoint, inputs, "s3://faults/clean")
            reference = version_bytes(clean["_uri"])
            rows = [clean]
            plan = [(kind, seed, Faults(seed=seed, **shares)) for kind, shares in KINDS.items() if kind in args.kinds
                    for seed in range(1, args.seeds + 1)]
            plan += [("outage", 1, Faults(seed=1, **OUTAGE))] if "outage" in args.kinds else []
            for kind, seed, faults in plan:
                row = one_run(kind, seed, faults, server.endpoint, inputs, f"s3://faults/{kind}-{seed}")
                if row["_uri"] is not None:
                    got = version_bytes(row["_uri"])
                    differ = sorted(n for n in reference.keys() | got.keys() if reference.get(n) != got.get(n))
                    row["outcome"] += ", equal to clean" if not differ else f", DIFFERENT BYTES in {differ}"
                    if row["written"] < clean["written"]:
                        row["outcome"] = "PARTIAL"
                rows.append(row)
                print({k: v for k, v in row.items() if not k.startswith("_")}, flush=True)
        finally:
            server.stop()
    baseline = clean["requests"]
    print(f"\nclean run: {clean['written']} inputs written, {baseline} requests, {clean['seconds']} s")
    print("| faults | runs | 503 SlowDown | resets mid-body | stalls | extra requests (retries) | published, equal "
          "to clean | failed, nothing published | partial or different versions published |")
    print("|---|---|---|---|---|---|---|---|---|")
    by_kind: dict[str, list[dict]] = {}
    for row in rows[1:]:
        by_kind.setdefault(row["kind"], []).append(row)
    totals: Counter = Counter()
    for kind, group in by_kind.items():
        c = Counter()
        for r in group:
            c.update({k: r[k] for k in ("slow_down", "reset", "stall")})
            c["extra"] += r["requests"] - baseline
            c["equal"] += r["outcome"] == "published, equal to clean"
            c["failed"] += r["outcome"] == "failed, nothing published"
            c["bad"] += "PARTIAL" in r["outcome"] or "DIFFERENT" in r["outcome"]
        c["runs"] = len(group)
        totals.update(c)
        print(f"| {kind} | {c['runs']} | {c['slow_down']} | {c['reset']} | {c['stall']} | {c['extra']} | "
              f"{c['equal']} | {c['failed']} | {c['bad']} |")
    t = totals
    print(f"| **all** | {t['runs']} | {t['slow_down']} | {t['reset']} | {t['stall']} | {t['extra']} | {t['equal']} | "
          f"{t['failed']} | {t['bad']} |")
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            writer = csv.DictWriter(fh, [k for k in rows[0] if not k.startswith("_")], extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()

"""The parse job through a store that throttles, resets connections mid-body and stalls (the fault proxy between
every client and the local S3 server): retried until it reads every input and publishes the clean run's version,
byte for byte. ``benchmarks/fault_runs.py`` repeats this over many seeds for the README's table."""

from __future__ import annotations

from conftest import shared_data

from pipelines.parse_replays import ParseConfig, run
from shards_schema import storage
from shards_schema.reader import open_version
from tools.fault_proxy import FaultProxy, Faults

BATTLES_PER_FORMAT = 8


def _upload_battles(bucket: str) -> str:
    inputs = f"{bucket}/inputs"
    for fmt in ("gen1ou", "gen9ou"):
        for path in sorted(shared_data("pokemon", "bench_replays", fmt).glob("*.json"))[:BATTLES_PER_FORMAT]:
            storage.write_bytes(f"{inputs}/{fmt}/{path.name}", path.read_bytes())
    return inputs


def version_bytes(uri: str) -> dict[str, bytes]:
    """Every file of a published version by name, manifest included, read straight from the store."""
    version = open_version(uri)
    m = version.manifest
    names = [e.path for e in (*m.files, m.index_file, m.quarantine_file)] + ["manifest.json"]
    return {name: storage.read_bytes(storage.join(uri, name)) for name in names}


def test_a_faulty_store_costs_retries_not_inputs(ray_local, s3_server, s3_bucket, monkeypatch):
    inputs = _upload_battles(s3_bucket)

    def parse(out: str):
        return run(ParseConfig.tiny(source="showdown-json", input=inputs, out=out), log=lambda *_: None)

    clean = parse(f"{s3_bucket}/clean")
    faults = Faults(seed=3, slow_down=0.2, reset=0.1, stall=0.03, stall_s=1.0)
    with FaultProxy(s3_server, faults) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)  # the driver and, through the job, every worker
        faulty = parse(f"{s3_bucket}/faulty")
    monkeypatch.undo()
    injected = proxy.counts()
    assert injected["slow_down"] > 0 and injected["reset"] > 0, injected
    assert faulty.manifest.counts.written == 2 * BATTLES_PER_FORMAT and faulty.manifest.counts.quarantined == {}
    assert faulty.path.rsplit("/", 1)[-1] == clean.path.rsplit("/", 1)[-1]
    assert version_bytes(faulty.path) == version_bytes(clean.path)

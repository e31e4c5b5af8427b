"""The parse job through a store that throttles, resets connections mid-body and stalls (the fault proxy between
every client and the local S3 server): retried until it reads every input and publishes the clean run's version,
byte for byte. ``benchmarks/fault_runs.py`` repeats this over many seeds for the README's table."""

from __future__ import annotations

import torch
from conftest import copy_tree, shared_data

from pipelines.parse_replays import ParseConfig, run
from shards_schema import storage
from shards_schema.reader import open_version
from tools.fault_proxy import FaultProxy, Faults
from training import world_model
from training.checkpoints import load_state
from training.loop import latest_checkpoint
from training.world_model import WorldModelTrainConfig

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


def test_a_training_run_through_a_faulty_store_ends_with_the_clean_weights(ray_local, synthetic_frames, s3_server,
                                                                           s3_bucket, tmp_path, monkeypatch):
    """Shards read from and checkpoints written to S3 through the proxy: the run ends at the weights of the same run
    on local disk, bit for bit."""
    monkeypatch.chdir(tmp_path)  # a remote --out keeps metrics.csv under ./runs/<bucket>/<key>
    shards = f"{s3_bucket}/shards/{synthetic_frames.name}"
    copy_tree(str(synthetic_frames), shards)
    train = dict(steps=8, checkpoint_every=4, eval_every=100)
    world_model.run(WorldModelTrainConfig.tiny(shards=str(synthetic_frames), out=str(tmp_path / "clean"), **train))
    faults = Faults(seed=5, slow_down=0.15, reset=0.05, stall=0.02, stall_s=1.0)
    with FaultProxy(s3_server, faults) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        out = f"{s3_bucket}/runs/wm"
        world_model.run(WorldModelTrainConfig.tiny(shards=shards, out=out, **train))
        faulty = load_state(storage.join(latest_checkpoint(out), "state.pt"))
    injected = proxy.counts()
    assert injected["slow_down"] + injected["reset"] > 0, injected
    clean = load_state(storage.join(latest_checkpoint(str(tmp_path / "clean")), "state.pt"))
    assert clean["step"] == faulty["step"] == 8
    assert clean["model"].keys() == faulty["model"].keys()
    assert all(torch.equal(clean["model"][k], faulty["model"][k]) for k in clean["model"])

"""Trainers by URI: shards read from and checkpoints written to an S3 bucket (moto's server on 127.0.0.1); a run
resumed from the store continues with the same losses as an uninterrupted local run on the local copy, also when the
store throttles, resets connections and stalls (the fault proxy in front of it)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from conftest import copy_tree

from shards_schema import storage
from tools.fault_proxy import FaultProxy, Faults
from training.checkpoints import load_state
from training.loop import latest_checkpoint, local_run_folder


def _losses(run_folder: Path, column: str) -> dict[int, float]:
    with open(run_folder / "metrics.csv") as fh:
        return {int(r["step"]): round(float(r[column]), 6) for r in csv.DictReader(fh)}


def _on_store_only(out: str) -> str:
    """The newest checkpoint of a remote run: on the store, and nothing of Ray Train's under the local run folder."""
    latest = latest_checkpoint(out)
    assert latest is not None and latest.startswith(out + "/ray/")
    assert not (local_run_folder(out) / "ray").exists()
    return latest


def test_offline_rl_on_s3_resumes_exactly(s3_bucket, tiny_generated, tmp_path, monkeypatch):
    from training.offline_rl import TrainConfig, run

    monkeypatch.chdir(tmp_path)  # a remote --out keeps metrics.csv under ./runs/<bucket>/<key>
    _, published, _ = tiny_generated
    shards = f"{s3_bucket}/out/pokemon_turns/{published.path.name}"
    copy_tree(str(published.path), shards)
    straight = tmp_path / "straight"
    run(TrainConfig.tiny(shards=str(published.path), out=str(straight), steps=8, log_every=1))
    out = f"{s3_bucket}/runs/bc"
    run(TrainConfig.tiny(shards=shards, out=out, steps=4, log_every=1))
    assert load_state(storage.join(_on_store_only(out), "state.pt"))["step"] == 4
    run(TrainConfig.tiny(shards=shards, out=out, steps=8, log_every=1, resume=True))
    assert load_state(storage.join(_on_store_only(out), "state.pt"))["step"] == 8
    a, b = _losses(straight, "loss"), _losses(local_run_folder(out), "loss")
    assert sorted(b) == list(range(1, 9))
    assert [a[s] for s in range(1, 9)] == [b[s] for s in range(1, 9)]  # the same rows, and an exact resume


@pytest.fixture(scope="module")
def melee_version(ray_local, tmp_path_factory):
    """A melee_frames version of the parse job's synthetic tiny input (no shared data needed)."""
    from pipelines.parse_replays import ParseConfig
    from pipelines.parse_replays import run as parse

    return parse(ParseConfig.tiny(source="slp", out=str(tmp_path_factory.mktemp("melee"))), log=lambda *_: None).path


def test_world_model_on_a_faulty_s3_resumes_exactly(s3_server, s3_bucket, melee_version, tmp_path, monkeypatch):
    """Both runs on the store read their shards and write their checkpoints through the fault proxy: retried, they
    log the uninterrupted local run's losses, step for step."""
    from training.world_model import WorldModelTrainConfig, load_model, run

    monkeypatch.chdir(tmp_path)
    shards = f"{s3_bucket}/out/melee_frames/{melee_version.name}"
    copy_tree(str(melee_version), shards)
    cfg = dict(log_every=1, scheduled_sampling=0.5)
    straight = tmp_path / "straight"
    run(WorldModelTrainConfig.tiny(shards=str(melee_version), out=str(straight), steps=8, **cfg))
    out = f"{s3_bucket}/runs/wm"
    with FaultProxy(s3_server, Faults(seed=5, slow_down=0.15, reset=0.05, stall=0.02, stall_s=1.0)) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)  # the driver and, through run_storage, the workers
        run(WorldModelTrainConfig.tiny(shards=shards, out=out, steps=4, **cfg))
        run(WorldModelTrainConfig.tiny(shards=shards, out=out, steps=8, resume=True, **cfg))
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)  # the store itself again, for the checks below
    injected = proxy.counts()
    assert injected["slow_down"] + injected["reset"] > 0, injected
    latest = _on_store_only(out)
    a, b = _losses(straight, "loss_total"), _losses(local_run_folder(out), "loss_total")
    assert sorted(b) == list(range(1, 9))
    assert [a[s] for s in range(1, 9)] == [b[s] for s in range(1, 9)]
    assert load_model(storage.join(latest, "state.pt")).num_parameters() > 0  # play/evaluate take the URI too


def test_workers_get_the_store_location_not_the_keys(s3_server):
    """Ray writes a task's runtime_env into runtime_env_agent.log, so only where the store is travels that way."""
    from training.loop import run_storage

    settings = run_storage("s3://bucket/runs/x")
    env = settings["worker_runtime_env"]["env_vars"]
    assert env["AWS_ENDPOINT_URL"] == s3_server and env["AWS_REGION"] == "us-east-1"
    assert not [k for k in env if any(word in k for word in ("KEY", "SECRET", "TOKEN"))]
    assert settings["storage_path"] == "bucket/runs/x/ray" and settings["storage_filesystem"].type_name == "s3"
    assert run_storage("/tmp/run") == {"storage_path": "/tmp/run/ray"}

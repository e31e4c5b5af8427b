"""Trainers by URI: shards read from and checkpoints written to an S3 bucket (moto's server on 127.0.0.1); a run
resumed from the store continues with the same losses as an uninterrupted local run on the local copy, also when the
store throttles and resets connections (the fault proxy in front of it). Every trainer runs through ``fit()``; the
Pokémon policy's S3 run and resume are checked on the two-node cluster (``tests/cluster/test_cluster_s3.py``)."""

from __future__ import annotations

import csv
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import copy_tree

from shards_schema import storage
from tools.fault_proxy import FaultProxy, Faults
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


@pytest.mark.slow
def test_world_model_on_a_faulty_s3_resumes_exactly(s3_server, s3_bucket, synthetic_frames, tmp_path, monkeypatch):
    """Both runs on the store read their shards and write their checkpoints through the fault proxy: retried, they
    log the uninterrupted local run's losses, step for step. The shards: the session's synthetic games
    (conftest's ``synthetic_frames``, no shared data needed)."""
    from training.melee.world_model import WorldModelTrainConfig, load_model, run

    monkeypatch.chdir(tmp_path)
    shards = f"{s3_bucket}/out/melee_frames/{synthetic_frames.name}"
    copy_tree(str(synthetic_frames), shards)
    cfg = dict(log_every=1, scheduled_sampling=0.5, eval_every=100)
    straight = tmp_path / "straight"
    out = f"{s3_bucket}/runs/wm"
    # the uninterrupted local run beside the two on the store, from a thread (Ray Train's fit() takes its SIGINT
    # handler in the main thread only): most of a tiny run is its actors' start-up (16 s of 19 in one measured run:
    # controller, worker, dataset manager). It reads and writes local folders only, so the store's endpoint set
    # below does not reach it.
    with ThreadPoolExecutor(1) as pool:
        uninterrupted = pool.submit(run, WorldModelTrainConfig.tiny(shards=str(synthetic_frames), out=str(straight),
                                                                    steps=8, **cfg))
        # few faults: each throttled request costs the S3 client's backoff (the SDK waits longer after a 503), and
        # the parse job's tests and benchmarks/fault_runs.py meet hundreds
        with FaultProxy(s3_server, Faults(seed=5, slow_down=0.05, reset=0.05)) as proxy:
            monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)  # the driver and, through run_storage, the workers
            run(WorldModelTrainConfig.tiny(shards=shards, out=out, steps=4, **cfg))
            run(WorldModelTrainConfig.tiny(shards=shards, out=out, steps=8, resume=True, **cfg))
        uninterrupted.result()
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

"""Pieces every Ray Train entry point shares: a worker's start, where a run's checkpoints and side files go (local
or an object store), finding the checkpoint to resume from, metric writers (CSV always, Weights & Biases offline
unless the user is logged in), and the local Ray start. ``training/fit.py`` runs the loop with them;
``training/checkpoints.py`` says what a checkpoint holds."""

from __future__ import annotations

import csv
import os
import random
from pathlib import Path

import numpy as np
import pyarrow.fs as pafs

from pipelines.console import metrics_line
from pipelines.ray_start import start_ray
from shards_schema import storage

REPO_ROOT = Path(__file__).resolve().parents[1]


def start_worker(cfg, tag: str):
    """A Ray Train worker's start: intra-op threads, rank, device, TF32 on CUDA, the seed, and one line saying what
    it runs on. ``cfg`` has ``torch_threads``, ``cpus_per_worker`` and ``seed``. Returns (rank, world, device, cuda)."""
    # Here, not at the top: ray must first be imported by pipelines.ray_start.start_ray (its single-machine switch is
    # read once, at import); and this module serves the drivers (storage, metrics) that need no torch (1.9 s to import)
    import ray.train
    import ray.train.torch
    import torch

    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    device = ray.train.torch.get_device()
    cuda = device.type == "cuda"
    if rank == 0:
        print(f"[{tag}] device: {device} ({torch.cuda.get_device_name(device) if cuda else 'CPU, fp32'}), "
              f"{world} worker(s), {torch.get_num_threads()} intra-op thread(s) each")
        if not cuda and torch.get_num_threads() > max(1, int(cfg.cpus_per_worker)):
            print(f"[{tag}] warning: {torch.get_num_threads()} intra-op threads on {cfg.cpus_per_worker} reserved "
                  "CPU(s) oversubscribe the cores; steps slow down several-fold when anything else runs. Leave "
                  "--torch-threads at 0 or raise --cpus-per-worker.")
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    # every generator a recipe may draw from: with torch's alone, two runs of one seed differed wherever a recipe drew
    # from NumPy or Python (their workers start from OS entropy); a restarted worker restores all three from its
    # checkpoint
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    random.seed(cfg.seed)
    return rank, world, device, cuda


def latest_checkpoint(out: str | Path) -> str | None:
    """The newest checkpoint folder (URI) under ``OUT/ray``, by modification time; the path breaks ties (object
    stores keep whole seconds, and a run's ``checkpoint_00000N`` folders and the time-stamped run names sort in
    the order they were written)."""
    root = storage.join(str(out), "ray")
    fs, path = storage.resolve(root)
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        return None
    found = [e for e in fs.get_file_info(pafs.FileSelector(path, recursive=True))
             if e.type == pafs.FileType.File and e.base_name == "state.pt"]
    if not found:
        return None
    newest = max(found, key=lambda e: (e.mtime_ns or 0, e.path))
    return storage.parent(storage.join(root, storage.relative_path(newest.path, path)))


def checkpoint_uri(checkpoint, out: str) -> str:
    """A Ray Train checkpoint's folder as a URI (its ``path`` is inside its filesystem: ``bucket/key`` on S3)."""
    return checkpoint.path if storage.is_local(out) else f"{storage.scheme(out)}://{checkpoint.path}"


def run_storage(out: str) -> dict:
    """``RunConfig`` arguments that put Ray Train's checkpoints under ``OUT/ray`` on ``out``'s store, so ``--resume``
    works from any node; and the worker environment that lets the workers reach that store."""
    fs, path = storage.resolve(storage.join(out, "ray"))
    if storage.is_local(out):
        return {"storage_path": path}
    return {"storage_path": path, "storage_filesystem": fs, "worker_runtime_env": {"env_vars": storage.location_env()}}


def check_workers_reach(*uris: str) -> None:
    """Fail before training when a Ray worker cannot list the remote ``uris`` (their parent folders when they do not
    exist yet): a worker with no credentials would otherwise fail only at its first read or checkpoint, deep in a
    Ray Train traceback. Local paths are not checked (a local path on a cluster is the user's choice)."""
    import ray  # after start_ray, which imports it first (see start_worker)

    remote = [u for u in uris if not storage.is_local(u)]
    if not remote:
        return

    def reach(targets: list[str]) -> str | None:
        for uri in targets:
            try:
                storage.exists(uri)
            except OSError as err:
                return f"{uri}: {err}"
        return None

    task = ray.remote(num_cpus=0, runtime_env={"env_vars": storage.location_env()})(reach)
    problem = ray.get(task.remote(remote))
    if problem:
        raise PermissionError(
            f"a Ray worker cannot reach {problem}. Workers read the store with the credentials of their own node: "
            "the environment Ray was started with (start Ray, or this script, after exporting AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY), ~/.aws, or the node's instance profile (ray_cluster.yaml); the endpoint and "
            f"region are passed from this process ({', '.join(storage.LOCATION_VARS)}).")


def local_run_folder(out: str) -> Path:
    """Where the driver-side files of a run go (metrics CSVs, the W&B folder): ``out`` itself when it is local;
    for a remote ``out`` (``s3://...``), ``runs/<bucket and key>`` under the working folder of rank 0's process, since
    CSV appends and W&B's own files need a local disk. Checkpoints go to ``out`` either way."""
    if storage.is_local(out):
        return Path(storage.local_path(out))
    return Path.cwd() / "runs" / out.replace("://", "/", 1)


class MetricsWriter:
    """CSV always (one file per table: ``metrics.csv``, ``eval.csv``, ...); Weights & Biases offline unless the user
    is logged in (or as ``wandb_mode`` says), silent but for one line saying where the run is. Each row is also
    printed: the ``metrics`` table as the run's progress line (``pipelines/console.metrics_line``, of
    ``total_steps``), the others as ``name=value``."""

    def __init__(self, out: Path, config: dict, wandb_mode: str, tag: str = "train", total_steps: int | None = None):
        out.mkdir(parents=True, exist_ok=True)
        self.out, self.tag, self.total_steps = out, tag, total_steps
        self.files: dict[str, tuple] = {}
        self.run = None
        mode = wandb_mode
        if mode == "auto":
            mode = "online" if os.environ.get("WANDB_API_KEY") or (Path.home() / ".netrc").exists() else "offline"
        if mode != "disabled":
            import wandb  # 1.0 s to import, paid only by a run that logs to W&B (not the tests' and tiny runs)

            # silent: W&B's own dozen lines (banner, offline hints, the summary at finish) say less than the one here
            self.run = wandb.init(project="replayforge", dir=str(out), mode=mode, config=config, resume="allow",
                                  settings=wandb.Settings(silent=True, console="off"))
            if mode == "offline":
                folder = Path(self.run.dir).parent
                print(f"[{tag}] W&B offline run in {folder}; upload it with: wandb sync {folder}")
            else:
                print(f"[{tag}] W&B run: {self.run.url}")

    def write(self, metrics: dict, table: str = "metrics", echo: bool = True) -> None:
        if table not in self.files:
            handle = open(self.out / f"{table}.csv", "a", newline="")
            writer = csv.DictWriter(handle, fieldnames=list(metrics))
            if handle.tell() == 0:
                writer.writeheader()
            self.files[table] = (handle, writer)
        handle, writer = self.files[table]
        writer.writerow(metrics)
        handle.flush()
        if echo:
            self.echo(metrics, table)
        if self.run is not None:
            self.run.log(metrics, step=metrics["step"])

    def echo(self, metrics: dict, table: str = "metrics") -> None:
        """Print a row as ``write`` does, without storing it."""
        if table == "metrics":
            print(metrics_line(self.tag, metrics, self.total_steps))
        else:
            print(f"[{self.tag}] {table}: " + " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                                      for k, v in metrics.items()))

    def close(self) -> None:
        for handle, _ in self.files.values():
            handle.close()
        if self.run is not None:
            self.run.finish()


def init_local_ray() -> None:
    """Attach to RAY_ADDRESS when set (a cluster, ``ray job submit``), else start a private local instance on
    127.0.0.1; token auth on for both (pipelines/ray_start.py)."""
    # Ray Train replaces print in its workers by a logger call that also prints when the worker's stdout is wrapped,
    # as Ray's workers' is: every line of a trainer came out twice. Ray Train hands this switch on to its workers.
    os.environ.setdefault("RAY_TRAIN_ENABLE_PRINT_PATCH", "0")
    start_ray(num_cpus=2, log_to_driver=True)

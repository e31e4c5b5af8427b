"""Pieces every training entry point shares that need no Ray: where a run's checkpoints and side files go (local
or an object store), finding the checkpoint to resume from, metric writers (CSV always, Weights & Biases offline
unless the user is logged in), and the local Ray start (``pipelines/ray_start.py``). ``training/fit.py``, the Ray
Train side, runs the loop with them; ``training/checkpoints.py`` says what a checkpoint holds."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pyarrow.fs as pafs

from pipelines.console import metrics_line
from pipelines.ray_start import start_ray
from shards_schema import storage

REPO_ROOT = Path(__file__).resolve().parents[1]


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

"""A Ray Train worker killed mid-run (SIGKILL, by PID): the run goes on from its last checkpoint (the trainer's
``max_failures``) and ends with the weights of an uninterrupted run."""

from __future__ import annotations

import csv
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from training.checkpoints import read_checkpoint
from training.fit import TrainerConfig, fit
from training.pokemon.offline_rl import PolicyRecipe, TrainConfig

CHECKPOINT_EVERY = 4
KILL_AT_STEP = 5  # the loss of optimizer step 6 (steps count from 0 there): step 5 was taken past the checkpoint
WAIT_S = 120.0  # bound on each side's wait for the other (a broken hand-over fails the test instead of hanging it)


def _recipe_and_killer(folder: Path, kill: bool):
    """(recipe, Ray Train callbacks): the policy recipe with a random reweighting of its loss, and with ``kill`` a
    callback that kills the worker once, at a step fixed in advance.

    The reweighting draws from the torch, NumPy and Python RNGs every step, so the run's weights depend on the RNG
    states a restarted worker takes from the checkpoint. The worker, on reaching ``KILL_AT_STEP`` the first time,
    writes its PID and waits; the callback, which Ray Train runs in its controller once the controller has
    registered a checkpoint (its checkpoint manager's hook runs before users'), kills that PID. So the kill falls
    after the first checkpoint is known and before the run could end, whatever the machine's speed. Both record
    what happened under ``folder``.

    Defined in a function: cloudpickle then ships the classes by value to the workers and the controller, where this
    test module is not importable."""
    import random

    import numpy as np
    import ray.train

    class Recipe(PolicyRecipe):
        def loss(self, model, batch, step):
            if not hasattr(self, "_started"):  # each worker process's first step: where it (re)started
                self._started = True
                with open(folder / "starts.txt", "a") as fh:
                    fh.write(f"{os.getpid()} {step}\n")
            if kill and step == KILL_AT_STEP and not (folder / "worker.pid").exists():
                (folder / "worker.pid.tmp").write_text(str(os.getpid()))
                (folder / "worker.pid.tmp").rename(folder / "worker.pid")  # whole when the callback reads it
                time.sleep(WAIT_S)
                raise RuntimeError(f"worker {os.getpid()} was not killed within {WAIT_S} s")
            total, parts = super().loss(model, batch, step)
            weight = float(torch.rand(())) + float(np.random.rand()) + random.random()
            return total + weight * parts["critic_loss"], parts

    class KillAfterCheckpoint(ray.train.UserCallback):
        def after_report(self, run_context, metrics, checkpoint):
            if checkpoint is None or (folder / "killed.txt").exists():
                return
            deadline = time.monotonic() + WAIT_S
            while not (folder / "worker.pid").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            pid = int((folder / "worker.pid").read_text())
            os.kill(pid, signal.SIGKILL)
            (folder / "killed.txt").write_text(f"{pid} {metrics[0]['step']}")

    return Recipe, (KillAfterCheckpoint(),) if kill else ()


def _losses(out: Path) -> dict[int, float]:
    with open(out / "metrics.csv") as fh:
        return {int(r["step"]): float(r["loss"]) for r in csv.DictReader(fh)}  # a repeated step: its last row


@pytest.mark.slow
def test_a_killed_worker_resumes_from_its_checkpoint_and_ends_as_an_uninterrupted_run(tiny_generated, tmp_path):
    _, published, _ = tiny_generated
    setups = {}
    for name, kill in (("straight", False), ("killed", True)):
        out = tmp_path / name
        out.mkdir()
        cfg = TrainConfig.tiny(shards=str(published.path), out=str(out), steps=8, checkpoint_every=CHECKPOINT_EVERY,
                               log_every=1)
        assert cfg.max_failures >= 1  # the default survives a lost worker
        setups[name] = (cfg, *_recipe_and_killer(out, kill))
    # the two runs side by side, the uninterrupted one from a thread (Ray Train's fit() takes its SIGINT handler in
    # the main thread only): most of a tiny run is its actors' start-up. Each records under its own folder.
    with ThreadPoolExecutor(1) as pool:
        cfg, recipe, callbacks = setups["straight"]
        straight = pool.submit(fit, cfg, recipe, callbacks=callbacks)
        cfg, recipe, callbacks = setups["killed"]
        runs = {"killed": fit(cfg, recipe, callbacks=callbacks), "straight": straight.result()}

    killed = tmp_path / "killed"
    pid, step = map(int, (killed / "killed.txt").read_text().split())
    assert step == CHECKPOINT_EVERY
    starts = [tuple(map(int, line.split())) for line in (killed / "starts.txt").read_text().splitlines()]
    # a new worker process, started at the checkpoint: Ray Train handed it over and the loop loaded it
    assert starts[0] == (pid, 0) and len(starts) == 2 and starts[1][0] != pid and starts[1][1] == CHECKPOINT_EVERY
    a, b = read_checkpoint(runs["straight"].checkpoint.path), read_checkpoint(runs["killed"].checkpoint.path)
    assert a.step == b.step == 8 and a.model.keys() == b.model.keys()
    assert all(torch.equal(a.model[k], b.model[k]) for k in a.model), "weights differ from the uninterrupted run's"
    assert _losses(tmp_path / "straight") == _losses(killed)  # steps 5..8 again, each as the uninterrupted run


def test_max_failures_is_checked():
    with pytest.raises(ValueError, match="--max-failures"):
        TrainerConfig(shards="s", out="o", max_failures=-2)

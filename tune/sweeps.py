"""What the sweep drivers under ``tune/`` share: a sweep folder is never reused, stopped trials are cleaned up
promptly, ASHA over a trial's own step count, Tune's results on the sweep's store (a local path or a URI), each
trial's reports read back; the trial resources the cluster gives, and a line as each trial ends.

A driver (``tune/scaling.py``, ``tune/ppo_sweep.py``) calls, in order: ``refuse_used_out``, ``limit_forced_cleanup``
(both before Ray starts), then ``trial_resources`` and builds its ``tune.Tuner`` with ``asha`` and ``run_config``
(with ``trials_done``), and after ``fit`` reads ``reports`` and writes its tables and figures with
``training.outputs``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from shards_schema import storage
from training.loop import run_storage

SWEEP_FOLDERS = ("tune", "trials")
"""Under a sweep's --out: Tune's results (every trial's config and reports) and each trial's own run."""


def refuse_used_out(out: str) -> None:
    """Raise ``FileExistsError`` when ``out`` already holds a sweep. Ray Train takes a run folder that exists as a
    run to continue: a second sweep into the same --out would find every trial finished and train nothing."""
    for used in SWEEP_FOLDERS:
        if storage.exists(storage.join(out, used)):
            raise FileExistsError(f"{storage.join(out, used)} exists: a sweep's results are never overwritten; "
                                  "give a new --out")


def limit_forced_cleanup(seconds: int = 15) -> None:
    """Let Tune end a stopped trial after ``seconds`` (unless the user set ``TUNE_FORCE_TRIAL_CLEANUP_S``). A trial
    ASHA stops is blocked inside its Ray Train run and never returns to Tune, which kills it (and with it the run's
    actors, which it owns) only after TUNE_FORCE_TRIAL_CLEANUP_S, 600 s by default: a tiny scaling sweep sat at its
    first stopped trial for the 7 minutes it was watched. Set before Ray starts."""
    os.environ.setdefault("TUNE_FORCE_TRIAL_CLEANUP_S", str(seconds))


def asha(last_step: int, grace_steps: int, reduction_factor: int, time_attr: str = "step"):
    """ASHA over the trials' own ``time_attr`` (the step or update each report carries, not Tune's iteration
    count). ``max_t`` is one past ``last_step``: a trial that reaches its last step ends on its own, and its Ray
    Train run shuts down cleanly, instead of being stopped by the scheduler at its last report."""
    # ray.* here and below, not at the top: the drivers import this module before pipelines.ray_start.start_ray,
    # which must import ray first (its single-machine switch is read once, at import)
    from ray.tune.schedulers import ASHAScheduler

    return ASHAScheduler(time_attr=time_attr, max_t=last_step + 1, grace_period=grace_steps,
                         reduction_factor=reduction_factor)


def run_config(out: str, name: str = "sweep", callbacks: tuple = ()):
    """Tune's ``RunConfig``: results (each trial's ``params.json`` and reports) under ``OUT/tune`` on ``out``'s
    store; Tune's own output at verbosity 1 (its trial-status lines, without a results table at every report: the
    drivers print each trial's end, ``trials_done``)."""
    from ray import tune

    where = run_storage(storage.join(out, "tune"))
    return tune.RunConfig(name=name, storage_path=where["storage_path"],
                          storage_filesystem=where.get("storage_filesystem"), verbose=1, callbacks=list(callbacks))


def trials_done(total: int, metric: str, mode: str, name_of, last_step: int, time_attr: str = "step", log=print):
    """A Tune callback printing each trial's end: ``[sweep] trial 3/9 done: d32-share0.1, best val_loss_actor 1.61 at
    step 200 (stopped by ASHA at step 400)``. ``name_of(config)`` names a trial; ``mode`` (min or max) says which
    ``metric`` is best."""
    from ray import tune

    better = (lambda a, b: a < b) if mode == "min" else (lambda a, b: a > b)

    class TrialsDone(tune.Callback):
        def __init__(self):
            self.done, self.best = 0, {}

        def on_trial_result(self, iteration, trials, trial, result, **info):
            value = result.get(metric)
            if value is not None and value == value and (
                    trial.trial_id not in self.best or better(value, self.best[trial.trial_id][0])):
                self.best[trial.trial_id] = (value, result.get(time_attr))

        def on_trial_complete(self, iteration, trials, trial, **info):
            self.done += 1
            value, at = self.best.get(trial.trial_id, (float("nan"), None))
            last = (trial.last_result or {}).get(time_attr)
            stopped = f" (stopped by ASHA at {time_attr} {last})" if last is not None and last < last_step else ""
            log(f"[sweep] trial {self.done}/{total} done: {name_of(trial.config)}, best {metric} {value:.4g} at "
                f"{time_attr} {at}{stopped}")

    return TrialsDone()


@dataclass(frozen=True)
class TrialResources:
    """What each trial asks of the cluster.

    Attributes:
        use_gpu: the trial's Ray Train worker takes a GPU.
        cpus_per_worker: CPUs the worker reserves (fractional on small machines: whole CPUs would leave trials
            waiting for one another's).
        torch_threads: intra-op threads of the worker.
        max_concurrent: trials at once.
    """

    use_gpu: bool
    cpus_per_worker: float
    torch_threads: int
    max_concurrent: int


def trial_resources(cluster: dict, asked_concurrent: int = 0) -> TrialResources:
    """Trial resources from ``ray.cluster_resources()``: with GPUs, one GPU per trial and as many trials as GPUs
    (or ``asked_concurrent``, at most that); CPU-only, one trial per 2 CPUs (at least 1), each worker reserving a
    quarter of its trial's share, the rest left to the trial's data reading."""
    gpus, cpus = int(cluster.get("GPU", 0)), float(cluster.get("CPU", 1))
    if gpus:
        concurrent = min(asked_concurrent or gpus, gpus)
        return TrialResources(True, max(1.0, min(4.0, cpus / concurrent / 2)), 0, concurrent)
    concurrent = asked_concurrent or max(1, int(cpus // 2))
    share = cpus / concurrent
    return TrialResources(False, round(max(0.25, share / 4), 2), 1, concurrent)



def reports(grid, columns: tuple[str, ...]) -> list[tuple[dict, list[dict]]]:
    """(config, reports) of every trial of a ``ResultGrid`` that reported: each report's ``columns`` (those it has),
    in order. A trial that never reported (it failed before its first) is left out: ``grid.errors`` holds why."""
    out = []
    for result in grid:
        history = result.metrics_dataframe
        if history is None or history.empty:
            continue
        present = [c for c in columns if c in history]
        out.append((result.config, history[present].to_dict("records")))
    return out

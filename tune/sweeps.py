"""What the sweep drivers under ``tune/`` share: a sweep folder is never reused, stopped trials are cleaned up
promptly, ASHA over a trial's own step count, Tune's results on the sweep's store (a local path or a URI), each
trial's reports read back, and the table and figure files written next to them.

A driver (``tune/ppo_sweep.py``) calls, in order: ``refuse_used_out``, ``limit_forced_cleanup`` (both before Ray
starts), then builds its ``tune.Tuner`` with ``asha`` and ``run_config``, and after ``fit`` reads ``reports`` and
writes ``write_csv`` / ``write_text`` / ``png_bytes`` files with ``shards_schema.storage``.
"""

from __future__ import annotations

import os

SWEEP_FOLDERS = ("tune", "trials")
"""Under a sweep's --out: Tune's results (every trial's config and reports) and each trial's own run."""


def refuse_used_out(out: str) -> None:
    """Raise ``FileExistsError`` when ``out`` already holds a sweep. Ray Train takes a run folder that exists as a
    run to continue: a second sweep into the same --out would find every trial finished and train nothing."""
    from shards_schema import storage

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
    from ray.tune.schedulers import ASHAScheduler

    return ASHAScheduler(time_attr=time_attr, max_t=last_step + 1, grace_period=grace_steps,
                         reduction_factor=reduction_factor)


def run_config(out: str, name: str = "sweep"):
    """Tune's ``RunConfig``: results (each trial's ``params.json`` and reports) under ``OUT/tune`` on ``out``'s
    store."""
    from ray import tune

    from shards_schema import storage
    from training.loop import run_storage

    where = run_storage(storage.join(out, "tune"))
    return tune.RunConfig(name=name, storage_path=where["storage_path"],
                          storage_filesystem=where.get("storage_filesystem"))


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


def write_csv(uri: str, rows: list[dict]) -> None:
    """``rows`` as CSV at ``uri`` (a local path or a URI), columns in the first row's order."""
    import csv
    import io

    from shards_schema import storage

    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    storage.write_bytes(uri, text.getvalue().encode())


def write_text(uri: str, text: str) -> None:
    from shards_schema import storage

    storage.write_bytes(uri, text.encode())


def png_bytes(fig) -> bytes:
    """A matplotlib figure as PNG bytes (then closed), for ``storage.write_bytes``."""
    import io

    import matplotlib.pyplot as plt

    data = io.BytesIO()
    fig.savefig(data, format="png")
    plt.close(fig)
    return data.getvalue()


def pyplot():
    """matplotlib's pyplot on the Agg backend: files only, no display on a cluster node or in CI."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt

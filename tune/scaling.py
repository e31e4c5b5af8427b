"""Scaling sweeps with Ray Tune: model size × data size × steps for the Pokémon policy or the Melee world model,
ASHA stopping the runs that fall behind, and a power-law fit of validation loss against compute, parameters and data.

    python tune/scaling.py --shards OUT/pokemon_turns/<v> --out runs/scaling-policy                # 3 × 3 trials
    python tune/scaling.py --shards OUT/melee_frames/<v> --out runs/scaling-wm
    python tune/scaling.py --tiny --shards OUT/melee_frames/<v> --out runs/scaling-tiny           # tests, demo

The shards say which trainer a sweep runs (``TARGETS``, by the manifest's dataset): ``pokemon_turns`` trains the policy
(``training/pokemon/offline_rl.py``, validation loss: the actor's cross-entropy on held-out battles), ``melee_frames``
the world model (``training/melee/world_model.py``, its total validation loss on held-out games). Each trial is one run
of that trainer (the shared ``training/fit.fit`` on Ray Train, reporting its validation with every checkpoint) of one
width (``--sizes``: ``d_model``, the rest of the preset scaled with it by the trainer) and one share of the training
data (``--train-shares``; the held-out data is the same for every trial); the steps axis is each run's own curve, one
validation every ``--eval-every`` steps. ASHA (``--grace-steps``, ``--reduction-factor``) stops a trial whose validation
loss is behind the others' at the same step. Tune keeps every trial's config and reports under ``OUT/tune`` and each
trial's checkpoints under ``OUT/trials/<trial>``, on the run's store (a local path or a URI). At the end the driver
writes, next to them:

- ``scaling.csv``: every validation of every trial with its parameters, training data size, data seen and compute;
- ``scaling.md``: the fitted exponents with 95% intervals;
- ``scaling.png``: loss against compute (every curve, the frontier and its fit), against parameters and against
  training data (the best validation of each).

Compute is ``6 · parameters · steps seen`` (forward and backward of a dense model, per turn or frame of every window).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
from matplotlib import ticker

from pipelines.cli import command_config
from shards_schema import storage
from shards_schema.reader import open_version
from training import outputs
from training.fit import fit
from training.loop import init_local_ray
from training.melee.world_model import WorldModelRecipe, WorldModelTrainConfig
from training.pokemon.offline_rl import PolicyRecipe, TrainConfig
from training.registry import model_kind
from tune import sweeps
from tune.scaling_fit import fit_power_law, frontier


@dataclass(frozen=True, kw_only=True)
class SweepConfig:
    """Configuration of a scaling sweep.

    Attributes:
        shards: the shard version to train on (a local path or a URI): ``pokemon_turns`` sweeps the policy,
            ``melee_frames`` the world model.
        out: the sweep's folder (a local path or a URI): Tune's results, each trial's run, the fit.
        sizes: model widths (the trainer's ``d_model``), one axis of the grid.
        train_shares: shares of the training data (battles or games), the other axis.
        preset: the trainer's preset the widths replace the width of (depth stays its own).
        steps: the most steps a trial trains (ASHA stops the ones that fall behind earlier).
        eval_every: steps between validations (each one a report ASHA reads).
        grace_steps: steps every trial trains before ASHA may stop it.
        reduction_factor: ASHA's: about 1/reduction_factor of the trials go on at each rung.
        context: turns or frames per training window.
        batch_size: windows per step.
        lr: learning rate.
        validation_share: share of battles or games held out for validation (the same for every trial).
        max_eval_windows: validation windows per validation.
        max_concurrent: trials at once (0: one per GPU, or one per 2 CPUs on a CPU-only cluster).
        seed: seed of every trial (split, window order, initialization).
    """

    shards: str
    out: str
    sizes: list[int] = field(default_factory=lambda: [32, 64, 128])
    train_shares: list[float] = field(default_factory=lambda: [0.25, 0.5, 1.0])
    preset: str = "tiny"
    steps: int = 300
    eval_every: int = 50
    grace_steps: int = 100
    reduction_factor: int = 3
    context: int = 32
    batch_size: int = 8
    lr: float = 1e-3
    validation_share: float = 0.2
    max_eval_windows: int = 128
    max_concurrent: int = 0
    seed: int = 0

    def __post_init__(self):
        if not self.sizes or min(self.sizes) < 1:
            raise ValueError("--sizes: at least one width, each >= 1")
        if not self.train_shares or not all(0.0 < s <= 1.0 for s in self.train_shares):
            raise ValueError("--train-shares: at least one share, each in (0, 1]")
        if min(self.steps, self.eval_every, self.grace_steps) < 1 or self.reduction_factor < 2:
            raise ValueError("--steps, --eval-every and --grace-steps must be >= 1, --reduction-factor >= 2")
        if self.steps % self.eval_every:
            raise ValueError(f"--steps {self.steps} must be a multiple of --eval-every {self.eval_every}")
        if not 0.0 < self.validation_share < 1.0:
            raise ValueError("--validation-share is a share in (0, 1): a sweep compares validation losses")

    @classmethod
    def tiny(cls, *, shards: str, out: str, **overrides) -> SweepConfig:
        """2 widths × 2 shares of a few steps: the tests' and the demo's sweep."""
        fields = {"sizes": [16, 32], "train_shares": [0.5, 1.0], "steps": 8, "eval_every": 4, "grace_steps": 4,
                  "reduction_factor": 2, "batch_size": 4, "max_eval_windows": 16, "validation_share": 0.3,
                  **overrides}
        return cls(shards=shards, out=out, **fields)

    def shared_fields(self) -> dict:
        """The settings every trial's trainer config takes from the sweep (a validation at each checkpoint, so every
        report ASHA reads carries one)."""
        return {"shards": self.shards, "preset": self.preset, "steps": self.steps, "eval_every": self.eval_every,
                "checkpoint_every": self.eval_every, "log_every": self.eval_every, "context": self.context,
                "batch_size": self.batch_size, "lr": self.lr, "validation_share": self.validation_share,
                "max_eval_windows": self.max_eval_windows, "seed": self.seed, "wandb_mode": "disabled"}


class SweepTarget:
    """One trainer as a sweep drives it: its config of one trial, its recipe, its validation metric and what its
    data axis counts. One subclass per trainer, found by the shards' dataset (``TARGETS``)."""

    dataset: str = ""  # the manifest's dataset it trains on
    unit: str = ""  # what the data axis counts (turns, frames)
    metric: str = ""  # the validation loss ASHA and the fits read
    overlap: int = 0  # steps a window holds beyond the ones it trains the next step of (the world model's +1)

    def config(self, sweep: SweepConfig, d_model: int, train_share: float, out: str):
        """The trainer config of the trial of width ``d_model`` and data share ``train_share``."""
        raise NotImplementedError

    def recipe(self):
        """The trainer's ``training/fit.Recipe``."""
        raise NotImplementedError

    def training_units(self, sweep: SweepConfig, version, train_share: float) -> int:
        """Turns or frames of the training data a share keeps (the data axis), as the trainer picks them."""
        raise NotImplementedError

    def parameters(self, sweep: SweepConfig, version, d_model: int) -> int:
        """Parameters of the model a trial of width ``d_model`` trains."""
        recipe = self.recipe()
        cfg = self.config(sweep, d_model, 1.0, out="-")
        _, model_class = model_kind(recipe.kind).classes()
        return sum(p.numel() for p in model_class(recipe(cfg, recipe.make_plan(cfg, version)).model_config())
                   .parameters())


class PolicyTarget(SweepTarget):
    dataset, unit, metric = "pokemon_turns", "turns", "val_loss_actor"

    def config(self, sweep, d_model, train_share, out):
        return TrainConfig(**sweep.shared_fields(), out=out, d_model=d_model, train_share=train_share)

    def recipe(self):
        return PolicyRecipe

    def training_units(self, sweep, version, train_share):
        cfg = self.config(sweep, sweep.sizes[0], train_share, out="-")
        # epoch 0's windows tile each kept trajectory: their rows are its turns
        return int(self.recipe()(cfg, {}).epoch_windows(version, 0).column("num_rows").to_numpy().sum())


class WorldModelTarget(SweepTarget):
    dataset, unit, metric, overlap = "melee_frames", "frames", "val_loss_total", 1

    def config(self, sweep, d_model, train_share, out):
        return WorldModelTrainConfig(**sweep.shared_fields(), out=out, d_model=d_model, train_share=train_share,
                                     scheduled_sampling=0.0)

    def recipe(self):
        return WorldModelRecipe

    def training_units(self, sweep, version, train_share):
        cfg = self.config(sweep, sweep.sizes[0], train_share, out="-")
        plan = self.recipe().make_plan(cfg, version)
        skip = set(plan["val_games"]) | set(plan["left_out"])
        return sum(r["num_rows"] for r in version.index().select(["game_id", "num_rows"]).to_pylist()
                   if r["game_id"] not in skip)


TARGETS = {t.dataset: t for t in (PolicyTarget(), WorldModelTarget())}
"""The trainer each dataset's shards sweep."""


def target_of(shards: str) -> SweepTarget:
    """The sweep target of a shard version, by its manifest's dataset."""
    dataset = open_version(shards, check_sha256=False).manifest.dataset
    if dataset not in TARGETS:
        raise ValueError(f"{shards} holds {dataset!r} shards; a scaling sweep trains on {sorted(TARGETS)}")
    return TARGETS[dataset]


def trial(config: dict) -> None:
    """One Tune trial: a run of the sweep's trainer of the trial's width and share, its validations forwarded to
    Tune."""
    # ray here and in run, not at the top: pipelines.ray_start.start_ray (init_local_ray) must import it first
    from ray.tune.integration.ray_train import TuneReportCallback

    sweep, target = SweepConfig(**config["sweep"]), TARGETS[config["dataset"]]
    name = trial_name(config)
    cfg = target.config(sweep, config["d_model"], config["train_share"], storage.join(sweep.out, "trials", name))
    cfg = dataclasses.replace(cfg, use_gpu=config["use_gpu"], cpus_per_worker=config["cpus_per_worker"],
                              torch_threads=config["torch_threads"])
    result = fit(cfg, target.recipe(), callbacks=(TuneReportCallback(),), name=name)
    if result.error is not None:
        raise RuntimeError(f"trial {name} failed: {result.error}") from result.error


def run(sweep: SweepConfig, log=print):
    """The sweep, then its table, fit and figure; Tune's ``ResultGrid``."""
    sweep = dataclasses.replace(sweep, shards=storage.normalize(sweep.shards), out=storage.normalize(sweep.out))
    sweeps.refuse_used_out(sweep.out)
    sweeps.limit_forced_cleanup()
    target = target_of(sweep.shards)
    init_local_ray()
    import ray
    from ray import tune

    resources = sweeps.trial_resources(ray.cluster_resources(), sweep.max_concurrent)
    log(f"[sweep] {target.recipe().kind}: {len(sweep.sizes)} widths × {len(sweep.train_shares)} shares, up to "
        f"{sweep.steps} steps, {target.metric}; {resources}")
    space = {"sweep": dataclasses.asdict(sweep), "dataset": target.dataset, "d_model": tune.grid_search(sweep.sizes),
             "train_share": tune.grid_search(sweep.train_shares), **{
                 k: getattr(resources, k) for k in ("use_gpu", "cpus_per_worker", "torch_threads")}}
    done = sweeps.trials_done(len(sweep.sizes) * len(sweep.train_shares), target.metric, "min", trial_name,
                              sweep.steps, log=log)
    tuner = tune.Tuner(
        # the trial itself only waits on its Ray Train run, whose worker reserves the CPUs/GPU
        tune.with_resources(trial, {"CPU": 0.01}),
        param_space=space,
        tune_config=tune.TuneConfig(metric=target.metric, mode="min", max_concurrent_trials=resources.max_concurrent,
                                    scheduler=sweeps.asha(sweep.steps, sweep.grace_steps, sweep.reduction_factor)),
        run_config=sweeps.run_config(sweep.out, callbacks=(done,)),
    )
    grid = tuner.fit()
    rows = result_rows(sweep, target, grid)
    write_report(sweep, target, rows, log)
    return grid


def trial_name(config: dict) -> str:
    """A trial's name: its run folder under ``OUT/trials`` and its name in the log."""
    return f"d{config['d_model']}-share{config['train_share']:g}"


def result_rows(sweep: SweepConfig, target: SweepTarget, grid) -> list[dict]:
    """Every validation report of every trial with its width, share, parameters, training data size (turns or
    frames), data seen and compute."""
    version = open_version(sweep.shards, check_sha256=False)
    parameters = {d: target.parameters(sweep, version, d) for d in sweep.sizes}
    units = {s: target.training_units(sweep, version, s) for s in sweep.train_shares}
    per_step = sweep.batch_size * (sweep.context + target.overlap)
    rows = []
    for config, reports in sweeps.reports(grid, ("step", target.metric)):
        for report in reports:
            if target.metric not in report or report[target.metric] != report[target.metric]:
                continue  # a report without a validation
            step = int(report["step"])
            n, seen = parameters[config["d_model"]], step * per_step
            rows.append({"d_model": config["d_model"], "train_share": config["train_share"], "parameters": n,
                         f"train_{target.unit}": units[config["train_share"]], "step": step,
                         f"{target.unit}_seen": seen, "compute": 6.0 * n * seen,
                         target.metric: float(report[target.metric])})
    last: dict = {}
    for r in rows:
        key = (r["d_model"], r["train_share"])
        last[key] = max(last.get(key, 0), r["step"])
    for r in rows:  # a trial ASHA stopped ends before the sweep's last step
        r["stopped_early"] = last[(r["d_model"], r["train_share"])] < sweep.steps
    return rows


def fits(rows: list[dict], target: SweepTarget) -> dict:
    """The three power laws: loss against compute on the frontier, against parameters (each width's best validation
    over shares and steps) and against training data (each share's best over widths and steps).

    The best validation of a trial, not its last: small data shares overfit within a run (the policy sweep's 10%
    trials rose from 1.60 to 2.34 between steps 200 and 1000), so a last validation measures the run's length, and
    the best is what the trial would give stopped early. A trial ASHA stopped counts with its best so far, which it
    reached while behind the others at the same step, so it changes an axis' minimum only where it was best there."""
    out = {}
    metric = target.metric
    edge = frontier([(r["compute"], r[metric]) for r in rows])
    if len({c for c, _ in edge}) >= 2:
        out["compute"] = (fit_power_law(*zip(*edge, strict=True)), edge)
    for axis in ("parameters", f"train_{target.unit}"):
        best: dict = {}
        for r in rows:
            if r[axis] not in best or r[metric] < best[r[axis]]:
                best[r[axis]] = r[metric]
        points = sorted(best.items())
        if len(points) >= 2:
            out[axis] = (fit_power_law(*zip(*points, strict=True)), points)
    return out


def write_report(sweep: SweepConfig, target: SweepTarget, rows: list[dict], log=print) -> dict:
    """``scaling.csv``, ``scaling.md`` and ``scaling.png`` in the sweep's folder; the fits."""
    if not rows:
        raise RuntimeError(f"no trial reported {target.metric}: see the trials' logs under "
                           f"{storage.join(sweep.out, 'tune')}")
    outputs.write_csv(storage.join(sweep.out, "scaling.csv"), rows)
    fitted = fits(rows, target)
    lines = [f"{target.metric} against:", "",
             "| loss against | exponent | 95% interval | points | R² (log-log) |", "|---|---|---|---|---|"]
    for axis, (law, _) in fitted.items():
        lines.append(f"| {axis} | {law.exponent:.3f} | [{law.exponent_low:.3f}, {law.exponent_high:.3f}] | "
                     f"{law.points} | {law.r2:.3f} |")
    table = "\n".join(lines) + "\n"
    outputs.write_text(storage.join(sweep.out, "scaling.md"), table)
    storage.write_bytes(storage.join(sweep.out, "scaling.png"), _figure(rows, fitted, target))
    log(table)
    log(f"[sweep] {len(rows)} validations → {storage.join(sweep.out, 'scaling.png')}")
    return fitted


def _figure(rows: list[dict], fitted: dict, target: SweepTarget) -> bytes:
    plt = outputs.pyplot()

    fig, axes = plt.subplots(1, 3, figsize=(13, 4), dpi=110)
    curves: dict = {}
    for r in rows:
        curves.setdefault((r["d_model"], r["train_share"]), []).append((r["compute"], r[target.metric]))
    for (d, share), points in sorted(curves.items()):
        axes[0].plot(*zip(*sorted(points), strict=True), "o-", alpha=0.6, linewidth=1, markersize=3,
                     label=f"d={d}, share={share:g}")  # markers: a trial stopped at its first validation shows too
    for ax, axis, label in ((axes[0], "compute", f"compute (6·N·{target.unit} seen)"),
                            (axes[1], "parameters", "parameters"),
                            (axes[2], f"train_{target.unit}", f"training {target.unit}")):
        if axis in fitted:
            law, points = fitted[axis]
            xs = np.array([p[0] for p in points])
            ax.scatter(xs, [p[1] for p in points], color="black", s=14, zorder=3,
                       label="frontier" if axis == "compute" else "best validation")
            grid = np.geomspace(xs.min(), xs.max(), 50)
            ax.plot(grid, law(grid), "r--", label=f"fit: exponent {law.exponent:.3f} "
                                                  f"[{law.exponent_low:.3f}, {law.exponent_high:.3f}]")
        ax.set_xscale("log")
        ax.set_yscale("log")
        # losses span a narrow range: plain numbers on the log axis instead of 1.6×10⁰
        ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%.4g"))
        ax.yaxis.set_minor_formatter(ticker.FormatStrFormatter("%.4g"))
        ax.tick_params(axis="y", which="minor", labelsize=6)
        ax.tick_params(axis="x", which="minor", labelsize=6, labelrotation=45)  # narrow ranges label minor ticks
        ax.set_xlabel(label)
        ax.set_ylabel(f"validation loss ({target.metric})")
        if ax.get_legend_handles_labels()[0]:  # an axis with one point per trial has no fit and nothing to label
            ax.legend(fontsize=6)
    fig.tight_layout()
    return outputs.png_bytes(fig)


def main(argv: list[str] | None = None) -> None:
    run(command_config(SweepConfig, argv))


if __name__ == "__main__":
    main()

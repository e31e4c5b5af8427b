"""Learning rate × entropy weight for PPO self-play with Ray Tune: a grid of self-play runs in the Melee world model
(``training/selfplay.py``), ASHA stopping the runs whose return against the scripted opponents falls behind.

    python tune/ppo_sweep.py --shards OUT/melee_frames/<v> --world-model RUN/ray/.../checkpoint_... \\
        --out runs/ppo-sweep                                                                    # 3 lr × 2 entropy
    python tune/ppo_sweep.py --tiny --shards OUT/melee_frames/<v> --out runs/ppo-sweep-tiny    # untrained world model

Each trial is one self-play run of one learning rate (``--lrs``) and one entropy-bonus weight
(``--entropy-weights``), everything else the same (seed included). Self-play reports every update's metrics line
to Ray Train; this sweep's callback (``window_report``) adds the metric below to each before Tune sees it, and ASHA
(``--grace-updates``, ``--reduction-factor``) stops a trial whose metric is behind the others' at the same update.

The metric, ``METRIC``: the mean return of the learner's games against the league's scripted opponents (strong: the
replay's recorded controller; weak: a random controller) that finished in the last ``--window-updates`` updates,
pooled over games. Why this one:

- Comparable across trials: the scripted opponents are the same in every trial. The league's Elo is relative to
  each trial's own snapshots (a trial whose snapshots all play badly rates itself high against them), and the
  learner's games against its snapshots are zero-sum against itself, so their return is about 0 whatever it learned.
- The return rather than the win rate: damage counts in every game, so games level on stocks still tell trials apart,
  and with the 7-24 scripted games a window held in docs/sweeps.md's sweep a continuous measure ranks trials on fewer
  games than a rate of wins, losses and draws. The win rate over the same games is in the table beside it.
- Over a window of updates: a game spans ``max_frames / rollout_steps`` updates, so a single update finishes a burst of
  games or none; a window at least that long (checked) holds at least one finished game of every game slot.

Tune keeps every trial's config (``params.json``) and reports under ``OUT/tune``; each trial's run (its resolved
``selfplay_config.json``, ``metrics.csv``, last checkpoint) is under ``OUT/trials/<trial>``, on the sweep's store (a
local path or a URI). At the end the driver writes next to them:

- ``ppo_sweep.csv``: every update of every trial with its lr, entropy weight, metric, scripted win rate and policy
  entropy;
- ``ppo_sweep.md``: one line per trial: its metric at ASHA's first rung (which every trial reaches) and at its last
  update, the longest-running trials first;
- ``ppo_sweep.png``: the metric against updates per trial, and an lr × entropy-weight heatmap of each trial's last.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field

import numpy as np

from pipelines.cli import command_config
from shards_schema import storage
from training import outputs
from training.loop import init_local_ray
from training.selfplay import SelfPlayConfig
from training.selfplay import run as run_selfplay
from tune import sweeps

METRIC = "scripted_return"
"""What the scheduler reads (higher is better): the mean return against the scripted opponents over the window."""
SCRIPTED = ("strong", "weak")
"""The league's opponent kinds that are the same in every trial (``training/league.OPPONENT_KINDS``)."""
COLUMNS = ("step", METRIC, "scripted_win_rate", "scripted_games", "entropy", "learner_rating", "elapsed_s")
"""What the table keeps of each report."""


@dataclass(frozen=True, kw_only=True)
class SweepConfig:
    """Configuration of a PPO self-play sweep over learning rate × entropy weight in the Melee world model.

    Attributes:
        shards: the melee_frames shard version the games are seeded from (a local path or a URI).
        out: the sweep's folder (a local path or a URI): Tune's results, each trial's run, the table and figure.
        world_model: the world-model checkpoint the games run in (folder or state.pt), or ``untrained`` for a fresh
            model of --world-model-preset (tests, demo).
        world_model_preset: preset of an untrained world model.
        lrs: learning rates at update 0, one axis of the grid (each annealed linearly to 0 over --updates, as the
            PPO preset does).
        entropy_weights: weights of the entropy bonus, the other axis (0: no bonus; the preset's is 0.01).
        updates: the most PPO updates a trial runs (ASHA stops the ones that fall behind earlier).
        window_updates: updates whose finished games the metric pools; at least a game's length in updates
            (--max-frames / --rollout-steps, rounded up).
        grace_updates: updates every trial runs before ASHA may stop it (at least --window-updates).
        reduction_factor: ASHA's: about 1/reduction_factor of the trials go on at each rung.
        num_runners: environment runner actors per trial.
        envs_per_runner: games each runner plays at once.
        rollout_steps: steps per game between updates.
        seed_frames: real frames each game is primed on.
        max_frames: frames before a game is cut by the time limit (short games finish often enough to fill a
            window).
        d_lstm: the policy's LSTM width.
        opponent_window: the opponent's last N frames the policy's strategy encoder reads.
        snapshot_every: updates between snapshots added to each trial's league.
        snapshot_share: share of games against the trial's own past snapshots.
        strong_share: share of games against the strong scripted opponent (self-play's default 0.15 and 0.05 would
            leave a fifth of the games to the metric).
        weak_share: share of games against the weak scripted opponent.
        max_concurrent: trials at once (0: one per GPU, or one per 2 CPUs on a CPU-only cluster).
        seed: seed of every trial (policy, runners, league draws): trials differ only in lr and entropy weight.
    """

    shards: str
    out: str
    world_model: str
    world_model_preset: str = "tiny"
    lrs: list[float] = field(default_factory=lambda: [1e-4, 3e-4, 1e-3])
    entropy_weights: list[float] = field(default_factory=lambda: [0.003, 0.03])
    updates: int = 36
    window_updates: int = 6
    grace_updates: int = 12
    reduction_factor: int = 2
    num_runners: int = 2
    envs_per_runner: int = 4
    rollout_steps: int = 64
    seed_frames: int = 60
    max_frames: int = 128
    d_lstm: int = 128
    opponent_window: int = 8
    snapshot_every: int = 5
    snapshot_share: float = 0.5
    strong_share: float = 0.25
    weak_share: float = 0.25
    max_concurrent: int = 0
    seed: int = 0

    def __post_init__(self):
        if not self.lrs or min(self.lrs) <= 0:
            raise ValueError("--lrs: at least one learning rate, each > 0")
        if not self.entropy_weights or min(self.entropy_weights) < 0:
            raise ValueError("--entropy-weights: at least one weight, each >= 0")
        if len(set(self.lrs)) < len(self.lrs) or len(set(self.entropy_weights)) < len(self.entropy_weights):
            raise ValueError("--lrs and --entropy-weights: each value once (a trial is named by its pair)")
        if min(self.updates, self.window_updates, self.grace_updates, self.rollout_steps, self.max_frames) < 1:
            raise ValueError("--updates, --window-updates, --grace-updates, --rollout-steps and --max-frames must "
                             "be >= 1")
        if self.reduction_factor < 2:
            raise ValueError("--reduction-factor must be >= 2")
        game_updates = math.ceil(self.max_frames / self.rollout_steps)
        if self.window_updates < game_updates:
            raise ValueError(f"--window-updates {self.window_updates} is shorter than a game ({game_updates} updates "
                             f"of --rollout-steps {self.rollout_steps} for --max-frames {self.max_frames}): some "
                             "windows would hold no finished game")
        if not self.window_updates <= self.grace_updates <= self.updates:
            raise ValueError("need --window-updates <= --grace-updates <= --updates: ASHA's first rung compares "
                             "full windows")
        if min(self.strong_share, self.weak_share) < 0 or self.strong_share + self.weak_share <= 0:
            raise ValueError("--strong-share and --weak-share must be >= 0 and not both 0: the metric is the games "
                             "against them")
        self.selfplay_config(self.lrs[0], self.entropy_weights[0], self.out, {})  # self-play's own checks, now

    @classmethod
    def tiny(cls, *, shards: str, out: str, **overrides) -> SweepConfig:
        """2 learning rates × 1 entropy weight of 8 short updates on an untrained tiny world model: the tests' and
        the demo's sweep (two trials: ASHA has one to compare with, and the test suite stays short)."""
        fields = {"world_model": "untrained", "lrs": [1e-2, 1e-4], "entropy_weights": [0.05], "updates": 8,
                  "window_updates": 2, "grace_updates": 4, "num_runners": 1, "envs_per_runner": 4,
                  "rollout_steps": 8, "seed_frames": 20, "max_frames": 12, "d_lstm": 16, "opponent_window": 3,
                  "snapshot_every": 2, **overrides}
        return cls(shards=shards, out=out, **fields)

    def selfplay_config(self, lr: float, entropy_weight: float, out: str, resources: dict):
        """The self-play run of one trial: this sweep's shared settings, one lr and one entropy weight, the
        trial's share of the cluster (``selfplay_resources``)."""
        return SelfPlayConfig.from_flags(
            out=out, env="melee", shards=self.shards, world_model=self.world_model,
            world_model_preset=self.world_model_preset, preset="full", updates=self.updates, lr=lr,
            entropy_weight=entropy_weight, num_runners=self.num_runners, envs_per_runner=self.envs_per_runner,
            rollout_steps=self.rollout_steps, seed_frames=self.seed_frames, max_frames=self.max_frames,
            d_lstm=self.d_lstm, opponent_window=self.opponent_window, snapshot_every=self.snapshot_every,
            snapshot_share=self.snapshot_share, strong_share=self.strong_share, weak_share=self.weak_share,
            seed=self.seed, wandb_mode="disabled", **resources)


def selfplay_resources(cluster: dict, asked_concurrent: int, num_runners: int) -> tuple[dict, int]:
    """(SelfPlayConfig resource fields of each trial, trials at once) from ``ray.cluster_resources()``: the learner
    as ``tune/sweeps.trial_resources`` sizes a trial's worker; the runners share the rest of the trial's CPUs, at
    most 1 each (a runner steps its games in one thread), rounded down so that a trial never asks for more than its
    share (on 2 CPUs a learner of 0.5 and runners of 0.75 would leave the trial's own 0.01 unplaceable)."""
    base = sweeps.trial_resources(cluster, asked_concurrent)
    share = float(cluster.get("CPU", 1)) / base.max_concurrent
    spare = share - base.cpus_per_worker - 0.01  # 0.01: the Tune trial's own
    runner = max(0.01, min(1.0, math.floor(spare / num_runners * 100) / 100))
    return ({"use_gpu": base.use_gpu, "cpus_per_worker": base.cpus_per_worker, "torch_threads": base.torch_threads,
             "cpus_per_runner": runner}, base.max_concurrent)


def window_metrics(lines: list[dict]) -> dict:
    """The sweep's metrics over some updates' metrics lines (``training/selfplay.episode_metrics``' per-kind games,
    mean return and win rate): ``METRIC`` and ``scripted_win_rate`` pooled over the games against the scripted
    opponents, and how many games that is. NaN without such games."""
    games = returns = wins = 0.0
    for line in lines:
        for kind in SCRIPTED:
            n = line[f"games_{kind}"]
            if n:  # a kind without games this update has NaN means
                games += n
                returns += n * line[f"return_{kind}"]
                wins += n * line[f"win_rate_{kind}"]
    nan = float("nan")
    return {METRIC: returns / games if games else nan, "scripted_win_rate": wins / games if games else nan,
            "scripted_games": int(games)}


def window_report(window_updates: int):
    """Tune's report callback with the sweep's metrics (``window_metrics`` over the last ``window_updates``
    updates) added to every report; made in a Tune trial. It runs in the Ray Train controller, which sees every
    update's line. Defined here rather than at module level because ``ray`` must not be imported before
    ``init_local_ray`` (pipelines/ray_start.py)."""
    from ray.tune.integration.ray_train import TuneReportCallback  # ray: only after init_local_ray, see above

    class WindowReport(TuneReportCallback):
        def __init__(self):
            super().__init__()
            self.lines: list[dict] = []

        def after_report(self, run_context, metrics, checkpoint):
            self.lines = (self.lines + [metrics[0]])[-window_updates:]
            super().after_report(run_context, [{**metrics[0], **window_metrics(self.lines)}, *metrics[1:]],
                                 checkpoint)

    return WindowReport()


def trial_name(lr: float, entropy_weight: float) -> str:
    return f"lr{lr:g}-ent{entropy_weight:g}"


def trial(config: dict) -> None:
    """One Tune trial: a self-play run of the trial's lr and entropy weight, each update forwarded to Tune with the
    sweep's metric; its resolved config written first, beside its run."""
    sweep = SweepConfig(**config["sweep"])
    name = trial_name(config["lr"], config["entropy_weight"])
    cfg = sweep.selfplay_config(config["lr"], config["entropy_weight"], storage.join(sweep.out, "trials", name),
                                config["resources"])
    outputs.write_text(storage.join(cfg.out, "selfplay_config.json"), json.dumps(dataclasses.asdict(cfg), indent=1))
    result = run_selfplay(cfg, callbacks=(window_report(sweep.window_updates),), name=name)
    if result.error is not None:
        raise RuntimeError(f"trial {name} failed: {result.error}") from result.error


def run(sweep: SweepConfig, log=print):
    """The sweep, then its table and figure; Tune's ``ResultGrid``."""
    sweep = dataclasses.replace(
        sweep, shards=storage.normalize(sweep.shards), out=storage.normalize(sweep.out),
        world_model=sweep.world_model if sweep.world_model == "untrained" else storage.normalize(sweep.world_model))
    sweeps.refuse_used_out(sweep.out)
    sweeps.limit_forced_cleanup()
    init_local_ray()
    import ray  # here, after init_local_ray: Ray reads its single-machine switch once, at import
    from ray import tune

    resources, concurrent = selfplay_resources(ray.cluster_resources(), sweep.max_concurrent, sweep.num_runners)
    log(f"[ppo-sweep] {len(sweep.lrs)} lr × {len(sweep.entropy_weights)} entropy weights, up to {sweep.updates} "
        f"updates, {concurrent} at once; each trial {resources}")
    space = {"sweep": dataclasses.asdict(sweep), "lr": tune.grid_search(sweep.lrs),
             "entropy_weight": tune.grid_search(sweep.entropy_weights), "resources": resources}
    tuner = tune.Tuner(
        # the trial itself only waits on its Ray Train run, whose learner and runners reserve the CPUs/GPU
        tune.with_resources(trial, {"CPU": 0.01}),
        param_space=space,
        tune_config=tune.TuneConfig(metric=METRIC, mode="max", max_concurrent_trials=concurrent,
                                    scheduler=sweeps.asha(sweep.updates, sweep.grace_updates,
                                                          sweep.reduction_factor)),
        run_config=sweeps.run_config(sweep.out, callbacks=(sweeps.trials_done(
            len(sweep.lrs) * len(sweep.entropy_weights), METRIC, "max",
            lambda config: trial_name(config["lr"], config["entropy_weight"]), sweep.updates, log=log),)),
    )
    grid = tuner.fit()
    write_report(sweep, result_rows(sweep, grid), log)
    return grid


def result_rows(sweep: SweepConfig, grid) -> list[dict]:
    """Every update of every trial that reported: its lr, entropy weight, the sweep's metrics, the policy's
    entropy and the league's rating of the learner, and whether ASHA stopped the trial."""
    rows = []
    for config, history in sweeps.reports(grid, COLUMNS):
        last = max(int(r["step"]) for r in history)
        for r in history:
            rows.append({"lr": config["lr"], "entropy_weight": config["entropy_weight"], "update": int(r["step"]),
                         **{k: r.get(k, float("nan")) for k in COLUMNS[1:]},
                         "stopped_early": last < sweep.updates})  # a trial ASHA stopped ends before the last update
    return rows


def last_rows(rows: list[dict], at_update: int) -> list[dict]:
    """Each trial's last update, with its metric at ``at_update`` too (``at_update``: NaN when it stopped before):
    the trials that ran longest first, then the best last metric (NaN last). Last metrics of trials stopped at
    different updates are not comparable; the metric at ASHA's first rung, which every trial reaches, is."""
    last: dict = {}
    at: dict = {}
    for r in rows:
        key = (r["lr"], r["entropy_weight"])
        if key not in last or r["update"] > last[key]["update"]:
            last[key] = r
        if r["update"] == at_update:
            at[key] = r[METRIC]
    out = [{**r, "at_update": at.get(key, float("nan"))} for key, r in last.items()]
    return sorted(out, key=lambda r: (-r["update"], math.isnan(r[METRIC]),
                                      -r[METRIC] if not math.isnan(r[METRIC]) else 0.0))


def write_report(sweep: SweepConfig, rows: list[dict], log=print) -> list[dict]:
    """``ppo_sweep.csv``, ``ppo_sweep.md`` and ``ppo_sweep.png`` in the sweep's folder; each trial's last row."""
    if not rows:
        raise RuntimeError(f"no trial reported: see the trials' logs under {storage.join(sweep.out, 'tune')}")
    outputs.write_csv(storage.join(sweep.out, "ppo_sweep.csv"), rows)
    last = last_rows(rows, sweep.grace_updates)
    lines = [f"| lr | entropy weight | updates | stopped by ASHA | return vs scripted at update {sweep.grace_updates} "
             f"| return vs scripted, last | win rate vs scripted, last | scripted games, last | policy entropy, last |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in last:
        lines.append(f"| {r['lr']:g} | {r['entropy_weight']:g} | {r['update']} | "
                     f"{'yes' if r['stopped_early'] else 'no'} | {r['at_update']:.4f} | {r[METRIC]:.4f} | "
                     f"{r['scripted_win_rate']:.3f} | {int(r['scripted_games'])} | {r['entropy']:.3f} |")
    lines.append(f"\nReturn vs scripted: the mean return of the games against the scripted opponents that finished in "
                 f"the last {sweep.window_updates} updates (``{METRIC}``, what ASHA compares).")
    table = "\n".join(lines) + "\n"
    outputs.write_text(storage.join(sweep.out, "ppo_sweep.md"), table)
    storage.write_bytes(storage.join(sweep.out, "ppo_sweep.png"), _figure(sweep, rows, last))
    log(table)
    log(f"[ppo-sweep] {len(last)} trials, {len(rows)} updates → {storage.join(sweep.out, 'ppo_sweep.png')}")
    return last


def _figure(sweep: SweepConfig, rows: list[dict], last: list[dict]) -> bytes:
    plt = outputs.pyplot()
    fig, (curves, heat) = plt.subplots(1, 2, figsize=(12, 4.5), dpi=110, gridspec_kw={"width_ratios": [1.4, 1]})
    per_trial: dict = {}
    for r in rows:
        per_trial.setdefault((r["lr"], r["entropy_weight"]), []).append((r["update"], r[METRIC]))
    for (lr, ent), points in sorted(per_trial.items()):
        curves.plot(*zip(*sorted(points), strict=True), "o-", markersize=2.5, linewidth=1, alpha=0.8,
                    label=f"lr {lr:g}, entropy {ent:g}")  # markers: a trial stopped at the first rung shows too
    curves.axvline(sweep.grace_updates, color="grey", linestyle=":", linewidth=1, label="ASHA's first rung")
    curves.set_xlabel("PPO update")
    curves.set_ylabel(f"return vs scripted opponents\n(games of the last {sweep.window_updates} updates)")
    curves.legend(fontsize=6)
    lrs, ents = sorted(sweep.lrs), sorted(sweep.entropy_weights)
    grid = np.full((len(lrs), len(ents)), np.nan)
    for r in last:
        grid[lrs.index(r["lr"]), ents.index(r["entropy_weight"])] = r[METRIC]
    image = heat.imshow(grid, cmap="viridis", origin="lower", aspect="auto")
    for r in last:
        i, j = lrs.index(r["lr"]), ents.index(r["entropy_weight"])
        note = f"{r[METRIC]:.3f}" + (f"\nstopped at {r['update']}" if r["stopped_early"] else "")
        heat.text(j, i, note, ha="center", va="center", fontsize=7,
                  bbox={"facecolor": "white", "alpha": 0.7, "edgecolor": "none"})
    heat.set_xticks(range(len(ents)), [f"{e:g}" for e in ents])
    heat.set_yticks(range(len(lrs)), [f"{v:g}" for v in lrs])
    heat.set_xlabel("entropy weight")
    heat.set_ylabel("learning rate")
    heat.set_title("each trial's metric at its last update", fontsize=9)
    fig.colorbar(image, ax=heat)
    fig.tight_layout()
    return outputs.png_bytes(fig)


def main(argv: list[str] | None = None) -> None:
    run(command_config(SweepConfig, argv))


if __name__ == "__main__":
    main()

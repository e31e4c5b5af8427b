"""PPO self-play on Ray: environment runners as Ray actors, the learner as a Ray Train worker, a league actor holding
snapshots, the opponent mix and the ratings.

    python training/selfplay.py --env <game> --out runs/selfplay-<game> [the game's flags]

Each update: the learner sends its weights to every runner (one object in the store), each runner plays its games
against opponents it draws from the league and returns the learner's side only, the learner runs one PPO update
(``training/ppo.py``) on the rollouts, reports every finished game to the league (Elo), and every
``snapshot_every`` updates adds a snapshot of itself to the opponent pool. Checkpoints are the shared
self-describing ones (``training/checkpoints.py``), with the league in them: a resumed run continues with the same
opponent pool and ratings. Metrics per reward term and behaviour (win rate against each opponent kind, knockouts)
go to ``OUT/metrics.csv`` and W&B, with a line per update; the same line is reported to Ray Train every update (with
the checkpoint every ``checkpoint_every``), so a sweep's scheduler (``tune/ppo_sweep.py``) sees each one. Ray Train
collects a worker's report once per health check (2 s by default) and holds one at a time: updates shorter than that
wait for it.

This module is self-play's executor: every Ray call of self-play is here. The environments (``--env``, each with its
own ``--help`` section) are registered in ``training/selfplay_envs.py`` and reached only through the contract of
``training/selfplay_base.py``; the registered class travels to the Ray Train worker in its config.
"""

from __future__ import annotations

import dataclasses
import random
import time
from pathlib import Path

import torch

# ray itself is imported in the functions that run after training/loop.init_local_ray
# (pipelines/ray_start.py: Ray reads its auth mode once, when imported)
from models.ppo_policy import RecurrentPolicy
from pipelines.cli import command_config
from shards_schema import storage
from training.checkpoints import DataIdentity, payload, read_checkpoint, set_rng_state
from training.fit import Learner, launch, report_checkpoint, resume_path, start_worker, worker_checkpoint
from training.league import LEARNER, OPPONENT_KINDS, League, keyed_rng
from training.loop import (
    MetricsWriter,
    checkpoint_uri,
    init_local_ray,
    latest_checkpoint,
)
from training.ppo import update
from training.selfplay_base import runner_seed
from training.selfplay_envs import SelfPlayConfig, environment_class, register_environment

ACTOR_SCHEDULING = "DEFAULT"
"""Where the learner's runner and league actors go: on the cluster, never into the learner's own placement group.
Inside a Tune trial (``tune/ppo_sweep.py``) the learner inherits the trial's capture of child tasks, and a runner
asking 1 CPU was put into the learner's bundle of 0.5 and refused ("cannot fit into any bundles for the placement
group")."""


class LeagueActor:
    """The league on Ray: runners draw opponents and fetch snapshots from it; the learner reports games to it,
    adds snapshots and saves its state with each checkpoint."""

    def __init__(self, cfg, state: dict | None, seed: int):
        self.league = League.from_state_dict(cfg, state) if state else League(cfg)
        self.rng = random.Random(seed)

    def draw(self, key: tuple | None = None):
        """An opponent: from the league's own stream (a draw depends on every draw before it, in the order runners
        ask), or with ``key`` from that key's own stream (``league.keyed_rng``: the same opponent for the same key
        and league, whatever the order; a resumed run draws as the uninterrupted one would)."""
        return self.league.sample(self.rng if key is None else keyed_rng(key))

    def snapshot(self, name: str) -> dict:
        return self.league.snapshots[name]

    def record(self, results: list[tuple[str, float]]) -> None:
        for opponent, score in results:
            self.league.record(LEARNER, opponent, score)

    def add_snapshot(self, update: int, weights: dict) -> str:
        return self.league.add_snapshot(update, weights)

    def ratings(self) -> dict:
        return dict(self.league.ratings)

    def state_dict(self) -> dict:
        return self.league.state_dict()


def episode_metrics(episodes: list, terms: tuple[str, ...], knockout_term: str, bots: tuple[str, ...] = ()) -> dict:
    """Per reward term and behaviour over the games that finished this update: games, win rate and mean return
    against each opponent kind and win rate against each scripted bot of ``bots``, damage dealt and taken,
    knockouts, game length. Every key is always there (NaN without games), so the CSV keeps one set of columns; with
    the games per kind, rates over several updates can be weighted by games (``tune/ppo_sweep.py``)."""
    def mean(values: list[float]) -> float:
        return sum(values) / len(values) if values else float("nan")

    out: dict = {"games": len(episodes)}
    for term in terms:
        out[f"term_{term}"] = mean([e.terms[term] for e in episodes])
    out["episode_reward"] = mean([e.reward for e in episodes])
    out["episode_frames"] = mean([e.frames for e in episodes])
    out["knockouts"] = mean([e.terms[knockout_term] for e in episodes])
    for kind in OPPONENT_KINDS:
        games = [e for e in episodes if e.opponent.kind == kind]
        out[f"games_{kind}"] = len(games)
        out[f"win_rate_{kind}"] = mean([e.score for e in games])
        out[f"return_{kind}"] = mean([e.reward for e in games])
    for bot in bots:
        out[f"win_rate_vs_{bot}"] = mean([e.score for e in episodes
                                          if e.opponent.kind != "snapshot" and e.opponent.name == bot])
    return out


def start_runners(env, cfg, policy_cfg, first_update: int, league) -> list:
    """``cfg.num_runners`` actors of the environment's runner, each with its seed (``runner_seed``), drawing
    opponents and fetching snapshots from the league actor."""
    import ray  # not at the top: the driver imports this module before init_local_ray (pipelines/ray_start.py)

    def draw(key=None):
        return ray.get(league.draw.remote(key))

    def weights_of(name):
        return ray.get(league.snapshot.remote(name))

    cls = ray.remote(num_cpus=cfg.cpus_per_runner, scheduling_strategy=ACTOR_SCHEDULING)(env.runner_class)
    shared = env.runner_kwargs(policy_cfg)
    return [cls.remote(**shared, seed=runner_seed(cfg.seed, first_update, i), index=i, first_update=first_update,
                       temperature=cfg.temperature, draw_opponent=draw, snapshot_weights=weights_of)
            for i in range(cfg.num_runners)]


def train_loop_per_worker(config: dict) -> None:
    """The learner: runs on one Ray Train worker, drives the runner actors and the league actor."""
    import ray  # not at the top: the driver imports this module before init_local_ray (pipelines/ray_start.py)

    register_environment(config["environment"])  # a game registered by the driver's caller (a test's toy game)
    cfg = SelfPlayConfig.from_dict(config["cfg"])
    env = cfg.environment()
    rank, world, device, cuda = start_worker(cfg, "selfplay")
    start, _ = worker_checkpoint(config, device, env.kind)
    if start is not None:  # first: what the environment restores (its encoder, a prior or none) shapes the policy
        env.restore(start.extra)
    ppo, policy_cfg = cfg.ppo(env.num_envs), env.policy_config()
    torch.manual_seed(cfg.seed)
    policy = RecurrentPolicy(policy_cfg)
    env.start_policy(policy)
    learner = Learner(policy, lr=ppo.lr, weight_decay=0.0, grad_clip=ppo.grad_clip, device=device)
    first_update, league_state = 0, None
    if start is not None:
        learner.load({"model": start.model, "optimizer": start.optimizer}, optimizer=True)
        set_rng_state(start.rng[0])
        first_update, league_state = start.step, start.extra["league"]
    encoder = env.trainable_encoder(device, ppo)
    generator = torch.Generator().manual_seed(cfg.seed * 1_000_003 + first_update)
    league = ray.remote(num_cpus=0, scheduling_strategy=ACTOR_SCHEDULING)(LeagueActor).remote(
        env.league_config(), league_state, cfg.seed + first_update)
    runners = start_runners(env, cfg, policy_cfg, first_update, league)
    try:
        _learn(cfg, env, config, ppo, policy_cfg, learner, league, runners, first_update, generator, rank, world,
               encoder)
    finally:
        ray.get([r.close.remote() for r in runners])


def _learn(cfg, env, config, ppo, policy_cfg, learner, league, runners, first_update, generator, rank, world,
           encoder=None):
    """The updates: weights out to the runners, their rollouts in, one PPO update, the league told, metrics and
    checkpoints written."""
    import ray  # not at the top: the driver imports this module before init_local_ray (pipelines/ray_start.py)
    import ray.train

    writer = MetricsWriter(Path(config["run_folder"]), dataclasses.asdict(cfg), cfg.wandb_mode, "selfplay",
                           total_steps=ppo.updates)
    league_cfg = env.league_config()
    bots = (*league_cfg.strong, *league_cfg.weak)
    data = DataIdentity(**config["data"])
    started = time.monotonic()
    for u in range(first_update, ppo.updates):
        weights = {k: v.detach().cpu().clone() for k, v in learner.module.state_dict().items()}
        refs = [ray.put(a) for a in (weights, *env.collect_args(ppo))]  # one object each, read by every runner
        t0 = time.monotonic()
        rollout, episodes = env.collect(ray.get([r.collect.remote(*refs) for r in runners]), ppo)
        collect_s = time.monotonic() - t0
        steps_taken = int(rollout.mask.sum()) if rollout.mask is not None else rollout.actions.numel()
        metrics = update(learner, rollout, ppo, u, generator, encoder)
        collected = env.collect_metrics()
        league.record.remote([(e.opponent.name, e.score) for e in episodes])
        done = u + 1
        if done % cfg.snapshot_every == 0:
            ray.get(league.add_snapshot.remote(done, weights))
        ratings = ray.get(league.ratings.remote())
        snapshots = sorted(n for n in ratings if n.startswith("snapshot-"))
        line = {"step": done, **metrics, **episode_metrics(episodes, env.reward_terms, env.knockout_term, bots),
                **collected,
                "env_steps_per_s": steps_taken / max(collect_s, 1e-9),
                "learner_rating": ratings["learner"],
                "latest_snapshot_rating": ratings[snapshots[-1]] if snapshots else float("nan"),
                "elapsed_s": time.monotonic() - started}
        writer.write(line)
        if done % ppo.checkpoint_every == 0 or done == ppo.updates:
            state = {"league": ray.get(league.state_dict.remote()), "ratings": ratings, **env.extra()}
            report_checkpoint(payload(kind=env.kind, model_config=policy_cfg, train_config=cfg, step=done,
                                      data=data, model=learner.model, optimizer=learner.optimizer, extra=state),
                              line, rank, world)
        else:  # every update reaches Ray Train's callbacks: a sweep's scheduler compares trials update by update
            ray.train.report(line)
    writer.close()


def run(cfg: SelfPlayConfig, callbacks: tuple = (), name: str = ""):
    """Self-play on Ray Train; Ray Train's ``Result``. ``callbacks``: Ray Train callbacks, which see every update's
    metrics line (a sweep's ``TuneReportCallback``); ``name``: the run's name (default: ``selfplay-`` and the
    time)."""
    init_local_ray()
    cfg = cfg.normalized()
    env = cfg.environment()  # once: an environment may read a checkpoint or build an encoder
    identity = env.identity()
    latest = resume_path(cfg.out, cfg.resume)
    if latest:
        ckpt = read_checkpoint(latest)
        if ckpt.kind != env.kind or "league" not in ckpt.extra:
            raise ValueError(f"--resume {latest}: not a self-play checkpoint ({ckpt.kind})")
        updates = cfg.ppo(env.num_envs).updates
        if ckpt.step >= updates:
            raise ValueError(f"--resume: the checkpoint is at update {ckpt.step}, --updates is {updates}")
    # one learner, no restarts (max_failures 0): self-play has no --max-failures
    return launch(train_loop_per_worker,
                  {"cfg": dataclasses.asdict(cfg), "environment": environment_class(cfg.env), "resume_path": latest,
                   "data": dataclasses.asdict(identity)},
                  cfg, tag="selfplay", callbacks=callbacks, name=name)


def run_to_end(cfg: SelfPlayConfig) -> tuple[str, float]:
    """Self-play to its last update: (the last checkpoint's URI, wall seconds); a failed run raises."""
    started = time.monotonic()
    result = run(cfg)
    seconds = time.monotonic() - started
    if result.error is not None:
        raise RuntimeError(f"self-play failed: {result.error}") from result.error
    return latest_checkpoint(storage.normalize(cfg.out)), seconds


def main(argv: list[str] | None = None) -> None:
    cfg = command_config(SelfPlayConfig, argv)
    result = run(cfg)
    print(f"[selfplay] done: {result.metrics}")
    if result.checkpoint:
        print(checkpoint_uri(result.checkpoint, storage.normalize(cfg.out)))


if __name__ == "__main__":
    main()

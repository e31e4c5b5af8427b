"""PPO self-play on Ray: environment runners as Ray actors, the learner as a Ray Train worker, a league actor holding
snapshots, the opponent mix and the ratings.

    python training/selfplay.py --env melee --shards OUT/melee_frames/<v> \\
        --world-model RUN/ray/.../checkpoint_000010 --out runs/selfplay-melee --preset full
    python training/selfplay.py --env pokemon --policy-init RUN/ray/.../checkpoint_000040 --out runs/selfplay-pkmn
    python training/selfplay.py --tiny --shards OUT/melee_frames/<v> --out runs/sp     # untrained world model

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

Environments (``ENVIRONMENTS``): ``melee``, the world model (``training/melee/selfplay.py``), and ``pokemon``,
real battles on each runner's own local Showdown server on top of an offline-RL checkpoint
(``training/pokemon/selfplay.py``).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


from training.selfplay_base import ACTOR_SCHEDULING  # noqa: E402  (after the path set-up above)

ENVIRONMENTS = {"melee": "training.melee.selfplay.MeleeSelfPlay",
                "pokemon": "training.pokemon.selfplay.PokemonSelfPlay"}
"""Each environment's side of a run: policy shape, league, runners, how their results make a rollout."""


@dataclass(frozen=True, kw_only=True)
class SelfPlayConfig:
    """Configuration of a self-play run.

    Attributes:
        out: run folder (checkpoints, metrics.csv, wandb).
        env: ``melee`` (the world model) or ``pokemon`` (real battles on local Showdown servers).
        shards: melee: the melee_frames shard version the games are seeded from (a local path or a URI).
        policy_init: pokemon: the offline-RL checkpoint (training/offline_rl.py) whose turn features the policy
            reads (frozen) and whose actor head it starts from; empty: from scratch, on an untrained encoder.
        encoder_preset: pokemon from scratch: size of the untrained, frozen turn encoder (models/pokemon_policy.py).
        encoder_context: pokemon from scratch: turns the encoder reads per decision (the LSTM carries the rest).
        battle_format: pokemon: the format of the battles.
        battles_per_runner: pokemon: battles each runner plays per update (its rollout).
        world_model: the world-model checkpoint the games run in (folder or state.pt), or ``untrained`` for a fresh
            model of --world-model-preset (tests, demo).
        world_model_preset: preset of an untrained world model.
        preset: PPO hyperparameters: ``full`` or ``test`` (the same set, a few updates and frequent checkpoints).
        updates: PPO updates (0: the preset's).
        lr: learning rate at update 0, annealed as the preset anneals it (0: the preset's; a sweep's axis).
        entropy_weight: weight of the entropy bonus (None: the preset's; 0 turns the bonus off; a sweep's axis).
        num_runners: environment runner actors.
        envs_per_runner: games each runner plays at once.
        rollout_steps: melee: steps per game between updates (0: the preset's); pokemon: whole battles are played, so
            it only sets the training sequences' length.
        cpus_per_runner: CPUs each runner actor reserves.
        seed_frames: real frames each game is primed on.
        max_frames: frames before a game is cut by the time limit (bootstrapped, not terminal).
        reward_per_percent: reward per percent of damage dealt (taken: the negative); a stock is worth 1.
        opponent_window: the opponent's last N frames the strategy encoder reads.
        d_lstm: the policy's LSTM width.
        snapshot_every: updates between snapshots added to the league.
        snapshot_share: share of games against past snapshots (the three shares sum to 1).
        strong_share: share of games against the strong scripted opponents.
        weak_share: share of games against the weak scripted opponent.
        reference_kl: pokemon with --policy-init: weight of the KL penalty that keeps the policy near the offline-RL
            policy it started from (0: none).
        critic_warmup: updates at the start that train the critic alone, the policy kept as it started (a
            fine-tune's value head starts untrained, and its first advantages are noise).
        seed: seed of the policy, the runners and the league's draws.
        cpus_per_worker: CPUs the learner's Ray Train worker reserves.
        use_gpu: train the learner on a GPU.
        torch_threads: intra-op threads of the learner (0: Ray's default).
        wandb_mode: auto (online when logged in, else offline), online, offline or disabled.
        resume: continue from the latest checkpoint under --out (policy, optimizer, league, update).
    """

    out: str
    env: str = "melee"
    shards: str = ""
    policy_init: str = ""
    encoder_preset: str = "small"
    encoder_context: int = 4
    battle_format: str = "gen9randombattle"
    battles_per_runner: int = 4
    world_model: str = "untrained"
    world_model_preset: str = "tiny"
    preset: str = "full"
    updates: int = 0
    lr: float = 0.0
    entropy_weight: float | None = None
    num_runners: int = 2
    envs_per_runner: int = 4
    rollout_steps: int = 0
    cpus_per_runner: float = 0.5
    seed_frames: int = 60
    max_frames: int = 600
    reward_per_percent: float = 0.01
    opponent_window: int = 8
    d_lstm: int = 128
    snapshot_every: int = 10
    snapshot_share: float = 0.80
    strong_share: float = 0.15
    weak_share: float = 0.05
    reference_kl: float = 0.0
    critic_warmup: int = 0
    seed: int = 0
    cpus_per_worker: float = 0.5
    use_gpu: bool = False
    torch_threads: int = 0
    wandb_mode: str = "auto"
    resume: bool = False

    def __post_init__(self):
        if self.env not in ENVIRONMENTS:
            raise ValueError(f"--env must be one of {sorted(ENVIRONMENTS)}")
        if self.preset not in ("full", "test"):
            raise ValueError("--preset must be full or test")
        if min(self.num_runners, self.envs_per_runner, self.max_frames, self.snapshot_every) < 1:
            raise ValueError("--num-runners, --envs-per-runner, --max-frames and --snapshot-every must be >= 1")
        if self.wandb_mode not in ("auto", "online", "offline", "disabled"):
            raise ValueError("--wandb-mode must be auto, online, offline or disabled")
        shares = (self.snapshot_share, self.strong_share, self.weak_share)
        if min(shares) < 0 or abs(sum(shares) - 1.0) > 1e-9:
            raise ValueError(f"--snapshot-share, --strong-share and --weak-share {shares} must be >= 0 and sum to 1")
        if self.lr < 0 or (self.entropy_weight is not None and self.entropy_weight < 0):
            raise ValueError("--lr and --entropy-weight must be >= 0 (--lr 0: the preset's)")
        if self.reference_kl and not (self.env == "pokemon" and self.policy_init):
            raise ValueError("--reference-kl needs a policy to stay near: --env pokemon with --policy-init")

    @classmethod
    def tiny(cls, *, out: str, **overrides) -> SelfPlayConfig:
        fields = {"battles_per_runner": 2, "preset": "test", "num_runners": 2, "envs_per_runner": 2,
                  "rollout_steps": 8, "seed_frames": 20,
                  "max_frames": 12, "opponent_window": 3, "d_lstm": 16, "snapshot_every": 2, "wandb_mode": "disabled",
                  **overrides}
        return cls(out=out, **fields)

    def league(self, strong: tuple[str, ...], weak: tuple[str, ...]):
        """The league's configuration: this run's cadence and opponent mix over an environment's bots."""
        from training.league import LeagueConfig

        return LeagueConfig(snapshot_every=self.snapshot_every, snapshot_share=self.snapshot_share,
                            strong_share=self.strong_share, weak_share=self.weak_share, strong=strong, weak=weak)

    def environment(self):
        """The environment's side of the run (``ENVIRONMENTS``)."""
        import importlib

        module, _, name = ENVIRONMENTS[self.env].rpartition(".")
        return getattr(importlib.import_module(module), name)(self)

    def ppo(self, num_envs: int):
        """The PPO hyperparameters: the preset's, with this run's environment count (``num_envs`` columns per
        rollout) and lengths; never more minibatches than a rollout has sequences; ``lr`` and ``entropy_weight``
        where this run sets them."""
        from training.ppo import PPOConfig

        base = PPOConfig.test() if self.preset == "test" else PPOConfig.full()
        steps = self.rollout_steps or base.rollout_steps
        seq_len = min(base.seq_len, steps)
        return dataclasses.replace(base, num_envs=num_envs, rollout_steps=steps, seq_len=seq_len,
                                   num_minibatches=min(base.num_minibatches, num_envs * (steps // seq_len)),
                                   updates=self.updates or base.updates, seed=self.seed, lr=self.lr or base.lr,
                                   entropy_weight=base.entropy_weight if self.entropy_weight is None
                                   else self.entropy_weight,
                                   reference_kl=self.reference_kl, critic_warmup=self.critic_warmup)


class LeagueActor:
    """The league on Ray: runners draw opponents and fetch snapshots from it; the learner reports games to it,
    adds snapshots and saves its state with each checkpoint."""

    def __init__(self, cfg, state: dict | None, seed: int):
        import random

        from training.league import League

        self.league = League.from_state_dict(cfg, state) if state else League(cfg)
        self.rng = random.Random(seed)

    def draw(self):
        return self.league.sample(self.rng)

    def snapshot(self, name: str) -> dict:
        return self.league.snapshots[name]

    def record(self, results: list[tuple[str, float]]) -> None:
        from training.league import LEARNER

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
    from training.league import OPPONENT_KINDS

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


def train_loop_per_worker(config: dict) -> None:
    """The learner: runs on one Ray Train worker, drives the runner actors and the league actor."""
    import ray
    import ray.train
    import torch

    from models.ppo_policy import RecurrentPolicy
    from training.checkpoints import set_rng_state
    from training.fit import Learner, worker_checkpoint
    from training.loop import start_worker

    cfg = SelfPlayConfig(**config["cfg"])
    env = cfg.environment()
    rank, world, device, cuda = start_worker(cfg, "selfplay")
    ppo, policy_cfg = cfg.ppo(env.num_envs), env.policy_config()
    torch.manual_seed(cfg.seed)
    policy = RecurrentPolicy(policy_cfg)
    env.start_policy(policy)
    learner = Learner(policy, lr=ppo.lr, weight_decay=0.0, grad_clip=ppo.grad_clip, device=device)
    first_update, league_state = 0, None
    start, _ = worker_checkpoint(config, device, env.kind)
    if start is not None:
        learner.load({"model": start.model, "optimizer": start.optimizer}, optimizer=True)
        set_rng_state(start.rng[0])
        first_update, league_state = start.step, start.extra["league"]
        env.restore(start.extra)
    reference = env.reference_policy()
    if reference is not None:
        reference = reference.to(device)
    generator = torch.Generator().manual_seed(cfg.seed * 1_000_003 + first_update)
    league = ray.remote(num_cpus=0, scheduling_strategy=ACTOR_SCHEDULING)(LeagueActor).remote(
        env.league_config(), league_state, cfg.seed + first_update)

    def draw():
        return ray.get(league.draw.remote())

    def weights_of(name):
        return ray.get(league.snapshot.remote(name))

    runners = env.runners(policy_cfg, first_update, draw, weights_of)
    try:
        _learn(cfg, env, config, ppo, policy_cfg, learner, league, runners, first_update, generator, rank, world,
               reference)
    finally:
        env.close(runners)


def _learn(cfg, env, config, ppo, policy_cfg, learner, league, runners, first_update, generator, rank, world,
           reference):
    """The updates: weights out to the runners, their rollouts in, one PPO update, the league told, metrics and
    checkpoints written."""
    import ray
    import ray.train

    from training.checkpoints import DataIdentity, payload
    from training.fit import report_checkpoint
    from training.loop import MetricsWriter
    from training.ppo import update

    writer = MetricsWriter(Path(config["run_folder"]), dataclasses.asdict(cfg), cfg.wandb_mode, "selfplay",
                           total_steps=ppo.updates)
    league_cfg = env.league_config()
    bots = (*league_cfg.strong, *league_cfg.weak)
    data = DataIdentity(**config["data"])
    started = time.monotonic()
    for u in range(first_update, ppo.updates):
        weights = {k: v.detach().cpu().clone() for k, v in learner.module.state_dict().items()}
        ref = ray.put(weights)
        t0 = time.monotonic()
        rollout, episodes = env.collect(runners, ref, ppo)
        collect_s = time.monotonic() - t0
        steps_taken = int(rollout.mask.sum()) if rollout.mask is not None else rollout.actions.numel()
        metrics = update(learner, rollout, ppo, u, generator, reference)
        league.record.remote([(e.opponent.name, e.score) for e in episodes])
        done = u + 1
        if done % cfg.snapshot_every == 0:
            ray.get(league.add_snapshot.remote(done, weights))
        ratings = ray.get(league.ratings.remote())
        snapshots = sorted(n for n in ratings if n.startswith("snapshot-"))
        line = {"step": done, **metrics, **episode_metrics(episodes, env.reward_terms, env.knockout_term, bots),
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
    from shards_schema import storage
    from training.loop import init_local_ray, latest_checkpoint, local_run_folder, run_storage

    init_local_ray()
    import ray.train
    from ray.train.torch import TorchTrainer

    from training.checkpoints import read_checkpoint

    cfg = dataclasses.replace(cfg, out=storage.normalize(cfg.out),
                              **{k: storage.normalize(getattr(cfg, k)) for k in ("shards", "policy_init", "world_model")
                                 if getattr(cfg, k) and getattr(cfg, k) != "untrained"})
    env = cfg.environment()  # once: a Pokémon environment reads its checkpoint or builds its encoder
    identity = env.identity()
    latest = latest_checkpoint(cfg.out) if cfg.resume else None
    if cfg.resume and latest is None:
        raise FileNotFoundError(f"--resume: no checkpoint under {storage.join(cfg.out, 'ray')}")
    if latest:
        ckpt = read_checkpoint(latest)
        if ckpt.kind != env.kind or "league" not in ckpt.extra:
            raise ValueError(f"--resume {latest}: not a self-play checkpoint ({ckpt.kind})")
        updates = cfg.ppo(env.num_envs).updates
        if ckpt.step >= updates:
            raise ValueError(f"--resume: the checkpoint is at update {ckpt.step}, --updates is {updates}")
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config={"cfg": dataclasses.asdict(cfg), "resume_path": latest,
                           "data": dataclasses.asdict(identity), "run_folder": str(local_run_folder(cfg.out))},
        scaling_config=ray.train.ScalingConfig(num_workers=1, use_gpu=cfg.use_gpu,
                                               resources_per_worker={"CPU": cfg.cpus_per_worker}),
        run_config=ray.train.RunConfig(name=name or f"selfplay-{time.strftime('%Y%m%d-%H%M%S')}",
                                       **run_storage(cfg.out), callbacks=list(callbacks),
                                       checkpoint_config=ray.train.CheckpointConfig(num_to_keep=2)),
    )
    return trainer.fit()


def run_to_end(cfg: SelfPlayConfig) -> tuple[str, float]:
    """Self-play to its last update: (the last checkpoint's URI, wall seconds); a failed run raises."""
    from shards_schema import storage
    from training.loop import latest_checkpoint

    started = time.monotonic()
    result = run(cfg)
    seconds = time.monotonic() - started
    if result.error is not None:
        raise RuntimeError(f"self-play failed: {result.error}") from result.error
    return latest_checkpoint(storage.normalize(cfg.out)), seconds


def main(argv: list[str] | None = None) -> None:
    from pipelines.cli import command_config
    from shards_schema import storage
    from training.loop import checkpoint_uri

    cfg = command_config(SelfPlayConfig, argv)
    result = run(cfg)
    print(f"[selfplay] done: {result.metrics}")
    if result.checkpoint:
        print(checkpoint_uri(result.checkpoint, storage.normalize(cfg.out)))


if __name__ == "__main__":
    main()

"""What self-play's core and each game's self-play environment share, naming no game: the settings every run has
(``SelfPlayCoreConfig``), the finished game a runner reports (``Episode``) and where runner actors are placed
(``ACTOR_SCHEDULING``).

A game's environment (``training/<game>/selfplay.py``) imports this module and extends ``SelfPlayCoreConfig`` with
its own fields; the registry (``training/selfplay_envs.py``) joins the games' configs into the command's
``SelfPlayConfig``; the core (``training/selfplay.py``) reaches the games through the registry only, so no game
module imports the core.

An environment's methods the core calls: ``policy_config``, ``start_policy``, ``extra``, ``restore`` (on resume,
before ``policy_config``), ``league_config``, ``identity``, ``runners``, ``collect``, ``close``, and
``config_problem``, ``reward_terms``, ``knockout_term``, ``kind``, ``num_envs``. A fine-tune's rollouts carry its
starting policy's logits (``Rollout.prior``, for a policy with ``RecurrentPolicyConfig.prior``): they are the
reference policy of ``reference_kl``. Two are optional (``OPTIONAL_HOOKS``), absent where an
environment has no use for them: ``trainable_encoder(device, ppo)`` → a ``training/ppo.TrainableEncoder`` or None
(an observation encoder trained beside the policy; its rollouts then carry ``Rollout.inputs``), and
``collect_metrics()`` → what the last ``collect`` adds to the update's metrics line (the same keys every update).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from shards_schema import storage
from training.league import LeagueConfig
from training.ppo import PPOConfig

ACTOR_SCHEDULING = "DEFAULT"
"""Where the learner's runner and league actors go: on the cluster, never into the learner's own placement group.
Inside a Tune trial (``tune/ppo_sweep.py``) the learner inherits the trial's capture of child tasks, and a runner
asking 1 CPU was put into the learner's bundle of 0.5 and refused ("cannot fit into any bundles for the placement
group")."""

OPTIONAL_HOOKS = ("trainable_encoder", "collect_metrics")
"""Environment methods the core calls only where an environment has them (see the module docstring)."""


@dataclass
class Episode:
    """One finished game of the learner, for metrics and the league.

    Attributes:
        opponent: who it played (kind, name).
        side: the learner's side (0 = the first player).
        frames: steps the learner took (frames in Melee, decisions in Pokémon).
        terms: each reward term summed over the game (the environment's ``reward_terms``).
        reward: the summed reward.
        score: 1 a win, 0.5 a draw, 0 a loss (each environment says when a game is won).
        truncated: ended by the time limit.
    """

    opponent: object
    side: int
    frames: int
    terms: dict
    reward: float
    score: float
    truncated: bool


@dataclass(frozen=True, kw_only=True)
class SelfPlayCoreConfig:
    """What every self-play run sets, whatever its game. A game's config extends it (``__post_init__`` and
    ``normalized`` call their base's first).

    Attributes:
        out: run folder (checkpoints, metrics.csv, wandb).
        preset: PPO hyperparameters: ``full`` or ``test`` (the same set, a few updates and frequent checkpoints).
        updates: PPO updates (0: the preset's).
        lr: learning rate at update 0, annealed as the preset anneals it (0: the preset's; a sweep's axis).
        entropy_weight: weight of the entropy bonus (None: the preset's; 0 turns the bonus off; a sweep's axis).
        num_runners: environment runner actors.
        rollout_steps: steps per game between updates (0: the preset's); an environment that plays whole games,
            one per rollout column, takes it only as the training sequences' length.
        cpus_per_runner: CPUs each runner actor reserves.
        opponent_window: the opponent's last N steps the strategy encoder reads.
        d_lstm: the policy's LSTM width.
        snapshot_every: updates between snapshots added to the league.
        snapshot_share: share of games against past snapshots (the three shares sum to 1).
        strong_share: share of games against the strong scripted opponents.
        weak_share: share of games against the weak scripted opponent.
        reference_kl: weight of the KL penalty that keeps the policy near the policy it started from (0: none);
            only where the environment starts from one (its rollouts carry that policy's logits, ``Rollout.prior``).
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
    preset: str = "full"
    updates: int = 0
    lr: float = 0.0
    entropy_weight: float | None = None
    num_runners: int = 2
    rollout_steps: int = 0
    cpus_per_runner: float = 0.5
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
        if self.preset not in ("full", "test"):
            raise ValueError("--preset must be full or test")
        if min(self.num_runners, self.snapshot_every) < 1:
            raise ValueError("--num-runners and --snapshot-every must be >= 1")
        if self.wandb_mode not in ("auto", "online", "offline", "disabled"):
            raise ValueError("--wandb-mode must be auto, online, offline or disabled")
        shares = (self.snapshot_share, self.strong_share, self.weak_share)
        if min(shares) < 0 or abs(sum(shares) - 1.0) > 1e-9:
            raise ValueError(f"--snapshot-share, --strong-share and --weak-share {shares} must be >= 0 and sum to 1")
        if self.lr < 0 or (self.entropy_weight is not None and self.entropy_weight < 0):
            raise ValueError("--lr and --entropy-weight must be >= 0 (--lr 0: the preset's)")

    def normalized(self):
        """This config with its paths made absolute (workers run in Ray's session folder, where a relative path
        would point elsewhere) and URIs normalized; a game's config adds its own paths."""
        return dataclasses.replace(self, out=storage.normalize(self.out))

    def league(self, strong: tuple[str, ...], weak: tuple[str, ...]) -> LeagueConfig:
        """The league's configuration: this run's cadence and opponent mix over an environment's bots."""
        return LeagueConfig(snapshot_every=self.snapshot_every, snapshot_share=self.snapshot_share,
                            strong_share=self.strong_share, weak_share=self.weak_share, strong=strong, weak=weak)

    def ppo(self, num_envs: int) -> PPOConfig:
        """The PPO hyperparameters: the preset's, with this run's environment count (``num_envs`` columns per
        rollout) and lengths; never more minibatches than a rollout has sequences; ``lr`` and ``entropy_weight``
        where this run sets them."""
        base = PPOConfig.test() if self.preset == "test" else PPOConfig.full()
        steps = self.rollout_steps or base.rollout_steps
        seq_len = min(base.seq_len, steps)
        return dataclasses.replace(base, num_envs=num_envs, rollout_steps=steps, seq_len=seq_len,
                                   num_minibatches=min(base.num_minibatches, num_envs * (steps // seq_len)),
                                   updates=self.updates or base.updates, seed=self.seed, lr=self.lr or base.lr,
                                   entropy_weight=base.entropy_weight if self.entropy_weight is None
                                   else self.entropy_weight,
                                   reference_kl=self.reference_kl, critic_warmup=self.critic_warmup)

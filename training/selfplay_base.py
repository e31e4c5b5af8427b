"""The self-play contract, naming no game: the environment a game provides (``SelfPlayEnvironment``), its runner
(``Runner``), its options (``SelfPlayOptions``), the finished game a runner reports (``Episode``) and the settings
every run has (``SelfPlayCoreConfig``).

A game's module (``training/<game>/selfplay.py``) subclasses ``SelfPlayEnvironment``, ``Runner`` and
``SelfPlayOptions``; the registry (``training/selfplay_envs.py``) makes it ``--env <name>``; the executor
(``training/selfplay.py``) drives it through these methods alone, and holds every Ray call: it starts
``cfg.num_runners`` actors of ``runner_class`` with ``runner_kwargs`` and a seed each (``runner_seed``), hands each
update's weights and ``collect_args`` to every runner's ``collect``, and gives their results to the environment's
``collect``, which makes them one ``training/ppo.Rollout``. A fine-tune's rollouts carry its starting policy's
logits (``Rollout.prior``): they are the reference policy of ``reference_kl``.
"""

from __future__ import annotations

import abc
import dataclasses
from dataclasses import dataclass

from shards_schema import storage
from training.league import LeagueConfig
from training.ppo import PPOConfig, Rollout, TrainableEncoder, sample_actions


def runner_seed(seed: int, first_update: int, index: int) -> int:
    """Runner ``index``'s seed in a run of ``seed`` started (or resumed) at ``first_update``: a resumed run's runners
    draw anew, not the first run's games again."""
    return seed * 1000 + first_update * 10 + index


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
    """What every self-play run sets, whatever its game.

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
        critic_warmup_updates: updates at the start that train the critic alone, the policy kept as it started (a
            fine-tune's value head starts untrained, and its first advantages are noise).
        temperature: the learner and its snapshots act from softmax(logits / temperature), the policy PPO trains
            (``PPOConfig.temperature``); below 1 the sampled play comes closer to the argmax, which evaluation plays.
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
    critic_warmup_updates: int = 0
    temperature: float = 1.0
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
        if not self.temperature > 0:
            raise ValueError(f"--temperature must be > 0, not {self.temperature}")
        if self.lr < 0 or (self.entropy_weight is not None and self.entropy_weight < 0):
            raise ValueError("--lr and --entropy-weight must be >= 0 (--lr 0: the preset's)")

    def normalized(self):
        """This config with its paths made absolute (workers run in Ray's session folder, where a relative path
        would point elsewhere) and URIs normalized."""
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
                                   reference_kl=self.reference_kl, critic_warmup_updates=self.critic_warmup_updates,
                                   temperature=self.temperature)


@dataclass(frozen=True, kw_only=True)
class SelfPlayOptions:
    """A game's own options (its ``--help`` section, chosen by ``--env``). A game's options extend it."""

    def normalized(self):
        """These options with their paths made absolute and URIs normalized (``SelfPlayCoreConfig.normalized``)."""
        return self

    @classmethod
    def tiny(cls, **overrides):
        """The options of the tiny run (tests, demo)."""
        return cls(**overrides)


class Runner(abc.ABC):
    """Plays a game's games for the learner as a Ray actor (or in the learner's process): ``collect`` plays an
    update's worth against opponents drawn from the league and returns the learner's side only.

    ``draw_opponent(key=None)`` → an ``Opponent`` (``training/selfplay.LeagueActor.draw``); ``snapshot_weights(name)``
    → that snapshot's state_dict; ``index``: the runner's place among the run's; ``first_update``: the update it
    starts at; ``temperature``: the temperature its policies act at (``PPOConfig.temperature``), through ``sample``."""

    def __init__(self, *, seed: int, draw_opponent=None, snapshot_weights=None, index: int = 0,
                 first_update: int = 0, temperature: float = 1.0):
        self.seed, self.index, self.update = seed, index, first_update
        self.draw_opponent, self.snapshot_weights = draw_opponent, snapshot_weights
        self.temperature = temperature

    def sample(self, logits, generator):
        """(actions, log-probabilities) of logits (N, A) at the run's temperature (``training/ppo.sample_actions``):
        how the learner and its snapshots act, so that the log-probabilities PPO trains on are the play's."""
        return sample_actions(logits, generator, self.temperature)

    @abc.abstractmethod
    def collect(self, weights: dict, *args):
        """One update's games with the learner's ``weights`` and the environment's ``collect_args``."""

    def close(self) -> None:  # noqa: B027 (optional: most runners hold nothing outside their process)
        """Release what the runner holds outside its process (a server)."""


class SelfPlayEnvironment(abc.ABC):
    """A game as self-play's environment: its policy's shapes, league, runners and how their results make a
    rollout. Built from the run's ``SelfPlayConfig`` (``cfg.options``: the game's own).

    Attributes:
        name: its ``--env`` value.
        kind: the kind of its checkpoints.
        options_class: its ``SelfPlayOptions``.
        runner_class: its ``Runner``.
        reward_terms: the names of an ``Episode``'s terms.
        knockout_term: the term the metrics' ``knockouts`` are.
    """

    name: str
    kind: str
    options_class: type[SelfPlayOptions]
    runner_class: type[Runner]
    reward_terms: tuple[str, ...]
    knockout_term: str

    def __init__(self, cfg):
        self.cfg = cfg

    @staticmethod
    def config_problem(cfg) -> str | None:
        """What this environment cannot do with ``cfg``, or None."""
        return None

    @property
    @abc.abstractmethod
    def num_envs(self) -> int:
        """Rollout columns per update, over every runner."""

    @abc.abstractmethod
    def policy_config(self):
        """The policy's ``RecurrentPolicyConfig`` (after ``restore`` on resume)."""

    @abc.abstractmethod
    def league_config(self) -> LeagueConfig:
        """The league: the run's cadence and mix (``cfg.league``) over this game's bots."""

    @abc.abstractmethod
    def identity(self):
        """The ``DataIdentity`` the run's checkpoints carry."""

    @abc.abstractmethod
    def runner_kwargs(self, policy_cfg) -> dict:
        """What every runner is made with beside ``Runner``'s own arguments (computed once, on the learner)."""

    @abc.abstractmethod
    def collect_args(self, ppo: PPOConfig) -> tuple:
        """The arguments of an update's ``Runner.collect`` after the weights (each put once in the object store)."""

    @abc.abstractmethod
    def collect(self, results: list, ppo: PPOConfig) -> tuple[Rollout, list[Episode]]:
        """Every runner's ``collect`` result → (the update's rollout, the games that finished)."""

    def start_policy(self, policy) -> None:  # noqa: B027 (optional: a fresh policy starts as initialized)
        """Set a fresh policy's starting weights."""

    def trainable_encoder(self, device, ppo: PPOConfig) -> TrainableEncoder | None:
        """An observation encoder trained beside the policy (its rollouts then carry ``Rollout.inputs``), or None."""
        return None

    def collect_metrics(self) -> dict:
        """What the last ``collect`` adds to the update's metrics line (the same keys every update)."""
        return {}

    def extra(self) -> dict:
        """What a checkpoint keeps beside the policy and the league."""
        return {}

    def restore(self, extra: dict) -> None:  # noqa: B027 (optional: nothing beside the policy and the league)
        """On resume, before ``policy_config``: what ``extra`` kept."""

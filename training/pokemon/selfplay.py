"""Self-play in real Pokémon battles: poke-env players on a local Showdown server (127.0.0.1, an explicit port,
stopped by PID), the learner playing with the self-play policy on top of a frozen offline-RL policy's turn features.

The learner's player (``training/pokemon/selfplay_player.SelfPlayPlayer``) sees exactly what evaluation sees (the
server's protocol through the project's tracker and observation spec); per turn it reads the offline-RL policy's
features of its battle so far (frozen), the features of its previous turns as the opponent's recent behaviour (what
the opponent did shows in them), and chooses with ``models/ppo_policy.RecurrentPolicy``, keeping one LSTM state per
battle. It records its own decisions only. Reward: +1 a win, -1 a loss, 0 a tie, at the battle's last decision
(terminal).

A battle is an episode of its own length; ``PokemonRunner.collect`` lays finished battles one per column, padded
at the end, with ``Rollout.mask`` False on the padding.

    python training/selfplay.py --env pokemon --policy-init RUN/ray/.../checkpoint_000040 --out runs/selfplay-pkmn
"""

from __future__ import annotations

import asyncio
import collections
import copy
import dataclasses
from dataclasses import dataclass

import torch
from poke_env import AccountConfiguration, ServerConfiguration
from poke_env import player as players

from models.pokemon_policy import NUM_POLICY_ACTIONS, PokemonPolicy, PolicyConfig
from models.ppo_policy import RecurrentPolicy, RecurrentPolicyConfig
from pipelines.pokemon.observation import vocabulary
from shards_schema import storage
from shards_schema.pokemon import CODE_VERSIONS as POKEMON_TURNS
from training.checkpoints import live_identity, read_checkpoint
from training.pokemon.selfplay_player import SelfPlayPlayer, encoder_from_state, encoder_state
from training.pokemon.showdown_server import free_port, showdown_server
from training.ppo import Rollout
from training.registry import POKEMON_OBSERVATION
from training.selfplay_base import ACTOR_SCHEDULING, Episode, SelfPlayCoreConfig

OPPONENT_CLASSES = {"heuristic": "SimpleHeuristicsPlayer", "maxbp": "MaxBasePowerPlayer", "random": "RandomPlayer"}
"""Scripted opponents by league name: ``heuristic`` and ``maxbp`` strong, ``random`` weak."""


def battles_to_rollout(battles: list[tuple], seq_len: int):
    """Finished battles → a ``training/ppo.Rollout``, one battle per column, padded at the end to a multiple of
    ``seq_len`` (``mask`` False there); the result is the reward of each battle's last decision, which is terminal."""
    longest = max(len(steps) for steps, *_ in battles)
    t = -(-longest // seq_len) * seq_len
    n = len(battles)
    first = battles[0][0][0]

    def column(key, fill):
        out = torch.full((t, n, *torch.as_tensor(first[key]).shape), fill, dtype=torch.as_tensor(first[key]).dtype)
        for j, (steps, *_) in enumerate(battles):
            out[:len(steps), j] = torch.stack([torch.as_tensor(s[key]) for s in steps])
        return out

    mask = torch.zeros(t, n, dtype=torch.bool)
    rewards = torch.zeros(t, n)
    terminated = torch.zeros(t, n, dtype=torch.bool)
    for j, (steps, result, *_) in enumerate(battles):
        mask[:len(steps), j] = True
        rewards[len(steps) - 1, j] = result
        terminated[len(steps) - 1:, j] = True  # the end, and the padding after it (no value flows back from it)
    values = column("values", 0.0)
    legal = column("legal", True)
    return Rollout(obs=column("obs", 0.0), opponent=column("opponent", 0.0),
                   opponent_valid=column("opponent_valid", False), legal=legal,
                   episode_start=column("episode_start", True), actions=column("actions", 0),
                   logp=column("logp", 0.0), values=values, rewards=rewards, terminated=terminated,
                   truncated=torch.zeros(t, n, dtype=torch.bool),
                   next_values=torch.cat([values[1:], torch.zeros(1, n)]), states=(column("h", 0.0),
                                                                                   column("c", 0.0)),
                   mask=mask)


class PokemonRunner:
    """Plays real battles for the learner on its own local Showdown server (started on a free loopback port, stopped
    by PID when the runner closes) against opponents drawn from the league: past snapshots (the same player with a
    snapshot's weights, recording nothing) or poke-env's scripted bots. Runs as a Ray actor or in process."""

    def __init__(self, bc_model, context: int, policy_cfg, *, battle_format: str = "gen9randombattle",
                 seed: int = 0, draw_opponent=None, snapshot_weights=None, concurrency: int = 2):
        self.bc_model, self.context, self.policy_cfg = bc_model.eval(), context, policy_cfg
        self.format, self.seed, self.concurrency = battle_format, seed, concurrency
        self.draw_opponent, self.snapshot_weights = draw_opponent, snapshot_weights
        self.policy = RecurrentPolicy(policy_cfg)
        self._server = showdown_server(free_port())
        self.url = self._server.__enter__()
        self.rounds = 0

    def _opponent(self, opponent, tag: str):
        server = ServerConfiguration(self.url, None)
        account = AccountConfiguration(f"rf opp {tag}", None)
        common = dict(server_configuration=server, battle_format=self.format, max_concurrent_battles=self.concurrency)
        if opponent.kind == "snapshot":
            policy = RecurrentPolicy(self.policy_cfg)
            policy.load_state_dict(self.snapshot_weights(opponent.name))
            return SelfPlayPlayer(self.bc_model, self.context, policy, account, record=False, seed=self.seed + 1,
                                  **common)
        return getattr(players, OPPONENT_CLASSES[opponent.name])(account, **common)

    def collect(self, weights: dict, battles: int) -> tuple[list[tuple], list]:
        """``battles`` battles with the learner's ``weights``, each against its own opponent drawn from the league
        (battles against the same opponent run together): (the learner's recorded battles as (decisions, result,
        knockouts, opponent), an ``Episode`` per finished one)."""
        self.policy.load_state_dict(weights)
        drawn = collections.Counter(self.draw_opponent() for _ in range(battles))
        self.rounds += 1
        tag = f"{self.seed % 1000}x{self.rounds % 1000}"  # Showdown names are at most 18 characters
        made = {}

        async def play():  # players are made inside the loop that runs them, as training/pokemon/evaluate.py does
            learner = made["learner"] = SelfPlayPlayer(
                self.bc_model, self.context, self.policy, AccountConfiguration(f"rf learner {tag}", None),
                server_configuration=ServerConfiguration(self.url, None), battle_format=self.format,
                max_concurrent_battles=self.concurrency, seed=self.seed + self.rounds)
            clients = [learner]
            for k, (choice, n) in enumerate(sorted(drawn.items(), key=lambda item: item[0].name)):
                opponent = self._opponent(choice, f"{tag}o{k}")
                clients.append(opponent)
                learner.opponent = choice
                await learner.battle_against(opponent, n_battles=n)
            await asyncio.gather(*(c.ps_client.stop_listening() for c in clients), return_exceptions=True)

        asyncio.run(play())
        finished = made["learner"].finished
        return finished, [Episode(opponent=opponent, side=0, frames=len(steps),
                                  terms={"result": result, "knockouts_dealt": dealt, "knockouts_taken": taken},
                                  reward=result, score=(result + 1.0) / 2.0, truncated=False)
                          for steps, result, (dealt, taken), opponent in finished]

    def close(self) -> None:
        self._server.__exit__(None, None, None)


def untrained_encoder(preset: str, seed: int):
    """A fresh, frozen turn encoder (``models/pokemon_policy.PokemonPolicy`` of ``preset`` over this code's
    vocabulary, initialised from ``seed``): the observations of a run from scratch, with no offline-RL policy."""
    torch.manual_seed(seed)
    return PokemonPolicy(PolicyConfig.preset(preset, len(vocabulary(POKEMON_TURNS.observation)))).eval()


@dataclass(frozen=True, kw_only=True)
class PokemonSelfPlayConfig(SelfPlayCoreConfig):
    """A self-play run in real Pokémon battles.

    Attributes:
        policy_init: the offline-RL checkpoint (training/pokemon/offline_rl.py) whose turn features the policy
            reads (frozen) and whose actor head it starts from; empty: from scratch, on an untrained encoder.
        encoder_preset: from scratch: size of the untrained, frozen turn encoder (models/pokemon_policy.py).
        encoder_context: from scratch: turns the encoder reads per decision (the LSTM carries the rest).
        battle_format: the format of the battles.
        battles_per_runner: battles each runner plays per update (its rollout).
    """

    policy_init: str = ""
    encoder_preset: str = "small"
    encoder_context: int = 4
    battle_format: str = "gen9randombattle"
    battles_per_runner: int = 4

    def normalized(self):
        cfg = super().normalized()
        return dataclasses.replace(cfg, policy_init=storage.normalize(cfg.policy_init)) if cfg.policy_init else cfg


class PokemonSelfPlay:
    """Real Pokémon battles as ``training/selfplay.py``'s environment. With ``--policy-init`` (an offline-RL
    checkpoint) its turn features (frozen) are the observations and its actor head starts the policy, so at step 0
    the learner chooses as that policy does; the checkpoint's observation spec and vocabulary are checked against
    this code's before any battle. Without it, the run starts from scratch: the observations are the turn features
    of an untrained encoder of ``--encoder-preset`` (frozen, initialised from ``--seed``) and the policy starts as
    initialised. Either encoder is saved in every checkpoint."""

    kind = "pokemon_selfplay"
    reward_terms = ("result", "knockouts_dealt", "knockouts_taken")
    knockout_term = "knockouts_dealt"

    @staticmethod
    def config_problem(cfg) -> str | None:
        """What this environment cannot do with ``cfg``, or None."""
        if cfg.reference_kl and not cfg.policy_init:
            return "--reference-kl needs a policy to stay near: --policy-init (from scratch there is none)"
        return None

    def __init__(self, cfg):
        self.cfg = cfg
        if cfg.policy_init:
            self.checkpoint = read_checkpoint(cfg.policy_init, kind="pokemon_policy")
            self.checkpoint.check_features(live_identity(POKEMON_OBSERVATION))
            self.bc = self.checkpoint.build_model().requires_grad_(False)
            self.context = int(self.checkpoint.train_config["context"])
            self.data, self.source = self.checkpoint.data, cfg.policy_init
        else:
            self.checkpoint = None
            self.bc = untrained_encoder(cfg.encoder_preset, cfg.seed).requires_grad_(False)
            self.context, self.data = cfg.encoder_context, live_identity(POKEMON_OBSERVATION)
            self.source = f"untrained {cfg.encoder_preset} (seed {cfg.seed})"
        self.num_envs = cfg.num_runners * cfg.battles_per_runner  # rollout columns: one per battle

    def policy_config(self):
        return RecurrentPolicyConfig(d_obs=self.bc.cfg.d_model, num_actions=NUM_POLICY_ACTIONS,
                                     opponent_window=self.cfg.opponent_window, strategy_heads=2,
                                     d_lstm=self.cfg.d_lstm)

    def start_policy(self, policy) -> None:
        """The offline-RL policy's actor head, for a fresh run (zero-started residuals do the rest); from scratch,
        the policy as initialised."""
        if self.checkpoint is not None:
            policy.actor.load_state_dict(self.bc.actor.state_dict())

    def reference_policy(self):
        """With ``--policy-init``, the offline-RL policy's actor head (frozen, a copy), mapping the observations to
        the logits of the policy the run started from (``--reference-kl``); from scratch, None. Called after
        ``restore``, so a resumed run's reference is the checkpointed encoder's head."""
        if not self.cfg.policy_init:
            return None
        return copy.deepcopy(self.bc.actor).requires_grad_(False)

    def extra(self) -> dict:
        """What a checkpoint keeps beside the policy: the frozen encoder its observations come from."""
        return {"encoder": encoder_state(self.bc, self.context, self.source)}

    def restore(self, extra: dict) -> None:
        """On resume, the encoder the run was started with (before any runner is made)."""
        self.bc, self.context = encoder_from_state(extra["encoder"])

    def league_config(self):
        return self.cfg.league(strong=("heuristic", "maxbp"), weak=("random",))

    def identity(self):
        return self.data

    def runners(self, policy_cfg, first_update: int, draw, weights_of) -> list:
        import ray  # not at the top: ray is imported only after training/loop.init_local_ray (pipelines/ray_start.py)

        cls = ray.remote(num_cpus=self.cfg.cpus_per_runner, scheduling_strategy=ACTOR_SCHEDULING)(PokemonRunner)
        return [cls.remote(self.bc, self.context, policy_cfg, battle_format=self.cfg.battle_format,
                           seed=self.cfg.seed * 1000 + first_update * 10 + i, draw_opponent=draw,
                           snapshot_weights=weights_of) for i in range(self.cfg.num_runners)]

    def collect(self, runners: list, weights_ref, ppo):
        """(the runners' battles, one per column, finished ``Episode``s)."""
        import ray  # see runners: ray only after init_local_ray

        results = ray.get([r.collect.remote(weights_ref, self.cfg.battles_per_runner) for r in runners])
        battles = [b for recorded, _ in results for b in recorded]
        return battles_to_rollout(battles, ppo.seq_len), [e for _, episodes in results for e in episodes]

    def close(self, runners: list) -> None:
        """Stop every runner's Showdown server (by PID, in the runner)."""
        import ray  # see runners: ray only after init_local_ray

        ray.get([r.close.remote() for r in runners])

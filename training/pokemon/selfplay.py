"""Self-play in real Pokémon battles: poke-env players on a local Showdown server (127.0.0.1, an explicit port,
stopped by PID), the learner playing with the self-play policy on top of an offline-RL policy's turn features.

Fine-tuning (``--policy-init``, an offline-RL checkpoint with either action head): the policy's logits are the
starting policy's logits (its prior: the whole head, the slot head's per-action scores included) plus its own
actor's, which starts at zero, so at step 0 the learner chooses exactly as the checkpoint does and PPO moves it away
by training the actor and the trunk under it (``models/ppo_policy.RecurrentPolicyConfig.prior``). The runners
compute the prior of each decision from its window of turns and record it in the rollout; ``--reference-kl``
takes it as the reference policy. The prior always comes from the starting checkpoint as it was: with a frozen
encoder that is the encoder itself (the features and the prior come from one pass); with ``--encoder-lr`` the
encoder trains and a frozen copy of the starting policy, kept apart, gives the prior. Checkpoints keep the
starting policy (``extra["start"]``, not written twice where it is the encoder), so resume and evaluation give the
policy the same prior.

The learner's player (``training/pokemon/selfplay_player.SelfPlayPlayer``) sees exactly what evaluation sees (the
server's protocol through the project's tracker and observation spec); per turn it reads the offline-RL policy's
features of its battle so far, the features of its previous turns as the opponent's recent behaviour (what the
opponent did shows in them), and chooses with ``models/ppo_policy.RecurrentPolicy``, keeping one LSTM state per
battle. It records its own decisions only. Reward: +1 a win, -1 a loss, 0 a tie, at the battle's last decision
(terminal), plus the dense terms of ``shaping_rewards`` where their weights are set (all 0 by default). The encoder
is frozen unless ``--encoder-lr`` trains it: then each decision also records the window of turns it read, and the
learner recomputes the features from them with gradients (``training/ppo.TrainableEncoder``).

Each battle's opponent is drawn from the league on its own, from a key (run seed, update, runner, battle), so the
draws of an update are the same whatever order the runners ask in, and on resume.

A battle is an episode of its own length; ``battles_to_rollout`` lays finished battles one per column, padded at
the end, with ``Rollout.mask`` False on the padding.

    python training/selfplay.py --env pokemon --policy-init RUN/ray/.../checkpoint_000040 --out runs/selfplay-pkmn
    python training/selfplay.py --env pokemon --policy-init ... --out ... --encoder-lr 1e-5 \
        --reward-hp-swing 0.5 --reward-knockout-dealt 0.1 --reward-knockout-taken 0.1   # dense terms, trained encoder
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
from training.pokemon.evaluate import export_teams, team_rotation
from training.pokemon.selfplay_player import (
    RecordedBattle,
    SelfPlayPlayer,
    TeamState,
    TurnFeatures,
    encoder_from_state,
    encoder_state,
    start_from_state,
    start_state,
)
from training.pokemon.showdown_server import free_port, showdown_server
from training.ppo import RolloutBuffer, TrainableEncoder
from training.registry import POKEMON_OBSERVATION
from training.selfplay_base import Episode, Runner, SelfPlayEnvironment, SelfPlayOptions

OPPONENT_CLASSES = {"heuristic": "SimpleHeuristicsPlayer", "maxbp": "MaxBasePowerPlayer", "random": "RandomPlayer"}
"""Scripted opponents by league name: ``heuristic`` and ``maxbp`` strong, ``random`` weak."""


@dataclass(frozen=True, kw_only=True)
class RewardWeights:
    """Weights of the dense reward terms (all 0: the result alone, as before they existed).

    Attributes:
        knockout_dealt: reward per opponent's Pokémon knocked out.
        knockout_taken: penalty per own Pokémon knocked out (a positive weight subtracts).
        hp_swing: reward per unit of HP swing: the opponent's team HP fraction lost minus one's own.
        keep_optimum: shape as γ·Φ(s') − Φ(s) with Φ = 0 at the battle's end (see ``shaping_rewards``).
    """

    knockout_dealt: float = 0.0
    knockout_taken: float = 0.0
    hp_swing: float = 0.0
    keep_optimum: bool = False

    @property
    def any(self) -> bool:
        return bool(self.knockout_dealt or self.knockout_taken or self.hp_swing)


def potential(state: TeamState, weights: RewardWeights) -> float:
    """Φ(s) = w_dealt · opponent's fainted − w_taken · own fainted + w_hp · (own HP fraction − opponent's): every dense
    term is a difference of it (``step_terms``)."""
    return (weights.knockout_dealt * state.opponent_fainted - weights.knockout_taken * state.own_fainted
            + weights.hp_swing * (state.own_hp - state.opponent_hp))


def step_terms(states: list[TeamState]) -> list[dict[str, float]]:
    """Per decision, what happened between it and the next (the battle's end for the last): ``states`` holds the
    teams at each decision and, last, at the end (decisions + 1). Knockouts dealt and taken, and HP fraction of the
    opponent's team and of one's own lost (negative where healed)."""
    return [{"knockouts_dealt": after.opponent_fainted - before.opponent_fainted,
             "knockouts_taken": after.own_fainted - before.own_fainted,
             "hp_dealt": before.opponent_hp - after.opponent_hp, "hp_taken": before.own_hp - after.own_hp}
            for before, after in zip(states[:-1], states[1:], strict=True)]


def shaping_rewards(states: list[TeamState], weights: RewardWeights, gamma: float) -> list[float]:
    """The dense reward of each decision from the teams at each decision and at the end (``step_terms``' layout).

    Plain (``keep_optimum`` False): r_t = Φ(s_{t+1}) − Φ(s_t) = w_dealt · knockouts dealt − w_taken · knockouts taken
    + w_hp · (HP dealt − HP taken) over the step. Summed over a battle they telescope to Φ(end) − Φ(first decision),
    and Φ(end) differs between battles: these terms do NOT keep the optimum, they also pay for winning with more
    left (and losing having taken more), which is the point of dense terms against strong bots, and a bias.

    ``keep_optimum``: r_t = γ Φ(s_{t+1}) − Φ(s_t), with Φ taken as 0 at the battle's end: potential-based shaping
    (Ng, Harada & Russell 1999), whose discounted sum is −Φ(first decision), the same for every policy from a
    state, so the optimal policy is unchanged; the last decision gives back what the earlier ones were paid."""
    phi = [potential(s, weights) for s in states]
    if not weights.keep_optimum:
        return [after - before for before, after in zip(phi[:-1], phi[1:], strict=True)]
    phi[-1] = 0.0
    return [gamma * after - before for before, after in zip(phi[:-1], phi[1:], strict=True)]


def battle_rewards(battle: RecordedBattle, weights: RewardWeights, gamma: float) -> tuple[list[float], dict]:
    """(reward of each decision, the battle's terms summed): the result at the last decision plus the dense terms
    where ``weights`` set them (all 0: the result alone, bit for bit as without them). Terms: result, knockouts dealt
    and taken, HP fractions dealt and taken (from the first decision to the end), and ``shaping``, the dense
    reward's sum."""
    states = [step["team"] for step in battle.steps] + [battle.end]
    rewards = [0.0] * len(battle.steps)
    rewards[-1] = battle.result
    shaping = 0.0
    if weights.any:
        dense = shaping_rewards(states, weights, gamma)
        rewards = [r + d for r, d in zip(rewards, dense, strict=True)]
        shaping = sum(dense)
    moved = step_terms(states)
    terms = {"result": battle.result, "knockouts_dealt": float(battle.end.opponent_fainted),
             "knockouts_taken": float(battle.end.own_fainted),
             "hp_dealt": sum(m["hp_dealt"] for m in moved), "hp_taken": sum(m["hp_taken"] for m in moved),
             "shaping": shaping}
    return rewards, terms


def battles_to_rollout(battles: list[RecordedBattle], seq_len: int, weights: RewardWeights = RewardWeights(),
                       gamma: float = 0.99):
    """Finished battles → a ``training/ppo.Rollout``, one battle per column, padded at the end to a multiple of
    ``seq_len`` (``mask`` False there); rewards from ``battle_rewards`` (the result at each battle's last decision,
    which is terminal, plus the dense terms ``weights`` set). Decisions recorded with their encoder inputs give the
    rollout's ``inputs`` (tokens, numeric, turns) for a trained encoder."""
    longest = max(len(b.steps) for b in battles)
    t = -(-longest // seq_len) * seq_len
    buffer = RolloutBuffer(t, len(battles))
    for j, b in enumerate(battles):
        rewards = battle_rewards(b, weights, gamma)[0]
        for i, step in enumerate(b.steps):
            buffer.put(i, j, **{k: v for k, v in step.items() if k != "team"}, rewards=rewards[i], mask=True)
        buffer.put(slice(len(b.steps) - 1, None), j, terminated=True)  # the end, and the padding after it
    data = buffer.data
    inputs = {k: data[k] for k in ("tokens", "numeric", "turns")} if "tokens" in data else None
    return buffer.rollout(truncated=torch.zeros_like(data["mask"]), inputs=inputs,
                          next_values=torch.cat([data["values"][1:], torch.zeros(1, len(battles))]))


def battle_draws(draw_opponent, draw_seed: int, update: int, index: int, battles: int) -> collections.Counter:
    """The opponents of runner ``index``'s ``battles`` battles of an update, each drawn on its own by its key
    (``draw_seed``, update, index, battle): ``draw_opponent(key)`` (``training/selfplay.LeagueActor.draw``), counted
    by opponent."""
    return collections.Counter(draw_opponent((draw_seed, update, index, b)) for b in range(battles))


class PokemonRunner(Runner):
    """Plays real battles for the learner on its own local Showdown server (started on a free loopback port, stopped
    by PID when the runner closes) against opponents drawn from the league: past snapshots (the same player with a
    snapshot's weights, recording nothing) or poke-env's scripted bots.

    ``draw_opponent(key)`` → the ``Opponent`` of the battle ``key`` names: (``draw_seed``, update, ``index``, battle),
    the update counted from ``first_update``. ``record_inputs``: record each decision's encoder window (a trained
    encoder); ``collect`` then also takes the encoder's weights of the update. ``start``: the starting policy whose
    logits are the prior of a ``prior`` policy: ``"encoder"`` (the frozen encoder is that policy; a name, since Ray
    sends each argument apart and the same module twice would arrive as two), its frozen copy, or None."""

    def __init__(self, bc_model, context: int, policy_cfg, *, battle_format: str = "gen9randombattle",
                 concurrency: int = 2, draw_seed: int = 0, record_inputs: bool = False, start=None,
                 num_teams: int = 50, team_seed: int = 9101, **common):
        super().__init__(**common)
        self.bc_model, self.context, self.policy_cfg = bc_model.eval(), context, policy_cfg
        self.start = self.bc_model if start == "encoder" else start.eval() if start is not None else None
        self.format, self.concurrency = battle_format, concurrency
        # a format that needs teams: the learner's rotation and its opponents', this runner's own slice of the
        # export, kept across updates (None twice where the format brings its own)
        pool = export_teams(battle_format, 2 * num_teams, team_seed, first_index=2 * num_teams * self.index)
        self.teams = team_rotation(pool, num_teams, 0), team_rotation(pool, num_teams, 1)
        self.draw_seed, self.record_inputs = draw_seed, record_inputs
        self.policy = RecurrentPolicy(policy_cfg)
        self._server = showdown_server(free_port())
        self.url = self._server.__enter__()
        self.rounds = 0

    def _opponent(self, opponent, tag: str):
        server = ServerConfiguration(self.url, None)
        account = AccountConfiguration(f"rf opp {tag}", None)
        common = dict(server_configuration=server, battle_format=self.format, max_concurrent_battles=self.concurrency,
                      team=self.teams[1])
        if opponent.kind == "snapshot":
            policy = RecurrentPolicy(self.policy_cfg)
            policy.load_state_dict(self.snapshot_weights(opponent.name))
            # on the runner's encoder, which a trained encoder (--encoder-lr) brings up to the update: a snapshot
            # keeps its policy only (an encoder per snapshot would be ~60 MB each at the small preset)
            return SelfPlayPlayer(self.bc_model, self.context, policy, account, start=self.start, record=False,
                                  sample_seed=self.seed + 1, temperature=self.temperature, **common)
        return getattr(players, OPPONENT_CLASSES[opponent.name])(account, **common)

    def collect(self, weights: dict, battles: int, encoder_weights: dict | None = None):
        """``battles`` battles with the learner's ``weights`` (and, for a trained encoder, ``encoder_weights``),
        each against its own opponent drawn from the league (battles against the same opponent run together):
        (the learner's ``RecordedBattle``s, the draws counted by opponent)."""
        self.policy.load_state_dict(weights)
        if encoder_weights is not None:
            self.bc_model.load_state_dict(encoder_weights)
        drawn = battle_draws(self.draw_opponent, self.draw_seed, self.update, self.index, battles)
        self.rounds += 1
        self.update += 1
        tag = f"{self.seed % 1000}x{self.rounds % 1000}"  # Showdown names are at most 18 characters
        made = {}

        async def play():  # players are made inside the loop that runs them, as training/pokemon/evaluate.py does
            learner = made["learner"] = SelfPlayPlayer(
                self.bc_model, self.context, self.policy, AccountConfiguration(f"rf learner {tag}", None),
                server_configuration=ServerConfiguration(self.url, None), battle_format=self.format,
                team=self.teams[0], max_concurrent_battles=self.concurrency, sample_seed=self.seed + self.rounds,
                temperature=self.temperature, record_inputs=self.record_inputs, start=self.start)
            clients = [learner]
            for k, (choice, n) in enumerate(sorted(drawn.items(), key=lambda item: item[0].name)):
                opponent = self._opponent(choice, f"{tag}o{k}")
                clients.append(opponent)
                learner.opponent = choice
                await learner.battle_against(opponent, n_battles=n)
            await asyncio.gather(*(c.ps_client.stop_listening() for c in clients), return_exceptions=True)

        asyncio.run(play())
        return made["learner"].finished, drawn

    def close(self) -> None:
        self._server.__exit__(None, None, None)


def episodes_of(battles: list[RecordedBattle], weights: RewardWeights, gamma: float) -> list[Episode]:
    """An ``Episode`` per battle: its terms (``battle_rewards``), its summed reward, the score of its result."""
    episodes = []
    for b in battles:
        rewards, terms = battle_rewards(b, weights, gamma)
        episodes.append(Episode(opponent=b.opponent, side=0, frames=len(b.steps), terms=terms, reward=sum(rewards),
                                score=(b.result + 1.0) / 2.0, truncated=False))
    return episodes


def untrained_encoder(preset: str, seed: int):
    """A fresh, frozen turn encoder (``models/pokemon_policy.PokemonPolicy`` of ``preset`` over this code's
    vocabulary, initialised from ``seed``): the observations of a run from scratch, with no offline-RL policy."""
    torch.manual_seed(seed)
    return PokemonPolicy(PolicyConfig.preset(preset, len(vocabulary(POKEMON_TURNS.observation)))).eval()


@dataclass(frozen=True, kw_only=True)
class PokemonSelfPlayOptions(SelfPlayOptions):
    """Pokémon in real battles: the encoder the policy reads, the battles and their dense reward terms.

    Attributes:
        policy_init: the offline-RL checkpoint (training/pokemon/offline_rl.py, either action head) whose turn
            features the policy reads and whose logits are its prior (it chooses as that policy at step 0); empty:
            from scratch, on an untrained encoder.
        encoder_preset: from scratch: size of the untrained turn encoder (models/pokemon_policy.py).
        encoder_context: from scratch: turns the encoder reads per decision (the LSTM carries the rest).
        encoder_lr: learning rate of the turn encoder, trained with the policy (annealed as ``lr`` is); 0: frozen.
            Each decision then records its window of turns (context × 87 ids and 50 numbers) for the update.
        battle_format: the format of the battles.
        num_teams: in a format that needs teams (gen1ou, gen9ou): teams in the learner's rotation and in its
            opponents', exported by the generator (``evaluate.export_teams``), each runner its own.
        team_seed: seed of those teams; evaluation's default (9001) differs, so its teams are not trained on.
        battles_per_runner: battles each runner plays per update (its rollout).
        reward_knockout_dealt: dense reward per opponent's Pokémon knocked out (0: none).
        reward_knockout_taken: dense penalty per own Pokémon knocked out (0: none).
        reward_hp_swing: dense reward per unit of HP swing each decision: the opponent's team HP fraction lost minus
            one's own (0: none).
        reward_keep_optimum: shape the dense terms as γΦ(s') − Φ(s), Φ = 0 at the end, which keeps the optimal
            policy of the result alone; otherwise plain differences, which also pay for winning by more (see
            ``shaping_rewards``).
    """

    policy_init: str = ""
    encoder_preset: str = "small"
    encoder_context: int = 4
    encoder_lr: float = 0.0
    battle_format: str = "gen9randombattle"
    num_teams: int = 50
    team_seed: int = 9101
    battles_per_runner: int = 4
    reward_knockout_dealt: float = 0.0
    reward_knockout_taken: float = 0.0
    reward_hp_swing: float = 0.0
    reward_keep_optimum: bool = False

    def __post_init__(self):
        if self.encoder_lr < 0:
            raise ValueError("--encoder-lr must be >= 0 (0: the encoder stays frozen)")
        if self.num_teams < 1:
            raise ValueError("--num-teams must be at least 1")

    def normalized(self):
        return dataclasses.replace(self, policy_init=storage.normalize(self.policy_init)) if self.policy_init else self

    @classmethod
    def tiny(cls, **overrides):
        return cls(**{"battles_per_runner": 2, **overrides})

    def reward_weights(self) -> RewardWeights:
        return RewardWeights(knockout_dealt=self.reward_knockout_dealt, knockout_taken=self.reward_knockout_taken,
                             hp_swing=self.reward_hp_swing, keep_optimum=self.reward_keep_optimum)


class PokemonSelfPlay(SelfPlayEnvironment):
    """Real Pokémon battles as self-play's environment, one battle per rollout column. With ``--policy-init`` (an
    offline-RL checkpoint, linear or slot head) its turn features are the observations and its logits the policy's
    prior (see the module docstring), so at step 0 the learner chooses as that policy does; the checkpoint's
    observation spec and vocabulary are checked against this code's before any battle. Without it, the run starts
    from scratch: the observations are the turn features of an untrained encoder of ``--encoder-preset``
    (initialised from ``--seed``) and the policy, without a prior, starts as initialised. Either encoder is frozen
    unless ``--encoder-lr`` trains it, and is saved in every checkpoint (with its optimizer's state where it trains)
    with the starting policy, so evaluation plays the encoder and the prior the policy was trained on."""

    name = "pokemon"
    kind = "pokemon_selfplay"
    options_class = PokemonSelfPlayOptions
    runner_class = PokemonRunner
    reward_terms = ("result", "knockouts_dealt", "knockouts_taken", "hp_dealt", "hp_taken", "shaping")
    knockout_term = "knockouts_dealt"

    @staticmethod
    def config_problem(cfg) -> str | None:
        if cfg.reference_kl and not cfg.options.policy_init:
            return "--reference-kl needs a policy to stay near: --policy-init (from scratch there is none)"
        return None

    def __init__(self, cfg):
        super().__init__(cfg)
        self.options = o = cfg.options
        if o.policy_init:
            self.checkpoint = read_checkpoint(o.policy_init, kind="pokemon_policy")
            self.checkpoint.check_features(live_identity(POKEMON_OBSERVATION))
            self.bc = self.checkpoint.build_model().requires_grad_(False)
            self.context = int(self.checkpoint.train_config["context"])
            self.data, self.source = self.checkpoint.data, o.policy_init
            self.start = self._kept_apart(self.bc)
        else:
            self.checkpoint = None
            self.bc = untrained_encoder(o.encoder_preset, cfg.seed).requires_grad_(False)
            self.context, self.data = o.encoder_context, live_identity(POKEMON_OBSERVATION)
            self.source = f"untrained {o.encoder_preset} (seed {cfg.seed})"
            self.start = None  # no prior: the policy's actor alone
        self.encoder_optimizer = None  # where --encoder-lr trains the encoder (``trainable_encoder``)
        self._encoder_optimizer_state = None  # a resumed run's, until ``trainable_encoder`` loads it
        self._drawn: collections.Counter = collections.Counter()

    @property
    def num_envs(self) -> int:
        return self.cfg.num_runners * self.options.battles_per_runner

    def _kept_apart(self, start):
        """The starting policy as the prior's source: ``start`` itself while the encoder stays frozen (it is that
        policy), a frozen copy where ``--encoder-lr`` trains the encoder (the prior stays the starting policy's)."""
        if start is None or not self.options.encoder_lr or start is not self.bc:
            return start
        return copy.deepcopy(start).requires_grad_(False)

    def policy_config(self):
        """The policy's shapes, with a prior where a starting policy gives one (``--policy-init``, or a resumed
        checkpoint that has one; called after ``restore``)."""
        return RecurrentPolicyConfig(d_obs=self.bc.cfg.d_model, num_actions=NUM_POLICY_ACTIONS,
                                     opponent_window=self.cfg.opponent_window, strategy_heads=2,
                                     d_lstm=self.cfg.d_lstm, prior=self.start is not None)

    def trainable_encoder(self, device, ppo) -> TrainableEncoder | None:
        """With ``--encoder-lr``, the encoder as the learner trains it (``TurnFeatures`` over the recorded windows,
        its own AdamW, a resumed run's optimizer state loaded); else None (frozen)."""
        if not self.options.encoder_lr:
            return None
        self.bc.to(device)
        # the turn transformer only: the offline-RL heads (actor, critic) are not on the features' path
        params = [p.requires_grad_(True) for name, p in self.bc.named_parameters()
                  if not name.startswith(("actor.", "critic."))]
        self.encoder_optimizer = torch.optim.AdamW(params, lr=self.options.encoder_lr, weight_decay=0.0)
        if self._encoder_optimizer_state is not None:
            self.encoder_optimizer.load_state_dict(self._encoder_optimizer_state)
        return TrainableEncoder(module=TurnFeatures(self.bc, self.cfg.opponent_window),
                                optimizer=self.encoder_optimizer, lr=self.options.encoder_lr, grad_clip=ppo.grad_clip)

    def extra(self) -> dict:
        """What a checkpoint keeps beside the policy: the encoder its observations come from (and, trained, its
        optimizer's state)."""
        return {"encoder": encoder_state(self.bc, self.context, self.source, self.encoder_optimizer),
                "start": start_state(self.start, self.bc, self.options.policy_init)}

    def restore(self, extra: dict) -> None:
        """On resume, the encoder the run had reached (before any runner is made), its optimizer's state and the
        starting policy its prior comes from (a checkpoint from before priors has none: its actor alone)."""
        self.bc, self.context = encoder_from_state(extra["encoder"])
        self._encoder_optimizer_state = extra["encoder"].get("optimizer")
        self.start = self._kept_apart(start_from_state(extra.get("start"), self.bc))

    def league_config(self):
        return self.cfg.league(strong=("heuristic", "maxbp"), weak=("random",))

    def identity(self):
        return self.data

    def runner_kwargs(self, policy_cfg) -> dict:
        encoder = copy.deepcopy(self.bc).cpu().eval().requires_grad_(False)  # the learner's may be on its GPU
        return dict(bc_model=encoder, context=self.context, policy_cfg=policy_cfg,
                    battle_format=self.options.battle_format, num_teams=self.options.num_teams,
                    team_seed=self.options.team_seed, draw_seed=self.cfg.seed,
                    record_inputs=self.options.encoder_lr > 0, start="encoder" if self.start is self.bc else self.start)

    def collect_args(self, ppo) -> tuple:
        """The battles of each runner and, for a trained encoder, its weights of the update."""
        encoder = None
        if self.options.encoder_lr:
            encoder = {k: v.detach().cpu().clone() for k, v in self.bc.state_dict().items()}
        return self.options.battles_per_runner, encoder

    def collect(self, results: list, ppo):
        """(the runners' battles, one per column, finished ``Episode``s)."""
        battles = [b for recorded, _ in results for b in recorded]
        self._drawn = sum((drawn for _, drawn in results), collections.Counter())
        weights = self.options.reward_weights()
        return (battles_to_rollout(battles, ppo.seq_len, weights, ppo.gamma),
                episodes_of(battles, weights, ppo.gamma))

    def collect_metrics(self) -> dict:
        """The last ``collect``'s draws: battles drawn against snapshots and against each bot (one column each)."""
        league = self.league_config()
        out = {"drawn_snapshot": sum(n for o, n in self._drawn.items() if o.kind == "snapshot")}
        for bot in (*league.strong, *league.weak):
            out[f"drawn_{bot}"] = sum(n for o, n in self._drawn.items() if o.kind != "snapshot" and o.name == bot)
        return out

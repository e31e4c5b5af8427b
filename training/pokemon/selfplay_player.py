"""The self-play learner's live player: ``PolicyPlayer``'s view of the battle (the server's protocol through the
tracker and observation spec), choosing with a self-play policy (``models/ppo_policy.RecurrentPolicy``) on top of an
offline-RL policy's turn features (frozen, or trained with the policy: ``--encoder-lr``), and recording its own
decisions for PPO (``training/pokemon/selfplay.py``).

A fine-tune's policy adds its logits to the starting offline-RL policy's (its prior, ``starting_logits``: the whole
head, linear or slots), which the player computes each decision from the same window of turns: from the encoder's
own features where the encoder is that policy (frozen), else with the starting policy's frozen copy.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch
from torch import nn

from models.pokemon_policy import PokemonPolicy, PolicyConfig
from training.checkpoints import config_from_dict
from training.pokemon.player import PolicyPlayer
from training.ppo import sample_actions


class TeamState(NamedTuple):
    """Both teams as the player's own stream shows them at one moment: HP as a fraction of each whole team (an
    opponent's Pokémon not yet seen counts as unhurt) and Pokémon fainted."""

    own_hp: float
    opponent_hp: float
    own_fainted: int
    opponent_fainted: int


def team_state(battle) -> TeamState:
    """``TeamState`` of a poke-env battle: own HP from the requests, the opponent's as the protocol showed it (in
    percent), each team of the larger of both known sizes (6 in random battles)."""
    own, theirs = list(battle.team.values()), list(battle.opponent_team.values())
    size = max(len(own), len(theirs), 1)
    unseen = size - len(theirs)  # not yet sent out: full HP as far as this player knows
    return TeamState(own_hp=sum(mon.current_hp_fraction for mon in own) / size,
                     opponent_hp=(sum(mon.current_hp_fraction for mon in theirs) + unseen) / size,
                     own_fainted=sum(mon.fainted for mon in own), opponent_fainted=sum(mon.fainted for mon in theirs))


def window_features(features: torch.Tensor, turns: torch.Tensor, window: int):
    """What the self-play policy reads from a window's turn features: features (M, C, d) of right-padded windows
    with ``turns`` (M,) valid turns each → (obs (M, d): the last valid turn's, opponent (M, W, d): the up to W turns
    before it, right-aligned with zeros in front, opponent_valid (M, W) bool). A row with no valid turn (rollout
    padding) gives turn 0's features, which every loss masks out."""
    m, _, d = features.shape
    last = (turns.long() - 1).clamp(min=0)  # (M,)
    obs = features[torch.arange(m, device=features.device), last]  # (M, d)
    before = last[:, None] - window + torch.arange(window, device=features.device)  # (M, W): turn ids, oldest first
    valid = before >= 0
    gathered = features.gather(1, before.clamp(min=0)[..., None].expand(m, window, d))  # (M, W, d)
    return obs, torch.where(valid[..., None], gathered, torch.zeros((), dtype=features.dtype)), valid


class TurnFeatures(nn.Module):
    """The offline-RL encoder (``models/pokemon_policy.PokemonPolicy``) as the self-play policy's observation
    backbone over recorded windows, with gradients (the learner's side of ``--encoder-lr``): tokens (B, T, C, 87),
    numeric (B, T, C, 50) right-padded windows of C turns, turns (B, T) valid turns per window → (obs (B, T, d),
    opponent (B, T, W, d), opponent_valid (B, T, W)), as ``SelfPlayPlayer.select`` reads them while playing. Only
    the decisions are encoded (``turns`` > 0): the rollout's padding after a battle's end is left at zeros, so a
    minibatch costs its real decisions × C turns."""

    def __init__(self, model: PokemonPolicy, window: int):
        super().__init__()
        self.model, self.window = model, window

    def forward(self, tokens: torch.Tensor, numeric: torch.Tensor, turns: torch.Tensor):
        b, t, c = tokens.shape[:3]
        flat_turns = turns.reshape(b * t)
        real = (flat_turns > 0).nonzero().squeeze(-1)  # (M,): decisions, not the rollout's padding after a battle
        valid = torch.arange(c, device=tokens.device) < flat_turns[real, None]  # (M, C); causal: unused, see model
        features = self.model.features(tokens.reshape(b * t, c, -1)[real].long(),
                                       numeric.reshape(b * t, c, -1)[real], valid)  # (M, C, d)
        obs, opponent, opponent_valid = window_features(features, flat_turns[real], self.window)
        d = features.shape[-1]
        out_obs = obs.new_zeros(b * t, d).index_copy(0, real, obs)  # padding: zeros, masked out by every loss
        out_opponent = opponent.new_zeros(b * t, self.window, d).index_copy(0, real, opponent)
        out_valid = opponent_valid.new_zeros(b * t, self.window).index_copy(0, real, opponent_valid)
        return out_obs.reshape(b, t, d), out_opponent.reshape(b, t, self.window, d), out_valid.reshape(b, t, -1)


def starting_logits(model: PokemonPolicy, tokens: torch.Tensor, numeric: torch.Tensor,
                    features: torch.Tensor | None = None) -> torch.Tensor:
    """An offline-RL policy's logits (B, T, 9) before the legal mask, for windows tokens (B, T, 87), numeric
    (B, T, 50) of valid turns: ``PokemonPolicy.forward``'s heads (the linear actor, plus the slot head's scores where
    it has one) over its ``features`` (given: computed once for the self-play policy too; None: computed here). A
    test compares it with ``forward``'s logits."""
    if model.cfg.action_head not in ("linear", "slots"):
        raise ValueError(f"starting_logits knows the 'linear' and 'slots' heads, not {model.cfg.action_head!r}")
    if features is None:
        features = model.features(tokens, numeric, torch.ones(tokens.shape[:2], dtype=torch.bool,
                                                               device=tokens.device))
    logits = model.actor(features)
    if model.slots is not None:
        logits = logits + model.slots(features, tokens, numeric, model.encoder.words)[0]
    return logits


class SelfPlayPlayer(PolicyPlayer):
    """Chooses with the self-play policy over the offline-RL policy's turn features; records its decisions, with
    both teams' state at each (dense rewards) and, with ``record_inputs``, the window of turns the encoder read (a
    trained encoder's features are recomputed from them in the update). ``start``: the policy a fine-tune started
    from (frozen), whose logits each decision gives the policy as its prior (``bc_model`` itself where the encoder
    is that policy, frozen); None: a policy without a prior (from scratch)."""

    def __init__(self, bc_model, context: int, policy, *args, start: PokemonPolicy | None = None,
                 record: bool = True, record_inputs: bool = False, **kwargs):
        super().__init__(bc_model, context, *args, **kwargs)
        if (start is not None) != policy.cfg.prior:
            raise ValueError("a policy with a prior needs the starting policy (start)" if policy.cfg.prior
                             else "this policy reads no prior: start must be None")
        self.policy, self.record, self.record_inputs = policy.eval(), record, record_inputs
        self.start = start
        self.states: dict[str, tuple] = {}
        self.steps: dict[str, list[dict]] = {}
        self.finished: list[RecordedBattle] = []
        self.opponent = None  # the league's Opponent of the battles now being played

    def select(self, battle, tokens, numeric, legal) -> int:
        tag, window = battle.battle_tag, self.policy.cfg.opponent_window
        turns = tokens.shape[1]
        with torch.no_grad():
            features = self.model.features(tokens, numeric, torch.ones(legal.shape[:2], dtype=torch.bool))
            # its earlier turns, what the opponent did shows in them
            obs, opponent, valid = (x[0] for x in window_features(features, torch.tensor([turns]), window))
            prior = None
            if self.start is not None:  # the starting policy's logits of the last turn (9,)
                prior = starting_logits(self.start, tokens, numeric,
                                        features if self.start is self.model else None)[0, -1]
            first = tag not in self.states
            state = self.states.get(tag) or self.policy.initial_state(1)
            out = self.policy.step(obs[None], opponent[None], valid[None], torch.tensor([first]),
                                   legal[0, -1][None], state, None if prior is None else prior[None])
            # no sampler (greedy): evaluation's default, as PolicyPlayer's (a fine-tune at step 0 chooses as the
            # offline-RL policy); training's runners sample, as PPO's policy is the distribution
            actions, logp = sample_actions(out.logits[:, 0], self.sampler, self.temperature)
            action = int(actions[0])
        self.states[tag] = out.state
        if self.record:
            step = {"obs": obs, "opponent": opponent, "opponent_valid": valid, "legal": legal[0, -1],
                    "episode_start": first, "actions": action, "logp": logp[0],
                    "values": out.values[0, 0], "h": state[0][0], "c": state[1][0], "team": team_state(battle)}
            if prior is not None:
                step["prior"] = prior
            if self.record_inputs:  # the window right-padded to the context (C, ...): one shape for every step
                pad = self.context - turns
                step["tokens"] = torch.nn.functional.pad(tokens[0].to(torch.int32), (0, 0, 0, pad))
                step["numeric"] = torch.nn.functional.pad(numeric[0].float(), (0, 0, 0, pad))
                step["turns"] = turns
            self.steps.setdefault(tag, []).append(step)
        return action

    def _battle_finished_callback(self, battle):
        steps = self.steps.pop(battle.battle_tag, [])
        self.states.pop(battle.battle_tag, None)
        if self.record and steps:
            result = 1.0 if battle.won else -1.0 if battle.lost else 0.0
            self.finished.append(RecordedBattle(steps=steps, result=result, end=team_state(battle),
                                                opponent=self.opponent))
        super()._battle_finished_callback(battle)


@dataclasses.dataclass
class RecordedBattle:
    """One battle of the learner: its decisions (each a dict of what PPO trains on, with ``team``: the
    ``TeamState`` when it chose), the result (+1 won, -1 lost, 0 tie), the teams at the end, and the opponent."""

    steps: list[dict]
    result: float
    end: TeamState
    opponent: object = None


def encoder_state(model, context: int, source: str, optimizer=None) -> dict:
    """The turn encoder as a self-play checkpoint keeps it (``extra["encoder"]``): evaluation and resume rebuild it
    from the checkpoint alone, whatever became of ``--policy-init``. A trained encoder (``--encoder-lr``) keeps its
    optimizer's state too (``optimizer``), so a resumed run continues exactly."""
    state = {"model_config": dataclasses.asdict(model.cfg), "model": model.state_dict(), "context": int(context),
             "source": source}
    if optimizer is not None:
        state["optimizer"] = optimizer.state_dict()
    return state


def encoder_from_state(state: dict):
    """(encoder, context) from ``encoder_state``'s dict, frozen (the trainer turns gradients on where it trains it)."""
    model = PokemonPolicy(config_from_dict(PolicyConfig, state["model_config"]))
    model.load_state_dict(state["model"])
    return model.eval().requires_grad_(False), int(state["context"])


def start_state(start: PokemonPolicy | None, encoder: PokemonPolicy, source: str) -> dict | None:
    """The starting policy as a self-play checkpoint keeps it (``extra["start"]``), so that resume and evaluation
    give the policy the same prior: None (no prior), ``{"source", "is_encoder": True}`` where the encoder is that
    policy (frozen: its weights are the checkpoint's encoder, not written twice), else its own config and weights."""
    if start is None:
        return None
    if start is encoder:
        return {"source": source, "is_encoder": True}
    return {"source": source, "is_encoder": False, "model_config": dataclasses.asdict(start.cfg),
            "model": start.state_dict()}


def start_from_state(state: dict | None, encoder: PokemonPolicy) -> PokemonPolicy | None:
    """The starting policy from ``start_state``'s dict (frozen): None, ``encoder`` itself, or its own copy. A
    checkpoint from before priors has no entry: None, its actor alone gives its logits, as it was trained."""
    if state is None:
        return None
    if state["is_encoder"]:
        return encoder
    model = PokemonPolicy(config_from_dict(PolicyConfig, state["model_config"]))
    model.load_state_dict(state["model"])
    return model.eval().requires_grad_(False)

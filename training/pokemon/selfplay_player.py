"""The self-play learner's live player: ``PolicyPlayer``'s view of the battle (the server's protocol through the
tracker and observation spec), choosing with a self-play policy (``models/ppo_policy.RecurrentPolicy``) on top of a
frozen offline-RL policy's turn features, and recording its own decisions for PPO (``training/pokemon/selfplay.py``).
"""

from __future__ import annotations

import dataclasses

import torch

from models.pokemon_policy import PokemonPolicy, PolicyConfig
from training.checkpoints import config_from_dict
from training.pokemon.player import PolicyPlayer


class SelfPlayPlayer(PolicyPlayer):
    """Chooses with the self-play policy over the offline-RL policy's turn features; records its decisions."""

    def __init__(self, bc_model, context: int, policy, *args, record: bool = True, greedy: bool = False,
                 seed: int = 0, **kwargs):
        super().__init__(bc_model, context, *args, **kwargs)
        self.policy, self.record, self.greedy = policy.eval(), record, greedy
        self.states: dict[str, tuple] = {}
        self.steps: dict[str, list[dict]] = {}
        self.finished: list[tuple] = []  # (decisions, result, (knockouts dealt, taken), opponent)
        self.opponent = None  # the league's Opponent of the battles now being played
        self.generator = torch.Generator().manual_seed(seed)

    def select(self, battle, tokens, numeric, legal) -> int:
        tag, window = battle.battle_tag, self.policy.cfg.opponent_window
        with torch.no_grad():
            features = self.model.features(tokens, numeric, torch.ones(legal.shape[:2], dtype=torch.bool))[0]
            past = features[:-1][-window:]  # (≤ N, d): its earlier turns, what the opponent did shows in them
            opponent = torch.zeros(window, features.shape[-1])
            valid = torch.zeros(window, dtype=torch.bool)
            if len(past):
                opponent[window - len(past):], valid[window - len(past):] = past, True
            start = tag not in self.states
            state = self.states.get(tag) or self.policy.initial_state(1)
            out = self.policy.step(features[-1][None], opponent[None], valid[None], torch.tensor([start]),
                                   legal[0, -1][None], state)
            probs = torch.softmax(out.logits[0, 0].float(), -1)
            # greedy: evaluation, as PolicyPlayer (the same choice as the offline-RL policy at step 0)
            action = int(probs.argmax()) if self.greedy else int(torch.multinomial(probs, 1,
                                                                                     generator=self.generator))
        self.states[tag] = out.state
        if self.record:
            self.steps.setdefault(tag, []).append({
                "obs": features[-1], "opponent": opponent, "opponent_valid": valid, "legal": legal[0, -1],
                "episode_start": start, "actions": action, "logp": torch.log(probs[action]),
                "values": out.values[0, 0], "h": state[0][0], "c": state[1][0]})
        return action

    def _battle_finished_callback(self, battle):
        steps = self.steps.pop(battle.battle_tag, [])
        self.states.pop(battle.battle_tag, None)
        if self.record and steps:
            result = 1.0 if battle.won else -1.0 if battle.lost else 0.0
            knockouts = (sum(mon.fainted for mon in battle.opponent_team.values()),
                         sum(mon.fainted for mon in battle.team.values()))
            self.finished.append((steps, result, knockouts, self.opponent))
        super()._battle_finished_callback(battle)


def encoder_state(model, context: int, source: str) -> dict:
    """The frozen turn encoder as a self-play checkpoint keeps it (``extra["encoder"]``): evaluation and resume
    rebuild it from the checkpoint alone, whatever became of ``--policy-init``."""
    return {"model_config": dataclasses.asdict(model.cfg), "model": model.state_dict(), "context": int(context),
            "source": source}


def encoder_from_state(state: dict):
    """(frozen encoder, context) from ``encoder_state``'s dict."""
    model = PokemonPolicy(config_from_dict(PolicyConfig, state["model_config"]))
    model.load_state_dict(state["model"])
    return model.eval().requires_grad_(False), int(state["context"])

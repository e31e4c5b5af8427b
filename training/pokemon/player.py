"""The live Pokémon player: a poke-env ``Player`` that plays a trained policy on a Showdown server, and what builds
one from a checkpoint.

The player sees exactly what the policy was trained on: the protocol lines and ``|request|`` JSON the server sends go
through the project's tracker and observation spec (``pipelines/pokemon``), as the ``generated`` source's
first-person trajectories do. ``PolicyPlayer`` plays an offline-RL policy's most likely legal action;
``training/pokemon/selfplay_player.SelfPlayPlayer`` extends it for self-play, and ``training/pokemon/players``
builds either from a checkpoint.
"""

from __future__ import annotations

import collections

import numpy as np
import torch
from poke_env.player import Player

from models.pokemon_policy import check_inputs, fold_actions
from pipelines.errors import InputError
from pipelines.pokemon.dex import gen_of_format, load_dex, to_id
from pipelines.pokemon.observation import observe
from pipelines.pokemon.pov import Decision
from pipelines.pokemon.tracker import BattleTracker
from training.checkpoints import live_identity, read_checkpoint
from training.registry import POKEMON_OBSERVATION


class PolicyPlayer(Player):
    """Plays the argmax legal action of a policy over its whole battle so far (up to its context)."""

    def __init__(self, model, context: int, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.model, self.context = model, context
        self.trackers: dict[str, BattleTracker] = {}
        self.history: dict[str, list] = {}
        self.broken: set[str] = set()  # battles whose log our tracker could not follow (counted, never hidden)
        self.fallbacks = 0
        self.forced = 0  # requests with a single possible choice (not decisions, not fallbacks)
        self.fallback_reasons: collections.Counter = collections.Counter()
        self.decisions = 0  # requests rendered into a state and mask
        self.mask_mismatches: collections.Counter = collections.Counter()  # reason → decisions (Decision.unmasked)

    def _fallback(self, battle, reason: str):
        self.fallbacks += 1
        self.fallback_reasons[reason] += 1
        return self.choose_random_move(battle)

    async def _handle_battle_message(self, split_messages):
        tag = split_messages[0][0].lstrip(">").strip()
        fmt = tag.split("-")[1] if tag.count("-") >= 2 else self._format
        tracker = self.trackers.get(tag)
        if tracker is None:
            tracker = self.trackers[tag] = BattleTracker(load_dex(gen_of_format(fmt)), fmt)
        for parts in split_messages[1:]:
            if len(parts) > 1 and parts[1] not in ("request", "") and tag not in self.broken:
                try:
                    tracker.apply_parts(parts, "|".join(parts))
                except InputError:
                    self.broken.add(tag)
        await super()._handle_battle_message(split_messages)

    def select(self, battle, tokens, numeric, legal) -> int:
        """The action (0-8) for the last turn of a window: tokens (1, T, 87), numeric (1, T, 50), legal
        (1, T, 9); the policy's most likely legal action."""
        with torch.no_grad():
            out = self.model(tokens, numeric, legal, torch.ones(legal.shape[:2], dtype=torch.bool))
        return int(out.logits[0, -1].argmax())

    def choose_move(self, battle):
        tracker = self.trackers.get(battle.battle_tag)
        request = battle.last_request
        side = battle.player_role
        if tracker is None or battle.battle_tag in self.broken or not request or side is None:
            reason = ("no tracker" if tracker is None else "tracker lost the log" if battle.battle_tag in
                      self.broken else "no request" if not request else "no side")
            return self._fallback(battle, reason)
        try:
            decision = Decision(tracker, side, request, None)
            state, mask13 = decision.render_state_and_mask()
        except (InputError, KeyError, TypeError, ValueError, IndexError) as err:
            return self._fallback(battle, f"state: {type(err).__name__}: {err}")
        self.decisions += 1
        self.mask_mismatches.update(decision.unmasked())
        _, tokens, numeric, _ = observe(state, tracker.format_id)
        check_inputs(np.asarray(tokens), self.model.cfg.vocab_size)
        legal = fold_actions(torch.tensor(mask13))
        history = self.history.setdefault(battle.battle_tag, [])
        history.append((tokens, numeric, legal))
        if not legal.any():
            # Nothing to decide: a locked-in move (Gen 1 recharge, Wrap, Thrash, Bide...) is not one of the 9
            # actions; the training rows of such requests have an empty mask too. The server picks it.
            options = len(battle.available_moves) + len(battle.available_switches)
            if options <= 1:
                self.forced += 1
                return self.choose_default_move()
            return self._fallback(battle, f"empty mask with {options} options")
        window = history[-self.context:]
        tokens_t = torch.tensor([[w[0] for w in window]])  # (1, T, 87)
        numeric_t = torch.tensor([[w[1] for w in window]])  # (1, T, 50)
        legal_t = torch.stack([w[2] for w in window])[None]  # (1, T, 9)
        action = self.select(battle, tokens_t, numeric_t, legal_t)
        move_ids, switch_slots = decision.slots()
        if action < 4:
            wanted = move_ids[action] if action < len(move_ids) else None
            for move in battle.available_moves:
                if to_id(move.id).rstrip("0123456789") == wanted:
                    return self.create_order(move)
        else:
            slot = switch_slots[action - 4] if action - 4 < len(switch_slots) else None
            if slot is not None:
                wanted = request["side"]["pokemon"][slot]["ident"].split(": ", 1)[1]
                for mon in battle.available_switches:
                    if mon.name == wanted or to_id(mon.species) == to_id(
                            request["side"]["pokemon"][slot]["details"].split(",")[0]):
                        return self.create_order(mon)
        return self._fallback(battle, f"action {action} has no matching order")


def checked_policy(ckpt):
    """(model, context) of a loaded ``pokemon_policy`` checkpoint, refused when it reads another observation spec or
    vocabulary than this code makes."""
    ckpt.check_features(live_identity(POKEMON_OBSERVATION))
    return ckpt.build_model(), int(ckpt.train_config["context"])


def load_policy(path: str, device: str = "cpu"):
    """(model, context length) from a training checkpoint (its folder or ``state.pt``, a path or a URI), rebuilt from
    the checkpoint alone; refused when it reads another observation spec or vocabulary than this code makes."""
    model, context = checked_policy(read_checkpoint(path, device, kind="pokemon_policy"))
    return model.to(device), context

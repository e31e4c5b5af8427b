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
import functools
import hashlib

import numpy as np
import torch
from poke_env.player import Player, SingleBattleOrder

from models.pokemon_policy import check_inputs, fold_actions
from pipelines.errors import InputError
from pipelines.pokemon.dex import gen_of_format, load_dex
from pipelines.pokemon.observation import observe
from pipelines.pokemon.pov import Decision, _request_key, switch_targets
from pipelines.pokemon.tracker import BattleTracker
from shards_schema import storage
from shards_schema.pokemon import NUM_MOVES
from training.checkpoints import CheckpointError, from_state, live_identity, load_state, read_checkpoint, state_file
from training.ppo import sample_actions
from training.registry import POKEMON_OBSERVATION


class LivePolicy:
    """A policy playing live from a player's own stream: the protocol lines it saw and each ``|request|`` JSON go
    through the tracker, decision and observation spec that made its training rows, and each decision becomes a
    simulator choice string (``move 2``, ``switch 4``), whoever carries it: a poke-env player on a server
    (``PolicyPlayer``) or the battle generator's stream (``pipelines/pokemon/generated``). It keeps one tracker and
    one window of turns per battle, and counts what it could not decide."""

    def __init__(self, model, context: int):
        self.model, self.context = model, context
        self.trackers: dict[str, BattleTracker] = {}
        self.history: dict[str, list] = {}
        self.broken: set[str] = set()  # battles whose log our tracker could not follow (counted, never hidden)
        self.fallbacks = 0
        self.forced = 0  # requests with a single possible choice (not decisions, not fallbacks)
        self.fallback_reasons: collections.Counter = collections.Counter()
        self.decisions = 0  # requests rendered into a state and mask
        self.mask_mismatches: collections.Counter = collections.Counter()  # reason → decisions (Decision.unmasked)

    def observe(self, tag: str, fmt: str, lines: list[str]) -> None:
        """Battle ``tag``'s protocol lines (requests excluded), in the order the player received them."""
        tracker = self.trackers.get(tag)
        if tracker is None:
            tracker = self.trackers[tag] = BattleTracker(load_dex(gen_of_format(fmt)), fmt)
        for line in lines:
            if tag in self.broken:
                return
            try:
                tracker.apply(line)
            except InputError:
                self.broken.add(tag)

    def forget(self, tag: str) -> None:
        """Drop a finished battle's tracker and window."""
        self.trackers.pop(tag, None)
        self.history.pop(tag, None)
        self.broken.discard(tag)

    def fallback(self, reason: str) -> None:
        self.fallbacks += 1
        self.fallback_reasons[reason] += 1

    def decide(self, tag: str, side: str | None, request: dict | None, select) -> tuple[str | None, str | None]:
        """``(choice, None)``: the choice string of the action ``select(tokens, numeric, legal)`` picks for the
        last turn of the battle's window (tokens (1, T, 87), numeric (1, T, 50), legal (1, T, 9)); ``(None,
        None)``: nothing to decide (one possible choice: the caller takes it); ``(None, reason)``: a fallback,
        counted, the caller chooses otherwise."""
        tracker = self.trackers.get(tag)
        if tracker is None or tag in self.broken or not request or side is None:
            reason = ("no tracker" if tracker is None else "tracker lost the log" if tag in self.broken
                      else "no request" if not request else "no side")
            self.fallback(reason)
            return None, reason
        try:
            decision = Decision(tracker, side, request, None)
            state, mask13 = decision.render_state_and_mask()
        except (InputError, KeyError, TypeError, ValueError, IndexError) as err:
            reason = f"state: {type(err).__name__}: {err}"
            self.fallback(reason)
            return None, reason
        self.decisions += 1
        self.mask_mismatches.update(decision.unmasked())
        _, tokens, numeric, _ = observe(state, tracker.format_id)
        check_inputs(np.asarray(tokens), self.model.cfg.vocab_size)
        legal = fold_actions(torch.tensor(mask13))
        history = self.history.setdefault(tag, [])
        history.append((tokens, numeric, legal))
        if not legal.any():
            # Nothing to decide: a locked-in move (Gen 1 recharge, Wrap, Thrash, Bide...) is not one of the 9
            # actions; the training rows of such requests have an empty mask too. The server picks it.
            options = request_options(request)
            if options <= 1:
                self.forced += 1
                return None, None
            reason = f"empty mask with {options} options"
            self.fallback(reason)
            return None, reason
        window = history[-self.context:]
        tokens_t = torch.tensor([[w[0] for w in window]])  # (1, T, 87)
        numeric_t = torch.tensor([[w[1] for w in window]])  # (1, T, 50)
        legal_t = torch.stack([w[2] for w in window])[None]  # (1, T, 9)
        action = select(tokens_t, numeric_t, legal_t)
        choice = action_choice(decision, action)
        if choice is None:
            reason = f"action {action} has no matching choice"
            self.fallback(reason)
            return None, reason
        return choice, None


def greedy_action(model, tokens, numeric, legal) -> int:
    """A policy's most likely legal action (0-8) for the last turn of a window: tokens (1, T, 87), numeric
    (1, T, 50), legal (1, T, 9)."""
    return policy_action(model, tokens, numeric, legal, None)


def policy_action(model, tokens, numeric, legal, generator: torch.Generator | None,
                  temperature: float = 1.0) -> int:
    """A policy's legal action (0-8) for the last turn of a window (shapes as ``greedy_action``): drawn from its
    distribution at ``temperature`` with ``generator``, or its most likely one where ``generator`` is None."""
    with torch.no_grad():
        out = model(tokens, numeric, legal, torch.ones(legal.shape[:2], dtype=torch.bool))
    return int(sample_actions(out.logits[:, -1], generator, temperature)[0][0])


def request_options(request: dict) -> int:
    """How many choices a request offers: its enabled moves plus its switch targets (``pov.switch_targets``; 0 for
    a wait)."""
    if request.get("wait"):
        return 0
    forced = bool(request.get("forceSwitch") and request["forceSwitch"][0])
    active = None if forced else (request.get("active") or [None])[0]
    moves = sum(1 for m in (active or {}).get("moves", []) if not m.get("disabled"))
    return moves + len(switch_targets(request))


def protocol_lines(split_messages: list[list[str]]) -> tuple[str, list[str]]:
    """(battle tag, its protocol lines) of a poke-env battle message, ``|request|`` and blank lines left out: what
    a player's own stream holds beside its requests."""
    tag = split_messages[0][0].lstrip(">").strip()
    return tag, ["|".join(parts) for parts in split_messages[1:] if len(parts) > 1 and parts[1] not in ("request", "")]


def action_choice(decision: Decision, action: int) -> str | None:
    """The simulator choice of a 9-way action in a rendered decision: ``move i`` for the request's listed move
    that fills the action's team move slot, ``switch j`` for the action's switch target (both 1-based, as the
    simulator numbers them); None when the action has no such choice."""
    move_ids, switch_slots = decision.slots()
    if action < NUM_MOVES:
        wanted = move_ids[action] if action < len(move_ids) else None
        listed = (decision.request.get("active") or [{}])[0].get("moves", [])
        for i, move in enumerate(listed):
            if not move.get("disabled") and _request_key(move["id"], move_ids) == wanted:
                return f"move {i + 1}"
        return None
    k = action - NUM_MOVES
    return f"switch {switch_slots[k] + 1}" if k < len(switch_slots) else None


class PolicyPlayer(Player):
    """A poke-env player of a ``LivePolicy``: the argmax legal action of a policy over its whole battle so far (up
    to its context), sent as the simulator's own choice string; with ``sample_seed``, an action drawn from the
    policy's distribution at ``temperature`` instead (seeded; ``training/ppo.sample_actions``)."""

    def __init__(self, model, context: int, *args, sample_seed: int | None = None, temperature: float = 1.0,
                 **kwargs):
        super().__init__(*args, **kwargs)
        self.model, self.context, self.temperature = model, context, temperature
        self.sampler = None if sample_seed is None else torch.Generator().manual_seed(sample_seed)
        self.live = LivePolicy(model, context)
        self.trackers, self.history = self.live.trackers, self.live.history

    fallbacks = property(lambda self: self.live.fallbacks)
    forced = property(lambda self: self.live.forced)
    fallback_reasons = property(lambda self: self.live.fallback_reasons)
    decisions = property(lambda self: self.live.decisions)
    mask_mismatches = property(lambda self: self.live.mask_mismatches)

    async def _handle_battle_message(self, split_messages):
        tag, lines = protocol_lines(split_messages)
        fmt = tag.split("-")[1] if tag.count("-") >= 2 else self._format
        self.live.observe(tag, fmt, lines)
        await super()._handle_battle_message(split_messages)

    def select(self, battle, tokens, numeric, legal) -> int:
        """The action (0-8) for the last turn of a window: the policy's most likely legal action, or a sampled one."""
        return policy_action(self.model, tokens, numeric, legal, self.sampler, self.temperature)

    def choose_move(self, battle):
        choice, reason = self.live.decide(battle.battle_tag, battle.player_role, battle.last_request,
                                          functools.partial(self.select, battle))
        if choice is not None:
            return SingleBattleOrder(f"/choose {choice}")
        if reason is None:
            return self.choose_default_move()
        return self.choose_random_move(battle)


class StreamPlayer:
    """A policy answering the battle generator's asks for a ``remote`` player (``generate_battles.js``): each ask
    holds the player-stream lines its side saw since its last ask and the request. It plays the policy's most likely
    legal action, as ``PolicyPlayer`` does on a server; team preview, a request with one possible choice and a
    fallback answer None (the generator then takes the first legal choice, so a battle stays a function of its
    seed)."""

    def __init__(self, model, context: int):
        self.model = model
        self.live = LivePolicy(model, context)

    def answer(self, ask: dict, fmt: str) -> str | None:
        tag = f"{ask['battle']}/{ask['side']}"
        self.live.observe(tag, fmt, ask["lines"])
        if ask["request"].get("teamPreview"):
            return None
        choice, _ = self.live.decide(tag, ask["side"], ask["request"], functools.partial(greedy_action, self.model))
        return choice

    def forget(self, battle_id: str) -> None:
        """Drop a finished battle's trackers."""
        for side in ("p1", "p2"):
            self.live.forget(f"{battle_id}/{side}")


def pinned_checkpoint(path: str) -> tuple[str, str]:
    """(the ``state.pt`` a policy checkpoint path stands for, its sha256): a run folder means its newest checkpoint
    at the time it is pinned, so a job's read tasks all play the same weights, and the hash names them in the
    version. The checkpoint is read once here and refused if it is not a ``pokemon_policy`` this code can play."""
    state = state_file(path)
    data = storage.read_bytes(state)
    checked_policy(from_state(load_state(state, data=data), state, kind="pokemon_policy"))
    return state, hashlib.sha256(data).hexdigest()


def stream_player(state: str, sha256: str) -> StreamPlayer:
    """The ``StreamPlayer`` of a pinned checkpoint (``pinned_checkpoint``); a checkpoint whose bytes changed since
    it was pinned is refused, as an input that changed in place is."""
    data = storage.read_bytes(state)
    if hashlib.sha256(data).hexdigest() != sha256:
        raise CheckpointError(f"{state} changed since the job pinned it (sha256 {sha256[:12]}); run the job again")
    model, context = checked_policy(from_state(load_state(state, data=data), state, kind="pokemon_policy"))
    return StreamPlayer(model.eval(), context)


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

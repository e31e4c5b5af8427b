"""Metamon-style Pokémon policy: a turn encoder, a causal transformer over turns, a masked actor head over the 9
actions (4 moves, 5 switches) and critic heads for several discount factors.

Plain ``nn.Module``s with no I/O. Attention goes through ``torch.nn.functional.scaled_dot_product_attention`` with
``is_causal`` and no mask (windows are right-padded; see ``PokemonPolicy.forward``), so it
picks flash or memory-efficient kernels on GPU by itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from shards_schema.pokemon import (
    MOVE_SLOT_NUMBERS,
    MOVE_SLOT_WORDS,
    NUM_MOVES,
    NUM_SWITCHES,
    OBS_NUMERIC,
    OBS_WORDS,
    SWITCH_SLOT_NUMBERS,
    SWITCH_SLOT_WORDS,
)

NUM_POLICY_ACTIONS = NUM_MOVES + NUM_SWITCHES
"""The actor chooses among 4 moves and 5 switches; terastallizing is folded into the move it goes with."""
ACTION_HEADS = ("linear", "slots")
CRITIC_TRUNKS = ("shared", "own")


@dataclass(frozen=True, kw_only=True)
class PolicyConfig:
    """Shapes of the policy.

    Attributes:
        vocab_size: observation vocabulary size (ids above it are an error, never clamped).
        d_token: embedding width of each of the 87 words.
        d_model: width of the turn vectors and the transformer.
        n_layers: transformer blocks.
        n_heads: attention heads.
        d_ff: feed-forward width.
        max_turns: longest context (turns) the position embedding covers.
        dropout: dropout rate.
        gammas: discount factors of the critic heads.
        action_head: ``linear``: each action's logit and values are a linear read of the turn vector, so an action
            is its slot number; ``slots``: each action also gets a score from its own slot's words and numbers (the
            move's id, type, category, power...; the switch target's species, types, HP...) against the turn
            vector (``ActionSlots``), so what a move does is learned once for every slot it can sit in.
        critic_trunk: ``shared``: the critic heads read the actor's turn vectors; ``own``: the critic has a turn
            encoder, transformer and heads of its own, of the same shapes (``CriticTrunk``), so the critic loss and
            the actor loss never share a gradient path.
        critic_context: the own critic's attention span in turns, its own turn included, in every layer (a
            sliding window: a turn's Q reads the last ``n_layers * (critic_context - 1) + 1`` turns). 0: the whole
            window, as the actor's; 1: the current turn only, a critic that cannot tell who is playing from how
            they played before. Needs ``critic_trunk="own"``.
    """

    vocab_size: int
    d_token: int = 32
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 8
    d_ff: int = 1024
    max_turns: int = 128
    dropout: float = 0.0
    gammas: tuple[float, ...] = field(default=(0.9, 0.99, 0.999, 0.9999))
    action_head: str = "linear"
    critic_trunk: str = "shared"
    critic_context: int = 0

    def __post_init__(self):
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        if self.action_head not in ACTION_HEADS:
            raise ValueError(f"action_head must be one of {ACTION_HEADS}, not {self.action_head!r}")
        if self.critic_trunk not in CRITIC_TRUNKS:
            raise ValueError(f"critic_trunk must be one of {CRITIC_TRUNKS}, not {self.critic_trunk!r}")
        if self.critic_context < 0:
            raise ValueError(f"critic_context is a number of turns >= 0 (0: the whole window), not "
                             f"{self.critic_context}")
        if self.critic_context and self.critic_trunk != "own":
            raise ValueError("critic_context limits the critic's own trunk: set critic_trunk='own' with it (the "
                             "shared trunk's context is the actor's)")

    @classmethod
    def preset(cls, name: str, vocab_size: int, d_model: int = 0, action_head: str = "linear",
               critic_trunk: str = "shared", critic_context: int = 0) -> PolicyConfig:
        """``tiny`` (tests), ``small`` (~15M), ``medium`` (~50M), ``large`` (~200M), after Metamon's sizes.

        ``d_model`` (0: the preset's) replaces the width and scales the rest with it: the feed-forward keeps the
        preset's ratio to the width, and the heads keep the preset's head width (``d_model // head width`` heads,
        fewer where that count does not divide ``d_model``, at least one). Depth and word embeddings stay the preset's:
        a scaling sweep's size axis."""
        sizes = {
            "tiny": dict(d_token=8, d_model=32, n_layers=2, n_heads=2, d_ff=64, max_turns=64),
            "small": dict(d_token=32, d_model=384, n_layers=6, n_heads=6, d_ff=1536, max_turns=128),
            "medium": dict(d_token=48, d_model=640, n_layers=8, n_heads=10, d_ff=2560, max_turns=128),
            "large": dict(d_token=64, d_model=1152, n_layers=12, n_heads=16, d_ff=4608, max_turns=128),
        }
        if name not in sizes:
            raise ValueError(f"unknown preset {name!r}; have {sorted(sizes)}")
        size = sizes[name]
        if d_model:
            heads = max(1, d_model // (size["d_model"] // size["n_heads"]))
            while d_model % heads:
                heads -= 1
            size = {**size, "d_model": d_model, "n_heads": heads, "d_ff": d_model * size["d_ff"] // size["d_model"]}
        return cls(vocab_size=vocab_size, action_head=action_head, critic_trunk=critic_trunk,
                   critic_context=critic_context, **size)


def check_inputs(tokens, vocab_size: int) -> None:
    """Refuse token ids outside ``[0, vocab_size)`` (numpy or torch, any shape): an embedding lookup would fail on
    the device with no word of which id, or, with a larger vocabulary, read a wrong row. Called where data is loaded
    (the trainers' window loader once per decoded shard, evaluation per observation), not in ``forward``."""
    if not len(tokens.reshape(-1)):
        return
    low, high = int(tokens.min()), int(tokens.max())
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(f"token id {bad} is outside the vocabulary of {vocab_size} words: the observations were "
                         "made with another vocabulary than the model's (check the shards' observation version "
                         "against the checkpoint's)")


def fold_actions(mask13: torch.Tensor) -> torch.Tensor:
    """13-action legal mask (moves, switches, tera moves) → the actor's 9: a move is legal with or without tera."""
    moves = mask13[..., :NUM_MOVES] | mask13[..., NUM_MOVES + NUM_SWITCHES:]
    return torch.cat([moves, mask13[..., NUM_MOVES:NUM_MOVES + NUM_SWITCHES]], dim=-1)


def fold_action_ids(action13: torch.Tensor) -> torch.Tensor:
    """13-space action ids → 9-space (tera move k → move k); -1 stays -1."""
    return torch.where(action13 >= NUM_MOVES + NUM_SWITCHES, action13 - (NUM_MOVES + NUM_SWITCHES), action13)


class TurnEncoder(nn.Module):
    """87 word ids + 50 numbers of one turn → one turn vector."""

    def __init__(self, cfg: PolicyConfig):
        super().__init__()
        self.cfg = cfg
        self.words = nn.Embedding(cfg.vocab_size, cfg.d_token)
        self.slot = nn.Parameter(torch.zeros(OBS_WORDS, cfg.d_token))  # which of the 87 positions a word fills
        self.mix = nn.Linear(OBS_WORDS * cfg.d_token, cfg.d_model)
        self.numeric = nn.Sequential(nn.Linear(OBS_NUMERIC, cfg.d_model), nn.GELU(),
                                     nn.Linear(cfg.d_model, cfg.d_model))
        self.norm = nn.LayerNorm(cfg.d_model)

    def forward(self, tokens: torch.Tensor, numeric: torch.Tensor) -> torch.Tensor:
        # tokens (B, T, 87) int, numeric (B, T, 50) float → (B, T, d_model). Ids are checked by ``check_inputs``
        # where data is loaded: a check here would make every step wait for the device (a GPU→host copy).
        b, t, _ = tokens.shape
        words = self.words(tokens) + self.slot  # (B, T, 87, d_token)
        turn = self.mix(words.reshape(b, t, OBS_WORDS * self.cfg.d_token))  # (B, T, d_model)
        return self.norm(turn + self.numeric(numeric.to(turn.dtype)))


class ActionSlots(nn.Module):
    """Each action's own slot (a move: its 3 words and 4 numbers; a switch: its target's 7 words and HP) → a logit and
    one value per discount factor, read against the turn vector: ``w · GELU(W_h h + W_a slot + e_action)``.

    The linear head has to learn "slot 2 holds a Water move and the foe is Fire" from the whole turn's mixed words
    and learn it again for each of the 4 slots; here the same weights score a move wherever it sits, and the hidden
    layer sees the move and the context (the foe's types, HP, boosts) together."""

    def __init__(self, cfg: PolicyConfig, *, logit: bool = True, values: bool = True):
        super().__init__()
        self.logit, self.values = logit, values  # which outputs this head scores (an own critic's: values only)
        self.register_buffer("move_words", torch.tensor(MOVE_SLOT_WORDS), persistent=False)
        self.register_buffer("move_numbers", torch.tensor(MOVE_SLOT_NUMBERS), persistent=False)
        self.register_buffer("switch_words", torch.tensor(SWITCH_SLOT_WORDS), persistent=False)
        self.register_buffer("switch_numbers", torch.tensor(SWITCH_SLOT_NUMBERS), persistent=False)
        self.move = nn.Linear(len(MOVE_SLOT_WORDS[0]) * cfg.d_token + len(MOVE_SLOT_NUMBERS[0]), cfg.d_model)
        self.switch = nn.Linear(len(SWITCH_SLOT_WORDS[0]) * cfg.d_token + len(SWITCH_SLOT_NUMBERS[0]), cfg.d_model)
        self.action = nn.Parameter(torch.zeros(NUM_POLICY_ACTIONS, cfg.d_model))
        self.context = nn.Linear(cfg.d_model, cfg.d_model)
        self.out = nn.Linear(cfg.d_model, int(logit) + len(cfg.gammas) * int(values))

    @staticmethod
    def _slots(layer: nn.Linear, embed: nn.Embedding, tokens, numeric, word_at, number_at) -> torch.Tensor:
        # tokens (B, T, 87), numeric (B, T, 50) → (B, T, slots, d_model)
        b, t, _ = tokens.shape
        words = embed(tokens[:, :, word_at]).reshape(b, t, word_at.shape[0], -1)
        return layer(torch.cat([words, numeric[:, :, number_at].to(words.dtype)], dim=-1))

    def forward(self, x: torch.Tensor, tokens: torch.Tensor, numeric: torch.Tensor, embed: nn.Embedding):
        """x (B, T, d_model) turn features → logits (B, T, 9) and values (B, T, 9, G), to add to the linear heads'
        (None for an output the head does not score). ``embed`` is the turn encoder's word embedding: one vector per
        word, shared."""
        slots = torch.cat([self._slots(self.move, embed, tokens, numeric, self.move_words, self.move_numbers),
                           self._slots(self.switch, embed, tokens, numeric, self.switch_words, self.switch_numbers)],
                          dim=2)
        out = self.out(F.gelu(self.context(x)[:, :, None, :] + slots + self.action))  # (B, T, 9, [1 +] [G])
        return (out[..., 0] if self.logit else None), (out[..., int(self.logit):] if self.values else None)


class Block(nn.Module):
    def __init__(self, cfg: PolicyConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.ff = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), nn.GELU(), nn.Linear(cfg.d_ff, cfg.d_model))
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        # x (B, T, D); attn_mask (B, 1, T, T) bool, True where a query may attend to a key, or None: causal
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2) for z in (q, k, v))  # (B, H, T, hs)
        # is_causal without a mask lets scaled_dot_product_attention pick the flash kernel (a mask rules it out)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=attn_mask is None,
                                           dropout_p=self.dropout if self.training else 0.0)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.ff(self.ln2(x))


@dataclass
class PolicyOutput:
    """Per-turn outputs.

    Attributes:
        logits: (B, T, 9) action logits, illegal actions at -inf.
        q_values: (B, T, G, 9) action values, one set per discount factor.
        values: (B, T, G) state values under the current policy (expected Q).
    """

    logits: torch.Tensor
    q_values: torch.Tensor
    values: torch.Tensor


def trunk_features(trunk: nn.Module, tokens: torch.Tensor, numeric: torch.Tensor, valid: torch.Tensor | None, *,
                   mask_padding: bool = False, context: int = 0) -> torch.Tensor:
    """(B, T, d_model) turn vectors of a trunk (any module with ``encoder``, ``position``, ``blocks``, ``ln_f`` and
    ``cfg``: the policy's own, ``CriticTrunk``): in every block each turn attends to itself and the turns before it,
    the last ``context`` turns only where ``context`` > 0 and shorter than the window (a sliding window).
    ``mask_padding``: see ``PokemonPolicy.forward``."""
    t = tokens.shape[1]
    if t > trunk.cfg.max_turns:
        raise ValueError(f"context of {t} turns exceeds max_turns {trunk.cfg.max_turns}")
    x = trunk.encoder(tokens, numeric) + trunk.position(torch.arange(t, device=tokens.device))
    attn_mask = None
    if mask_padding or 0 < context < t:
        query = torch.arange(t, device=tokens.device)[:, None]
        key = torch.arange(t, device=tokens.device)[None, :]
        allowed = (key <= query) & (query - key < (context if context > 0 else t))  # (T, T): the turns in reach
        attn_mask = allowed[None, None].expand(tokens.shape[0], 1, t, t)  # (B, 1, T, T)
        if mask_padding:
            attn_mask = attn_mask & valid[:, None, None, :]  # past, non-padded keys
            attn_mask = attn_mask | torch.eye(t, dtype=torch.bool, device=tokens.device)  # a padded query: itself
    for block in trunk.blocks:
        x = block(x, attn_mask)
    return trunk.ln_f(x)


class CriticTrunk(nn.Module):
    """The critic's own turn encoder, transformer and heads (``PolicyConfig.critic_trunk="own"``): Q(s, ·) per
    discount factor from turn vectors the actor's loss never touches, over the last ``critic_context`` turns."""

    def __init__(self, cfg: PolicyConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = TurnEncoder(cfg)
        self.position = nn.Embedding(cfg.max_turns, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.critic = nn.Linear(cfg.d_model, len(cfg.gammas) * NUM_POLICY_ACTIONS)
        self.slots = ActionSlots(cfg, logit=False) if cfg.action_head == "slots" else None

    def forward(self, tokens: torch.Tensor, numeric: torch.Tensor, valid: torch.Tensor, *,
                mask_padding: bool = False) -> torch.Tensor:
        """→ q (B, T, G, 9)."""
        b, t, _ = tokens.shape
        x = trunk_features(self, tokens, numeric, valid, mask_padding=mask_padding, context=self.cfg.critic_context)
        q = self.critic(x).view(b, t, len(self.cfg.gammas), NUM_POLICY_ACTIONS)
        if self.slots is not None:
            q = q + self.slots(x, tokens, numeric, self.encoder.words)[1].transpose(-1, -2)
        return q


class PokemonPolicy(nn.Module):
    def __init__(self, cfg: PolicyConfig):
        super().__init__()
        self.cfg = cfg
        own = cfg.critic_trunk == "own"
        self.encoder = TurnEncoder(cfg)
        self.position = nn.Embedding(cfg.max_turns, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.actor = nn.Linear(cfg.d_model, NUM_POLICY_ACTIONS)
        # the critic's heads read this trunk (shared) or its own (CriticTrunk)
        self.critic = None if own else nn.Linear(cfg.d_model, len(cfg.gammas) * NUM_POLICY_ACTIONS)
        self.critic_trunk = CriticTrunk(cfg) if own else None
        self.slots = ActionSlots(cfg, values=not own) if cfg.action_head == "slots" else None

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def features(self, tokens: torch.Tensor, numeric: torch.Tensor, valid: torch.Tensor, *,
                 mask_padding: bool = False) -> torch.Tensor:
        """(B, T, d_model) turn features the actor's heads read (after the final norm); see ``forward``."""
        return trunk_features(self, tokens, numeric, valid, mask_padding=mask_padding)

    def forward(self, tokens: torch.Tensor, numeric: torch.Tensor, legal: torch.Tensor,
                valid: torch.Tensor, *, mask_padding: bool = False) -> PolicyOutput:
        """tokens (B, T, 87), numeric (B, T, 50), legal (B, T, 9) bool, valid (B, T) bool (False = padding).

        Windows are right-padded (each row's valid turns come first), so causal attention alone never lets a valid
        turn see padding: outputs at padded turns are garbage that every loss masks out. ``mask_padding`` also masks
        padded keys explicitly: the readable reference the causal path is tested against (equal on valid turns)."""
        b, t, _ = tokens.shape
        x = self.features(tokens, numeric, valid, mask_padding=mask_padding)
        # A row with no legal action (forced moves, terminal rows) keeps finite logits; its loss is masked out.
        any_legal = legal.any(dim=-1, keepdim=True)
        logits = self.actor(x)
        if self.critic_trunk is not None:
            q = self.critic_trunk(tokens, numeric, valid, mask_padding=mask_padding)
        else:
            q = self.critic(x).view(b, t, len(self.cfg.gammas), NUM_POLICY_ACTIONS)
        if self.slots is not None:
            slot_logits, slot_q = self.slots(x, tokens, numeric, self.encoder.words)
            logits = logits + slot_logits
            if slot_q is not None:
                q = q + slot_q.transpose(-1, -2)
        logits = logits.masked_fill(~legal & any_legal, float("-inf"))
        probs = torch.softmax(logits.float(), dim=-1).to(q.dtype)
        values = (q * probs[:, :, None, :]).sum(-1)
        return PolicyOutput(logits=logits, q_values=q, values=values)

"""The self-play league: snapshots of the learning policy, the opponent mix drawn from them and scripted bots, and
an Elo rating of every snapshot against fixed baselines.

The league is plain data: ``state_dict`` holds tensors and plain values only, so it goes into a checkpoint (read
with ``weights_only``) and comes back on resume with its opponent pool and ratings.

Opponent kinds, after the usual self-play set-ups: ``snapshot`` (a past version of the policy: without them
self-play collapses into strategies that only beat the latest self), ``strong`` (a scripted bot that punishes
mistakes) and ``weak`` (a scripted bot that keeps easy wins in the mix). Ratings: Elo with one anchor (the first
baseline, fixed at ``anchor_rating``); every other baseline and snapshot is rated from its games.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

OPPONENT_KINDS = ("snapshot", "strong", "weak")
LEARNER = "learner"
"""The learning policy's name in the ratings: its games are recorded under it, and each snapshot starts at its
rating, so the snapshots' ratings trace the learner's over time."""


@dataclass(frozen=True, kw_only=True)
class LeagueConfig:
    """How the league mixes opponents and rates snapshots.

    Attributes:
        snapshot_every: PPO updates between snapshots of the learning policy.
        max_snapshots: snapshots kept (the oldest goes first; the newest is always kept).
        snapshot_share: share of games against past snapshots.
        strong_share: share of games against the strong scripted bots.
        weak_share: share of games against the weak scripted bots.
        strong: names of the strong scripted bots (environment-specific).
        weak: names of the weak scripted bots.
        anchor_rating: the fixed Elo rating of the first weak bot, the anchor every rating is relative to.
        elo_k: Elo update step.
    """

    snapshot_every: int = 10
    max_snapshots: int = 20
    snapshot_share: float = 0.80
    strong_share: float = 0.15
    weak_share: float = 0.05
    strong: tuple[str, ...] = ("heuristic", "maxbp")
    weak: tuple[str, ...] = ("random",)
    anchor_rating: float = 1000.0
    elo_k: float = 16.0

    def __post_init__(self):
        shares = (self.snapshot_share, self.strong_share, self.weak_share)
        if min(shares) < 0 or abs(sum(shares) - 1.0) > 1e-9:
            raise ValueError(f"opponent shares {shares} must be non-negative and sum to 1")
        if not self.weak:
            raise ValueError("the league needs at least one weak bot: the first is the rating anchor")
        if self.snapshot_every < 1 or self.max_snapshots < 1:
            raise ValueError("snapshot_every and max_snapshots must be at least 1")


def keyed_rng(key: tuple) -> random.Random:
    """A random stream of its own for one draw, named by ``key`` (e.g. run seed, update, runner, game): the same
    key gives the same stream in any process (a string seed is hashed with SHA-512, not Python's salted ``hash``)."""
    return random.Random(":".join(str(part) for part in key))


def elo_expected(rating: float, other: float) -> float:
    """The expected score of a player rated ``rating`` against one rated ``other``."""
    return 1.0 / (1.0 + 10.0 ** ((other - rating) / 400.0))


@dataclass(frozen=True)
class Opponent:
    """Who to play: a kind from OPPONENT_KINDS and a name (a bot's, or ``snapshot-<update>``)."""

    kind: str
    name: str


@dataclass
class League:
    """Snapshots (name → model weights), ratings (name → Elo) and game counts."""

    cfg: LeagueConfig
    snapshots: dict[str, dict] = field(default_factory=dict)
    ratings: dict[str, float] = field(default_factory=dict)
    games: dict[str, int] = field(default_factory=dict)

    def __post_init__(self):
        for player in (*self.cfg.weak, *self.cfg.strong, LEARNER):
            self.ratings.setdefault(player, self.cfg.anchor_rating)
            self.games.setdefault(player, 0)

    @property
    def anchor(self) -> str:
        return self.cfg.weak[0]

    def due(self, update: int) -> bool:
        """Whether a snapshot is taken after PPO update ``update`` (counted from 1)."""
        return update % self.cfg.snapshot_every == 0

    def add_snapshot(self, update: int, weights: dict) -> str:
        """Keep the policy's weights (a state_dict, copied by the caller) as ``snapshot-<update>``, rated as the
        learner is now (its games so far are this snapshot's past). Drops the oldest beyond ``max_snapshots``."""
        name = f"snapshot-{update:06d}"
        self.snapshots[name] = weights
        self.ratings[name] = self.ratings[LEARNER]
        self.games[name] = 0
        while len(self.snapshots) > self.cfg.max_snapshots:
            oldest = min(self.snapshots)
            del self.snapshots[oldest]  # its rating stays: the curve of every snapshot's rating is kept
        return name

    def latest_snapshot(self) -> str | None:
        return max(self.snapshots) if self.snapshots else None

    def sample(self, rng: random.Random) -> Opponent:
        """An opponent from the configured mix; with no snapshot yet, its share goes to the scripted bots in
        proportion (the learner then plays bots until the first snapshot)."""
        shares = {"snapshot": self.cfg.snapshot_share if self.snapshots else 0.0,
                  "strong": self.cfg.strong_share if self.cfg.strong else 0.0, "weak": self.cfg.weak_share}
        total = sum(shares.values())
        if total == 0:
            shares["weak"], total = 1.0, 1.0
        draw, kind = rng.random() * total, "weak"
        for name, share in shares.items():
            if draw < share:
                kind = name
                break
            draw -= share
        if kind == "snapshot":
            return Opponent("snapshot", rng.choice(sorted(self.snapshots)))
        return Opponent(kind, rng.choice(self.cfg.strong if kind == "strong" else self.cfg.weak))

    def record(self, player: str, opponent: str, score: float) -> None:
        """One game's result for ``player`` against ``opponent`` (1 win, 0.5 draw, 0 loss): Elo updates both,
        except the anchor, whose rating is fixed."""
        for name in (player, opponent):
            if name not in self.ratings:
                raise KeyError(f"{name!r} is not in the league (bots: {self.cfg.weak + self.cfg.strong}, "
                               f"snapshots: {sorted(self.snapshots)})")
        expected = elo_expected(self.ratings[player], self.ratings[opponent])
        delta = self.cfg.elo_k * (score - expected)
        if player != self.anchor:
            self.ratings[player] += delta
        if opponent != self.anchor:
            self.ratings[opponent] -= delta
        self.games[player] += 1
        self.games[opponent] += 1

    def state_dict(self) -> dict:
        """Tensors and plain values only (a checkpoint reads it with ``weights_only``)."""
        return {"snapshots": dict(self.snapshots), "ratings": dict(self.ratings), "games": dict(self.games)}

    @classmethod
    def from_state_dict(cls, cfg: LeagueConfig, state: dict) -> League:
        return cls(cfg, snapshots=dict(state["snapshots"]), ratings=dict(state["ratings"]),
                   games=dict(state["games"]))

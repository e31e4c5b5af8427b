"""A strength ladder: a round robin among poke-env's bots, the battle generator's scripted players and any
checkpoints on one local Showdown server, with a win-rate matrix (95% Wilson intervals) and Bradley-Terry ratings on
the Elo scale (95% bootstrap intervals).

    python training/pokemon/ladder.py --out runs/ladder --port 8123 --scripted heuristic search
    python training/pokemon/ladder.py --out runs/ladder --port 8123 --checkpoints runs/bc runs/ppo
    python training/pokemon/ladder.py --out runs/ladder --port 8123 --formats gen9randombattle --battles-per-pair 20

Every pair of entrants plays ``--battles-per-pair`` battles in each format, half with each entrant challenging
(sides swapped). Formats without random teams (``gen1ou``) take teams from the generator's export
(``evaluate.export_teams``), one rotation per entrant; the second half swaps the two rotations, so a pair's two halves
play the same team pairs with the players exchanged. Writes ``matches.csv``, ``matrix.csv``, ``elo.csv`` and
``ladder.png`` under ``--out`` and prints the matrix and the ratings.

An entrant is a name and a factory of poke-env players (``Entrant``): poke-env's bots (``--players``), the battle
generator's scripted Node players (``--scripted``: ``node-random``, ``node-heuristic``, ``node-search``, the teachers
of the ``generated`` source, through ``training/pokemon/scripted_player.py``) and checkpoints (loaded as
``evaluate.py`` loads them).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from poke_env import AccountConfiguration, ServerConfiguration
from poke_env.player import MaxBasePowerPlayer, RandomPlayer, SimpleHeuristicsPlayer

from pipelines.cli import command_config
from pipelines.console import eta_s, progress_line
from pipelines.pokemon.generated import POLICIES as SCRIPTED
from shards_schema import storage
from training import outputs
from training.pokemon.evaluate import export_teams, team_rotation, wilson_interval
from training.pokemon.players import load_player
from training.pokemon.scripted_player import ScriptedPlayer
from training.pokemon.showdown_server import CLIENT_TIMEOUTS, showdown_server

BUILTIN = {"random": ("RandomPlayer", RandomPlayer), "maxbp": ("MaxBasePowerPlayer", MaxBasePowerPlayer),
           "heuristic": ("SimpleHeuristicsPlayer", SimpleHeuristicsPlayer)}
"""The poke-env bots by their flag name: (the name in the tables, the player class)."""
ANCHOR = "RandomPlayer"
ANCHOR_ELO = 1000.0
ELO_PER_NAT = 400.0 / math.log(10.0)
"""Elo points per unit of the Bradley-Terry log-strength: P(i beats j) = 1 / (1 + 10 ** ((R_j - R_i) / 400))."""


@dataclass(frozen=True)
class Entrant:
    """A ladder player: its name in the tables and a factory ``make(account, **poke-env player options)`` → a fresh
    poke-env player (a player class, ``ScriptedPlayer`` with its policy, or ``load_player``'s function). A player
    with a ``close()`` (a Node process) is closed when the ladder ends."""

    name: str
    make: Callable


@dataclass(frozen=True, kw_only=True)
class LadderConfig:
    """Configuration of a ladder run.

    Attributes:
        out: folder for matches.csv, matrix.csv, elo.csv and ladder.png, a local path or a URI (files in it are
            replaced).
        port: port of the local Showdown server (bound to 127.0.0.1, stopped by PID at the end).
        checkpoints: policies to enter (each a checkpoint folder, its state.pt, a run folder or a URI, as evaluate.py
            takes them); each is named by its path.
        players: poke-env bots to enter: random (RandomPlayer, the rating anchor at 1000), maxbp, heuristic.
        scripted: the battle generator's scripted players to enter (pipelines/showdown/players.js), each named
            ``node-<policy>``.
        battles_per_pair: battles of each pair in each format, half with each player challenging (even).
        formats: formats to play: random formats use the server's teams, others (gen1ou, gen9ou) exported teams.
        concurrency: battles in flight per pair and half.
        num_teams: teams in each entrant's rotation in formats that need teams.
        team_seed: seed of the exported teams.
        bootstrap_samples: bootstrap resamples of the battles for the rating intervals.
        seed: seed of the bootstrap.
        prior_ties: virtual tied battles of every entrant against the anchor, so an entrant that never won or never
            lost still gets a finite rating (1 by default: a weak pull towards the anchor).
        checkpoints_meet: play the checkpoints against one another too; without, each checkpoint meets only the
            bots and scripted players (a gauntlet: n policies cost n pairs per opponent instead of n² / 2, and every
            rating stays tied to the anchor through the opponents they share).
    """

    out: str
    port: int
    checkpoints: list[str] = field(default_factory=list)
    players: list[str] = field(default_factory=lambda: list(BUILTIN))
    scripted: list[str] = field(default_factory=list)
    battles_per_pair: int = 200
    formats: list[str] = field(default_factory=lambda: ["gen9randombattle", "gen1ou"])
    concurrency: int = 4
    num_teams: int = 50
    team_seed: int = 9001
    bootstrap_samples: int = 1000
    seed: int = 0
    prior_ties: float = 1.0
    checkpoints_meet: bool = True

    def __post_init__(self):
        unknown = set(self.players) - set(BUILTIN)
        if unknown:
            raise ValueError(f"unknown --players {sorted(unknown)}; have {list(BUILTIN)}")
        unknown = set(self.scripted) - set(SCRIPTED)
        if unknown:
            raise ValueError(f"unknown --scripted {sorted(unknown)}; the generator has {list(SCRIPTED)}")
        if "random" not in self.players:
            raise ValueError("--players must include random: RandomPlayer is the rating anchor")
        if len(self.players) + len(self.scripted) + len(self.checkpoints) < 2:
            raise ValueError("a ladder needs at least two entrants (--players, --scripted, --checkpoints)")
        if self.battles_per_pair < 2 or self.battles_per_pair % 2:
            raise ValueError(f"--battles-per-pair {self.battles_per_pair} must be even and at least 2 (half each side)")
        if self.num_teams < 1 or self.concurrency < 1 or self.bootstrap_samples < 1:
            raise ValueError("--num-teams, --concurrency and --bootstrap-samples must be at least 1")
        if self.prior_ties < 0:
            raise ValueError("--prior-ties must be non-negative")

    @classmethod
    def tiny(cls, *, out: str, port: int, **overrides) -> LadderConfig:
        return cls(out=out, port=port, **{"battles_per_pair": 2, "players": ["random", "maxbp"],
                                          "formats": ["gen9randombattle"], "concurrency": 2,
                                          "bootstrap_samples": 50, **overrides})


# ---------------------------------------------------------------------------------------------------- the ratings

UNBOUNDED = ("the ratings have no finite maximum: an entrant never lost or never won, or is not connected to the "
             "anchor by battles; use prior_ties > 0 (--prior-ties)")


def bradley_terry(scores: np.ndarray, *, anchor: int = 0, anchor_elo: float = ANCHOR_ELO,
                  prior_ties: float = 0.0, tol: float = 1e-10, max_iter: int = 100) -> np.ndarray:
    """Bradley-Terry ratings on the Elo scale by Newton's method on the log-likelihood, the anchor fixed.

    ``scores[i, j]`` is i's score against j (a win 1, a tie ½ to each side), so i and j met ``scores[i, j] +
    scores[j, i]`` times. ``prior_ties`` adds that many tied battles of every other entrant against the anchor: with
    it every rating is finite; without it an entrant that never lost (or never won) has none, and a ValueError says
    so, as does a set of entrants not connected to the anchor by battles.
    """
    w = np.asarray(scores, dtype=float).copy()
    n = len(w)
    if w.shape != (n, n) or (w < 0).any():
        raise ValueError(f"scores must be a square non-negative matrix, got shape {w.shape}")
    others = [i for i in range(n) if i != anchor]
    w[others, anchor] += prior_ties / 2
    w[anchor, others] += prior_ties / 2
    np.fill_diagonal(w, 0.0)
    games = w + w.T
    s = np.zeros(n)  # log-strengths (natural units), s[anchor] = 0

    def log_likelihood(s):
        diff = s[:, None] - s[None, :]
        return float((w * -np.logaddexp(0.0, -diff)).sum())

    for _ in range(max_iter):
        with np.errstate(over="ignore"):  # a strength running off to infinity gives p = 0 or 1, caught below
            p = 1.0 / (1.0 + np.exp(-(s[:, None] - s[None, :])))  # p[i, j] = P(i beats j)
        grad = (w - games * p).sum(axis=1)
        curv = games * p * (1 - p)
        hess = curv - np.diag(curv.sum(axis=1))
        try:
            step = np.linalg.solve(hess[np.ix_(others, others)], -grad[others])
        except np.linalg.LinAlgError as err:  # curvature gone: strengths ran off to infinity, or no path to the anchor
            raise ValueError(UNBOUNDED) from err
        # damped Newton: the log-likelihood is concave, so halving the step until it rises always ends
        before, t = log_likelihood(s), 1.0
        while t > 1e-8:
            trial = s.copy()
            trial[others] += t * step
            if log_likelihood(trial) >= before - 1e-12:
                break
            t /= 2
        s = trial
        if np.abs(t * step).max(initial=0.0) < tol:
            break
    if not np.isfinite(s).all() or np.abs(s).max(initial=0.0) > 30:  # > 5,000 Elo from the anchor: no maximum
        raise ValueError(UNBOUNDED)
    return anchor_elo + ELO_PER_NAT * s


def scores_of(battles: np.ndarray, num_entrants: int) -> np.ndarray:
    """The score matrix of battle records: rows ``(i, j, score of i)`` (1 a win, ½ a tie, 0 a loss)."""
    scores = np.zeros((num_entrants, num_entrants))
    i, j, score = battles[:, 0].astype(int), battles[:, 1].astype(int), battles[:, 2]
    np.add.at(scores, (i, j), score)
    np.add.at(scores, (j, i), 1.0 - score)
    return scores


def bootstrap_ratings(battles: np.ndarray, num_entrants: int, *, samples: int, seed: int, anchor: int = 0,
                      prior_ties: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ratings of battle records ``(i, j, score of i)`` and their 95% intervals from a seeded bootstrap: each
    resample draws every pair's battles with replacement (its number of battles kept). Returns (ratings, low, high)."""
    battles = np.asarray(battles, dtype=float).reshape(-1, 3)
    fit = functools.partial(bradley_terry, anchor=anchor, prior_ties=prior_ties)
    ratings = fit(scores_of(battles, num_entrants))
    pair_key = np.minimum(battles[:, 0], battles[:, 1]) * num_entrants + np.maximum(battles[:, 0], battles[:, 1])
    groups = [np.flatnonzero(pair_key == key) for key in np.unique(pair_key)]
    rng = np.random.default_rng(seed)
    draws = np.empty((samples, num_entrants))
    for b in range(samples):
        picked = np.concatenate([rng.choice(g, size=len(g)) for g in groups]) if groups else np.zeros(0, int)
        draws[b] = fit(scores_of(battles[picked], num_entrants))
    low, high = np.percentile(draws, [2.5, 97.5], axis=0)
    return ratings, low, high


# ---------------------------------------------------------------------------------------------------- the battles


def entrants_of(cfg: LadderConfig) -> list[Entrant]:
    """The built-in bots in ``BUILTIN``'s order (RandomPlayer first: the anchor), the scripted players, then the
    checkpoints."""
    out = [Entrant(BUILTIN[key][0], BUILTIN[key][1]) for key in BUILTIN if key in cfg.players]
    out += [Entrant(f"node-{policy}", functools.partial(ScriptedPlayer, policy, seed=cfg.seed))
            for policy in cfg.scripted]
    for path in cfg.checkpoints:
        name = path.rstrip("/")
        out.append(Entrant(name, load_player(path)))
    if len({e.name for e in out}) != len(out):
        raise ValueError(f"two entrants share a name: {[e.name for e in out]}")
    return out


def pairings(cfg: LadderConfig, num_entrants: int) -> list[tuple[int, int]]:
    """The pairs (a, b), a < b, of entrant indices that play: every pair, or with ``checkpoints_meet`` off every
    pair but those of two checkpoints (``entrants_of`` puts the checkpoints last)."""
    first_checkpoint = num_entrants - len(cfg.checkpoints)
    return [(a, b) for a in range(num_entrants) for b in range(a + 1, num_entrants)
            if cfg.checkpoints_meet or a < first_checkpoint]


@dataclass
class _Half:
    """One half of a pair's battles in a format: ``first`` challenges ``second``."""

    fmt: str
    first: int
    second: int
    challenger: object
    opponent: object


async def _show_progress(halves: list[_Half], total: int, log, every_s: float = 10.0) -> None:
    start = time.monotonic()
    while True:
        await asyncio.sleep(every_s)
        done = sum(h.challenger.n_finished_battles for h in halves)
        log(progress_line("ladder", done, total, "battles", {}, eta_s(done, total, time.monotonic() - start)))


async def _play(cfg: LadderConfig, entrants: list[Entrant], url: str, log) -> list[dict]:
    """Every pair's battles in every format; one record per battle: format, i, j (i challenged), i's score."""
    server = ServerConfiguration(url, "https://play.pokemonshowdown.com/action.php?")
    half = cfg.battles_per_pair // 2
    halves: list[_Half] = []
    for fmt in cfg.formats:
        pool = export_teams(fmt, cfg.num_teams * len(entrants), cfg.team_seed)

        def team(k, pool=pool):  # entrant k's rotation, from its first team on (None: the format brings its own)
            return team_rotation(pool, cfg.num_teams, k)

        for a, b in pairings(cfg, len(entrants)):
            # second half: b challenges with a's teams, a answers with b's, so both halves play the same team pairs
            for first, second, first_team, second_team in ((a, b, a, b), (b, a, a, b)):
                job = len(halves)
                opts = {"server_configuration": server, "battle_format": fmt,
                        "max_concurrent_battles": cfg.concurrency, **CLIENT_TIMEOUTS}
                # Showdown names are at most 18 characters; longer ones are cut and the login check fails
                challenger = entrants[first].make(AccountConfiguration(f"rf ladder {job}a", None),
                                                  team=team(first_team), **opts)
                opponent = entrants[second].make(AccountConfiguration(f"rf ladder {job}b", None),
                                                 team=team(second_team), **opts)
                halves.append(_Half(fmt, first, second, challenger, opponent))
    total = half * len(halves)
    log(f"ladder: {len(entrants)} entrants, {len(cfg.formats)} formats, {total} battles on {url}")
    progress = asyncio.create_task(_show_progress(halves, total, log))
    try:
        await asyncio.gather(*(h.challenger.battle_against(h.opponent, n_battles=half) for h in halves))
    finally:
        progress.cancel()
    # log out before the server stops, so no websocket is cut mid-frame
    clients = [p for h in halves for p in (h.challenger, h.opponent)]
    await asyncio.gather(*(c.ps_client.stop_listening() for c in clients), return_exceptions=True)
    for k, entrant in enumerate(entrants):  # a scripted player's illegal or crashed choices (the first legal taken)
        complaints = [line for h in halves for i, p in ((h.first, h.challenger), (h.second, h.opponent))
                      if i == k and hasattr(p, "complaints") for line in p.complaints().splitlines()]
        if complaints:
            log(f"{entrant.name}: {len(complaints)} choices replaced by the first legal one, e.g. {complaints[0]}")
    for client in clients:
        if hasattr(client, "close"):
            client.close()
    for k, entrant in enumerate(entrants):  # the policies' own counts, as evaluate.py reports them
        players = [p for h in halves for i, p in ((h.first, h.challenger), (h.second, h.opponent)) if i == k]
        if all(hasattr(p, "fallbacks") for p in players):
            mismatches = sum((p.mask_mismatches for p in players), collections.Counter())
            log(f"{entrant.name}: {sum(p.fallbacks for p in players)} fallback moves (its choice not accepted), "
                f"{sum(p.forced for p in players)} forced choices, {sum(mismatches.values())} of "
                f"{sum(p.decisions for p in players)} decisions whose mask differs from the server's choices"
                + "".join(f"; {n}× {reason}" for reason, n in mismatches.most_common()))
    records = []
    for h in halves:
        finished = [battle for battle in h.challenger.battles.values() if battle.finished]
        if len(finished) != half or h.opponent.n_finished_battles != half:
            raise RuntimeError(f"{entrants[h.first].name} vs {entrants[h.second].name} in {h.fmt}: "
                               f"{len(finished)} and {h.opponent.n_finished_battles} battles finished of {half}")
        their_wins = h.opponent.n_won_battles  # the other side's own count must agree with ours
        if their_wins != sum(bool(battle.lost) for battle in finished):
            raise RuntimeError(f"{entrants[h.first].name} vs {entrants[h.second].name} in {h.fmt}: the two sides "
                               f"disagree ({their_wins} wins for the second, by its own count)")
        for battle in finished:
            score = 1.0 if battle.won else 0.0 if battle.lost else 0.5
            records.append({"format": h.fmt, "i": h.first, "j": h.second, "score": score})
    return records


# ---------------------------------------------------------------------------------------------------- the tables


def match_rows(records: list[dict], entrants: list[Entrant]) -> list[dict]:
    """One row per pair and format: battles, wins of each, ties (every battle counted once)."""
    rows: dict[tuple, dict] = {}
    for r in records:
        a, b = sorted((r["i"], r["j"]))
        row = rows.setdefault((r["format"], a, b), {
            "format": r["format"], "player_a": entrants[a].name, "player_b": entrants[b].name,
            "battles": 0, "wins_a": 0, "wins_b": 0, "ties": 0})
        score_a = r["score"] if r["i"] == a else 1.0 - r["score"]
        row["battles"] += 1
        row["wins_a"] += score_a == 1.0
        row["wins_b"] += score_a == 0.0
        row["ties"] += score_a == 0.5
    return list(rows.values())


def matrix_rows(matches: list[dict], entrants: list[Entrant]) -> list[dict]:
    """Win rate of each row entrant against each column entrant per format (ties half), with 95% Wilson interval."""
    out = []
    for m in matches:
        for row, col, wins in (("player_a", "player_b", "wins_a"), ("player_b", "player_a", "wins_b")):
            score = m[wins] + 0.5 * m["ties"]
            low, high = wilson_interval(score, m["battles"])
            out.append({"format": m["format"], "row": m[row], "column": m[col], "battles": m["battles"],
                        "win_rate": score / m["battles"], "ci_low": low, "ci_high": high})
    return out


def elo_rows(records: list[dict], entrants: list[Entrant], cfg: LadderConfig) -> list[dict]:
    """Ratings per format, and over all formats together when there are several."""
    groups = {fmt: [r for r in records if r["format"] == fmt] for fmt in cfg.formats}
    if len(cfg.formats) > 1:
        groups["all"] = records
    out = []
    for fmt, rs in groups.items():
        battles = np.array([(r["i"], r["j"], r["score"]) for r in rs], dtype=float).reshape(-1, 3)
        ratings, low, high = bootstrap_ratings(battles, len(entrants), samples=cfg.bootstrap_samples, seed=cfg.seed,
                                               prior_ties=cfg.prior_ties)
        for k, e in enumerate(entrants):
            out.append({"format": fmt, "player": e.name, "battles": int(((battles[:, :2] == k).any(axis=1)).sum()),
                        "elo": ratings[k], "ci_low": low[k], "ci_high": high[k]})
    return out


def _rounded(rows: list[dict]) -> list[dict]:
    """Floats to 4 decimals: the CSVs' precision (win rates, intervals, ratings)."""
    return [{k: f"{v:.4f}" if isinstance(v, float) else v for k, v in row.items()} for row in rows]


def _plot(matrix: list[dict], entrants: list[Entrant], formats: list[str]) -> bytes:
    """The win-rate matrices as one PNG."""
    plt = outputs.pyplot()
    names = [e.name for e in entrants]
    fig, axes = plt.subplots(1, len(formats), figsize=(2.2 + 1.4 * len(names) * len(formats), 1.2 + 1.1 * len(names)),
                             squeeze=False)
    for ax, fmt in zip(axes[0], formats, strict=True):
        rate = np.full((len(names), len(names)), np.nan)
        for m in matrix:
            if m["format"] == fmt:
                rate[names.index(m["row"]), names.index(m["column"])] = m["win_rate"]
        ax.imshow(rate, vmin=0, vmax=1, cmap="RdBu")
        for (r, c), value in np.ndenumerate(rate):
            if not np.isnan(value):
                ax.text(c, r, f"{value:.1%}", ha="center", va="center", fontsize=9,
                        color="white" if abs(value - 0.5) > 0.3 else "black")
        short = [n[-22:] for n in names]  # a checkpoint path keeps its end
        ax.set_xticks(range(len(names)), short, rotation=30, ha="right", fontsize=8)
        ax.set_yticks(range(len(names)), short, fontsize=8)
        ax.set_title(f"{fmt}: row's win rate vs column", fontsize=9)
    fig.tight_layout()
    fig.set_dpi(120)
    return outputs.png_bytes(fig)


def _cell(m: dict | None) -> str:
    """A pair's win rate and interval; ``·`` for a pair that did not play (two checkpoints in a gauntlet)."""
    return f"{m['win_rate']:.1%} [{m['ci_low']:.0%}, {m['ci_high']:.0%}]" if m else "·"


def print_tables(matrix: list[dict], elo: list[dict], entrants: list[Entrant], formats: list[str], log=print) -> None:
    names = [e.name for e in entrants]
    width = max(22, *(len(n) for n in names)) + 1
    for fmt in formats:
        log(f"\n{fmt}: row's win rate vs column [95% Wilson interval]")
        log(" " * width + "".join(f"{n[-22:]:>24s}" for n in names))  # a checkpoint path keeps its end
        cells = {(m["row"], m["column"]): m for m in matrix if m["format"] == fmt}
        for r in names:
            line = "".join(f"{'—':>24s}" if r == c else _cell(cells.get((r, c))).rjust(24) for c in names)
            log(f"{r:{width}s}{line}")
    log(f"\n{'format':18s} {'player':{width}s} {'battles':>7s} {'Elo':>6s}  95% interval")
    for row in elo:
        log(f"{row['format']:18s} {row['player']:{width}s} {row['battles']:7d} {row['elo']:6.0f}  "
            f"[{row['ci_low']:.0f}, {row['ci_high']:.0f}]")


def run(cfg: LadderConfig, *, log=print) -> dict:
    entrants = entrants_of(cfg)
    with showdown_server(cfg.port) as url:
        records = asyncio.run(_play(cfg, entrants, url, log))
    matches = match_rows(records, entrants)
    matrix = matrix_rows(matches, entrants)
    elo = elo_rows(records, entrants, cfg)
    out = storage.normalize(cfg.out)  # a local folder or a URI: files go through the store
    for name, rows in (("matches.csv", matches), ("matrix.csv", matrix), ("elo.csv", elo)):
        outputs.write_csv(storage.join(out, name), _rounded(rows))
    storage.write_bytes(storage.join(out, "ladder.png"), _plot(matrix, entrants, cfg.formats))
    print_tables(matrix, elo, entrants, cfg.formats, log)
    log(f"\nwrote matches.csv, matrix.csv, elo.csv, ladder.png to {out}")
    return {"matches": matches, "matrix": matrix, "elo": elo, "records": records}


def main(argv: list[str] | None = None) -> None:
    run(command_config(LadderConfig, argv))


if __name__ == "__main__":
    main()

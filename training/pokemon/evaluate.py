"""Judge a trained policy in real battles: a local Showdown server, poke-env opponents, win rates with 95% intervals.

    python training/pokemon/evaluate.py --checkpoint runs/bc/.../state.pt --battles 200 --port 8123
    python training/pokemon/evaluate.py --checkpoint A/state.pt --checkpoint2 B/state.pt --battles 100 --port 8123
    python training/pokemon/evaluate.py --checkpoint ... --formats gen9randombattle gen1ou --battles 200 --port 8123
    python training/pokemon/evaluate.py --checkpoint ... --sample --battles 400 --port 8123   # the sampled policy

The server is the project's own install (127.0.0.1, the given port, stopped by PID at the end). The player is
``training/pokemon/player.py``'s: the policy sees exactly what it was trained on. Formats without generated
teams (``gen1ou``, ``gen9ou``, ...) take teams from ``pipelines/showdown/generate_battles.js --export-teams``
(validated by Showdown's ``TeamValidator``, the generator's own way of building battle teams), a different rotation
for each player.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import math
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from poke_env import AccountConfiguration, ServerConfiguration
from poke_env.player import MaxBasePowerPlayer, RandomPlayer, SimpleHeuristicsPlayer
from poke_env.teambuilder import Teambuilder

from pipelines.cli import command_config
from pipelines.console import eta_s, progress_line
from pipelines.pokemon.dex import node_env
from training.pokemon.players import load_player
from training.pokemon.showdown_server import CLIENT_TIMEOUTS, showdown_server

REPO_ROOT = Path(__file__).resolve().parents[2]

OPPONENTS = ("random", "maxbp", "heuristic")


def wilson_interval(wins: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a win rate (ties count half)."""
    if n == 0:
        return 0.0, 1.0
    p = wins / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def export_teams(fmt: str, num_teams: int, seed: int, first_index: int = 0) -> list[str]:
    """Packed, validated teams of a format from the Node generator; empty for a random format (its own teams)."""
    script = REPO_ROOT / "pipelines" / "showdown" / "generate_battles.js"
    cmd = ["node", str(script), "--format", fmt, "--export-teams", str(num_teams), "--seed", str(seed),
           "--first-index", str(first_index)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT, env=node_env())
    if done.returncode != 0:
        raise RuntimeError(f"team export for {fmt} failed ({done.returncode}): {done.stderr.strip()}")
    return [line for line in done.stdout.splitlines() if line]


class RotatingTeambuilder(Teambuilder):
    """A poke-env Teambuilder that hands out the given packed teams in turn (one per battle)."""

    def __init__(self, packed: list[str]):
        self.packed, self.next = packed, 0

    def yield_team(self) -> str:
        team = self.packed[self.next % len(self.packed)]
        self.next += 1
        return team


def team_rotation(pool: list[str], num_teams: int, k: int):
    """The k-th player's teams of a pool (None where the format brings its own)."""
    return RotatingTeambuilder(pool[k * num_teams:(k + 1) * num_teams]) if pool else None


@dataclass(frozen=True, kw_only=True)
class EvalConfig:
    """Configuration of an evaluation.

    Attributes:
        checkpoint: the policy's ``state.pt`` (a local path or a URI: ``s3://bucket/runs/bc/ray/.../state.pt``): an
            offline-RL (training/pokemon/offline_rl.py) or a Pokémon self-play (training/selfplay.py) checkpoint.
        port: port of the local Showdown server (bound to 127.0.0.1).
        checkpoint2: a second policy to play against instead of the built-in opponents.
        battles: battles per opponent and format.
        formats: formats to play: random formats use the server's teams, others (gen1ou, gen9ou) exported teams.
        opponents: poke-env opponents: random, maxbp, heuristic.
        concurrency: battles in flight per opponent.
        num_teams: teams in each player's rotation in formats that need teams.
        team_seed: seed of the exported teams (the generator's battle teams use other derived seeds).
        sample: each policy plays actions drawn from its distribution (the stochastic policy PPO trains and
            self-play's runners play), seeded; otherwise its most likely action (greedy).
        sample_seed: seed of the sampled actions; each policy player draws from its own generator (this seed plus
            its index), so its draws do not depend on how the battles interleave with other players'.
        temperature: with ``sample``, the actions are drawn from softmax(logits / temperature): a self-play run's
            ``--temperature`` evaluates the player it trained.
    """

    checkpoint: str
    port: int
    checkpoint2: str = ""
    battles: int = 100
    formats: list[str] = field(default_factory=lambda: ["gen9randombattle"])
    opponents: list[str] = field(default_factory=lambda: list(OPPONENTS))
    concurrency: int = 4
    num_teams: int = 50
    team_seed: int = 9001
    sample: bool = False
    sample_seed: int = 0
    temperature: float = 1.0

    def __post_init__(self):
        unknown = set(self.opponents) - set(OPPONENTS)
        if unknown:
            raise ValueError(f"unknown --opponents {sorted(unknown)}; have {list(OPPONENTS)}")
        if self.num_teams < 1:
            raise ValueError("--num-teams must be at least 1")
        if not self.temperature > 0 or (self.temperature != 1.0 and not self.sample):
            raise ValueError("--temperature must be > 0 and needs --sample (greedy play is the same at every "
                             "temperature)")

    @classmethod
    def tiny(cls, *, checkpoint: str, port: int, **overrides) -> EvalConfig:
        return cls(checkpoint=checkpoint, port=port, **{"battles": 2, "opponents": ["random"], **overrides})


async def _show_progress(players: list, total: int, log, every_s: float = 5.0) -> None:
    """A line every ``every_s`` seconds while the battles run: battles finished of the total, the policy's score so
    far, an ETA (cancelled when they end)."""
    start = time.monotonic()
    while True:
        await asyncio.sleep(every_s)
        done = sum(p.n_finished_battles for p in players)
        score = sum(p.n_won_battles + 0.5 * p.n_tied_battles for p in players)
        fields = {"won so far": f"{score / done:.0%}"} if done else {}
        log(progress_line("evaluate", done, total, "battles", fields, eta_s(done, total, time.monotonic() - start)))


async def _play(cfg: EvalConfig, url: str, log=print) -> list[dict]:
    server = ServerConfiguration(url, "https://play.pokemonshowdown.com/action.php?")
    classes = {"random": RandomPlayer, "maxbp": MaxBasePowerPlayer, "heuristic": SimpleHeuristicsPlayer}
    make_player = load_player(cfg.checkpoint)
    make_other = load_player(cfg.checkpoint2) if cfg.checkpoint2 else None
    rows, jobs, clients = [], [], []
    seeds = itertools.count(cfg.sample_seed)

    def sampling() -> dict:
        return {"sample_seed": next(seeds), "temperature": cfg.temperature} if cfg.sample else {}

    for fmt in cfg.formats:
        names = ["checkpoint2"] if cfg.checkpoint2 else cfg.opponents
        # one rotation per player: ours first, then each opponent's, from consecutive export indices
        pool = export_teams(fmt, cfg.num_teams * (1 + len(names)), cfg.team_seed)
        team = functools.partial(team_rotation, pool, cfg.num_teams)
        for k, name in enumerate(names):
            # Showdown names are at most 18 characters; longer ones are cut and the login check fails
            tag = f"{fmt[3]}{fmt[-2:]}{k}"
            opts = {"server_configuration": server, "battle_format": fmt,
                    "max_concurrent_battles": cfg.concurrency, **CLIENT_TIMEOUTS}
            player = make_player(AccountConfiguration(f"rf policy {tag}", None), team=team(0), **sampling(), **opts)
            if make_other is not None:
                opponent = make_other(AccountConfiguration(f"rf other {tag}", None), team=team(k + 1), **sampling(),
                                      **opts)
            else:
                opponent = classes[name](AccountConfiguration(f"rf {name[:5]} {tag}", None), team=team(k + 1),
                                         **opts)
            jobs.append((fmt, name, player, player.battle_against(opponent, n_battles=cfg.battles)))
            clients.extend([player, opponent])
    progress = asyncio.create_task(_show_progress([player for _, _, player, _ in jobs], cfg.battles * len(jobs), log))
    try:
        await asyncio.gather(*(job for *_, job in jobs))
    finally:
        progress.cancel()
    # log out before the server stops, so no websocket is cut mid-frame
    await asyncio.gather(*(client.ps_client.stop_listening() for client in clients), return_exceptions=True)
    for fmt, name, player, _ in jobs:
        n = player.n_finished_battles
        score = player.n_won_battles + 0.5 * player.n_tied_battles
        low, high = wilson_interval(score, n)
        rows.append({"format": fmt, "opponent": name, "battles": n, "wins": player.n_won_battles,
                     "ties": player.n_tied_battles, "win_rate": score / max(n, 1), "ci_low": low, "ci_high": high,
                     "fallback_moves": player.fallbacks, "forced_choices": player.forced,
                     "fallback_reasons": dict(player.fallback_reasons), "decisions": player.decisions,
                     "mask_mismatches": dict(player.mask_mismatches)})
    return rows


def run(cfg: EvalConfig, *, log=print) -> list[dict]:
    with showdown_server(cfg.port) as url:
        rows = asyncio.run(_play(cfg, url, log))
    log(f"{'format':18s} {'opponent':12s} {'battles':>7s} {'win rate':>9s}  95% interval   fallbacks  forced  "
        "mask≠request")
    for r in rows:
        log(f"{r['format']:18s} {r['opponent']:12s} {r['battles']:7d} {r['win_rate']:9.1%}  "
            f"[{r['ci_low']:.1%}, {r['ci_high']:.1%}]   {r['fallback_moves']:9d}  {r['forced_choices']:6d}  "
            f"{sum(r['mask_mismatches'].values())}/{r['decisions']}")
    for r in rows:
        for reason, count in r["fallback_reasons"].items():
            log(f"fallback {r['format']} vs {r['opponent']}: {count}× {reason}")
        for reason, count in r["mask_mismatches"].items():
            log(f"mask≠request {r['format']} vs {r['opponent']}: {count}× {reason}")
    return rows


def main(argv: list[str] | None = None) -> None:
    run(command_config(EvalConfig, argv))


if __name__ == "__main__":
    main()

"""Judge a trained policy in real battles: a local Showdown server, poke-env opponents, win rates with 95% intervals.

    python training/evaluate.py --checkpoint runs/bc/.../state.pt --battles 200 --port 8123
    python training/evaluate.py --checkpoint A/state.pt --checkpoint2 B/state.pt --battles 100 --port 8123
    python training/evaluate.py --checkpoint ... --formats gen9randombattle gen1ou --battles 200 --port 8123

The server is the project's own install (127.0.0.1, the given port, stopped by PID at the end). The policy sees
exactly what it was trained on: the protocol lines and ``|request|`` JSON the server sends go through the same
tracker and observation spec as the ``generated`` source's first-person trajectories. Formats without generated
teams (``gen1ou``, ``gen9ou``, ...) take teams from ``pipelines/showdown/generate_battles.js --export-teams``
(validated by Showdown's ``TeamValidator``, the generator's own way of building battle teams), a different rotation
for each player.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

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
    import subprocess

    from pipelines.pokemon.dex import node_env

    script = REPO_ROOT / "pipelines" / "showdown" / "generate_battles.js"
    cmd = ["node", str(script), "--format", fmt, "--export-teams", str(num_teams), "--seed", str(seed),
           "--first-index", str(first_index)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT, env=node_env())
    if done.returncode != 0:
        raise RuntimeError(f"team export for {fmt} failed ({done.returncode}): {done.stderr.strip()}")
    return [line for line in done.stdout.splitlines() if line]


def make_teambuilder(teams: list[str]):
    """A poke-env Teambuilder that hands out the given packed teams in turn (one per battle)."""
    from poke_env.teambuilder import Teambuilder

    class RotatingTeambuilder(Teambuilder):
        def __init__(self, packed: list[str]):
            self.packed, self.next = packed, 0

        def yield_team(self) -> str:
            team = self.packed[self.next % len(self.packed)]
            self.next += 1
            return team

    return RotatingTeambuilder(teams)


def _rotation(pool: list[str], num_teams: int, k: int):
    """The k-th player's teams of a pool (None where the format brings its own)."""
    return make_teambuilder(pool[k * num_teams:(k + 1) * num_teams]) if pool else None


def load_policy(path: str, device: str = "cpu"):
    """(model, context length) from a training checkpoint (its folder or ``state.pt``, a path or a URI), rebuilt from
    the checkpoint alone; refused when it reads another observation spec or vocabulary than this code makes."""
    from training.checkpoints import read_checkpoint

    model, context = _checked_policy(read_checkpoint(path, device, kind="pokemon_policy"))
    return model.to(device), context


def _checked_policy(ckpt):
    """(model, context) of a loaded ``pokemon_policy`` checkpoint, refused when it reads another observation spec or
    vocabulary than this code makes."""
    from training.checkpoints import POKEMON_OBSERVATION, live_identity

    ckpt.check_features(live_identity(POKEMON_OBSERVATION))
    return ckpt.build_model(), int(ckpt.train_config["context"])


def load_player(path: str):
    """A function (account, **poke-env player options) → a player of the policy in a checkpoint (its folder or
    ``state.pt``, a path or a URI): an offline-RL policy (``pokemon_policy``) or a self-play policy
    (``pokemon_selfplay``, on the frozen encoder its checkpoint holds), both choosing their most likely legal
    action. Refused when the checkpoint reads another observation spec or vocabulary than this code makes."""
    import functools

    from training.checkpoints import POKEMON_OBSERVATION, CheckpointError, live_identity, read_checkpoint

    ckpt = read_checkpoint(path)
    if ckpt.kind == "pokemon_policy":
        return functools.partial(make_player_class(), *_checked_policy(ckpt))
    if ckpt.kind == "pokemon_selfplay":
        from training.pokemon_selfplay import encoder_from_state, make_selfplay_player_class

        ckpt.check_features(live_identity(POKEMON_OBSERVATION))
        encoder, context = encoder_from_state(ckpt.extra["encoder"])
        return functools.partial(make_selfplay_player_class(), encoder, context, ckpt.build_model(), record=False,
                                 greedy=True)
    raise CheckpointError(f"{path} holds a {ckpt.kind} model; evaluate.py plays pokemon_policy and "
                          "pokemon_selfplay checkpoints")


def make_player_class():
    """The poke-env Player subclass (imported lazily: poke-env is only needed to play)."""
    import numpy as np
    import torch
    from poke_env.player import Player

    from models.pokemon_policy import check_inputs, fold_actions
    from pipelines.errors import InputError
    from pipelines.pokemon.dex import gen_of_format, load_dex, to_id
    from pipelines.pokemon.observation import observe
    from pipelines.pokemon.pov import Decision
    from pipelines.pokemon.tracker import BattleTracker

    class ReplayforgePlayer(Player):
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

    return ReplayforgePlayer


@dataclass(frozen=True, kw_only=True)
class EvalConfig:
    """Configuration of an evaluation.

    Attributes:
        checkpoint: the policy's ``state.pt`` (a local path or a URI: ``s3://bucket/runs/bc/ray/.../state.pt``): an
            offline-RL (training/offline_rl.py) or a Pokémon self-play (training/selfplay.py) checkpoint.
        port: port of the local Showdown server (bound to 127.0.0.1).
        checkpoint2: a second policy to play against instead of the built-in opponents.
        battles: battles per opponent and format.
        formats: formats to play: random formats use the server's teams, others (gen1ou, gen9ou) exported teams.
        opponents: poke-env opponents: random, maxbp, heuristic.
        concurrency: battles in flight per opponent.
        num_teams: teams in each player's rotation in formats that need teams.
        team_seed: seed of the exported teams (the generator's battle teams use other derived seeds).
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

    def __post_init__(self):
        unknown = set(self.opponents) - set(OPPONENTS)
        if unknown:
            raise ValueError(f"unknown --opponents {sorted(unknown)}; have {list(OPPONENTS)}")
        if self.num_teams < 1:
            raise ValueError("--num-teams must be at least 1")

    @classmethod
    def tiny(cls, *, checkpoint: str, port: int, **overrides) -> EvalConfig:
        return cls(checkpoint=checkpoint, port=port, **{"battles": 2, "opponents": ["random"], **overrides})


async def _show_progress(players: list, total: int, log, every_s: float = 5.0) -> None:
    """A line every ``every_s`` seconds while the battles run: battles finished of the total, the policy's score so
    far, an ETA (cancelled when they end)."""
    import time

    from pipelines.console import eta_s, progress_line

    start = time.monotonic()
    while True:
        await asyncio.sleep(every_s)
        done = sum(p.n_finished_battles for p in players)
        score = sum(p.n_won_battles + 0.5 * p.n_tied_battles for p in players)
        fields = {"won so far": f"{score / done:.0%}"} if done else {}
        log(progress_line("evaluate", done, total, "battles", fields, eta_s(done, total, time.monotonic() - start)))


async def _play(cfg: EvalConfig, url: str, log=print) -> list[dict]:
    from poke_env import AccountConfiguration, ServerConfiguration
    from poke_env.player import MaxBasePowerPlayer, RandomPlayer, SimpleHeuristicsPlayer

    server = ServerConfiguration(url, "https://play.pokemonshowdown.com/action.php?")
    classes = {"random": RandomPlayer, "maxbp": MaxBasePowerPlayer, "heuristic": SimpleHeuristicsPlayer}
    make_player = load_player(cfg.checkpoint)
    make_other = load_player(cfg.checkpoint2) if cfg.checkpoint2 else None
    rows, jobs, clients = [], [], []
    for fmt in cfg.formats:
        names = ["checkpoint2"] if cfg.checkpoint2 else cfg.opponents
        # one rotation per player: ours first, then each opponent's, from consecutive export indices
        pool = export_teams(fmt, cfg.num_teams * (1 + len(names)), cfg.team_seed)
        team = functools.partial(_rotation, pool, cfg.num_teams)
        for k, name in enumerate(names):
            # Showdown names are at most 18 characters; longer ones are cut and the login check fails
            tag = f"{fmt[3]}{fmt[-2:]}{k}"
            player = make_player(AccountConfiguration(f"rf policy {tag}", None),
                            server_configuration=server, battle_format=fmt, max_concurrent_battles=cfg.concurrency,
                            team=team(0))
            if make_other is not None:
                opponent = make_other(AccountConfiguration(f"rf other {tag}", None),
                                  server_configuration=server, battle_format=fmt,
                                  max_concurrent_battles=cfg.concurrency, team=team(k + 1))
            else:
                opponent = classes[name](AccountConfiguration(f"rf {name[:5]} {tag}", None),
                                         server_configuration=server, battle_format=fmt,
                                         max_concurrent_battles=cfg.concurrency, team=team(k + 1))
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
                     "fallback_reasons": dict(player.fallback_reasons)})
    return rows


def run(cfg: EvalConfig, *, log=print) -> list[dict]:
    from training.showdown_server import showdown_server

    with showdown_server(cfg.port) as url:
        rows = asyncio.run(_play(cfg, url, log))
    log(f"{'format':18s} {'opponent':12s} {'battles':>7s} {'win rate':>9s}  95% interval   fallbacks  forced")
    for r in rows:
        log(f"{r['format']:18s} {r['opponent']:12s} {r['battles']:7d} {r['win_rate']:9.1%}  "
            f"[{r['ci_low']:.1%}, {r['ci_high']:.1%}]   {r['fallback_moves']:9d}  {r['forced_choices']:6d}")
    for r in rows:
        for reason, count in r["fallback_reasons"].items():
            log(f"fallback {r['format']} vs {r['opponent']}: {count}× {reason}")
    return rows


def main(argv: list[str] | None = None) -> None:
    from pipelines.cli import command_config

    run(command_config(EvalConfig, argv))


if __name__ == "__main__":
    main()

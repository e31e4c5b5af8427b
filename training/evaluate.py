"""Judge a trained policy in real battles: a local Showdown server, poke-env opponents, win rates with 95% intervals.

    python training/evaluate.py --checkpoint runs/bc/.../state.pt --battles 200 --port 8123
    python training/evaluate.py --checkpoint A/state.pt --checkpoint2 B/state.pt --battles 100 --port 8123

The server is the project's own install (127.0.0.1, the given port, stopped by PID at the end). The policy sees
exactly what it was trained on: the protocol lines and ``|request|`` JSON the server sends go through the same
tracker and observation spec as the ``generated`` source's first-person trajectories.
"""

from __future__ import annotations

import asyncio
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


def load_policy(path: str, device: str = "cpu"):
    """(model, context length) from a training checkpoint's ``state.pt``."""
    import dataclasses

    import torch

    from models.pokemon_policy import PokemonPolicy, PolicyConfig
    from pipelines.pokemon.observation import vocabulary

    state = torch.load(path, map_location=device, weights_only=False)
    cfg = state["config"]
    policy_cfg = PolicyConfig.preset(cfg["preset"], len(vocabulary()))
    policy_cfg = dataclasses.replace(policy_cfg, max_turns=max(policy_cfg.max_turns, cfg["context"]))
    model = PokemonPolicy(policy_cfg)
    model.load_state_dict(state["model"])
    return model.eval().to(device), int(cfg["context"])


def make_player_class():
    """The poke-env Player subclass (imported lazily: poke-env is only needed to play)."""
    import torch
    from poke_env.player import Player

    from models.pokemon_policy import fold_actions
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

        def choose_move(self, battle):
            tracker = self.trackers.get(battle.battle_tag)
            request = battle.last_request
            side = battle.player_role
            if tracker is None or battle.battle_tag in self.broken or not request or side is None:
                self.fallbacks += 1
                return self.choose_random_move(battle)
            try:
                decision = Decision(tracker, side, request, None)
                state, mask13 = decision.render_state_and_mask()
            except (InputError, KeyError, TypeError, ValueError, IndexError):
                self.fallbacks += 1
                return self.choose_random_move(battle)
            _, tokens, numeric, _ = observe(state, tracker.format_id)
            legal = fold_actions(torch.tensor(mask13))
            history = self.history.setdefault(battle.battle_tag, [])
            history.append((tokens, numeric, legal))
            window = history[-self.context:]
            tokens_t = torch.tensor([[w[0] for w in window]])  # (1, T, 87)
            numeric_t = torch.tensor([[w[1] for w in window]])  # (1, T, 48)
            legal_t = torch.stack([w[2] for w in window])[None]  # (1, T, 9)
            with torch.no_grad():
                out = self.model(tokens_t, numeric_t, legal_t, torch.ones(1, len(window), dtype=torch.bool))
            if not legal.any():
                self.fallbacks += 1
                return self.choose_random_move(battle)
            action = int(out.logits[0, -1].argmax())
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
            self.fallbacks += 1
            return self.choose_random_move(battle)

    return ReplayforgePlayer


@dataclass(frozen=True, kw_only=True)
class EvalConfig:
    """Configuration of an evaluation.

    Attributes:
        checkpoint: the policy's ``state.pt``.
        port: port of the local Showdown server (bound to 127.0.0.1).
        checkpoint2: a second policy to play against instead of the built-in opponents.
        battles: battles per opponent and format.
        formats: formats to play (random-battle formats; teams are the server's).
        opponents: poke-env opponents: random, maxbp, heuristic.
        concurrency: battles in flight per opponent.
    """

    checkpoint: str
    port: int
    checkpoint2: str = ""
    battles: int = 100
    formats: list[str] = field(default_factory=lambda: ["gen9randombattle"])
    opponents: list[str] = field(default_factory=lambda: list(OPPONENTS))
    concurrency: int = 4

    @classmethod
    def tiny(cls, *, checkpoint: str, port: int, **overrides) -> EvalConfig:
        return cls(checkpoint=checkpoint, port=port, **{"battles": 2, "opponents": ["random"], **overrides})


async def _play(cfg: EvalConfig, url: str) -> list[dict]:
    from poke_env import AccountConfiguration, ServerConfiguration
    from poke_env.player import MaxBasePowerPlayer, RandomPlayer, SimpleHeuristicsPlayer

    server = ServerConfiguration(url, "https://play.pokemonshowdown.com/action.php?")
    classes = {"random": RandomPlayer, "maxbp": MaxBasePowerPlayer, "heuristic": SimpleHeuristicsPlayer}
    Policy = make_player_class()
    model, context = load_policy(cfg.checkpoint)
    rows, jobs, clients = [], [], []
    for fmt in cfg.formats:
        names = ["checkpoint2"] if cfg.checkpoint2 else cfg.opponents
        for k, name in enumerate(names):
            # Showdown names are at most 18 characters; longer ones are cut and the login check fails
            tag = f"{fmt[3]}{fmt[-2:]}{k}"
            player = Policy(model, context, AccountConfiguration(f"rf policy {tag}", None),
                            server_configuration=server, battle_format=fmt, max_concurrent_battles=cfg.concurrency)
            if cfg.checkpoint2:
                model2, context2 = load_policy(cfg.checkpoint2)
                opponent = Policy(model2, context2, AccountConfiguration(f"rf other {tag}", None),
                                  server_configuration=server, battle_format=fmt,
                                  max_concurrent_battles=cfg.concurrency)
            else:
                opponent = classes[name](AccountConfiguration(f"rf {name[:5]} {tag}", None),
                                         server_configuration=server, battle_format=fmt,
                                         max_concurrent_battles=cfg.concurrency)
            jobs.append((fmt, name, player, player.battle_against(opponent, n_battles=cfg.battles)))
            clients.extend([player, opponent])
    await asyncio.gather(*(job for *_, job in jobs))
    # log out before the server stops, so no websocket is cut mid-frame
    await asyncio.gather(*(client.ps_client.stop_listening() for client in clients), return_exceptions=True)
    for fmt, name, player, _ in jobs:
        n = player.n_finished_battles
        score = player.n_won_battles + 0.5 * player.n_tied_battles
        low, high = wilson_interval(score, n)
        rows.append({"format": fmt, "opponent": name, "battles": n, "wins": player.n_won_battles,
                     "ties": player.n_tied_battles, "win_rate": score / max(n, 1), "ci_low": low, "ci_high": high,
                     "fallback_moves": player.fallbacks})
    return rows


def run(cfg: EvalConfig, *, log=print) -> list[dict]:
    from training.showdown_server import showdown_server

    with showdown_server(cfg.port) as url:
        rows = asyncio.run(_play(cfg, url))
    log(f"{'format':18s} {'opponent':12s} {'battles':>7s} {'win rate':>9s}  95% interval   fallbacks")
    for r in rows:
        log(f"{r['format']:18s} {r['opponent']:12s} {r['battles']:7d} {r['win_rate']:9.1%}  "
            f"[{r['ci_low']:.1%}, {r['ci_high']:.1%}]   {r['fallback_moves']}")
    return rows


def main(argv: list[str] | None = None) -> None:
    from pipelines.cli import parse_config

    run(parse_config(EvalConfig, argv))


if __name__ == "__main__":
    main()

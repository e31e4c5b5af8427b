"""Battle-state tracking over Showdown protocol lines, from one player's point of view.

``BattleTracker`` applies protocol lines (``|switch|``, ``|move|``, ``|-damage|``...) to a model of both sides,
keeping only what the watching player can know: everything revealed in the log, plus, when the player's own
``|request|`` JSON is available, the exact facts of its own team. ``state_dict`` renders the structured
``BattleState`` (as plain dicts in the declared schema's shape) at a decision point.

Unknown facts stay explicit (``unknownitem``, ``unknownability``); nothing is filled from usage statistics.
Lines that carry no game state (chat, timers, ``|raw|``) are ignored; unknown ``-`` minor messages are ignored
as the Showdown client does; malformed lines raise ``ProtocolError``.
"""

from __future__ import annotations

import itertools

from pipelines.errors import ProtocolError, UnknownMessageError
from pipelines.pokemon.dex import TYPELESS, Dex, UnknownDexEntry, move_id, to_id

_BOOST_KEYS = {"atk": "atk_boost", "def": "def_boost", "spa": "spa_boost", "spd": "spd_boost", "spe": "spe_boost",
               "accuracy": "accuracy_boost", "evasion": "evasion_boost"}
_STATUSES = {"brn", "frz", "par", "psn", "tox", "slp", "fnt"}
# Lines with no effect on the modelled game state: chat, room and timer messages, client decorations, and battle
# messages that only describe (crits, misses, hints). Together with the handled kinds below they are every message
# of the protocol (PROTOCOL.md and SIM-PROTOCOL.md of pokemon-showdown 0.11.11, plus what its simulator and server
# emit); anything else is an unknown message and quarantines the battle.
_IGNORED = frozenset(
    "c c: chat chatmsg chatmsg-raw j J join l L leave n N name b B raw html uhtml uhtmlchange t: : inactive "
    "inactiveoff timer message error bigerror debug seed gametype title rule clearpoke teampreview upkeep start "
    "split hint done sentchoice askreg unlink hidelines notify tempnotify tempnotifyoff badge rated init deinit "
    "noinit expire choice variation warning custom spectator spectatorleave updatepoke showteam swap request "
    "queryresponse userstats tournament zbroken "
    "-hint -message -anim -notarget -nothing -crit -supereffective -resisted -immune -miss -fail -block -center "
    "-combine -waiting -prepare -mustrecharge -hitcount -singlemove -singleturn -zpower -zbroken "
    "-ohko -fieldactivate -activate -candynamax".split()
)
def _ident(raw: str) -> tuple[str, str]:
    """``p1a: Nick`` → (``p1``, ``Nick``)."""
    side, sep, name = raw.partition(": ")
    if not sep or len(side) < 2 or side[:2] not in ("p1", "p2", "p3", "p4"):
        raise ProtocolError(f"malformed Pokémon identifier {raw!r}")
    return side[:2], name.strip()


def _details(raw: str) -> tuple[str, int, str | None]:
    """``Pikachu, L88, M, tera:Fire`` → (species, level, tera type id or None)."""
    parts = [p.strip() for p in raw.split(",")]
    level, tera = 100, None
    for part in parts[1:]:
        if part.startswith("L") and part[1:].isdigit():
            level = int(part[1:])
        elif part.startswith("tera:"):
            tera = to_id(part[5:])
    return parts[0], level, tera


def _effect_id(raw: str) -> str:
    for prefix in ("move: ", "ability: ", "item: "):
        if raw.startswith(prefix):
            raw = raw[len(prefix):]
    return to_id(raw)


DYNAMAX_TURNS = 3
"""A Dynamax lasts the turn it starts in and the two after (pokemon-showdown 0.11.11 ``endTurn`` ends it once its
third end-of-turn residual has counted, before the next ``|turn|``)."""


def moves_since(moves: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    """Move id → PP used since ``before`` (the same Pokémon's ``moves`` earlier), for the moves revealed or used
    since: what an Illusion's disguise seemed to use is the real Pokémon's."""
    return {move: used - before.get(move, 0) for move, used in moves.items()
            if move not in before or used > before[move]}


class Mon:
    """One Pokémon as the watching player knows it.

    ``revision`` goes up whenever a tracker handler may have changed it (every ``BattleTracker._mon`` lookup, and
    the handlers that reach Pokémon otherwise), so a renderer can reuse what it rendered at the same revision;
    Code outside the tracker that changes a Mon (``pov.py``'s request) does not count revisions, and its renders
    do not read them.

    ``form`` is the species its switch-in or last permanent change (``|detailschange|``) showed: a ``|-formechange|``
    (Aegislash-Blade, Wishiwashi-School, Minior-Meteor) lasts until it leaves the field, as in pokemon-showdown
    0.11.11, whose ``clearVolatile`` restores the base species on switch-out.
    """

    __slots__ = ("name", "species", "form", "level", "hp_pct", "status", "types", "item", "ability", "moves",
                 "own_moves", "boosts", "effects", "tera_type", "terastallized", "active", "exact_pp", "revision",
                 "dynamax_turn")

    def __init__(self, name: str, species: str, level: int, gen: int):
        self.name = name
        self.species = self.form = species
        self.level = level
        self.hp_pct = 1.0
        self.status = "nostatus"
        self.types: list[str] | None = None  # None: the species' dex types
        self.item = "unknownitem" if gen >= 2 else "noitem"
        self.ability = "unknownability" if gen >= 3 else "noability"
        self.moves: dict[str, int] = {}  # move id -> PP used (revealed order is slot order)
        self.own_moves: dict[str, int] | None = None  # its own moves while ``moves`` are those it copied
        self.exact_pp: dict[str, tuple[int, int]] = {}  # move id -> (pp, maxpp) from the player's own request
        self.boosts: dict[str, int] = {}
        self.effects: set[str] = set()
        self.tera_type = "unknowntype" if gen >= 9 else "notype"
        self.terastallized = False
        self.active = False
        self.revision = 0
        self.dynamax_turn: int | None = None  # the battle turn it Dynamaxed in, while Dynamaxed

    def set_condition(self, condition: str) -> None:
        """Apply ``hp/max status`` or ``0 fnt``."""
        hp_part, _, status = condition.strip().partition(" ")
        if hp_part == "0" or status == "fnt":
            self.hp_pct = 0.0
            self.status = "fnt"
            return
        cur, sep, total = hp_part.partition("/")
        try:
            self.hp_pct = float(cur) / float(total) if sep else float(cur) / 100.0
        except (ValueError, ZeroDivisionError) as err:
            raise ProtocolError(f"malformed HP condition {condition!r}") from err
        self.status = status if status in _STATUSES else "nostatus"

    def switch_out(self, keep_boosts: bool = False) -> None:
        self.active = False
        self.effects.clear()
        self.dynamax_turn = None
        if self.own_moves is not None:  # a Transform ends when its Pokémon leaves the field
            self.moves, self.own_moves = self.own_moves, None
        if not keep_boosts:
            self.boosts.clear()
        self.types = None if not self.terastallized else self.types
        self.species = self.form


class Side:
    __slots__ = ("side_id", "player_name", "mons", "active", "conditions", "team_size", "prev_move",
                 "teampreview", "fainted", "entered")

    def __init__(self, side_id: str):
        self.side_id = side_id
        self.player_name: str | None = None
        self.mons: dict[str, Mon] = {}
        self.active: Mon | None = None
        self.conditions: dict[str, int] = {}
        self.team_size = 6
        self.prev_move: str | None = None
        self.teampreview: list[str] = []
        self.fainted = 0
        # the active as it was when it switched in (hp, status, moves, item, ability): an Illusion broken later
        # (``|replace|``) gives back to the Pokémon it disguised as what the disguise seemed to do
        self.entered: tuple | None = None


class BattleTracker:
    """Applies protocol lines to a two-sided battle model."""

    def __init__(self, dex: Dex, format_id: str):
        self.dex = dex
        self.gen = dex.gen
        self.format_id = format_id
        self.sides = {"p1": Side("p1"), "p2": Side("p2")}
        self.weather = "noweather"
        self.fields: set[str] = set()
        self.turn = 0
        self.winner: str | None = None  # player name, "" for a tie
        self.ended = False
        self._handlers = {
            "player": self._player, "teamsize": self._teamsize, "gen": self._gen, "tier": _noop,
            "poke": self._poke, "switch": self._switch, "drag": self._switch, "replace": self._replace,
            "detailschange": self._detailschange, "-formechange": self._formechange, "move": self._move,
            "cant": self._cant, "faint": self._faint, "-damage": self._hp, "-heal": self._hp, "-sethp": self._hp,
            "-status": self._status, "-curestatus": self._curestatus, "-cureteam": self._cureteam,
            "-boost": self._boost, "-unboost": self._unboost, "-setboost": self._setboost,
            "-clearboost": self._clearboost, "-clearallboost": self._clearallboost,
            "-clearnegativeboost": self._clearnegativeboost, "-clearpositiveboost": self._clearpositiveboost,
            "-invertboost": self._invertboost, "-swapboost": _noop, "-copyboost": self._copyboost,
            "-weather": self._weather, "-fieldstart": self._fieldstart, "-fieldend": self._fieldend,
            "-sidestart": self._sidestart, "-sideend": self._sideend, "-swapsideconditions": self._swapsides,
            "-start": self._start, "-end": self._end, "-item": self._item, "-enditem": self._enditem,
            "-ability": self._ability, "-endability": self._endability, "-transform": self._transform,
            "-mega": self._forme_item, "-burst": self._forme_item, "-primal": self._primal,
            "-terastallize": self._terastallize, "-transformed": _noop,
            "turn": self._turn, "win": self._win, "tie": self._tie, "-clearallboosts": self._clearallboost,
        }
        self._last_mover: Mon | None = None
        self._move_memo: dict[tuple, dict] = {}
        self._idents: dict[str, tuple[str, str]] = {}  # raw identifier → _ident's reading of it
        self._moves_by_use: dict[str, dict[int, dict]] = {}  # move id → PP used → render, with the dex's PP
        self._mon_memo: dict[tuple, dict] = {}
        self._mon_moves_memo: dict[tuple, dict] = {}
        self._conditions_memo: dict[tuple, list[str]] = {}
        self._lists: dict[tuple[str, ...], list[str]] = {}
        self._no_effects = self._shared_list(())
        self._species_fields: dict[str, tuple[str, str, list[str], dict]] = {}  # species as named → _species_part
        self._field_memo: dict[tuple, list[str]] = {}

    # ------------------------------------------------------------------ feeding lines
    def apply(self, line: str) -> None:
        if not line or line[0] != "|":
            return  # room header or blank
        self.apply_parts(line.split("|"), line)

    def apply_parts(self, parts: list[str], line: str) -> None:
        """``apply`` for a line its caller already split on ``|``."""
        kind = parts[1] if len(parts) > 1 else ""
        handler = self._handlers.get(kind)
        if handler is not None:
            try:
                handler(parts)
            except (IndexError, ValueError, KeyError) as err:  # missing or malformed fields
                raise ProtocolError(f"malformed {kind!r} line {line!r}: {type(err).__name__}: {err}") from err
        elif kind in _IGNORED or kind == "":
            return
        else:
            raise UnknownMessageError(f"unknown protocol message {kind!r} in {line[:200]!r}")

    # ------------------------------------------------------------------ helpers
    def _mon(self, raw_ident: str, details: str | None = None) -> Mon:
        ident = self._idents.get(raw_ident)
        if ident is None:
            ident = self._idents[raw_ident] = _ident(raw_ident)
        side_id, name = ident
        side = self.sides.get(side_id)
        if side is None:
            raise ProtocolError(f"unknown side in {raw_ident!r}")
        mon = side.mons.get(name)
        if mon is None:
            if details is None:
                active = side.active
                if active is not None and active.name == name:
                    active.revision += 1
                    return active
                raise ProtocolError(f"{raw_ident!r} appears before it was switched in")
            species, level, tera = _details(details)
            mon = Mon(name, species, level, self.gen)
            if tera:
                mon.tera_type = tera
            side.mons[name] = mon
        mon.revision += 1  # the handler that asked for it may change it
        return mon

    def _side_of(self, raw_ident: str) -> Side:
        side_id = raw_ident[:2]
        side = self.sides.get(side_id)
        if side is None:
            raise ProtocolError(f"unknown side in {raw_ident!r}")
        return side

    @staticmethod
    def _kwargs(parts: list[str]) -> dict[str, str]:
        out = {}
        for p in parts:
            if p.startswith("[") and "]" in p:
                key, _, val = p[1:].partition("]")
                out[key] = val.strip()
        return out

    def _reveal_from(self, mon: Mon, parts: list[str]) -> None:
        """Reveal items and abilities named by ``[from] item: X`` / ``[from] ability: X`` (``[of]`` names whose)."""
        kw = self._kwargs(parts)
        source = kw.get("from", "")
        # ``[of]`` names the holder when it is not the Pokémon the line is about (Rocky Helmet, Rough Skin).
        owner = self._mon(kw["of"]) if kw.get("of") else mon
        if source.startswith("item: "):
            owner.item = to_id(source[6:])
        elif source.startswith("ability: "):
            owner.ability = to_id(source[9:])

    # ------------------------------------------------------------------ handlers
    def _player(self, parts):
        if len(parts) > 3 and parts[3]:
            self.sides[parts[2]].player_name = parts[3]

    def _teamsize(self, parts):
        self.sides[parts[2]].team_size = int(parts[3])

    def _gen(self, parts):
        if int(parts[2]) != self.gen:
            raise ProtocolError(f"log says gen {parts[2]} but format {self.format_id} is gen {self.gen}")

    def _poke(self, parts):
        species, _, _ = _details(parts[3])
        self.sides[parts[2]].teampreview.append(to_id(species))

    def _switch(self, parts):
        side = self._side_of(parts[2])
        mon = self._mon(parts[2], parts[3])
        species, level, tera = _details(parts[3])
        mon.species = mon.form = species
        mon.level = level
        if tera:
            mon.tera_type, mon.terastallized = tera, True
        previous = side.active
        if previous is not None and previous is not mon:
            keep = side.prev_move in ("batonpass", "shedtail") and parts[1] == "switch"
            carried = dict(previous.boosts) if keep else {}
            previous.switch_out()
            previous.revision += 1
            mon.boosts = carried
        side.entered = (mon, mon.hp_pct, mon.status, dict(mon.moves), mon.item, mon.ability)
        side.active = mon
        mon.active = True
        if len(parts) > 4:
            mon.set_condition(parts[4])

    def _replace(self, parts):
        """Illusion broken: the active was ``parts[2]`` since it switched in. What the disguise seemed to do
        since then (HP, status, moves used, boosts, effects) is the real Pokémon's; the Pokémon it disguised as
        is as it was before."""
        side = self._side_of(parts[2])
        old = side.active
        mon = self._mon(parts[2], parts[3])
        species, level, _ = _details(parts[3])
        mon.species = mon.form = species
        mon.level = level
        if old is not None and old is not mon:
            mon.hp_pct, mon.status, mon.boosts, mon.effects = old.hp_pct, old.status, old.boosts, old.effects
            old.boosts, old.effects = {}, set()
            if side.entered is not None and side.entered[0] is old:
                _, old.hp_pct, old.status, moves_before, old.item, old.ability = side.entered
                for move, gained in moves_since(old.moves, moves_before).items():
                    mon.moves[move] = mon.moves.get(move, 0) + gained
                old.moves = moves_before
            old.active = False
            old.species = old.form
            old.revision += 1
        side.active = mon
        mon.active = True
        side.entered = (mon, mon.hp_pct, mon.status, dict(mon.moves), mon.item, mon.ability)

    def _detailschange(self, parts):
        mon = self._mon(parts[2])
        species, level, tera = _details(parts[3])
        mon.species = mon.form = species
        mon.level = level
        if tera:
            mon.tera_type = tera

    def _formechange(self, parts):
        mon = self._mon(parts[2])
        mon.species = _details(parts[3])[0]

    def _move(self, parts):
        mon = self._mon(parts[2])
        if mon.status == "fnt":
            raise ProtocolError(f"impossible state: {parts[2]} uses {parts[3]} while fainted")
        move = move_id(parts[3])
        side = self._side_of(parts[2])
        kw = self._kwargs(parts[5:]) if len(parts) > 5 else {}
        source = kw.get("from", "")
        # A move called by another (Sleep Talk, Metronome) or continuing a lock does not cost PP. Gen 1-3 logs
        # name the caller without the ``move:`` prefix (``[from] Sleep Talk`` in pokemon-showdown 0.11.11's gen 2).
        # A move an ability uses (Magic Bounce reflecting the foe's, Dancer) is not one of the user's either.
        called = (source.startswith(("move:", "ability:")) or source == "lockedmove"
                  or (source != "" and to_id(source) in self.dex.moves))
        if called:
            # Sleep Talk uses one of the user's own move slots (pokemon-showdown 0.11.11 ``sleeptalk.onHit`` picks
            # from ``pokemon.moveSlots``): the called move is revealed, at no PP (Sleep Talk paid). No other caller
            # uses the user's own moves (Metronome, Copycat, Assist, Me First, Mirror Move, Nature Power).
            if _caller(source) == "sleeptalk" and move not in self.dex.power_moves:
                mon.moves.setdefault(move, 0)
            elif source.startswith("ability:"):  # Magic Bounce, Dancer: the mover's ability
                self._reveal_from(mon, parts[5:])
        elif move in self.dex.power_moves:
            # A Z-move or Max move is never one of a Pokémon's moves: a signature Z-move names its base (which pays
            # the PP: ``runMove`` deducts the base move's); other Z-moves and Max moves do not say which it was.
            base = self.dex.power_moves[move]
            if base:
                mon.moves[base] = mon.moves.get(base, 0) + 1
        elif move not in ("struggle", "recharge"):
            mon.moves[move] = mon.moves.get(move, 0) + 1
        side.prev_move = move
        self._last_mover = mon

    def _cant(self, parts):
        if len(parts) > 4 and parts[4]:
            self._mon(parts[2])  # validates the ident; a "cant" reveals nothing modelled here

    def _faint(self, parts):
        mon = self._mon(parts[2])
        if mon.status != "fnt" or mon.hp_pct > 0:
            mon.hp_pct, mon.status = 0.0, "fnt"
        self._side_of(parts[2]).fainted += 1

    def _hp(self, parts):
        mon = self._mon(parts[2])
        mon.set_condition(parts[3])
        self._reveal_from(mon, parts[4:])

    def _status(self, parts):
        mon = self._mon(parts[2])
        mon.status = parts[3] if parts[3] in _STATUSES else mon.status
        self._reveal_from(mon, parts[4:])

    def _curestatus(self, parts):
        if parts[2][:2] in self.sides and ": " in parts[2]:
            self._mon(parts[2]).status = "nostatus"

    def _cureteam(self, parts):
        for mon in self._side_of(parts[2]).mons.values():
            if mon.status != "fnt":
                mon.status = "nostatus"
                mon.revision += 1

    def _change_boost(self, parts, sign):
        mon = self._mon(parts[2])
        key = _BOOST_KEYS.get(parts[3])
        if key is None:
            return
        amount = int(parts[4]) if len(parts) > 4 and parts[4].lstrip("-").isdigit() else 0
        mon.boosts[key] = max(-6, min(6, mon.boosts.get(key, 0) + sign * amount))
        if self.gen == 1 and key == "spa_boost":  # gen 1 has one Special stat
            mon.boosts["spd_boost"] = mon.boosts[key]

    def _boost(self, parts):
        self._change_boost(parts, 1)

    def _unboost(self, parts):
        self._change_boost(parts, -1)

    def _setboost(self, parts):
        mon = self._mon(parts[2])
        key = _BOOST_KEYS.get(parts[3])
        if key is not None:
            mon.boosts[key] = int(parts[4])

    def _clearboost(self, parts):
        self._mon(parts[2]).boosts.clear()

    def _clearallboost(self, parts):
        for side in self.sides.values():
            if side.active is not None:
                side.active.boosts.clear()
                side.active.revision += 1

    def _clearnegativeboost(self, parts):
        mon = self._mon(parts[2])
        mon.boosts = {k: v for k, v in mon.boosts.items() if v > 0}

    def _clearpositiveboost(self, parts):
        mon = self._mon(parts[2])
        mon.boosts = {k: v for k, v in mon.boosts.items() if v < 0}

    def _invertboost(self, parts):
        mon = self._mon(parts[2])
        mon.boosts = {k: -v for k, v in mon.boosts.items()}

    def _copyboost(self, parts):
        self._mon(parts[2]).boosts = dict(self._mon(parts[3]).boosts)

    def _weather(self, parts):
        kw = self._kwargs(parts[3:])
        self.weather = "noweather" if parts[2] == "none" else to_id(parts[2])
        if kw.get("from", "").startswith("ability: ") and kw.get("of"):
            self._mon(kw["of"]).ability = to_id(kw["from"][9:])

    def _fieldstart(self, parts):
        self.fields.add(_effect_id(parts[2]))

    def _fieldend(self, parts):
        self.fields.discard(_effect_id(parts[2]))

    def _sidestart(self, parts):
        side = self._side_of(parts[2])
        cond = _effect_id(parts[3])
        side.conditions[cond] = side.conditions.get(cond, 0) + 1

    def _sideend(self, parts):
        self._side_of(parts[2]).conditions.pop(_effect_id(parts[3]), None)

    def _swapsides(self, parts):
        a, b = self.sides["p1"], self.sides["p2"]
        a.conditions, b.conditions = b.conditions, a.conditions

    def _start(self, parts):
        mon = self._mon(parts[2])
        effect = _effect_id(parts[3])
        if effect == "typechange" and len(parts) > 4:
            # "???" (a Pokémon that lost its type, e.g. after Burn Up) is a type of its own
            mon.types = [to_id(t) or TYPELESS for t in parts[4].split("/") if t]
        elif effect.startswith("perish") or effect.startswith("stockpile"):
            mon.effects = {e for e in mon.effects if not e.startswith(effect[:6])} | {effect}
        else:
            mon.effects.add(effect)
            if effect == "dynamax":
                mon.dynamax_turn = self.turn
        self._reveal_from(mon, parts[4:])

    def _end(self, parts):
        mon = self._mon(parts[2])
        effect = _effect_id(parts[3])
        mon.effects.discard(effect)
        if effect == "dynamax":
            mon.dynamax_turn = None

    def _item(self, parts):
        kw = self._kwargs(parts[4:])
        if parts[2] or not kw.get("of"):
            mon = self._mon(parts[2])
        else:  # gens 4-5 Frisk: the holder is the frisker's foe, unnamed (``foe_holder``)
            mon = self.foe_holder(kw["of"])
        mon.item = to_id(parts[3])
        if kw.get("from", "").startswith("ability: ") and kw.get("of"):  # Frisk: the [of] side's ability
            self._mon(kw["of"]).ability = to_id(kw["from"][9:])

    def foe_holder(self, frisker: str) -> Mon:
        """The Pokémon whose item a gen 4-5 Frisk line reveals: pokemon-showdown 0.11.11 (``mods/gen4`` and
        ``mods/gen5`` abilities) writes ``|-item||<item>|[from] ability: Frisk|[of] <frisker>``, naming no holder;
        in singles it is the frisker's foe's active Pokémon."""
        side = self.sides.get("p2" if frisker[:2] == "p1" else "p1" if frisker[:2] == "p2" else "")
        if side is None or side.active is None:
            raise ProtocolError(f"Frisk by {frisker!r} with no foe on the field")
        side.active.revision += 1
        return side.active

    def _enditem(self, parts):
        self._mon(parts[2]).item = "noitem"

    def _ability(self, parts):
        mon = self._mon(parts[2])
        mon.ability = to_id(parts[3])

    def _endability(self, parts):
        self._mon(parts[2]).ability = "noability"

    def _transform(self, parts):
        mon, target = self._mon(parts[2]), self._mon(parts[3])
        mon.types = list(target.types) if target.types else self.species_types(target)
        mon.boosts = dict(target.boosts)
        mon.effects.add("transform")
        # The moves it uses from now on are the copied ones, until it leaves the field (``switch_out``); a second
        # Transform copies afresh. Its own moves (Transform's PP included) come back when it switches out.
        if mon.own_moves is None:
            mon.own_moves = mon.moves
        mon.moves = {}
        self._reveal_from(mon, parts[4:])  # [from] ability: Imposter

    def _forme_item(self, parts):
        """``|-mega|<mon>|<species>|<stone>`` and ``|-burst|<mon>|<species>|<item>`` name the item that made the
        forme (pokemon-showdown 0.11.11 ``Pokemon.formeChange``); a Mega Stone cannot be lost."""
        mon = self._mon(parts[2])
        if len(parts) > 4 and parts[4]:
            mon.item = to_id(parts[4])

    def _primal(self, parts):
        """``|-primal|<mon>|<orb>`` (pokemon-showdown 0.11.11; older logs leave the orb out)."""
        mon = self._mon(parts[2])
        if len(parts) > 3 and parts[3]:
            mon.item = to_id(parts[3])

    def _terastallize(self, parts):
        mon = self._mon(parts[2])
        mon.tera_type = to_id(parts[3])
        mon.terastallized = True
        mon.types = [mon.tera_type]

    def _turn(self, parts):
        self.turn = int(parts[2])

    def _win(self, parts):
        self.winner = parts[2]
        self.ended = True

    def _tie(self, parts):
        self.winner = ""
        self.ended = True

    # ------------------------------------------------------------------ rendering
    def species_types(self, mon: Mon) -> list[str]:
        try:
            return list(self.dex.species_entry(mon.species)["types"])
        except UnknownDexEntry as err:
            raise ProtocolError(str(err)) from err

    # Rendered dicts are memoized and shared between rows (a Pokémon that did not change renders to the same
    # object), which keeps rendering, observation and Arrow conversion cheap. Callers must never mutate them.
    def move_state(self, move_id: str, *, pp: int | None = None, max_pp: int | None = None,
                   used: int = 0) -> dict:
        if pp is None and max_pp is None:  # PP from the dex and the uses seen (most calls): no key tuple
            by_use = self._moves_by_use.get(move_id)
            if by_use is None:
                by_use = self._moves_by_use[move_id] = {}
            hit = by_use.get(used)
            if hit is None:
                hit = by_use[used] = self._render_move(move_id, None, None, used)
            return hit
        key = (move_id, pp, max_pp, used)
        hit = self._move_memo.get(key)
        if hit is not None:
            return hit
        hit = self._move_memo[key] = self._render_move(move_id, pp, max_pp, used)
        return hit

    def _render_move(self, move_id: str, pp: int | None, max_pp: int | None, used: int) -> dict:
        entry = self.dex.move_entry(move_id)
        max_pp = entry["max_pp"] if max_pp is None else max_pp
        return {
            "name": move_id if move_id in self.dex.moves else to_id(entry["name"]),
            "move_type": entry["type"], "category": entry["category"], "base_power": entry["base_power"],
            "accuracy": entry["accuracy"], "priority": entry["priority"],
            "current_pp": max(0, max_pp - used) if pp is None else pp, "max_pp": max_pp,
        }

    def mon_key(self, mon: Mon) -> tuple:
        """Everything ``mon_state`` reads from a Mon (its moves excepted)."""
        return (mon.species, mon.hp_pct, mon.status, mon.item, mon.ability, mon.level,
                tuple(mon.types) if mon.types is not None else None,
                tuple(sorted(mon.effects)) if mon.effects else (),
                tuple(sorted(mon.boosts.items())) if mon.boosts else (), mon.tera_type, mon.terastallized,
                self.dynamax_turns(mon))

    def dynamax_turns(self, mon: Mon) -> int:
        """Turns of Dynamax left to ``mon`` at a decision now, this turn's included: ``DYNAMAX_TURNS`` from the turn
        it Dynamaxed in; 0 when not Dynamaxed."""
        return 0 if mon.dynamax_turn is None else max(0, DYNAMAX_TURNS - (self.turn - mon.dynamax_turn))

    def mon_state(self, mon: Mon, moves: list[dict] | None = None) -> dict:
        """The rendered Pokémon (memoized, shared: never mutate it); ``moves`` default to the revealed ones."""
        if moves is None:  # keys are flat tuples: one object each for the cyclic collector to see
            key = (*self.mon_key(mon), *itertools.chain.from_iterable(mon.moves.items()))  # + the default moves
            hit = self._mon_memo.get(key)
            if hit is None:
                try:
                    moves = [self.move_state(m, used=used) for m, used in mon.moves.items()][:8]
                except UnknownDexEntry as err:
                    raise ProtocolError(str(err)) from err
                hit = self._mon_memo[key] = self.render_mon(mon, moves)
            return hit
        key = (*self.mon_key(mon), *map(id, moves))  # move dicts are memoized: their ids are stable
        hit = self._mon_moves_memo.get(key)
        if hit is None:
            hit = self._mon_moves_memo[key] = self.render_mon(mon, moves)
        return hit

    def render_mon(self, mon: Mon, moves: list[dict]) -> dict:
        """A new dict of ``mon`` in the declared ``PokemonState`` shape (``mon_state`` memoizes it)."""
        species = self._species_fields.get(mon.species)
        if species is None:
            species = self._species_fields[mon.species] = self._species_part(mon.species)
        species_id, base_species, default_types, base_stats = species
        boosts = mon.boosts
        return {
            "name": species_id, "base_species": base_species, "hp_pct": mon.hp_pct,
            "types": self._shared_list(tuple(mon.types)) if mon.types is not None else default_types,
            "item": mon.item, "ability": mon.ability, "level": mon.level, "status": mon.status,
            "effects": self._shared_list(tuple(sorted(mon.effects))) if mon.effects else self._no_effects,
            "moves": moves,
            "atk_boost": boosts.get("atk_boost", 0), "def_boost": boosts.get("def_boost", 0),
            "spa_boost": boosts.get("spa_boost", 0), "spd_boost": boosts.get("spd_boost", 0),
            "spe_boost": boosts.get("spe_boost", 0), "accuracy_boost": boosts.get("accuracy_boost", 0),
            "evasion_boost": boosts.get("evasion_boost", 0),
            **base_stats, "tera_type": mon.tera_type, "terastallized": mon.terastallized,
            "dynamax_turns": self.dynamax_turns(mon),
        }

    def _species_part(self, species: str) -> tuple[str, str, list[str], dict]:
        """(species id, base species id, its dex types as a shared list, its base stats as ``PokemonState``
        fields) of a species as the log names it."""
        try:
            species_id = self.dex.species_id(species)
        except UnknownDexEntry as err:
            raise ProtocolError(str(err)) from err
        entry = self.dex.species[species_id]
        stats = entry["base_stats"]
        return species_id, entry["base_species"], self._shared_list(tuple(entry["types"])), {
            "base_hp": stats["hp"], "base_atk": stats["atk"], "base_def": stats["def"], "base_spa": stats["spa"],
            "base_spd": stats["spd"], "base_spe": stats["spe"]}

    def _shared_list(self, values: tuple[str, ...]) -> list[str]:
        """One list per distinct content, shared by the rendered Pokémon (never mutate it): fewer objects for the
        cyclic collector to walk (with the other shared lists and tuples, 19.2 instead of 22.3 tracked objects per
        row alive at the end of a gen1ou parse)."""
        hit = self._lists.get(values)
        if hit is None:
            hit = self._lists[values] = list(values)
        return hit

    def conditions(self, side: Side) -> list[str]:
        """The side's conditions, sorted, a layered one once per layer (memoized, shared: never mutate it)."""
        key = tuple(side.conditions.items())
        hit = self._conditions_memo.get(key)
        if hit is None:
            hit = self._conditions_memo[key] = sorted(c for c, layers in side.conditions.items() for _ in range(layers))
        return hit

    def battle_field(self) -> list[str]:
        """The field effects, sorted (memoized, shared: never mutate it)."""
        key = tuple(self.fields)
        hit = self._field_memo.get(key)
        if hit is None:
            hit = self._field_memo[key] = sorted(self.fields)
        return hit

    def field_state(self) -> dict:
        return {"weather": self.weather, "battle_field": self.battle_field()}

    def prev_move_state(self, side: Side) -> dict | None:
        if side.prev_move is None or side.prev_move in ("recharge",):
            return None
        hit = self._moves_by_use.get(side.prev_move, {}).get(0)
        if hit is not None:
            return hit
        try:
            return self.move_state(side.prev_move)
        except UnknownDexEntry as err:
            raise ProtocolError(str(err)) from err


def _caller(source: str) -> str:
    """The id of the move a ``[from]`` names: ``move: Sleep Talk`` (gen 4+) or ``Sleep Talk`` (gens 1-3)."""
    return to_id(source[5:]) if source.startswith("move:") else to_id(source)


def _noop(parts):
    return None

"""First-person trajectories reconstructed from a spectator log (public replays: neither side's private view).

For each player, at each decision point, the state holds what that player could know:
- its own team as the whole log reveals it (a player knows its own moves, item, ability and tera type from the
  start, so a move first shown on turn 20 was known on turn 1); what the log never shows stays explicitly
  unknown (``unknownmove`` slots are absent, ``unknownitem``...) and nothing is guessed from usage statistics;
  while it is transformed, its move slots are those the log reveals for the Pokémon it copied (the player's
  request lists the copied moves), including the ones it uses itself; a move Mimic copied takes Mimic's slot
  until the Pokémon switches out;
- the opponent as revealed so far, exactly as a spectator (or the player) saw it.

Decision points and the action at each:
- every ``|turn|`` starts a decision for each side with an active Pokémon; its action is the side's first visible
  act in that turn: a move (slot in the own move list, +9 when terastallized first), a switch (index in the
  available switches) or -1 when nothing shows what was chosen (fainted first, Struggle, recharge, a ``|cant|``
  that names no move);
- a move shown after an Encore began in the same turn is the encored move, not the choice (-1);
- a ``|cant|`` shows the choice when it names the move that was stopped (``Disable``, ``move: Taunt``,
  ``move: Imprison``, ``move: Gravity``, ``move: Heal Block``, ``Focus Punch``, ``nopp``: in pokemon-showdown
  0.11.11 each is emitted before the move line with the chosen move) or, for ``slp``, when Sleep Talk or Snore
  (the only ``sleepUsable`` moves) follows; ``par``, ``frz``, ``flinch``, ``Attract``, ``ability: Truant``,
  ``move: Throat Chop``, ``partiallytrapped`` and a ``slp`` followed by nothing name no move. The blocking
  abilities (``ability: Damp``, ``Dazzling``, ``Queenly Majesty``, ``Armor Tail``) name their holder first and the
  mover in ``[of]``, after the mover's own move line;
- a ``|switch|`` after the side's active fainted, or mid-turn after it already acted (U-turn, Eject Button,
  Emergency Exit), is a forced-switch decision whose action is that switch; ``|drag|`` is not a decision;
- Revival Blessing's ``|-heal|...|[from] move: Revival Blessing`` is a forced decision of its user's side (which
  fainted Pokémon to revive: not one of the 13 actions, so -1), as the player's request makes it;
- a Z-move or Max move is chosen through one of the Pokémon's moves, and is never a move slot itself: a status
  Z-move (``Z-Dragon Dance``) and a signature Z-move (Catastropika: Volt Tackle) name their base, whose slot is the
  action; a type's Z-move or a Max move is its base's slot when all four of the Pokémon's moves are known and one
  alone can become it (``_power_move_base``), else -1. The row's ``zmove`` flag is set when a ``|-zpower|`` of the
  side came before the move in its turn, ``dynamax`` when the mover was Dynamaxed (its ``|-start|...|Dynamax``
  comes before the move of the turn it Dynamaxes in) or, with no move shown, when a Dynamaxed Pokémon did not
  switch out (its choice can only have been a Max move).
- ``can_zmove`` is true while the side has used no Z-move and its active is one the log shows using one (the
  crystal is never named); ``can_dynamax`` while a gen 8 side (not BDSP) has not Dynamaxed.
The legal mask is derived from the state (``legal_mask_exact`` false).

Illusion: a ``|replace|`` shows that the active since its side's last switch-in was Zoroark (or Zoroark-Hisui) in
disguise. Its owner knew that all along, so the log is read as its owner saw it (``unmasked``: the switch-in and
every line of that stint name the real Pokémon, and the switch is the owner's choice of it), while the opponent's
view shows the disguise until the ``|replace|``, with what the disguise seemed to do (HP, status, moves used), as
the opponent saw it. An Illusion never broken cannot be seen: where the log shows its side has Zoroark or Zorua (not
fainted) and a switch-in takes no direct hit before it leaves, that switch's action is -1 (``doubtful_switches``); the
state still shows the Pokémon the log named.

Older logs write ``[from]X`` / ``[of]X`` without the space, and a bare effect name (``[from]Magic Bounce``): such
lines are rewritten in 0.11.11's form first (``respaced``).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

from pipelines.errors import ProtocolError, TruncatedBattleError
from pipelines.pokemon.dex import Z_MOVE_TYPES, Dex, UnknownDexEntry, move_id, to_id
from pipelines.pokemon.tracker import BattleTracker, Mon, Side, _caller, _details, _effect_id, _ident, moves_since
from pipelines.pokemon.trajectory import TrajectoryMeta, build_rows, derived_mask
from shards_schema.pokemon import NUM_MOVES, NUM_SWITCHES

_TERA_OFFSET = NUM_MOVES + NUM_SWITCHES
# Moves that use a move which is not one of the user's own (a random or copied move, a teammate's, the foe's bounced
# or stolen one). Sleep Talk and Instruct use the user's own moves.
_NOT_OWN_CALLERS = ("metronome", "copycat", "assist", "mefirst", "mirrormove", "naturepower", "sketch", "magiccoat",
                    "snatch")
_FORCED_ONLY = ("struggle", "recharge")
_SLEEP_USABLE = ("sleeptalk", "snore")  # the moves with ``sleepUsable: true`` in pokemon-showdown 0.11.11's dex
_HINDSIGHT_KINDS = frozenset(("switch", "drag", "replace", "move", "cant", "-transform", "-start", "-activate",
                              "-terastallize", "-item", "-enditem", "-ability"))
# lines of those kinds, or any line naming an item or ability by [from] (the log's lines hold no newline)
_HINDSIGHT_LINES = re.compile(
    rf"^\|(?:{'|'.join(map(re.escape, sorted(_HINDSIGHT_KINDS)))})(?:\|.*)?$|^\|.*\[from\] .*$", re.MULTILINE)
# Mega Evolution, Ultra Burst and Primal Reversion name the item that made the forme; rare lines, found by a scan of
# their own only in logs that hold them (these three kinds in the pattern above made that scan 35% slower on the
# bench battles)
_FORME_ITEM_LINES = re.compile(r"^\|-(?:mega|burst|primal)\|.*$", re.MULTILINE)
_FORME_ITEM = re.compile(r"-(?:mega|burst|primal)\|")  # 5 us a bench battle; three `in` tests took 22 us
# the kinds the walk reads besides the tracker; every other line goes to the tracker only
_WALK_KINDS = frozenset(("turn", "switch", "drag", "replace", "move", "cant", "-transform", "-start", "-activate",
                         "-terastallize", "-zpower", "-heal"))
_Z_POWER_LINES = re.compile(r"^\|-zpower\|(p[12])a?: ([^|\n]*)", re.MULTILINE)
# ``[from]X`` and ``[of]X`` without the space: older pokemon-showdown wrote ``'|[from]' + effect`` on move lines, with
# the effect's bare name (a real gen 6 replay: ``|move|p1a: Espeon|Stealth Rock|p2a: Metacute|[from]Magic Bounce``).
# One search of the joined log finds them; only such logs are rewritten, line by line.
_UNSPACED = re.compile(r"\[(?:from|of)\][^ |]")
_UNSPACED_ARG = re.compile(r"\|\[(from|of)\]([^ |][^|]*)")


def respaced(lines: list[str], dex: Dex) -> list[str]:
    """The lines with ``[from]X`` / ``[of]X`` written as pokemon-showdown 0.11.11 writes them: ``[of] X``, and
    ``[from] ability: X`` / ``[from] item: X`` for a bare ability or item name (a bare move or condition stays bare,
    as 0.11.11 writes it in gens 1-3: ``[from] Sleep Talk``, ``[from] lockedmove``; Metronome is a move first)."""

    def spaced(match: re.Match) -> str:
        key, value = match.groups()
        if key == "from" and ":" not in value:
            effect = to_id(value)
            if effect not in dex.moves and effect in dex.abilities:
                value = f"ability: {value}"
            elif effect not in dex.moves and effect in dex.items:
                value = f"item: {value}"
        return f"|[{key}] {value}"

    return [_UNSPACED_ARG.sub(spaced, line) if "[from]" in line or "[of]" in line else line for line in lines]


@dataclass(frozen=True)
class Disguise:
    """An Illusion stint: the Pokémon the opponent saw (``nick``, ``species``, ``level`` of the switch-in line)."""

    nick: str
    species: str
    level: int


def unmasked(lines: list[str]) -> tuple[list[str], dict[int, Disguise]]:
    """The lines as the owner of each Illusion saw them, and the disguise of each unmasked switch-in by line index.

    A ``|replace|`` names the real Pokémon and its details; every line from its side's last ``|switch|`` or
    ``|drag|`` up to it that names the disguise's position and nickname (``p2a: Chatot``, ``[of] p2a: Chatot``)
    names the real one instead, and the switch-in line carries the real details (the HP shown was the real one's)."""
    out = list(lines)
    disguises: dict[int, Disguise] = {}
    entered: dict[str, int] = {}  # position (``p2a``) → index of its last switch-in line
    for i, line in enumerate(lines):
        if line.startswith(("|switch|", "|drag|")):
            entered[line.split("|", 3)[2].split(":", 1)[0]] = i
        elif line.startswith("|replace|"):
            parts = line.split("|")
            if len(parts) < 4:
                continue
            start = entered.get(parts[2].split(":", 1)[0])
            shown = lines[start].split("|") if start is not None else []  # the switch-in as the log wrote it
            if len(shown) < 4 or shown[2] == parts[2]:
                continue
            names_disguise = re.compile(re.escape(shown[2]) + r"(?=\||$)")
            for j in range(start, i):
                out[j] = names_disguise.sub(parts[2], out[j])
            real = out[start].split("|")
            real[3] = parts[3]
            out[start] = "|".join(real)
            species, level, _ = _details(shown[3])
            disguises[start] = Disguise(_ident(shown[2])[1], species, level)
    return out, disguises


_ILLUSION_USERS = re.compile(r"\|(?:switch|drag|replace)\|(p[12])a?: ([^|\n]*)\|Zor(?:oark|ua)\b")


def doubtful_switches(lines: list[str], log: str) -> set[int]:
    """Indices of the switch-ins that may be an Illusion the log never breaks, so that a spectator cannot tell
    which Pokémon was chosen: a side known (anywhere in the log) to have Zoroark or Zorua, not fainted by then,
    switches in another Pokémon that takes no direct hit before it leaves (a damaging hit breaks an Illusion:
    pokemon-showdown 0.11.11's ``onDamagingHit``) and is not unmasked by a ``|replace|`` (``unmasked`` reads those).
    ``log``: the lines joined by newlines.
    """
    users = {m.groups() for m in _ILLUSION_USERS.finditer(log)}
    if not users:
        return set()
    doubtful: set[int] = set()
    open_stint: dict[str, int] = {}  # side → index of its switch-in under doubt
    fainted: set[tuple[str, str]] = set()
    active: dict[str, str] = {}  # side → nickname its last switch-in showed
    for i, line in enumerate(lines):
        if not line.startswith(("|switch|", "|drag|", "|-damage|", "|faint|", "|replace|")):
            continue
        parts = line.split("|")
        if len(parts) < 3 or parts[2][:2] not in ("p1", "p2"):
            continue
        side, nick = _ident(parts[2])
        kind = parts[1]
        if kind in ("switch", "drag"):
            open_stint.pop(side, None)
            leaving, active[side] = active.get(side), nick
            user_hidden = any(s == side and u not in (nick, leaving) and (s, u) not in fainted for s, u in users)
            if user_hidden and (side, nick) not in users:
                open_stint[side] = i
                doubtful.add(i)
        elif kind == "-damage" and side in open_stint and not any(q.startswith("[from]") for q in parts[4:]):
            doubtful.discard(open_stint.pop(side))  # a direct hit and no Illusion broke: the real one
        elif kind == "faint":
            fainted.add((side, nick))
        elif kind == "replace":
            open_stint.pop(side, None)
            active[side] = nick
    return doubtful


def cant_actor_and_move(parts: list[str]) -> tuple[str, str | None]:
    """(ident of the Pokémon that could not act, id of the move it tried or None) of a ``|cant|`` line. The
    blocking abilities name their holder first and the mover in ``[of]``."""
    of = next((p[4:].strip() for p in parts[4:] if p.startswith("[of]")), None)
    move = parts[4] if len(parts) > 4 and parts[4] and not parts[4].startswith("[") else None
    return of or parts[2], to_id(move) if move else None


@dataclass
class Known:
    """What the whole log reveals about one Pokémon, as its own player knew it from the start."""

    species: str
    moves: list[str] = field(default_factory=list)
    item: str | None = None
    ability: str | None = None
    tera_type: str | None = None


def hindsight(log: str, dex: Dex) -> tuple[dict[str, dict[str, Known]], dict[str, list[str]]]:
    """(side -> nickname -> Known, side -> team order) from one pass over the log (its lines joined by newlines)."""
    known: dict[str, dict[str, Known]] = {"p1": {}, "p2": {}}
    order: dict[str, list[str]] = {"p1": [], "p2": []}
    transformed: dict[tuple[str, str], tuple[str, str]] = {}  # (side, nick) → whom it copied
    mimicked: dict[tuple[str, str], str] = {}  # (side, nick) → the move Mimic put in its Mimic slot
    active: dict[str, str] = {}  # side → nickname of its active Pokémon
    # Most lines (damage, turns, boosts...) say nothing a player knows in hindsight: one scan of the joined log
    # finds the others (gen1ou: 105 of 443 lines), about 3x faster than testing each line in Python.
    power_moves = dex.power_moves
    for match in _HINDSIGHT_LINES.finditer(log):
        line = match.group()
        reveals = "[from] " in line  # an item or ability named by [from] (Leftovers, Rough Skin...)
        parts = line.split("|")
        kind = parts[1] if len(parts) > 1 else ""
        try:
            if kind in ("switch", "drag", "replace"):
                side, nick = _ident(parts[2])
                if nick not in known[side]:
                    known[side][nick] = Known(species=_details(parts[3])[0])
                    order[side].append(nick)
                active[side] = nick
                transformed.pop((side, nick), None)
                mimicked.pop((side, nick), None)
            elif kind == "move":
                side, nick = _ident(parts[2])
                k = known[side].get(nick)
                move = move_id(parts[3])
                if move in power_moves:  # a signature Z-move's base, or "": no move of its set (a Z- or Max move)
                    move = power_moves[move]
                source = next((p[7:].strip() for p in parts[5:] if p.startswith("[from]")), "")
                caller = _caller(source)  # gens 1-3 name it bare (``[from] Metronome``), as old logs respaced do
                # an ability's move (Magic Bounce reflecting the foe's, Dancer copying it) is not the user's own
                by_ability = source.startswith(("ability:", "item:"))
                if (side, nick) in transformed:  # a transformed Pokémon uses the moves of the one it copied
                    target = transformed[(side, nick)]
                    k = known[target[0]].get(target[1]) if target not in transformed else None
                # the line is read on below either way: the ability that used a move is the user's
                if (move and k is not None and move not in _FORCED_ONLY and caller not in _NOT_OWN_CALLERS
                        and not by_ability and mimicked.get((side, nick)) != move and move not in k.moves):
                    k.moves.append(move)
            elif kind == "cant":
                actor, move = cant_actor_and_move(parts)
                move = power_moves.get(move, move) if move else move
                side, nick = _ident(actor)
                k = known[side].get(nick)
                own = actor == parts[2]  # not a blocking ability's holder
                if own and move and k is not None and (side, nick) not in transformed and move not in k.moves:
                    k.moves.append(move)
            elif kind == "-transform":
                transformed[_ident(parts[2])] = _ident(parts[3])
            elif kind in ("-start", "-activate") and len(parts) > 4 and _effect_id(parts[3]) == "mimic":
                mimicked[_ident(parts[2])] = to_id(parts[4])
            elif kind == "-terastallize":
                side, nick = _ident(parts[2])
                if nick in known[side]:
                    known[side][nick].tera_type = to_id(parts[3])
            elif kind in ("-item", "-enditem"):
                if parts[2] or kind == "-enditem":
                    side, nick = _ident(parts[2])
                else:  # gens 4-5 Frisk names no holder: the frisker's foe's active (BattleTracker.foe_holder)
                    side = "p2" if next(q for q in parts if q.startswith("[of] "))[5:7] == "p1" else "p1"
                    nick = active.get(side, "")
                k = known[side].get(nick)
                traded = any(p.startswith("[from] move:") for p in parts[4:])
                if k is not None and k.item is None:
                    k.item = "unknownitem" if kind == "-item" and traded else to_id(parts[3])
            elif kind == "-ability":
                side, nick = _ident(parts[2])
                k = known[side].get(nick)
                if k is not None and k.ability is None and not any("[from]" in p for p in parts[4:]):
                    k.ability = to_id(parts[3])
            for p in parts[3:] if reveals else ():
                if p.startswith("[from] item: ") or p.startswith("[from] ability: "):
                    of = next((q[5:].strip() for q in parts if q.startswith("[of] ")), parts[2])
                    side, nick = _ident(of)
                    k = known[side].get(nick)
                    if k is None:
                        continue
                    if p.startswith("[from] item: ") and k.item is None:
                        k.item = to_id(p[13:])
                    elif p.startswith("[from] ability: ") and k.ability is None:
                        k.ability = to_id(p[16:])
        except (IndexError, ValueError, ProtocolError):
            continue  # the main pass raises the typed error for malformed lines
    # from gen 6 on (Mega Evolution, Primal Reversion: gen 6; Ultra Burst: gen 7; all in later National Dex formats)
    if dex.gen >= 6 and _FORME_ITEM.search(log) is not None:
        for match in _FORME_ITEM_LINES.finditer(log):
            # |-mega|<mon>|<species>|<stone>, |-burst|<mon>|<species>|<item>, |-primal|<mon>|<orb>: an item that
            # cannot be lost, so the first item revealed by any line
            parts = match.group().split("|")
            at = 3 if parts[1] == "-primal" else 4
            try:
                side, nick = _ident(parts[2])
            except ProtocolError:
                continue
            k = known[side].get(nick)
            if k is not None and k.item is None and len(parts) > at and parts[at]:
                k.item = to_id(parts[at])
    return known, order


class SpectatorParser:
    """Walks one spectator log and builds both players' decision sequences."""

    def __init__(self, dex: Dex, format_id: str, lines: list[str]):
        self.tracker = BattleTracker(dex, format_id)
        # Each pass splits the lines it reads: holding every line's split (a list each) for the whole battle
        # gave the cyclic collector 4 more objects per decision to walk than it saved in splitting.
        log = "\n".join(lines)
        if _UNSPACED.search(log) is not None:
            lines = respaced(lines, dex)
            log = "\n".join(lines)
        self.disguises: dict[int, Disguise] = {}  # line index → the disguise an unmasked switch-in showed
        if "|replace|" in log:
            lines, self.disguises = unmasked(lines)
            log = "\n".join(lines)
        self.doubtful = doubtful_switches(lines, log) if "|Zor" in log else set()
        self.lines = lines
        # side → (disguise, the real Pokémon's moves when it switched in) while an Illusion is unbroken
        self.disguised: dict[str, tuple[Disguise, dict[str, int]]] = {}
        self.known, self.order = hindsight(log, dex)
        self.tera_allowed = dex.gen >= 9
        self.dynamax_allowed = dex.gen == 8 and "bdsp" not in format_id
        # Pokémon the log shows using a Z-move: each holds a Z-crystal from the start
        self.z_users = {m.groups() for m in _Z_POWER_LINES.finditer(log)} if "|-zpower|" in log else set()
        self.z_next = {"p1": False, "p2": False}  # a |-zpower| of the side this turn, before its move
        self.used_z = {"p1": False, "p2": False}
        self.used_dynamax = {"p1": False, "p2": False}
        self.powers: dict[str, list[tuple[bool, bool]]] = {"p1": [], "p2": []}  # (zmove, dynamax) of each step
        self.steps: dict[str, list[tuple[dict, int, list[bool]]]] = {"p1": [], "p2": []}
        self.turns: dict[str, list[int]] = {"p1": [], "p2": []}
        self.pending: dict[str, int | None] = {"p1": None, "p2": None}  # step index awaiting its turn action
        self.asleep = {"p1": False, "p2": False}  # |cant|...|slp seen: only Sleep Talk or Snore can still show it
        self.copied: dict[tuple[str, str], tuple[str, str]] = {}  # (side, nick) → whom it last transformed into
        self.mimicked: dict[tuple[str, str], str] = {}  # (side, nick) → the move its last Mimic copied
        self.tera_next = {"p1": False, "p2": False}
        self.used_tera = {"p1": False, "p2": False}
        self.moved_this_turn = False
        self._own_memo: dict[tuple, dict] = {}
        self._moves_memo: dict[tuple, list[dict]] = {}  # (move ids, PP used) → the rendered move slots
        self._own_last: dict[str, dict[str, tuple]] = {"p1": {}, "p2": {}}  # nick → (Mon, revision, slots, render)
        self._foe_last: dict[str, tuple] = {}  # side → (Mon, revision, render) of its active
        # each Pokémon's own moves as the whole log reveals them (fixed once the log is read)
        self._own_moves = {(side_id, nick): tuple(k.moves[:NUM_MOVES])
                           for side_id, team in self.known.items() for nick, k in team.items()}
        # the last available_switches, to share, with the benched Pokémon and their revisions it was made from
        self._switches: dict[str, tuple[list, list[int], list[dict]]] = {"p1": ([], [], []), "p2": ([], [], [])}
        self._teampreview: dict[str, list[str]] = {"p1": [], "p2": []}  # the last opponent_teampreview, to share
        self._benches: dict[str, list[tuple[str, ...]]] = {"p1": [], "p2": []}  # switch targets of each decision

    # ------------------------------------------------------------------ rendering
    def _own(self, side: Side, nick: str, mon: Mon | None) -> dict:
        """A Pokémon of the watching player's own team: the tracked state plus what the whole log reveals.
        The tracker's Mon is shared by both points of view, so hindsight goes into the rendered copy only."""
        side_id = side.side_id
        move_ids = self._move_ids(side_id, nick, mon)
        # Unchanged since its last render (same Mon at the same revision, same move slots): that render. Most
        # calls are for benched Pokémon, which rarely change; 64k of the 82k calls on the 200 gen1ou bench
        # battles found their render in the memo below, through a key of all the Pokémon's state.
        last = self._own_last[side_id].get(nick)
        if (last is not None and last[0] is mon and last[2] == move_ids
                and (mon is None or last[1] == mon.revision)):
            return last[3]
        tracker = self.tracker
        k = self.known[side_id][nick]
        fresh = mon or Mon(nick, k.species, 100, tracker.gen)
        used = tuple(map(fresh.moves.get, move_ids, itertools.repeat(0, len(move_ids))))
        key = (side_id, nick, *tracker.mon_key(fresh), move_ids, used)  # one flat tuple: one object to collect
        out = self._own_memo.get(key)
        if out is None:
            moves = self._moves_memo.get((move_ids, used))
            if moves is None:  # a list per distinct move slots and PP used, shared by the Pokémon's renders
                try:
                    moves = [tracker.move_state(m, used=u) for m, u in zip(move_ids, used, strict=True)]
                except UnknownDexEntry as err:
                    raise ProtocolError(str(err)) from err
                self._moves_memo[(move_ids, used)] = moves
            out = tracker.render_mon(fresh, moves)
            if k.item is not None and out["item"] == "unknownitem":
                out["item"] = k.item
            if k.ability is not None and out["ability"] == "unknownability":
                out["ability"] = k.ability
            if k.tera_type is not None and out["tera_type"] == "unknowntype":
                out["tera_type"] = k.tera_type
            self._own_memo[key] = out
        self._own_last[side_id][nick] = (mon, mon.revision if mon is not None else 0, move_ids, out)
        return out

    def _foe(self, foe: Side) -> dict | None:
        """The opponent's active Pokémon as revealed (``BattleTracker.mon_state``), reused while unchanged."""
        mon = foe.active
        if mon is None:
            return None
        if foe.side_id in self.disguised:
            return self.tracker.mon_state(self._disguise(foe, *self.disguised[foe.side_id]))
        last = self._foe_last.get(foe.side_id)
        if last is not None and last[0] is mon and last[1] == mon.revision:
            return last[2]
        out = self.tracker.mon_state(mon)
        self._foe_last[foe.side_id] = (mon, mon.revision, out)
        return out

    def _disguise(self, foe: Side, disguise: Disguise, moves_before: dict[str, int]) -> Mon:
        """The foe's active as the opponent sees it under an Illusion: the Pokémon it shows, as known before, with
        the real one's HP, status, boosts and effects, and the moves the real one used since it switched in."""
        real, tracker = foe.active, self.tracker
        view = Mon(disguise.nick, disguise.species, disguise.level, tracker.gen)
        seen = foe.mons.get(disguise.nick)
        if seen is not None:
            view.item, view.ability, view.moves = seen.item, seen.ability, dict(seen.moves)
            view.tera_type = seen.tera_type
        view.hp_pct, view.status, view.boosts, view.effects = real.hp_pct, real.status, real.boosts, real.effects
        if real.terastallized:
            view.terastallized, view.tera_type, view.types = True, real.tera_type, real.types
        for move, gained in moves_since(real.moves, moves_before).items():
            view.moves[move] = view.moves.get(move, 0) + gained
        view.active = True
        return view

    def _move_ids(self, side_id: str, nick: str, mon: Mon | None) -> tuple[str, ...]:
        """The move slots its player sees for a Pokémon: its own moves as the whole log reveals them or, while it
        is transformed, the moves of the Pokémon it copied (the player's request lists those, and the player
        chooses among them), as far as the log reveals that Pokémon's moves."""
        if mon is not None and "transform" in mon.effects:
            target = self.copied.get((side_id, nick))
            copied = self.known[target[0]].get(target[1]) if target else None
            if copied is not None:
                return tuple(copied.moves[:NUM_MOVES])
        own = self._own_moves[(side_id, nick)]
        if self.mimicked and (side_id, nick) in self.mimicked:
            # Mimic's slot holds the copied move until the Pokémon switches out (the request lists it there)
            return tuple(self.mimicked[(side_id, nick)] if m == "mimic" else m for m in own)
        return own

    def _bench(self, side: Side) -> tuple[str, ...]:
        """Nicknames of the side's known, unfainted, benched Pokémon in team order."""
        active = side.active.name if side.active else None
        out = []
        for nick in self.order[side.side_id]:
            mon = side.mons.get(nick)
            if nick != active and not (mon is not None and mon.status == "fnt"):
                out.append(nick)
        return tuple(out[:NUM_SWITCHES])

    def _render(self, side_id: str, forced: bool) -> tuple[dict, tuple[str, ...]]:
        tracker = self.tracker
        side = tracker.sides[side_id]
        foe = tracker.sides["p2" if side_id == "p1" else "p1"]
        bench = self._bench(side)
        player_active = self._own(side, side.active.name, side.active) if side.active else None
        known_fainted = [m.status for m in side.mons.values()].count("fnt")
        # Lists equal to the previous decision's are that list, shared (never mutated): fewer objects for the
        # cyclic collector to walk, and Arrow and the observation convert a shared object once.
        mons = [side.mons.get(nick) for nick in bench]
        revisions = [mon.revision if mon is not None else 0 for mon in mons]
        last_mons, last_revisions, switches = self._switches[side_id]
        # A benched Pokémon's render changes only with its revision (switching out raises it and clears what its
        # move slots depend on: transform, Mimic): unchanged Pokémon at unchanged revisions are the last list.
        if mons != last_mons or revisions != last_revisions:
            fresh = [self._own(side, nick, mon) for nick, mon in zip(bench, mons, strict=True)]
            if fresh != switches:
                switches = fresh
            self._switches[side_id] = (mons, revisions, switches)
        teampreview = self._teampreview[side_id]
        if teampreview != foe.teampreview:
            teampreview = self._teampreview[side_id] = list(foe.teampreview)
        state = {
            "player_active": player_active,
            "opponent_active": self._foe(foe),
            "available_switches": switches,
            "player_prev_move": tracker.prev_move_state(side), "opponent_prev_move": tracker.prev_move_state(foe),
            "player_remaining": side.team_size - known_fainted,
            "opponents_remaining": foe.team_size - foe.fainted,
            "player_conditions": tracker.conditions(side), "opponent_conditions": tracker.conditions(foe),
            "weather": tracker.weather, "battle_field": tracker.battle_field(), "forced_switch": forced,
            "can_tera": self.tera_allowed and not forced and not self.used_tera[side_id],
            "can_zmove": (not forced and not self.used_z[side_id] and side.active is not None
                          and (side_id, side.active.name) in self.z_users),
            "can_dynamax": self.dynamax_allowed and not forced and not self.used_dynamax[side_id],
            "opponent_teampreview": teampreview,
        }
        return state, bench

    def _decide(self, side_id: str, forced: bool) -> int:
        state, bench = self._render(side_id, forced)
        self.steps[side_id].append((state, -1, derived_mask(state)))
        # a Dynamaxed Pokémon that does not switch out chose a Max move, whether or not the log shows it moving
        active = self.tracker.sides[side_id].active
        self.powers[side_id].append((False, not forced and active is not None and "dynamax" in active.effects))
        self.turns[side_id].append(self.tracker.turn)
        self._benches[side_id].append(bench)
        return len(self.steps[side_id]) - 1

    def _set_action(self, side_id: str, index: int, action: int) -> None:
        state, _, mask = self.steps[side_id][index]
        self.steps[side_id][index] = (state, action, mask)

    def _move_action(self, side_id: str, move: str) -> int:
        side = self.tracker.sides[side_id]
        if side.active is None or move in _FORCED_ONLY:
            return -1
        moves = self._move_ids(side_id, side.active.name, side.active)
        if move not in moves and move in self.tracker.dex.power_moves:
            move = self._power_move_base(side_id, side.active, move, moves)
        if move not in moves:
            return -1  # not one of the slots it sees (a move Mimic copied, a transformed Pokémon's unrevealed one)
        slot = moves.index(move)
        return _TERA_OFFSET + slot if self.tera_next[side_id] else slot

    def _power_move_base(self, side_id: str, mon: Mon, move: str, slots: tuple[str, ...]) -> str | None:
        """The move slot a Z-move or Max move was chosen through, where the log tells it exactly, else None.

        A signature Z-move names its base. The log names the others only by type (``Savage Spin-Out``, ``Max
        Airstream``): the base is then known when all four of the Pokémon's moves are and one alone can become it.
        A type's Z-move comes from a damaging move of the base's dex type whatever the ability (Hidden Power's is
        Normal), or from Weather Ball, typed by the weather first (pokemon-showdown 0.11.11 ``getZMove``,
        ``useMoveInner``). Max Guard comes from any status move and every other Max move from a damaging one, of
        the type the move has after its user's ability and item (``getActiveMaxMove`` after ``ModifyType``), which
        a spectator may not know: only the category is used."""
        dex = self.tracker.dex
        if dex.power_moves[move]:
            return dex.power_moves[move]
        target = self.copied.get((side_id, mon.name)) if "transform" in mon.effects else None
        known = self.known[target[0]].get(target[1]) if target else self.known[side_id].get(mon.name)
        if known is None or len(known.moves) != NUM_MOVES or len(slots) != NUM_MOVES:
            return None
        entries = [dex.moves.get(m) for m in slots]
        if None in entries:
            return None
        z_type = Z_MOVE_TYPES.get(move)
        if z_type is not None:
            can = [m for m, e in zip(slots, entries, strict=True) if e["category"] != "status" and (
                m == "weatherball" or ("normal" if m.startswith("hiddenpower") else e["type"]) == z_type)]
        else:
            can = [m for m, e in zip(slots, entries, strict=True)
                   if (e["category"] == "status") == (move == "maxguard")]
        return can[0] if len(can) == 1 else None

    # ------------------------------------------------------------------ the walk
    def run(self) -> None:
        tracker = self.tracker
        started = False
        disguises = self.disguises
        for at, line in enumerate(self.lines):
            if not line.startswith("|"):
                continue
            parts = line.split("|")
            kind = parts[1] if len(parts) > 1 else ""
            if kind not in _WALK_KINDS:
                tracker.apply_parts(parts, line)
                continue
            if kind == "replace" and len(parts) > 2:
                self.disguised.pop(parts[2][:2], None)
            if kind == "turn":
                started = True  # switch-ins before turn 1 are leads, not decisions
                self._close_turn()
                tracker.apply(line)
                self.moved_this_turn = False
                for side_id in ("p1", "p2"):
                    active = tracker.sides[side_id].active
                    if active is not None and active.status != "fnt":
                        self.pending[side_id] = self._decide(side_id, forced=False)
                continue
            if kind in ("switch", "drag") and len(parts) > 2:
                leaving = tracker.sides[parts[2][:2]].active if parts[2][:2] in tracker.sides else None
                if leaving is not None:  # a copied move leaves Mimic's slot when its Pokémon switches out
                    self.mimicked.pop((parts[2][:2], leaving.name), None)
            if started and kind == "switch":
                self._on_switch(parts, at in self.doubtful)
            elif kind == "move" and len(parts) > 3:
                side_id = parts[2][:2]
                called = any(p.startswith("[from]") and "lockedmove" not in p for p in parts[5:])
                move = move_id(parts[3])
                if self.pending.get(side_id) is not None and not called and (
                        not self.asleep[side_id] or move in _SLEEP_USABLE):
                    self._set_action(side_id, self.pending[side_id], self._move_action(side_id, move))
                    mover = tracker.sides[side_id].active
                    self.powers[side_id][self.pending[side_id]] = (
                        self.z_next[side_id], mover is not None and "dynamax" in mover.effects)
                self.pending[side_id] = None if not called else self.pending[side_id]
                self.asleep[side_id] = False
                if move != "pursuit":
                    self.moved_this_turn = True
            elif kind == "cant" and len(parts) > 2:
                self._on_cant(parts)
            elif kind == "-transform" and len(parts) > 3:
                self.copied[_ident(parts[2])] = _ident(parts[3])
            elif kind in ("-start", "-activate") and len(parts) > 4 and _effect_id(parts[3]) == "mimic":
                # gen 1 and 5+ write |-start|X|Mimic|<move>, gens 2-4 |-activate|X|move: Mimic|<move>
                self.mimicked[_ident(parts[2])] = to_id(parts[4])
            elif kind == "-start" and len(parts) > 3 and to_id(parts[3]) == "encore":
                # An Encore begun before the target moved replaces the move it chose by the encored one (the
                # simulator's onOverrideAction): the move shown is forced, the choice hidden.
                self.pending[parts[2][:2]] = None
            elif kind == "-terastallize" and len(parts) > 2:
                self.tera_next[parts[2][:2]] = True
                self.used_tera[parts[2][:2]] = True
            elif kind == "-heal" and len(parts) > 2 and "[from] move: Revival Blessing" in line:
                # its user's side chose which fainted Pokémon to revive: a decision outside the 13 actions (-1)
                self._decide(parts[2][:2], forced=True)
            elif kind == "-zpower" and len(parts) > 2:
                self.z_next[parts[2][:2]] = self.used_z[parts[2][:2]] = True
            elif kind == "-start" and len(parts) > 3 and to_id(parts[3]) == "dynamax":
                self.used_dynamax[parts[2][:2]] = True
                if self.pending.get(parts[2][:2]) is not None:  # chose to Dynamax, whether it then moves or not
                    self.powers[parts[2][:2]][self.pending[parts[2][:2]]] = (False, True)
            tracker.apply_parts(parts, line)
            if kind == "move" and len(parts) > 2:
                self.tera_next[parts[2][:2]] = self.z_next[parts[2][:2]] = False
            elif kind in ("switch", "drag") and disguises and len(parts) > 2:
                if at in disguises:
                    self.disguised[parts[2][:2]] = (disguises[at], dict(tracker.sides[parts[2][:2]].active.moves))
                else:
                    self.disguised.pop(parts[2][:2], None)
        self._close_turn()
        if not tracker.ended:
            raise TruncatedBattleError("the log ends before the battle does (no |win| or |tie|)")

    def _on_cant(self, parts: list[str]) -> None:
        actor, move = cant_actor_and_move(parts)
        side_id = actor[:2]
        index = self.pending.get(side_id)
        if index is None:
            return  # already acted (the blocking abilities come after the mover's move line)
        if len(parts) > 3 and parts[3] == "slp" and move is None:
            self.asleep[side_id] = True  # Sleep Talk or Snore may follow and show the choice
            return
        self.pending[side_id] = None
        if move is not None and actor == parts[2]:
            self._set_action(side_id, index, self._move_action(side_id, move))

    def _close_turn(self) -> None:
        self.pending = {"p1": None, "p2": None}
        self.asleep = {"p1": False, "p2": False}
        self.tera_next = {"p1": False, "p2": False}  # a tera followed by |cant| never reached a move
        self.z_next = {"p1": False, "p2": False}

    def _on_switch(self, parts: list[str], doubtful: bool = False) -> None:
        """A switch-in: the side's turn action or a forced decision; its target is -1 when ``doubtful`` (a
        Zoroark may have come in disguised)."""
        side_id, nick = _ident(parts[2])
        if doubtful:
            nick = ""  # in no bench: the action is -1
        side = self.tracker.sides[side_id]
        active_fainted = side.active is not None and side.active.status == "fnt"
        marked = any(p.startswith("[from]") for p in parts[5:])
        index = self.pending[side_id]
        asleep, self.asleep[side_id] = self.asleep[side_id], False  # a sleeping Pokémon's turn was spent
        if index is not None and not active_fainted and not marked and not self.moved_this_turn and not asleep:
            bench = self._benches[side_id][index]
            self._set_action(side_id, index, 4 + bench.index(nick) if nick in bench else -1)
            self.powers[side_id][index] = (False, False)
            self.pending[side_id] = None
            return
        if self.pending[side_id] is not None:
            self.pending[side_id] = None  # fainted or pivoted before its turn action showed
        index = self._decide(side_id, forced=True)
        bench = self._benches[side_id][index]
        self._set_action(side_id, index, 4 + bench.index(nick) if nick in bench else -1)


def spectator_trajectories(lines: list[str], dex: Dex, *, format_id: str, battle_id: str,
                           rating: int | None = None, names: dict[str, str] | None = None) -> list[dict]:
    """Rows of both players' reconstructed trajectories (p1 then p2)."""
    parser = SpectatorParser(dex, format_id, lines)
    parser.run()
    tracker = parser.tracker
    rows: list[dict] = []
    names = dict(names or {})
    for side_id in ("p1", "p2"):
        names.setdefault(side_id, tracker.sides[side_id].player_name)
    for side_id, foe_id in (("p1", "p2"), ("p2", "p1")):
        steps, turns = parser.steps[side_id], parser.turns[side_id]
        if not steps:
            continue
        final_state, _ = parser._render(side_id, forced=False)
        final_state.update(can_tera=False, can_zmove=False, can_dynamax=False)
        steps = steps + [(final_state, -1, [False] * len(steps[0][2]))]
        powers = parser.powers[side_id] + [(False, False)]
        turns = turns + [tracker.turn]
        winner = tracker.winner
        if winner == "":
            result = "tie"
        elif winner == tracker.sides[side_id].player_name:
            result = "win"
        elif winner == tracker.sides[foe_id].player_name:
            result = "loss"
        else:
            raise ProtocolError(f"|win| names {winner!r}, who is not a player")
        meta = TrajectoryMeta(battle_id=battle_id, format=format_id, player_side=side_id,
                              player_name=names.get(side_id), opponent_name=names.get(foe_id), result=result,
                              rating=rating)
        rows += build_rows(meta, steps, mask_exact=False, battle_turns=turns, powers=powers)
    return rows

"""Observation spec 1.0.0: a structured ``BattleState`` → Metamon-style text (87 words) + 48 numeric features.

The spec is pure and versioned: shards store the structured state, so a new spec version re-derives these columns
from stored state (``pipelines/refeaturize.py``) without re-parsing raw replays. The vocabulary is a fixed file per
spec version; a word outside it maps to ``<unk>`` (id 1) and is counted in the row, never clamped to a valid id.

Word layout (index: meaning):
- 0 format id; 1 ``forcedswitch``/``noforcedswitch``; 2 ``cantera``/``nocantera``; 3 weather; 4-5 first two field
  effects (``nofield``); 6 the player's previous move (``nomove``); 7 the opponent's previous move; 8-9 first two
  player side conditions (``nocondition``); 10-11 first two opponent side conditions.
- 12-31 the player's active Pokémon: species, item, ability, type 1, type 2 (``notype``), status, first volatile
  effect (``noeffect``), tera type, then for move slots 0-3: move id, move type, move category.
- 32-51 the opponent's active Pokémon, same layout; unrevealed moves are ``unknownmove unknowntype
  unknowncategory``, unrevealed item/ability/tera ``unknownitem``/``unknownability``/``unknowntype``.
- 52-86 the five switch slots in action order: species, item, ability, type 1, type 2, status, tera type.
Absent Pokémon or move slots are ``<blank>``.

Numeric layout (index: meaning, scale):
- 0 player active HP fraction; 1-7 player boosts atk, def, spa, spd, spe, accuracy, evasion ÷ 6;
  8-11 player move base power ÷ 200; 12-15 move accuracy; 16-19 move PP left ÷ max PP; 20-23 move priority ÷ 5.
- 24 opponent active HP fraction; 25-31 opponent boosts ÷ 6; 32-35 opponent revealed move base power ÷ 200.
- 36-40 switch slot HP fractions (0 for absent slots).
- 41 player Pokémon remaining ÷ 6; 42 opponent Pokémon remaining ÷ 6; 43 player active level ÷ 100;
  44 opponent active level ÷ 100; 45 forced switch; 46 player active terastallized; 47 opponent terastallized.
Absent values are 0.

``decode_tokens`` reads a row's word ids back as words, and ``OBS_WORD_FIELDS`` names the stored state field each
word comes from.
"""

from __future__ import annotations

import itertools
import operator
import re
from functools import cache
from pathlib import Path

from shards_schema.pokemon import NUM_MOVES, NUM_SWITCHES, OBS_NUMERIC, OBS_WORDS
from shards_schema.versions import POKEMON_TURNS

OBSERVATION_VERSION = POKEMON_TURNS.observation
VOCAB_DIR = Path(__file__).resolve().parent / "vocab"
PAD, UNK, BLANK = "<pad>", "<unk>", "<blank>"
UNK_ID = 1

_BOOSTS = ("atk_boost", "def_boost", "spa_boost", "spd_boost", "spe_boost", "accuracy_boost", "evasion_boost")
_ACTIVE_WORDS = 8 + 3 * NUM_MOVES
_SWITCH_WORDS = 7


@cache
def vocabulary(version: str = OBSERVATION_VERSION) -> dict[str, int]:
    """Word → id for a spec version. Ids are line numbers of the committed vocabulary file."""
    path = VOCAB_DIR / f"obs-{version}.txt"
    words = path.read_text().split("\n")
    words = [w for w in words if w]
    if words[:3] != [PAD, UNK, BLANK]:
        raise ValueError(f"{path} must start with {PAD}, {UNK}, {BLANK}")
    return {w: i for i, w in enumerate(words)}


@cache
def vocabulary_words(version: str = OBSERVATION_VERSION) -> tuple[str, ...]:
    """Id → word for a spec version: the inverse of ``vocabulary``."""
    vocab = vocabulary(version)
    return tuple(sorted(vocab, key=vocab.__getitem__))


def decode_tokens(tokens, version: str = OBSERVATION_VERSION) -> list[str]:
    """Word ids (a row's ``obs_tokens``) back to words with the spec version's vocabulary. A word that was outside
    the vocabulary decodes to ``<unk>`` (the row's ``obs_text`` keeps it); an id past the vocabulary raises."""
    words = vocabulary_words(version)
    out = []
    for token in tokens:
        if not 0 <= token < len(words):
            raise ValueError(f"word id {token} is outside the {len(words)}-word vocabulary of observation spec "
                             f"{version}; decode with the spec version the shard's manifest records")
        out.append(words[token])
    return out


def _active_fields(side: str) -> list[str]:
    fields = [f"{side}.{name}" for name in ("name", "item", "ability", "types[0]", "types[1]", "status",
                                             "effects[0]", "tera_type")]
    return fields + [f"{side}.moves[{slot}].{name}" for slot in range(NUM_MOVES)
                     for name in ("name", "move_type", "category")]


OBS_WORD_FIELDS: tuple[str, ...] = (
    "format", "forced_switch", "can_tera", "weather", "battle_field[0]", "battle_field[1]", "player_prev_move.name",
    "opponent_prev_move.name", "player_conditions[0]", "player_conditions[1]", "opponent_conditions[0]",
    "opponent_conditions[1]", *_active_fields("player_active"), *_active_fields("opponent_active"),
    *[f"available_switches[{slot}].{name}" for slot in range(NUM_SWITCHES)
      for name in ("name", "item", "ability", "types[0]", "types[1]", "status", "tera_type")],
)
"""Where each of the 87 words comes from: a path into the stored ``BattleState`` (``format`` is the row's format
column). A word for a missing list entry or Pokémon is a filler (``nofield``, ``<blank>``...)."""
assert len(OBS_WORD_FIELDS) == OBS_WORDS


def stored_value(state: dict, field: str, format_id: str):
    """The stored value a word of ``OBS_WORD_FIELDS`` comes from (``None`` where the Pokémon, move or list entry
    is absent): what a decoded observation is read against."""
    value = {"format": format_id, **state}
    for key in re.findall(r"\w+", field):
        if value is None:
            return None
        if key.isdigit():
            value = value[int(key)] if int(key) < len(value) else None
        else:
            value = value[key]
    return value


def _first(values: list[str], k: int, empty: str) -> list[str]:
    out = list(values[:k])
    return out + [empty] * (k - len(out))


def _active_words(mon: dict | None, *, opponent: bool) -> list[str]:
    if mon is None:
        return [BLANK] * _ACTIVE_WORDS
    types = _first(mon["types"], 2, "notype")
    words = [mon["name"], mon["item"], mon["ability"], types[0], types[1], mon["status"],
             mon["effects"][0] if mon["effects"] else "noeffect", mon["tera_type"]]
    moves = mon["moves"]
    for slot in range(NUM_MOVES):
        if slot < len(moves):
            m = moves[slot]
            words += (m["name"], m["move_type"], m["category"])
        elif opponent:
            words += ("unknownmove", "unknowntype", "unknowncategory")
        else:
            words += (BLANK, BLANK, BLANK)
    return words


def _switch_words(mon: dict | None) -> list[str]:
    if mon is None:
        return [BLANK] * _SWITCH_WORDS
    types = _first(mon["types"], 2, "notype")
    return [mon["name"], mon["item"], mon["ability"], types[0], types[1], mon["status"], mon["tera_type"]]


def _ids(words: list[str]) -> list[int]:
    vocab = vocabulary()
    return [vocab.get(w, UNK_ID) for w in words]


def _active_tokens(mon: dict | None, *, opponent: bool) -> tuple[list[str], list[int]]:
    words = _active_words(mon, opponent=opponent)
    return words, _ids(words)


def _switch_tokens(mon: dict | None) -> tuple[list[str], list[int]]:
    words = _switch_words(mon)
    return words, _ids(words)


def _global_words(state: dict, format_id: str) -> list[str]:
    fields = _first(state["battle_field"], 2, "nofield")
    pprev, oprev = state["player_prev_move"], state["opponent_prev_move"]
    return [
        format_id,
        "forcedswitch" if state["forced_switch"] else "noforcedswitch",
        "cantera" if state["can_tera"] else "nocantera",
        state["weather"],
        *fields,
        pprev["name"] if pprev else "nomove",
        oprev["name"] if oprev else "nomove",
        *_first(state["player_conditions"], 2, "nocondition"),
        *_first(state["opponent_conditions"], 2, "nocondition"),
    ]


def observation_tokens(state: dict, format_id: str) -> tuple[list[str], list[int]]:
    """The 87 words of a state and their ids (see the module docstring for the layout)."""
    words = _global_words(state, format_id)
    tokens = _ids(words)
    switches = state["available_switches"]
    parts = [_active_tokens(state["player_active"], opponent=False),
             _active_tokens(state["opponent_active"], opponent=True)]
    parts += [_switch_tokens(switches[slot] if slot < len(switches) else None) for slot in range(NUM_SWITCHES)]
    for part_words, part_tokens in parts:
        words += part_words
        tokens += part_tokens
    assert len(words) == OBS_WORDS, len(words)
    return words, tokens


def observation_words(state: dict, format_id: str) -> list[str]:
    """The 87 words of a state (see the module docstring for the layout)."""
    return observation_tokens(state, format_id)[0]


def _own_numbers(mon: dict | None) -> list[float]:
    """Numeric features 0-23: the player's active Pokémon."""
    moves = mon["moves"] if mon else []
    pp = [moves[i]["current_pp"] / moves[i]["max_pp"] if i < len(moves) and moves[i]["max_pp"] else 0.0
          for i in range(NUM_MOVES)]
    return [mon["hp_pct"] if mon else 0.0, *_boosts(mon), *_move_numbers(mon, "base_power", 200.0),
            *_move_numbers(mon, "accuracy", 1.0), *pp, *_move_numbers(mon, "priority", 5.0)]


def _foe_numbers(mon: dict | None) -> list[float]:
    """Numeric features 24-35: the opponent's active Pokémon."""
    return [mon["hp_pct"] if mon else 0.0, *_boosts(mon), *_move_numbers(mon, "base_power", 200.0)]


def _boosts(mon: dict | None) -> list[float]:
    return [mon[b] / 6.0 for b in _BOOSTS] if mon else [0.0] * len(_BOOSTS)


def _move_numbers(mon: dict | None, key: str, scale: float) -> list[float]:
    moves = mon["moves"] if mon else []
    return [moves[i][key] / scale if i < len(moves) else 0.0 for i in range(NUM_MOVES)]


def _last_numbers(state: dict, me: dict | None, opp: dict | None) -> tuple[float, ...]:
    """The seven numeric features after the Pokémon's: team counts, levels, forced switch, terastallized."""
    return (state["player_remaining"] / 6.0, state["opponents_remaining"] / 6.0,
            me["level"] / 100.0 if me else 0.0, opp["level"] / 100.0 if opp else 0.0,
            float(state["forced_switch"]),
            float(me["terastallized"]) if me else 0.0, float(opp["terastallized"]) if opp else 0.0)


def observation_numeric(state: dict) -> list[float]:
    """The 48 numeric features of a state (see the module docstring for the layout)."""
    me, opp = state["player_active"], state["opponent_active"]
    switches = state["available_switches"]
    numeric = [
        *_own_numbers(me),
        *_foe_numbers(opp),
        *[switches[i]["hp_pct"] if i < len(switches) else 0.0 for i in range(NUM_SWITCHES)],
        *_last_numbers(state, me, opp),
    ]
    assert len(numeric) == OBS_NUMERIC, len(numeric)
    return numeric


def observe(state: dict, format_id: str) -> tuple[str, list[int], list[float], int]:
    """(text, token ids, numeric features, number of unknown words) for one state: the readable reference of
    ``Observer``."""
    words, tokens = observation_tokens(state, format_id)
    unknown = tokens.count(UNK_ID)
    return " ".join(words), tokens, observation_numeric(state), unknown


class Observer:
    """``observe`` for the rows of one trajectory, fast; equal output (``tests/test_observation.py`` compares them
    on every row of the shared replays).

    An active Pokémon's dict changes at most decisions (its PP, its HP), so its part of the observation is put
    together from smaller parts that recur: its eight non-move words, its four move slots (words and numbers), its
    boosts. The bench often stays the same from one decision to the next, so the five switch slots are cached per
    distinct tuple of dicts. Dicts are keyed by identity (renderers share unchanged ones between rows, and never
    mutate them); each cache entry holds the dicts it was made from, so an id is never reused while its entry
    lives. Joining the parts' texts with spaces is joining their words.
    """

    def __init__(self, format_id: str, version: str = OBSERVATION_VERSION):
        self.format_id = format_id
        self.vocab = vocabulary(version)
        self._active_parts: dict[tuple[int, bool], tuple] = {}
        self._heads: dict[tuple[str, ...], tuple] = {}  # a Pokémon's eight non-move words
        self._globals: dict[tuple[str, ...], tuple] = {}  # the twelve words before the Pokémon
        self._move_slots: dict[tuple, tuple] = {}
        self._boosts: dict[tuple[int, ...], tuple[float, ...]] = {}
        self._moves: dict[int, tuple] = {}
        assert NUM_MOVES == 4, "_slots unpacks four move slots"
        # an empty slot: unrevealed for the opponent, blank for the player
        self._fillers = {opponent: (" ".join(words), self._ids(words), 0.0, 0.0, 0.0, 0.0) for opponent, words in
                         ((True, ("unknownmove", "unknowntype", "unknowncategory")), (False, (BLANK, BLANK, BLANK)))}
        self._switches: dict[tuple[int, ...], tuple] = {}

    def _ids(self, words) -> tuple[int, ...]:
        # tuples of ints: the collector stops tracking them, unlike lists (cache entries live for a trajectory)
        return tuple(map(self.vocab.get, words, itertools.repeat(UNK_ID, len(words))))

    def _active(self, mon: dict | None, opponent: bool) -> tuple:
        """(mon, text, ids, numbers) of an active Pokémon: numeric features 0-23 for the player's, 24-35 for the
        opponent's."""
        key = (id(mon), opponent)
        hit = self._active_parts.get(key)
        if hit is not None:
            return hit
        if mon is None:
            words = _active_words(None, opponent=opponent)
            hit = (None, " ".join(words), self._ids(words), _foe_numbers(None) if opponent else _own_numbers(None))
            self._active_parts[key] = hit
            return hit
        name, item, ability, types, status, effects, tera_type, hp_pct, moves = _ACTIVE_FIELDS(mon)
        head_words = (name, item, ability, types[0] if types else "notype", types[1] if len(types) > 1 else "notype",
                      status, effects[0] if effects else "noeffect", tera_type)
        head = self._heads.get(head_words)
        if head is None:
            head = self._heads[head_words] = (" ".join(head_words), self._ids(head_words))
        slots_key = (opponent, *map(id, moves))
        slots = self._move_slots.get(slots_key)
        if slots is None:
            slots = self._move_slots[slots_key] = self._slots(moves, opponent)
        boost_values = _BOOST_VALUES(mon)
        boosts = self._boosts.get(boost_values)
        if boosts is None:
            boosts = self._boosts[boost_values] = tuple(b / 6.0 for b in boost_values)
        hit = self._active_parts[key] = (mon, f"{head[0]} {slots[1]}", head[1] + slots[2],
                                         (hp_pct, *boosts, *slots[3]))
        return hit

    def _slots(self, moves: list[dict], opponent: bool) -> tuple:
        """(moves, text, ids, numbers) of the four move slots: base power for the opponent; base powers,
        accuracies, PP left and priorities for the player (``_own_numbers``' order)."""
        filler = self._fillers[opponent]
        a, b, c, d = [self._move(moves[slot]) if slot < len(moves) else filler for slot in range(NUM_MOVES)]
        text, ids = f"{a[0]} {b[0]} {c[0]} {d[0]}", a[1] + b[1] + c[1] + d[1]
        if opponent:
            return moves, text, ids, (a[2], b[2], c[2], d[2])
        return moves, text, ids, (a[2], b[2], c[2], d[2], a[3], b[3], c[3], d[3], a[4], b[4], c[4], d[4],
                                        a[5], b[5], c[5], d[5])

    def _move(self, move: dict) -> tuple:
        """(text, ids, base power ÷ 200, accuracy, PP left ÷ max PP, priority ÷ 5, move) of one move slot."""
        hit = self._moves.get(id(move))
        if hit is None:
            words = (move["name"], move["move_type"], move["category"])
            hit = self._moves[id(move)] = (
                " ".join(words), self._ids(words), move["base_power"] / 200.0, move["accuracy"] / 1.0,
                move["current_pp"] / move["max_pp"] if move["max_pp"] else 0.0, move["priority"] / 5.0, move)
        return hit

    def _bench(self, switches: list[dict]) -> tuple:
        """(mons, text, ids, HP fractions) of the five switch slots."""
        key = tuple(map(id, switches))
        hit = self._switches.get(key)
        if hit is None:
            words, hps = [], []
            for slot in range(NUM_SWITCHES):
                mon = switches[slot] if slot < len(switches) else None
                words += _switch_words(mon)
                hps.append(mon["hp_pct"] if mon is not None else 0.0)
            hit = self._switches[key] = (switches, " ".join(words), self._ids(words), tuple(hps))
        return hit

    def __call__(self, state: dict) -> tuple[str, list[int], list[float], int]:
        me, opp = state["player_active"], state["opponent_active"]
        mine, theirs = self._active(me, opponent=False), self._active(opp, opponent=True)
        bench = self._bench(state["available_switches"])
        global_words = tuple(_global_words(state, self.format_id))
        head = self._globals.get(global_words)
        if head is None:
            head = self._globals[global_words] = (" ".join(global_words), self._ids(global_words))
        tokens = [*head[1], *mine[2], *theirs[2], *bench[2]]
        if len(tokens) != OBS_WORDS:
            raise AssertionError(f"{len(tokens)} words, not {OBS_WORDS}")
        numeric = [*mine[3], *theirs[3], *bench[3], *_last_numbers(state, me, opp)]
        return f"{head[0]} {mine[1]} {theirs[1]} {bench[1]}", tokens, numeric, tokens.count(UNK_ID)

_ACTIVE_FIELDS = operator.itemgetter("name", "item", "ability", "types", "status", "effects", "tera_type", "hp_pct",
                                     "moves")
_BOOST_VALUES = operator.itemgetter(*_BOOSTS)

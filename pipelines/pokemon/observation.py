"""Observation spec 2.0.0: a structured ``BattleState`` → Metamon-style text (87 words) + 50 numeric features.

The spec is pure and versioned: shards store the structured state, so a new spec version re-derives these columns
from stored state (``pipelines/pokemon/refeaturize.py``) without re-parsing raw replays. The vocabulary is a fixed
file per spec version; a word outside it maps to ``<unk>`` (id 1) and is counted in the row, never clamped to a valid
id.

Word layout (index: meaning):
- 0 format id; 1 ``forcedswitch``/``noforcedswitch``; 2 the generation's gimmick the player may use now:
  ``cantera``, ``canzmove``, ``candynamax`` or ``nogimmick``; 3 weather; 4-5 first two field
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
  44 opponent active level ÷ 100; 45 forced switch; 46 player active terastallized; 47 opponent terastallized;
  48 player active Dynamax turns left ÷ 3; 49 opponent's ÷ 3.
Absent values are 0.

``observe`` derives one state's observation; ``observation_columns`` derives the columns of many states at once (what
shards are written with), equal to it. ``decode_tokens`` reads a row's word ids back as words, and ``OBS_WORD_FIELDS``
names the stored state field each word comes from.
"""

from __future__ import annotations

import itertools
import operator
import re
from functools import cache
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.pokemon.tracker import DYNAMAX_TURNS
from shards_schema.pokemon import CODE_VERSIONS as POKEMON_TURNS
from shards_schema.pokemon import NUM_MOVES, NUM_SWITCHES, OBS_NUMERIC, OBS_WORDS, TURNS_SCHEMA

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


def _head_words(mon: dict) -> tuple[str, ...]:
    """The eight words of an active Pokémon before its moves."""
    types, effects = mon["types"], mon["effects"]
    return (mon["name"], mon["item"], mon["ability"], types[0] if types else "notype",
            types[1] if len(types) > 1 else "notype", mon["status"], effects[0] if effects else "noeffect",
            mon["tera_type"])


def _active_words(mon: dict | None, *, opponent: bool) -> list[str]:
    if mon is None:
        return [BLANK] * _ACTIVE_WORDS
    words = list(_head_words(mon))
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


def _flag_words(format_id: str, forced_switch: bool, can_tera: bool, can_zmove: bool, can_dynamax: bool,
                weather: str) -> tuple[str, str, str, str]:
    """Words 0-3. One generation's gimmick at most is open to a player at a time (tera: gen 9; Z-moves: gen 7;
    Dynamax: gen 8)."""
    gimmick = ("cantera" if can_tera else "canzmove" if can_zmove else "candynamax" if can_dynamax
               else "nogimmick")
    return format_id, "forcedswitch" if forced_switch else "noforcedswitch", gimmick, weather


def _prev_move_word(move: dict | None) -> str:
    return move["name"] if move else "nomove"


def _global_words(state: dict, format_id: str) -> list[str]:
    return [
        *_flag_words(format_id, state["forced_switch"], state["can_tera"], state["can_zmove"],
                     state["can_dynamax"], state["weather"]),
        *_first(state["battle_field"], 2, "nofield"),
        _prev_move_word(state["player_prev_move"]),
        _prev_move_word(state["opponent_prev_move"]),
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
    """The nine numeric features after the Pokémon's: team counts, levels, forced switch, terastallized, Dynamax
    turns left."""
    return (state["player_remaining"] / 6.0, state["opponents_remaining"] / 6.0,
            me["level"] / 100.0 if me else 0.0, opp["level"] / 100.0 if opp else 0.0,
            float(state["forced_switch"]),
            float(me["terastallized"]) if me else 0.0, float(opp["terastallized"]) if opp else 0.0,
            me["dynamax_turns"] / DYNAMAX_TURNS if me else 0.0, opp["dynamax_turns"] / DYNAMAX_TURNS if opp else 0.0)


def observation_numeric(state: dict) -> list[float]:
    """The 50 numeric features of a state (see the module docstring for the layout)."""
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
    ``observation_columns``."""
    words, tokens = observation_tokens(state, format_id)
    unknown = tokens.count(UNK_ID)
    return " ".join(words), tokens, observation_numeric(state), unknown


# An absent Pokémon (no active, an empty switch slot) as a dict whose words and numbers are those ``observe`` gives
# an absent one: every word ``<blank>``, every number 0 (``max_pp`` 0 makes PP left 0).
_BLANK_MOVE = {"name": BLANK, "move_type": BLANK, "category": BLANK, "base_power": 0, "accuracy": 0.0, "priority": 0,
               "current_pp": 0, "max_pp": 0}
_ABSENT = {"name": BLANK, "item": BLANK, "ability": BLANK, "types": [BLANK, BLANK], "status": BLANK,
           "effects": [BLANK], "tera_type": BLANK, "hp_pct": 0.0, "level": 0, "terastallized": False,
           "moves": [_BLANK_MOVE] * NUM_MOVES, **dict.fromkeys(_BOOSTS, 0)}
_UNREVEALED_MOVE = {**_BLANK_MOVE, "name": "unknownmove", "move_type": "unknowntype", "category": "unknowncategory"}


def _distinct(keys: list) -> tuple[np.ndarray, list[int]]:
    """(each key's position among the distinct keys, a row holding each distinct key, in first-seen order), with
    the per-row loops in C."""
    holder = dict(zip(keys, range(len(keys)), strict=True))
    position = dict(zip(holder, range(len(holder)), strict=False))
    return np.fromiter(map(position.__getitem__, keys), np.intp, len(keys)), list(holder.values())


class _Part:
    """Some consecutive words of every row's observation: the text and ids of each distinct value, each row's
    position among them (``at``), and a row holding each (``holders``)."""

    def __init__(self, at: np.ndarray, texts: list[str], ids: np.ndarray, holders: list[int]):
        self.at, self.texts, self.ids, self.holders = at, texts, ids, holders

    def gathered(self, at: np.ndarray) -> _Part:
        """This part for rows that each hold the value of one of its rows (``at``: which)."""
        return _Part(self.at[at], self.texts, self.ids, [])


class _Words:
    """Word ids of the vocabulary, and the parts made of words alone, keyed by their rows' values or objects."""

    def __init__(self, version: str):
        self.vocab = vocabulary(version)

    def ids(self, rows_of_words: list, width: int) -> np.ndarray:
        flat = itertools.chain.from_iterable(rows_of_words)
        get = self.vocab.get
        return np.fromiter(map(get, flat, itertools.repeat(UNK_ID)), np.int32,
                           len(rows_of_words) * width).reshape(len(rows_of_words), width)

    def part(self, values: list, keys: list, words, width: int) -> _Part:
        """The part whose words ``words(value)`` gives, for rows holding ``values`` (told apart by ``keys``)."""
        at, holders = _distinct(keys)
        distinct_words = [words(values[i]) for i in holders]
        return _Part(at, list(map(" ".join, distinct_words)), self.ids(distinct_words, width), holders)


def _pokemon(words: _Words, mons: list, opponent: bool) -> tuple[list[_Part], np.ndarray]:
    """(the parts of words 12-31 (player) or 32-51 (opponent): eight words, then three per move slot; each row's
    numeric features 0-23 or 24-35, then level ÷ 100 and terastallized for ``_last_numbers``) of each row's active
    Pokémon."""
    at, holders = _distinct(list(map(id, mons)))
    distinct = [mons[i] if mons[i] is not None else _ABSENT for i in holders]
    m = len(distinct)
    name, item, ability, types, status, effects, tera_type, hp, moves = (
        list(column) for column in zip(*map(_ACTIVE_FIELDS, distinct), strict=True)) if m else [[]] * 9
    # the eight non-move words: the lists of types and effects are shared between dicts, so keyed by identity
    head = words.part(distinct, list(zip(name, item, ability, map(id, types), status, map(id, effects), tera_type,
                                         strict=True)), _head_words, 8)
    # the four move slots: each Pokémon's moves padded with the filler of an empty slot (unrevealed for the
    # opponent, blank for the player), four each; move dicts are shared while their PP is unchanged
    padding = [_UNREVEALED_MOVE if opponent else _BLANK_MOVE] * NUM_MOVES
    padded = map(operator.getitem, map(operator.add, moves, itertools.repeat(padding)),
                 itertools.repeat(slice(0, NUM_MOVES)))
    slots = list(itertools.chain.from_iterable(padded))  # Pokémon j's slot k at j * NUM_MOVES + k
    move = words.part(slots, list(map(id, slots)), _MOVE_WORDS, 3)
    move_numbers = np.array([_move_numbers_of(slots[i]) for i in move.holders], dtype=np.float64).reshape(-1, 4)
    per_slot = move_numbers[move.at].reshape(m, NUM_MOVES, 4)  # (Pokémon, slot, base power/accuracy/PP/priority)
    picked = (0,) if opponent else (0, 1, 2, 3)
    boosts = np.fromiter(itertools.chain.from_iterable(map(_BOOST_VALUES, distinct)), np.float64,
                         m * len(_BOOSTS)).reshape(m, len(_BOOSTS)) / 6.0
    numbers = np.concatenate([
        np.array(hp, dtype=np.float64).reshape(m, 1), boosts, *(per_slot[:, :, k] for k in picked),
        np.fromiter(map(_LEVEL, distinct), np.float64, m).reshape(m, 1) / 100.0,
        np.fromiter(map(_TERASTALLIZED, distinct), np.float64, m).reshape(m, 1)], axis=1)
    parts = [head.gathered(at), *(move.gathered(at * NUM_MOVES + k) for k in range(NUM_MOVES))]
    return parts, numbers[at]


def _move_numbers_of(move: dict) -> tuple[float, float, float, float]:
    """(base power ÷ 200, accuracy, PP left ÷ max PP, priority ÷ 5) of a move slot."""
    return (move["base_power"] / 200.0, move["accuracy"] / 1.0,
            move["current_pp"] / move["max_pp"] if move["max_pp"] else 0.0, move["priority"] / 5.0)


def _bench(words: _Words, benches: list) -> tuple[_Part, np.ndarray]:
    """(words 52-86, numeric features 36-40) of each row's switch slots."""
    at, holders = _distinct(list(map(id, benches)))
    slot_mons = [bench[slot] if slot < len(bench) else None
                 for bench in map(benches.__getitem__, holders) for slot in range(NUM_SWITCHES)]
    mon = words.part(slot_mons, list(map(id, slot_mons)), _switch_words, _SWITCH_WORDS)
    hps = np.array([slot_mons[i]["hp_pct"] if slot_mons[i] is not None else 0.0 for i in mon.holders],
                   dtype=np.float64)
    texts = np.array(mon.texts, dtype=object)[mon.at].reshape(-1, NUM_SWITCHES)
    part = _Part(at, list(map(" ".join, texts)), mon.ids[mon.at].reshape(-1, NUM_SWITCHES * _SWITCH_WORDS), holders)
    return part, hps[mon.at].reshape(-1, NUM_SWITCHES)[at]


def observation_columns(states: list[dict], formats: list[str], version: str = OBSERVATION_VERSION) -> dict:
    """The observation columns (``obs_text``, ``obs_tokens``, ``obs_numeric``, ``obs_unknown_words``) of many
    states at once, as Arrow arrays of the ``pokemon_turns`` types. ``observe`` row by row is their readable
    reference (``tests/pipelines/test_observation.py`` compares them on every row of the shared replays).

    Rendered states share unchanged dicts and lists between rows (and never mutate them), so each part of the
    observation (an active Pokémon's eight non-move words, its move slots, a bench, a previous move...) is made
    once per distinct object, told apart by identity (the states the caller holds keep them alive), or per distinct
    value. The rows are then gathered from the parts by numpy (words, numbers) and Arrow (the text): no word or
    number goes through a Python list per row.
    """
    words = _Words(version)
    n = len(states)
    values = list(zip(*map(_GLOBAL_FIELDS, states), strict=True)) if n else [()] * len(_GLOBAL_FIELDS_NAMES)
    (forced, can_tera, can_zmove, can_dynamax, weather, battle_field, player_prev, opponent_prev, player_cond,
     opponent_cond) = values
    flags = list(zip(formats, forced, can_tera, can_zmove, can_dynamax, weather, strict=True))
    parts = [
        words.part(flags, flags, lambda f: _flag_words(*f), 4),
        words.part(battle_field, list(map(id, battle_field)), lambda f: _first(f, 2, "nofield"), 2),
        *(words.part(prev, list(map(id, prev)), lambda m: (_prev_move_word(m),), 1)
          for prev in (player_prev, opponent_prev)),
        *(words.part(cond, list(map(id, cond)), lambda c: _first(c, 2, "nocondition"), 2)
          for cond in (player_cond, opponent_cond)),
    ]
    me, mine = _pokemon(words, list(map(_PLAYER_ACTIVE, states)), opponent=False)
    opp, theirs = _pokemon(words, list(map(_OPPONENT_ACTIVE, states)), opponent=True)
    bench, hps = _bench(words, list(map(_SWITCHES, states)))
    parts += [*me, *opp, bench]
    tokens = np.concatenate([p.ids[p.at] for p in parts], axis=1)
    if tokens.shape[1] != OBS_WORDS:
        raise AssertionError(f"{tokens.shape[1]} words, not {OBS_WORDS}")
    last = np.stack([np.fromiter(map(_PLAYER_REMAINING, states), np.float64, n) / 6.0,
                     np.fromiter(map(_OPPONENTS_REMAINING, states), np.float64, n) / 6.0,
                     mine[:, -2], theirs[:, -2], np.array(forced, dtype=np.float64), mine[:, -1], theirs[:, -1],
                     *(np.fromiter((m["dynamax_turns"] if m else 0 for m in map(active, states)), np.float64, n)
                       / DYNAMAX_TURNS for active in (_PLAYER_ACTIVE, _OPPONENT_ACTIVE))],
                    axis=1)
    numeric = np.concatenate([mine[:, :-2], theirs[:, :-2], hps, last], axis=1)
    if numeric.shape[1] != OBS_NUMERIC:
        raise AssertionError(f"{numeric.shape[1]} numbers, not {OBS_NUMERIC}")
    text = pc.binary_join_element_wise(
        *(pa.array(p.texts, pa.string()).take(pa.array(p.at, pa.int32())) for p in parts), " ")
    types = {name: TURNS_SCHEMA.field(name).type for name in ("obs_tokens", "obs_numeric", "obs_unknown_words")}
    return {
        "obs_text": text,
        "obs_tokens": pa.FixedSizeListArray.from_arrays(pa.array(tokens.ravel(), types["obs_tokens"].value_type),
                                                        type=types["obs_tokens"]),
        "obs_numeric": pa.FixedSizeListArray.from_arrays(
            pa.array(numeric.astype(np.float32).ravel(), types["obs_numeric"].value_type), type=types["obs_numeric"]),
        "obs_unknown_words": pa.array((tokens == UNK_ID).sum(axis=1), types["obs_unknown_words"]),
    }


_ACTIVE_FIELDS = operator.itemgetter("name", "item", "ability", "types", "status", "effects", "tera_type", "hp_pct",
                                     "moves")
_BOOST_VALUES = operator.itemgetter(*_BOOSTS)
_LEVEL = operator.itemgetter("level")
_MOVE_WORDS = operator.itemgetter("name", "move_type", "category")
_TERASTALLIZED = operator.itemgetter("terastallized")
_PLAYER_ACTIVE = operator.itemgetter("player_active")
_OPPONENT_ACTIVE = operator.itemgetter("opponent_active")
_SWITCHES = operator.itemgetter("available_switches")
_PLAYER_REMAINING = operator.itemgetter("player_remaining")
_OPPONENTS_REMAINING = operator.itemgetter("opponents_remaining")
_GLOBAL_FIELDS_NAMES = ("forced_switch", "can_tera", "can_zmove", "can_dynamax", "weather", "battle_field",
                        "player_prev_move",
                        "opponent_prev_move", "player_conditions", "opponent_conditions")
_GLOBAL_FIELDS = operator.itemgetter(*_GLOBAL_FIELDS_NAMES)

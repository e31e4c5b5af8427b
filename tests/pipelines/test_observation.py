"""Observation spec: exact sizes, a fixed vocabulary, unknown words counted and never clamped."""

from __future__ import annotations

import copy
import json

import pyarrow as pa
import pytest
from conftest import shared_data

from pipelines.pokemon.observation import (
    OBS_WORD_FIELDS,
    UNK_ID,
    decode_tokens,
    observation_columns,
    observation_numeric,
    observation_words,
    observe,
    stored_value,
    vocabulary,
)
from shards_schema.pokemon import (
    MOVE_SLOT_NUMBERS,
    MOVE_SLOT_WORDS,
    OBS_NUMERIC,
    OBS_WORDS,
    SWITCH_SLOT_NUMBERS,
    SWITCH_SLOT_WORDS,
    TURNS_SCHEMA,
)


def _move(name, mtype="normal", bp=40, pp=35):
    return {"name": name, "move_type": mtype, "category": "physical", "base_power": bp, "accuracy": 1.0,
            "priority": 0, "current_pp": pp, "max_pp": pp}


def _mon(name, moves, hp=1.0):
    return {"name": name, "base_species": name, "hp_pct": hp, "types": ["normal"], "item": "leftovers",
            "ability": "noability", "level": 100, "status": "nostatus", "effects": [], "moves": moves,
            "atk_boost": 2, "def_boost": 0, "spa_boost": 0, "spd_boost": 0, "spe_boost": -1, "accuracy_boost": 0,
            "evasion_boost": 0, "base_hp": 250, "base_atk": 5, "base_def": 5, "base_spa": 105, "base_spd": 105,
            "base_spe": 50, "tera_type": "notype", "terastallized": False, "dynamax_turns": 0}


@pytest.fixture
def state():
    return {
        "player_active": _mon("chansey", [_move("softboiled"), _move("icebeam", "ice", 95, 16)], hp=0.63),
        "opponent_active": _mon("alakazam", [_move("psychic", "psychic", 90, 16)]),
        "available_switches": [_mon("snorlax", []), _mon("gengar", [])],
        "player_prev_move": _move("icebeam", "ice", 95, 16), "opponent_prev_move": None,
        "player_remaining": 6, "opponents_remaining": 5, "player_conditions": ["reflect"],
        "opponent_conditions": [], "weather": "noweather", "battle_field": [], "forced_switch": False,
        "can_tera": False, "can_zmove": False, "can_dynamax": False, "opponent_teampreview": [],
    }


def test_sizes_and_layout(state):
    words = observation_words(state, "gen1ou")
    assert len(words) == OBS_WORDS
    assert words[:3] == ["gen1ou", "noforcedswitch", "nogimmick"]
    assert words[12] == "chansey" and words[32] == "alakazam"
    assert words[32 + 8 + 3:32 + 8 + 6] == ["unknownmove", "unknowntype", "unknowncategory"]
    assert words[52] == "snorlax" and words[52 + 14:] == ["<blank>"] * 21
    numeric = observation_numeric(state)
    assert len(numeric) == OBS_NUMERIC
    assert numeric[0] == pytest.approx(0.63) and numeric[1] == pytest.approx(2 / 6)
    assert numeric[8] == pytest.approx(40 / 200) and numeric[42] == pytest.approx(5 / 6)


@pytest.mark.parametrize("flags,word", [({"can_tera": True}, "cantera"), ({"can_zmove": True}, "canzmove"),
                                        ({"can_dynamax": True}, "candynamax")])
def test_the_gimmick_open_now_and_dynamax_turns(state, flags, word):
    """Word 2 names the generation's gimmick the player may use; numbers 48-49 the actives' Dynamax turns left."""
    state = {**state, **flags, "player_active": {**state["player_active"], "dynamax_turns": 2},
             "opponent_active": {**state["opponent_active"], "dynamax_turns": 1}}
    text, tokens, numeric, unknown = observe(state, "gen8randombattle")
    assert text.split()[2] == word and unknown == 0
    assert numeric[48:] == pytest.approx([2 / 3, 1 / 3])
    columns = observation_columns([state], ["gen8randombattle"])
    assert columns["obs_text"][0].as_py() == text and columns["obs_tokens"][0].as_py() == tokens
    assert columns["obs_numeric"][0].as_py() == pytest.approx(numeric)


def test_vocabulary_is_fixed():
    vocab = vocabulary()
    assert [vocab["<pad>"], vocab["<unk>"], vocab["<blank>"]] == [0, 1, 2]
    assert len(set(vocab.values())) == len(vocab)
    for word in ("chansey", "icebeam", "leftovers", "gen9randombattle", "unknownitem", "stealthrock"):
        assert word in vocab


def test_unknown_words_map_to_unk_and_are_counted(state):
    text, tokens, _, unknown = observe(state, "gen1ou")
    assert unknown == 0 and UNK_ID not in tokens
    odd = copy.deepcopy(state)
    odd["player_active"]["name"] = "notarealmon"
    odd["opponent_active"]["item"] = "mysteryberryx"
    text, tokens, _, unknown = observe(odd, "gen1ou")
    assert unknown == 2
    assert tokens[12] == UNK_ID and tokens[33] == UNK_ID
    assert max(tokens) < len(vocabulary())
    assert text.split()[12] == "notarealmon"  # the text keeps the word; only its id is <unk>


def test_each_action_slot_names_its_own_move_or_switch_target(state):
    """The policy's slot head (``models.pokemon_policy.ActionSlots``) reads each action's words and numbers at these
    positions: move slot i's id, type and category and its four numbers; switch slot j's seven words and its HP."""
    for i, at in enumerate(MOVE_SLOT_WORDS):
        assert [OBS_WORD_FIELDS[k] for k in at] == [f"player_active.moves[{i}].{f}" for f in
                                                    ("name", "move_type", "category")]
    for j, at in enumerate(SWITCH_SLOT_WORDS):
        assert [OBS_WORD_FIELDS[k] for k in at] == [f"available_switches[{j}].{f}" for f in
                                                    ("name", "item", "ability", "types[0]", "types[1]", "status",
                                                     "tera_type")]
    numeric = observation_numeric(state)
    icebeam = [numeric[k] for k in MOVE_SLOT_NUMBERS[1]]
    assert icebeam == pytest.approx([95 / 200, 1.0, 1.0, 0.0])
    state["available_switches"][1]["hp_pct"] = 0.25
    assert observation_numeric(state)[SWITCH_SLOT_NUMBERS[1][0]] == pytest.approx(0.25)


def test_tokens_decode_back_to_words_of_their_fields(state):
    odd = copy.deepcopy(state)
    odd["player_active"]["item"] = "mysteryberryx"
    text, tokens, _, _ = observe(odd, "gen1ou")
    words = decode_tokens(tokens)
    assert words == [w if w != "mysteryberryx" else "<unk>" for w in text.split()]
    assert words[13] == "<unk>" and OBS_WORD_FIELDS[13] == "player_active.item"
    # every word that is a stored string is the stored value its field names; the rest are fillers or flags
    values = [stored_value(odd, field, "gen1ou") for field in OBS_WORD_FIELDS]
    strings = [(t, v) for t, v in zip(text.split(), values, strict=True) if isinstance(v, str)]
    assert len(strings) > 30 and all(t == v for t, v in strings)
    assert values[OBS_WORD_FIELDS.index("opponent_active.moves[0].name")] == "psychic"
    assert values[OBS_WORD_FIELDS.index("opponent_active.moves[1].name")] is None  # not revealed
    assert values[OBS_WORD_FIELDS.index("available_switches[4].name")] is None  # an empty slot
    assert values[OBS_WORD_FIELDS.index("forced_switch")] is False
    with pytest.raises(ValueError, match="outside"):
        decode_tokens([len(vocabulary())])


@pytest.mark.parametrize("gen", range(1, 10))
def test_every_dex_move_item_and_ability_renders_87_known_words(gen):
    """Every move (its id, type and category), item and ability of a generation's dex, rendered the way the parsers
    render them (``BattleTracker.move_state``/``mon_state``), gives 87 non-empty words, all in the vocabulary.
    The ``???`` type of Curse (gens 2-4) and Bide (gen 1) was an empty word: ``obs_text`` split into 86."""
    from pipelines.pokemon.dex import load_dex
    from pipelines.pokemon.tracker import BattleTracker, Mon

    dex = load_dex(gen)
    tracker = BattleTracker(dex, f"gen{gen}ou")
    # MissingNo.'s "Bird" type is not a type of any generation's type chart, so not a vocabulary word (<unk>)
    species = sorted(s for s in dex.species if s != "missingno")
    moves, items, abilities = sorted(dex.moves), sorted(dex.items), sorted(dex.abilities)
    vocab = vocabulary()
    num_states = max(len(moves) // 4, len(items) // 7, len(abilities) // 7) + 1
    for i in range(num_states):
        mons = []
        for slot in range(7):  # player active, opponent active, five switches
            k = i * 7 + slot
            mon = Mon(f"mon{slot}", dex.species[species[k % len(species)]]["name"], 100, gen)
            if gen >= 2:
                mon.item = items[k % len(items)]
            if gen >= 3:
                mon.ability = abilities[k % len(abilities)]
            first = (i * 4 + (slot % 2) * 2) % len(moves)
            mons.append(tracker.mon_state(mon, [tracker.move_state(m) for m in (moves * 2)[first:first + 4]]))
        state = {"player_active": mons[0], "opponent_active": mons[1], "available_switches": mons[2:],
                 "player_prev_move": tracker.move_state(moves[i % len(moves)]), "opponent_prev_move": None,
                 "player_remaining": 6, "opponents_remaining": 6, "player_conditions": [],
                 "opponent_conditions": [], "weather": "noweather", "battle_field": [], "forced_switch": False,
                 "can_tera": False, "can_zmove": False, "can_dynamax": False, "opponent_teampreview": []}
        text, tokens, _, unknown = observe(state, f"gen{gen}ou")
        words = text.split()
        assert len(words) == OBS_WORDS and all(words), (gen, i, text)
        assert unknown == 0, [w for w in words if w not in vocab]
        assert len(tokens) == OBS_WORDS


def _observed_row_by_row(states: list[dict], formats: list[str]) -> dict[str, pa.Array]:
    """``observe`` on each state, as the columns ``observation_columns`` returns."""
    observed = [observe(s, f) for s, f in zip(states, formats, strict=True)]
    return {name: pa.array([o[k] for o in observed], type=TURNS_SCHEMA.field(name).type)
            for k, name in enumerate(("obs_text", "obs_tokens", "obs_numeric", "obs_unknown_words"))}


def _assert_columns_equal_observe(states: list[dict], formats: list[str]) -> None:
    got, want = observation_columns(states, formats), _observed_row_by_row(states, formats)
    assert list(got) == list(want)
    for name, column in want.items():
        if not got[name].equals(column):
            row = next(i for i, (a, b) in enumerate(zip(got[name].to_pylist(), column.to_pylist(), strict=True))
                       if a != b)
            raise AssertionError(f"{name} of row {row}: {got[name][row]} != {column[row]}")


def test_observation_columns_equal_observe_with_shared_and_changed_pokemon(state):
    """The fast path renders each distinct dict and list once, keyed by identity: the same dict in another role
    (an active that was a switch), an equal-valued new dict, absent Pokémon and empty slots, more than four revealed
    moves, formats that change between rows must all come out as ``observe`` gives them."""
    swapped = {**state, "player_active": state["available_switches"][0],
               "available_switches": [state["player_active"], *state["available_switches"][1:]]}
    odd = copy.deepcopy(state)
    odd["player_active"]["name"] = "notarealmon"
    empty = {**state, "player_active": None, "opponent_active": None, "available_switches": [],
             "forced_switch": True, "can_tera": True, "battle_field": ["trickroom", "gravity", "x"]}
    many = copy.deepcopy(state)
    many["opponent_active"]["moves"] = [_move(f"move{i}", bp=10 * i) for i in range(6)]
    many["player_active"]["moves"] = []
    many["player_active"]["types"] = []
    many["player_active"]["effects"] = ["confusion", "substitute"]
    states = [state, swapped, state, odd, empty, copy.deepcopy(state), swapped, many, {**many, "weather": "raindance"}]
    _assert_columns_equal_observe(states, ["gen1ou", "gen1ou", "gen9ou", *["gen1ou"] * 6])
    _assert_columns_equal_observe(states[4:5], ["gen1ou"])
    empty_columns = observation_columns([], [])
    assert all(len(column) == 0 for column in empty_columns.values())
    assert [column.type for column in empty_columns.values()] == [
        TURNS_SCHEMA.field(name).type for name in ("obs_text", "obs_tokens", "obs_numeric", "obs_unknown_words")]


def test_observation_columns_equal_observe_on_every_row_of_the_shared_replays():
    """On parser output (dicts shared between rows, as rendered) and on the same states deep-copied (each row its
    own dicts, as read back from a shard)."""
    from pipelines.pokemon.dex import load_dex
    from pipelines.pokemon.spectator import spectator_trajectories

    paths = sorted(shared_data("pokemon", "showdown_replays").glob("*.json"))
    bench = shared_data("pokemon", "bench_replays")
    paths += sorted((bench / "gen1ou").glob("*.json"))[:20] + sorted((bench / "gen9ou").glob("*.json"))[:20]
    rows = []
    for path in paths:
        replay = json.loads(path.read_text())
        rows += spectator_trajectories(replay["log"].split("\n"), load_dex(int(replay["formatid"][3])),
                                       format_id=replay["formatid"], battle_id=replay["id"])
    assert len(rows) > 2000
    states, formats = [r["state"] for r in rows], [r["format"] for r in rows]
    _assert_columns_equal_observe(states, formats)
    _assert_columns_equal_observe(copy.deepcopy(states), formats)

"""Gen 4-8 mechanics and older log forms in spectator logs: format ids without a generation, ``[from]X`` without the
space, Sleep Talk and Metronome, Mega Evolution, Transform, Frisk, Z-moves and Max moves. Small hand-written battles,
each line in the form pokemon-showdown writes it (0.11.11 unless said), and the simulator's own gen 5-8 battles."""

from __future__ import annotations

import json
import subprocess

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import needs_simulator

from pipelines.errors import UnknownFormatError
from pipelines.pokemon.agreement import action_meaning
from pipelines.pokemon.dex import SIGNATURE_Z_MOVES, Z_MOVE_TYPES, known_formats, load_dex, node_env, showdown_dir
from pipelines.pokemon.replays import ReplayFilters, canonical_format, normalize, parse, plan_row_groups, read_row_group
from pipelines.pokemon.spectator import respaced, spectator_trajectories
from pipelines.pokemon.tracker import BattleTracker

DEXES = {g: load_dex(g) for g in range(1, 10)}


def battle(gen: int, p1: str, p2: str, *turns: list[str], header: tuple[str, ...] = (),
           leads: tuple[str, ...] = ()) -> list[str]:
    """A spectator log: Alice's ``p1`` against Bob's ``p2`` (species as nicknames, level 80), ``turns`` of lines,
    then Alice wins. ``header`` replaces the ``|gen|`` line; ``leads`` follow the two lead switches."""
    lines = ["|player|p1|Alice|", "|player|p2|Bob|", *(header or (f"|gen|{gen}",)), "|teamsize|p1|1",
             "|teamsize|p2|1", "|start", f"|switch|p1a: {p1}|{p1}, L80|100/100",
             f"|switch|p2a: {p2}|{p2}, L80|100/100", *leads]
    for number, lines_of_turn in enumerate(turns, 1):
        lines += [f"|turn|{number}", *lines_of_turn, "|"]
    return lines + [f"|turn|{len(turns) + 1}", "|win|Alice"]


def rows_of(lines: list[str], gen: int) -> dict[tuple[str, int], dict]:
    """(side, turn) → that side's row at the start of the turn (the last row: the battle's end)."""
    rows = spectator_trajectories(lines, DEXES[gen], format_id=f"gen{gen}ou", battle_id="b")
    return {(r["player_side"], r["battle_turn"]): r for r in rows if not r["state"]["forced_switch"]}


def move_names(mon: dict | None) -> list[str]:
    return [m["name"] for m in mon["moves"]] if mon else []


def choice(row: dict) -> tuple | None:
    return action_meaning(row["state"], row["action"])


# ---------------------------------------------------------------------------- format ids
def _record(formatid: str, log: list[str]) -> bytes:
    return json.dumps({"id": "old-1", "format": "OU", "formatid": formatid, "players": ["Alice", "Bob"],
                       "log": "\n".join(log), "uploadtime": 1420070400, "rating": None}).encode()


GEN6_BATTLE = battle(6, "Espeon", "Metagross", ["|move|p1a: Espeon|Psychic|p2a: Metagross",
                                                "|-damage|p2a: Metagross|70/100"])


@pytest.mark.parametrize("old,new", [("ou", "gen6ou"), ("ubers", "gen6ubers"), ("uu", "gen6uu"),
                                     ("randombattle", "gen6randombattle")])
def test_a_format_id_without_generation_takes_the_logs(old, new):
    """Replays from before the ids named the generation (``formatid: "ou"``) are parsed under the simulator's id
    for the log's ``|gen|``, which their rows carry; the source's id stays on the ``Replay`` and is said in the
    parse (the job's manifest counts it)."""
    replay = normalize("showdown-json", json.loads(_record(old, GEN6_BATTLE)))
    assert (replay.format, replay.source_format) == (new, old)
    parsed = parse("showdown-json", _record(old, GEN6_BATTLE), DEXES, ReplayFilters(), known_formats())
    assert parsed.filter_reason is None and parsed.rows and {r["format"] for r in parsed.rows} == {new}
    assert parsed.relabelled == f"{old}→{new}"
    # asking for the canonical id keeps it; asking for another filters it
    assert parse("showdown-json", _record(old, GEN6_BATTLE), DEXES, ReplayFilters(formats=frozenset({new})),
                 known_formats()).filter_reason is None
    assert parse("showdown-json", _record(old, GEN6_BATTLE), DEXES, ReplayFilters(formats=frozenset({"gen7ou"})),
                 known_formats()).filter_reason == "format_not_requested"


def test_prefixed_ids_are_kept_and_doubles_are_still_filtered():
    assert normalize("showdown-json", json.loads(_record("gen6ou", GEN6_BATTLE))).source_format is None
    assert parse("showdown-json", _record("gen6ou", GEN6_BATTLE), DEXES, ReplayFilters(),
                 known_formats()).relabelled is None
    doubles = GEN6_BATTLE[:2] + ["|gametype|doubles"] + GEN6_BATTLE[2:]
    assert parse("showdown-json", _record("doublesou", doubles), DEXES, ReplayFilters(),
                 known_formats())[:2] == ([], "not_singles")


@pytest.mark.parametrize("old,new", [("mono", "gen6monotype"), ("gen6mono", "gen6monotype"),
                                     ("oumonotype", "gen6monotype"), ("gen6oumonotype", "gen6monotype"),
                                     ("overused", "gen6ou"), ("randbats", "gen6randombattle")])
def test_an_alias_or_older_tier_name_is_its_generations_format(old, new):
    """The simulator's format aliases (gen 9's ``mono``) and an older tier name (2014's "OU Monotype") resolve to
    the format of the log's generation, and the relabelling is said."""
    parsed = parse("showdown-json", _record(old, GEN6_BATTLE), DEXES, ReplayFilters(), known_formats())
    assert parsed.rows and {r["format"] for r in parsed.rows} == {new}
    assert parsed.relabelled == f"{old}→{new}"


def test_the_game_type_decides_not_singles_before_the_format_is_looked_up():
    """A doubles battle of a format the simulator no longer has (a retired VGC season) is filtered as doubles,
    by its |gametype| line or, without one, by its format's name; a singles battle of an unknown format is
    unknown."""
    doubles = GEN6_BATTLE[:2] + ["|gametype|doubles"] + GEN6_BATTLE[2:]
    for formatid, log in [("gen9vgc2023regulationc", doubles), ("gen9vgc2023regulationc", GEN6_BATTLE),
                          ("vgc2014", GEN6_BATTLE), ("gen9doublesou", GEN6_BATTLE)]:
        assert parse("showdown-json", _record(formatid, log), DEXES, ReplayFilters(),
                     known_formats())[:2] == ([], "not_singles"), formatid
    singles = GEN6_BATTLE[:2] + ["|gametype|singles"] + GEN6_BATTLE[2:]
    with pytest.raises(UnknownFormatError, match="nor is any alias or older tier name"):
        parse("showdown-json", _record("gen9vgc2023regulationc", singles), DEXES, ReplayFilters(), known_formats())


def test_the_name_rule_matches_no_singles_format_and_every_named_doubles_one():
    """The format-name rule that reads an unknown id's game type is checked against every format of the pinned
    simulator: no singles format's id matches it; the only other formats it misses have names that say nothing
    (12 Switch, Partners in Crime, Metronome Battle, Orre Colosseum)."""
    from pipelines.pokemon.dex import game_type
    from pipelines.pokemon.replays import _NOT_SINGLES_NAME
    singles = {f for f in known_formats() if game_type(f) == "singles"}
    assert len(singles) > 200 and not {f for f in singles if _NOT_SINGLES_NAME.search(f)}
    missed = {f for f in known_formats() - singles if not _NOT_SINGLES_NAME.search(f)}
    assert missed == {"gen912switch", "gen9partnersincrime", "gen9metronomebattle", "gen3orrecolosseum"}


def test_a_format_id_without_generation_or_gen_line_is_unknown_and_says_why():
    no_gen = battle(6, "Espeon", "Metagross", ["|move|p1a: Espeon|Psychic|p2a: Metagross"], header=("|tier|OU",))
    with pytest.raises(UnknownFormatError, match=r"no gen<N> prefix.*no \|gen\| line"):
        parse("showdown-json", _record("ou", no_gen), DEXES, ReplayFilters(), known_formats())
    with pytest.raises(UnknownFormatError, match=r"'gen6oususpecttest' \(the source's 'oususpecttest'"):
        parse("showdown-json", _record("oususpecttest", GEN6_BATTLE), DEXES, ReplayFilters(), known_formats())
    assert canonical_format("ou", "|j|x\n|gen|5\n|tier|OU") == "gen5ou"
    assert canonical_format("gen9ou", "|gen|6") == "gen9ou"


def test_a_table_read_for_a_format_keeps_its_unprefixed_rows(tmp_path):
    """hf-raw rows are kept or skipped by format while the table is read: by the canonical id."""
    rows = [{"id": f"b{i}", "format": "OU", "formatid": fmt, "players": ["A", "B"], "log": "\n".join(log),
             "uploadtime": 1420070400, "rating": 0}
            for i, (fmt, log) in enumerate([("ou", GEN6_BATTLE), ("ou", battle(5, "Espeon", "Metagross")),
                                             ("gen6ou", GEN6_BATTLE), ("gen6uu", GEN6_BATTLE)])]
    path = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    items = plan_row_groups(str(tmp_path), [(str(path), path.stat().st_size)], "hf-raw", ["gen6ou"])
    assert [r["input_id"] for item in items for r in read_row_group(item)] == ["t.parquet::b0", "t.parquet::b2"]


# ---------------------------------------------------------------------------- [from]X, [of]X
def test_unspaced_from_and_of_are_respaced():
    lines = ["|move|p1a: Espeon|Stealth Rock|p2a: X|[from]Magic Bounce",
             "|-damage|p2a: X|90/100|[from]Rocky Helmet|[of]p1a: Espeon",
             "|move|p1a: Espeon|Thunderbolt|p2a: X|[from]Metronome",  # Metronome is an item too: the move first
             "|move|p1a: Espeon|Outrage|p2a: X|[from]lockedmove",
             "|-heal|p1a: Espeon|100/100|[from] item: Leftovers", "|move|p1a: Espeon|Psychic|p2a: X"]
    assert respaced(lines, DEXES[6]) == [
        "|move|p1a: Espeon|Stealth Rock|p2a: X|[from] ability: Magic Bounce",
        "|-damage|p2a: X|90/100|[from] item: Rocky Helmet|[of] p1a: Espeon",
        "|move|p1a: Espeon|Thunderbolt|p2a: X|[from] Metronome", "|move|p1a: Espeon|Outrage|p2a: X|[from] lockedmove",
        "|-heal|p1a: Espeon|100/100|[from] item: Leftovers", "|move|p1a: Espeon|Psychic|p2a: X"]


@pytest.mark.parametrize("bounced", ["[from]Magic Bounce", "[from] ability: Magic Bounce"])
def test_a_bounced_move_is_the_bouncers_ability_not_its_move(bounced):
    """A real gen 6 replay: Espeon's Magic Bounce reflects Stealth Rock, written ``[from]Magic Bounce`` by the
    Showdown of the time. Espeon's moves stay its own two, and both players learn its ability."""
    rows = rows_of(battle(6, "Espeon", "Metagross",
                          ["|move|p1a: Espeon|Calm Mind|p1a: Espeon", "|-boost|p1a: Espeon|spa|1",
                           "|move|p2a: Metagross|Stealth Rock|p1a: Espeon",
                           f"|move|p1a: Espeon|Stealth Rock|p2a: Metagross|{bounced}",
                           "|-sidestart|p2: Bob|move: Stealth Rock"],
                          ["|move|p2a: Metagross|Meteor Mash|p1a: Espeon", "|-damage|p1a: Espeon|50/100",
                           "|move|p1a: Espeon|Psychic|p2a: Metagross", "|-damage|p2a: Metagross|60/100"]), 6)
    assert move_names(rows[("p1", 1)]["state"]["player_active"]) == ["calmmind", "psychic"]
    assert choice(rows[("p1", 1)]) == ("move", "calmmind", False) and choice(rows[("p1", 2)]) == (
        "move", "psychic", False)
    assert rows[("p1", 1)]["state"]["player_active"]["ability"] == "magicbounce"
    seen = rows[("p2", 2)]["state"]["opponent_active"]
    assert move_names(seen) == ["calmmind"] and seen["ability"] == "magicbounce"


def test_an_unspaced_of_names_the_holder():
    rows = rows_of(battle(6, "Ferrothorn", "Garchomp",
                          ["|move|p2a: Garchomp|Earthquake|p1a: Ferrothorn", "|-damage|p1a: Ferrothorn|80/100",
                           "|-damage|p2a: Garchomp|84/100|[from]Rocky Helmet|[of]p1a: Ferrothorn"]), 6)
    assert rows[("p2", 2)]["state"]["opponent_active"]["item"] == "rockyhelmet"
    assert rows[("p1", 1)]["state"]["player_active"]["item"] == "rockyhelmet"


# ---------------------------------------------------------------------------- Sleep Talk, Metronome
@pytest.mark.parametrize("called_by", ["[from] move: Sleep Talk", "[from] Sleep Talk", "[from]Sleep Talk"])
def test_a_move_through_sleep_talk_is_revealed_to_the_foe(called_by):
    """Sleep Talk uses one of its user's own moves: the foe learns it (gen 4+ ``[from] move: Sleep Talk``, gens
    1-3 ``[from] Sleep Talk``, older logs ``[from]Sleep Talk``), at full PP (Sleep Talk paid)."""
    rows = rows_of(battle(6, "Snorlax", "Skarmory",
                          ["|cant|p1a: Snorlax|slp", "|move|p1a: Snorlax|Sleep Talk|p1a: Snorlax",
                           f"|move|p1a: Snorlax|Body Slam|p2a: Skarmory|{called_by}",
                           "|-resisted|p2a: Skarmory", "|-damage|p2a: Skarmory|90/100"]), 6)
    seen = rows[("p2", 2)]["state"]["opponent_active"]
    assert move_names(seen) == ["sleeptalk", "bodyslam"]
    assert seen["moves"][1]["current_pp"] == seen["moves"][1]["max_pp"]
    assert move_names(rows[("p1", 1)]["state"]["player_active"]) == ["sleeptalk", "bodyslam"]
    assert choice(rows[("p1", 1)]) == ("move", "sleeptalk", False)


@pytest.mark.parametrize("called_by", ["[from] move: Metronome", "[from] Metronome", "[from]Metronome"])
def test_a_move_metronome_called_is_nobodys(called_by):
    rows = rows_of(battle(6, "Clefable", "Skarmory",
                          ["|move|p1a: Clefable|Metronome|p1a: Clefable",
                           f"|move|p1a: Clefable|Thunderbolt|p2a: Skarmory|{called_by}",
                           "|-supereffective|p2a: Skarmory", "|-damage|p2a: Skarmory|50/100"]), 6)
    assert move_names(rows[("p2", 2)]["state"]["opponent_active"]) == ["metronome"]
    assert move_names(rows[("p1", 1)]["state"]["player_active"]) == ["metronome"]


# ---------------------------------------------------------------------------- Mega Evolution, Transform, Frisk
@pytest.mark.parametrize("mon,forme,line,item", [
    ("Kangaskhan", "Kangaskhan-Mega", "|-mega|p1a: Kangaskhan|Kangaskhan|Kangaskhanite", "kangaskhanite"),
    ("Groudon", "Groudon-Primal", "|-primal|p1a: Groudon|Red Orb", "redorb"),
    ("Necrozma-Dusk-Mane", "Necrozma-Ultra", "|-burst|p1a: Necrozma-Dusk-Mane|Necrozma|Ultranecrozium Z",
     "ultranecroziumz"),
])
def test_the_item_that_made_a_forme_is_the_item(mon, forme, line, item):
    """pokemon-showdown 0.11.11 (``Pokemon.formeChange``; its gen7randombattle logs for Mega Evolution):
    ``|detailschange|`` then ``|-mega|<mon>|<species>|<stone>``, ``|-primal|<mon>|<orb>`` or
    ``|-burst|<mon>|<species>|<item>``."""
    rows = rows_of(battle(7, mon, "Machamp", [f"|detailschange|p1a: {mon}|{forme}, L80", line,
                                              f"|move|p1a: {mon}|Earthquake|p2a: Machamp",
                                              "|-damage|p2a: Machamp|74/100"]), 7)
    assert rows[("p2", 1)]["state"]["opponent_active"]["item"] == "unknownitem"
    assert rows[("p2", 2)]["state"]["opponent_active"]["item"] == item
    assert rows[("p2", 2)]["state"]["opponent_active"]["name"] == forme.lower().replace("-", "")
    assert rows[("p1", 1)]["state"]["player_active"]["item"] == item  # its own, from the start


def test_transformed_moves_last_one_transform_and_imposter_is_learned():
    """Bob's Ditto transforms (Imposter) into Alice's Espeon, uses Psychic, leaves, comes back into Alice's
    Gengar and uses Shadow Ball: Alice sees Imposter, then only the moves of the current Transform."""
    lines = ["|player|p1|Alice|", "|player|p2|Bob|", "|gen|7", "|start",
             "|switch|p1a: Espeon|Espeon, L80|100/100", "|switch|p2a: Ditto|Ditto, L80|100/100",
             "|-transform|p2a: Ditto|p1a: Espeon|[from] ability: Imposter", "|turn|1",
             "|move|p2a: Ditto|Psychic|p1a: Espeon", "|-damage|p1a: Espeon|80/100", "|turn|2",
             "|switch|p2a: Snorlax|Snorlax, L80|100/100", "|switch|p1a: Gengar|Gengar, L80|100/100", "|turn|3",
             "|switch|p2a: Ditto|Ditto, L80|100/100",
             "|-transform|p2a: Ditto|p1a: Gengar|[from] ability: Imposter", "|turn|4",
             "|move|p2a: Ditto|Shadow Ball|p1a: Gengar", "|-damage|p1a: Gengar|40/100", "|turn|5",
             "|switch|p2a: Snorlax|Snorlax, L80|100/100", "|turn|6", "|switch|p2a: Ditto|Ditto, L80|100/100",
             "|turn|7", "|win|Alice"]
    rows = rows_of(lines, 7)
    ditto = {turn: rows[("p1", turn)]["state"]["opponent_active"] for turn in (1, 2, 5, 7)}
    assert all(mon["ability"] == "imposter" for mon in ditto.values())
    assert (move_names(ditto[1]), move_names(ditto[2]), move_names(ditto[5]), move_names(ditto[7])) == (
        [], ["psychic"], ["shadowball"], [])
    assert rows[("p2", 1)]["state"]["player_active"]["ability"] == "imposter"


@pytest.mark.parametrize("gen", [4, 5])
def test_gen4_5_frisk_reveals_the_foes_item(gen):
    """pokemon-showdown 0.11.11's gen 4-5 Frisk names no holder: ``|-item||<item>|[from] ability: Frisk|[of]
    <frisker>`` (3 of 30 of its gen5randombattle battles, seed 5): the item is the foe's."""
    rows = rows_of(battle(gen, "Furret", "Snorlax",
                          ["|move|p1a: Furret|Double-Edge|p2a: Snorlax", "|-damage|p2a: Snorlax|80/100"],
                          leads=("|-item||Leftovers|[from] ability: Frisk|[of] p1a: Furret",)), gen)
    assert rows[("p1", 1)]["state"]["opponent_active"]["item"] == "leftovers"
    assert rows[("p2", 1)]["state"]["player_active"]["item"] == "leftovers"
    assert rows[("p2", 1)]["state"]["opponent_active"]["ability"] == "frisk"


# ---------------------------------------------------------------------------- Z-moves, Max moves
CHANSEY = ["|move|p1a: Chansey|Seismic Toss|p2a: Garchomp", "|-damage|p2a: Garchomp|80/100"], \
    ["|move|p1a: Chansey|Soft-Boiled|p1a: Chansey", "|-heal|p1a: Chansey|100/100"], \
    ["|move|p1a: Chansey|Toxic|p2a: Garchomp", "|-status|p2a: Garchomp|tox"]
ICE_BEAM = ["|move|p1a: Chansey|Ice Beam|p2a: Garchomp", "|-supereffective|p2a: Garchomp",
            "|-damage|p2a: Garchomp|10/100"]
SUBZERO = ["|-zpower|p1a: Chansey", "|move|p1a: Chansey|Subzero Slammer|p2a: Garchomp|[zeffect]",
           "|-supereffective|p2a: Garchomp", "|-damage|p2a: Garchomp|10/100"]


@pytest.mark.parametrize("spelling", [["|move|p1a: Tyrantrum|Z-Dragon Dance|p1a: Tyrantrum|[anim]Dragon Dance"],
                                      ["|move|p1a: Tyrantrum|Dragon Dance|p1a: Tyrantrum|[zeffect]"]])
def test_a_status_z_move_is_its_base_move(spelling):
    """0.11.11 writes a status Z-move ``Z-<move>`` (its gen7randombattle logs), a move no dex holds: it is the
    base move, chosen through its slot; a ``[zeffect]`` on the base move's own line is read the same way."""
    rows = rows_of(battle(7, "Tyrantrum", "Skarmory",
                          ["|-zpower|p1a: Tyrantrum", *spelling, "|-clearnegativeboost|p1a: Tyrantrum|[zeffect]",
                           "|-boost|p1a: Tyrantrum|atk|1", "|-boost|p1a: Tyrantrum|spe|1"],
                          ["|move|p1a: Tyrantrum|Head Smash|p2a: Skarmory", "|-damage|p2a: Skarmory|60/100"]), 7)
    assert choice(rows[("p1", 1)]) == ("move", "dragondance", False)
    assert move_names(rows[("p1", 1)]["state"]["player_active"]) == ["dragondance", "headsmash"]
    assert move_names(rows[("p2", 2)]["state"]["opponent_active"]) == ["dragondance"]
    assert rows[("p2", 2)]["state"]["opponent_prev_move"]["name"] == "dragondance"


def test_a_damaging_z_move_is_its_base_slot_when_one_known_move_alone_makes_it():
    """Subzero Slammer comes from a damaging Ice move: with all four of Chansey's moves known and Ice Beam the only
    one, it is Ice Beam's slot, and no slot of its own."""
    rows = rows_of(battle(7, "Chansey", "Garchomp", *CHANSEY, ICE_BEAM, SUBZERO), 7)
    assert move_names(rows[("p1", 5)]["state"]["player_active"]) == ["seismictoss", "softboiled", "toxic", "icebeam"]
    assert choice(rows[("p1", 5)]) == ("move", "icebeam", False)
    assert "subzeroslammer" not in move_names(rows[("p2", 6)]["state"]["opponent_active"])


def test_a_damaging_z_move_is_no_slot_when_its_base_is_not_certain():
    """Three known moves: the fourth, never used, may be the Ice move it came from."""
    rows = rows_of(battle(7, "Chansey", "Garchomp", *CHANSEY[:2], ICE_BEAM, SUBZERO), 7)
    assert rows[("p1", 4)]["action"] == -1
    assert move_names(rows[("p1", 4)]["state"]["player_active"]) == ["seismictoss", "softboiled", "icebeam"]


def test_a_signature_z_move_names_its_base():
    rows = rows_of(battle(7, "Pikachu", "Gyarados",
                          ["|-zpower|p1a: Pikachu", "|move|p1a: Pikachu|Catastropika|p2a: Gyarados|[zeffect]",
                           "|-supereffective|p2a: Gyarados", "|-damage|p2a: Gyarados|0 fnt"]), 7)
    assert choice(rows[("p1", 1)]) == ("move", "volttackle", False)
    assert move_names(rows[("p2", 2)]["state"]["opponent_active"]) == ["volttackle"]


@pytest.mark.parametrize("moves,max_move,want", [
    (["Air Slash", "Roost", "Will-O-Wisp", "Dragon Dance"], "Max Airstream", ("move", "airslash", False)),
    (["Air Slash", "Flamethrower", "Roost", "Dragon Dance"], "Max Airstream", None),  # two damaging moves
    (["Air Slash", "Flamethrower", "Roost", "Focus Blast"], "Max Guard", ("move", "roost", False)),
])
def test_a_max_move_is_its_base_slot_when_one_known_move_alone_makes_it(moves, max_move, want):
    """Max moves are never slots; the base is known when the Max move's category leaves one of the four known
    moves (its type may follow the ability or item)."""
    uses = [[f"|move|p1a: Charizard|{m}|p2a: Venusaur", "|-damage|p2a: Venusaur|90/100"] for m in moves]
    dynamax = ["|-start|p1a: Charizard|Dynamax|", f"|move|p1a: Charizard|{max_move}|p2a: Venusaur",
               "|-damage|p2a: Venusaur|40/100"]
    rows = rows_of(battle(8, "Charizard", "Venusaur", *uses, dynamax), 8)
    assert choice(rows[("p1", 5)]) == want
    assert move_names(rows[("p1", 5)]["state"]["player_active"]) == [m.lower().replace(" ", "").replace("-", "")
                                                                      for m in moves]
    assert max_move.lower().replace(" ", "") not in move_names(rows[("p2", 6)]["state"]["opponent_active"])


@needs_simulator
def test_rows_flag_z_moves_and_max_moves():
    """``zmove`` after the side's ``|-zpower|``, ``dynamax`` while the mover is Dynamaxed; ``can_zmove`` for a
    Pokémon the log shows using a Z-move until its side has, ``can_dynamax`` until a gen 8 side has Dynamaxed."""
    rows = rows_of(battle(7, "Snorlax", "Chansey",
                          ["|-zpower|p1a: Snorlax", "|move|p1a: Snorlax|Breakneck Blitz|p2a: Chansey|[zeffect]",
                           "|-damage|p2a: Chansey|50/100"],
                          ["|move|p1a: Snorlax|Body Slam|p2a: Chansey", "|-damage|p2a: Chansey|20/100"]), 7)
    flags = [(rows[("p1", t)]["zmove"], rows[("p1", t)]["state"]["can_zmove"]) for t in (1, 2)]
    assert flags == [(True, True), (False, False)] and not rows[("p2", 1)]["state"]["can_zmove"]
    assert not any(rows[("p1", t)]["dynamax"] or rows[("p1", t)]["state"]["can_dynamax"] for t in (1, 2))
    rows = rows_of(battle(8, "Charizard", "Chansey",
                          ["|-start|p1a: Charizard|Dynamax", "|move|p1a: Charizard|Max Airstream|p2a: Chansey",
                           "|-damage|p2a: Chansey|70/100"],
                          ["|move|p1a: Charizard|Max Airstream|p2a: Chansey", "|-damage|p2a: Chansey|40/100"],
                          ["|move|p1a: Charizard|Max Airstream|p2a: Chansey", "|-damage|p2a: Chansey|10/100",
                           "|-end|p1a: Charizard|Dynamax"],
                          ["|move|p1a: Charizard|Air Slash|p2a: Chansey", "|-damage|p2a: Chansey|0 fnt"]), 8)
    assert [(rows[("p1", t)]["dynamax"], rows[("p1", t)]["state"]["can_dynamax"]) for t in (1, 2, 3, 4)] == [
        (True, True), (True, False), (True, False), (False, False)]
    # turns of Dynamax left, seen the same by its owner and its foe
    assert [rows[("p1", t)]["state"]["player_active"]["dynamax_turns"] for t in (1, 2, 3, 4)] == [0, 2, 1, 0]
    assert [rows[("p2", t)]["state"]["opponent_active"]["dynamax_turns"] for t in (1, 2, 3, 4)] == [0, 2, 1, 0]
    assert rows[("p2", 2)]["state"]["can_dynamax"] and not rows[("p1", 1)]["zmove"]


def test_z_and_max_move_tables_are_the_simulators():
    script = """
const {Dex} = require('pokemon-showdown');
const d = Dex.forGen(8), out = {type: {}, signature: {}, max: []};
for (const m of d.moves.all()) {
  if (m.isZ && !d.items.get(m.isZ).zMoveFrom) out.type[m.id] = m.type.toLowerCase();
  if (m.isMax) out.max.push(m.id);
}
for (const i of d.items.all()) if (i.zMoveFrom) out.signature[d.moves.get(i.zMove).id] = d.moves.get(i.zMoveFrom).id;
console.log(JSON.stringify(out));"""
    sim = json.loads(subprocess.run(["node", "-e", script], capture_output=True, check=True, text=True,
                                    env=node_env(showdown_dir())).stdout)
    assert sim["type"] == Z_MOVE_TYPES and sim["signature"] == SIGNATURE_Z_MOVES
    dex = DEXES[8]
    assert {m for m, base in dex.power_moves.items() if not base} == set(Z_MOVE_TYPES) | set(sim["max"])


# ---------------------------------------------------------------------------- Illusion
# Bob's Zoroark comes in disguised as his Chatot (the real one benched at 60%), is hit after using Night Daze, and the
# Illusion breaks; the real Chatot comes back in on turn 4. Line order as pokemon-showdown 0.11.11 writes it.
ILLUSION = [
    "|player|p1|Alice|", "|player|p2|Bob|", "|gen|7", "|teamsize|p1|1", "|teamsize|p2|2", "|start",
    "|switch|p1a: Snorlax|Snorlax, L80|100/100", "|switch|p2a: Chatot|Chatot, L80|100/100",
    "|turn|1", "|move|p2a: Chatot|Chatter|p1a: Snorlax", "|-damage|p1a: Snorlax|80/100",
    "|move|p1a: Snorlax|Body Slam|p2a: Chatot", "|-damage|p2a: Chatot|60/100", "|",
    "|turn|2", "|switch|p2a: Chatot|Chatot, L80|100/100", "|move|p1a: Snorlax|Curse|p1a: Snorlax",
    "|-boost|p1a: Snorlax|atk|1", "|", "|turn|3", "|move|p2a: Chatot|Night Daze|p1a: Snorlax",
    "|-damage|p1a: Snorlax|50/100", "|move|p1a: Snorlax|Body Slam|p2a: Chatot", "|-damage|p2a: Chatot|40/100",
    "|replace|p2a: Zoroark|Zoroark, L80, M", "|-end|p2a: Zoroark|Illusion", "|",
    "|turn|4", "|switch|p2a: Chatot|Chatot, L80|60/100", "|move|p1a: Snorlax|Body Slam|p2a: Chatot",
    "|-damage|p2a: Chatot|20/100", "|", "|turn|5", "|win|Alice",
]


def test_an_illusion_is_its_owners_choice_and_the_foes_disguise():
    """The owner chose Zoroark and saw it active; the foe saw Chatot do what Zoroark did until the Illusion broke,
    then gives Zoroark its move, HP and boosts, and the real Chatot its own."""
    rows = rows_of(ILLUSION, 7)
    assert choice(rows[("p2", 2)]) == ("switch", "zoroark")
    owner = rows[("p2", 3)]["state"]
    assert owner["player_active"]["name"] == "zoroark" and move_names(owner["player_active"]) == ["nightdaze"]
    assert [(m["name"], m["hp_pct"], move_names(m)) for m in owner["available_switches"]] == [
        ("chatot", 0.6, ["chatter"])]
    seen = rows[("p1", 3)]["state"]["opponent_active"]
    assert (seen["name"], seen["hp_pct"], move_names(seen)) == ("chatot", 1.0, ["chatter"])
    seen = rows[("p1", 4)]["state"]["opponent_active"]
    assert (seen["name"], seen["hp_pct"], move_names(seen)) == ("zoroark", 0.4, ["nightdaze"])
    seen = rows[("p1", 5)]["state"]["opponent_active"]
    assert (seen["name"], seen["hp_pct"], move_names(seen)) == ("chatot", 0.2, ["chatter"])


def test_a_broken_illusion_gives_the_disguise_back_what_it_had():
    """A player's own stream (``pov.py``) reads the same public lines through the tracker: under the disguise its
    foe is Chatot, and the ``|replace|`` moves what the disguise did to Zoroark."""
    tracker = BattleTracker(DEXES[7], "gen7ou")
    for line in ILLUSION[:ILLUSION.index("|replace|p2a: Zoroark|Zoroark, L80, M")]:
        tracker.apply(line)
    foe = tracker.sides["p2"]
    assert (foe.active.name, foe.active.hp_pct, dict(foe.active.moves)) == ("Chatot", 0.4, {"chatter": 1,
                                                                                            "nightdaze": 1})
    tracker.apply("|replace|p2a: Zoroark|Zoroark, L80, M")
    chatot, zoroark = foe.mons["Chatot"], foe.mons["Zoroark"]
    assert foe.active is zoroark and not chatot.active
    assert (zoroark.hp_pct, dict(zoroark.moves)) == (0.4, {"nightdaze": 1})
    assert (chatot.hp_pct, dict(chatot.moves)) == (0.6, {"chatter": 1})


def test_a_switch_an_unbroken_illusion_may_have_faked_is_not_guessed():
    """Bob's side has a Zoroark (the log unmasks it on turn 3): his turn-1 switch-in took no hit before leaving,
    so it may have been Zoroark in disguise and its action is -1; a switch-in hit without an Illusion breaking is
    the Pokémon shown; the unmasked one is Zoroark."""
    lines = ["|player|p1|Alice|", "|player|p2|Bob|", "|gen|9", "|teamsize|p1|1", "|teamsize|p2|3", "|start",
             "|switch|p1a: Snorlax|Snorlax, L80|100/100", "|switch|p2a: Chatot|Chatot, L80|100/100",
             "|turn|1", "|switch|p2a: Mewtwo|Mewtwo, L80|100/100", "|move|p1a: Snorlax|Curse|p1a: Snorlax",
             "|-boost|p1a: Snorlax|atk|1", "|",
             "|turn|2", "|switch|p2a: Chatot|Chatot, L80|100/100", "|move|p1a: Snorlax|Body Slam|p2a: Chatot",
             "|-damage|p2a: Chatot|50/100", "|",
             "|turn|3", "|switch|p2a: Mewtwo|Mewtwo, L80|100/100", "|move|p1a: Snorlax|Body Slam|p2a: Mewtwo",
             "|-damage|p2a: Mewtwo|60/100", "|replace|p2a: Zoroark|Zoroark, L80, M", "|-end|p2a: Zoroark|Illusion",
             "|", "|turn|4", "|win|Alice"]
    rows = rows_of(lines, 9)
    assert [choice(rows[("p2", t)]) for t in (1, 2, 3)] == [None, ("switch", "chatot"), ("switch", "zoroark")]


def test_forme_changes_end_when_the_pokemon_leaves():
    """A ``|-formechange|`` (Schooling, Stance Change) lasts while the Pokémon is active: benched, it is its base
    forme again, as the owner's request shows it."""
    log = battle(7, "Snorlax", "Wishiwashi", ["|switch|p2a: Wishiwashi|Wishiwashi, L80|100/100"],
                 leads=("|-formechange|p2a: Wishiwashi|Wishiwashi-School||[from] ability: Schooling",))
    tracker = BattleTracker(DEXES[7], "gen7ou")
    for line in log[:log.index("|turn|1") + 1]:
        tracker.apply(line)
    assert tracker.sides["p2"].active.species == "Wishiwashi-School"
    tracker.sides["p2"].active.switch_out()
    assert tracker.sides["p2"].mons["Wishiwashi"].species == "Wishiwashi"


def test_revival_blessing_is_a_decision_of_its_side():
    """The player whose Pokémon used Revival Blessing chose which fainted one to revive (its request asks, as a
    forced switch among the fainted): a decision with action -1, so both views keep the players' decision points."""
    lines = ["|player|p1|Alice|", "|player|p2|Bob|", "|gen|9", "|teamsize|p1|1", "|teamsize|p2|2", "|start",
             "|switch|p1a: Snorlax|Snorlax, L80|100/100", "|switch|p2a: Ho-Oh|Ho-Oh, L80|100/100",
             "|turn|1", "|move|p1a: Snorlax|Body Slam|p2a: Ho-Oh", "|-damage|p2a: Ho-Oh|0 fnt", "|faint|p2a: Ho-Oh",
             "|", "|upkeep", "|switch|p2a: Pawmot|Pawmot, L80|100/100",
             "|turn|2", "|move|p2a: Pawmot|Revival Blessing|p2a: Pawmot", "|",
             "|-heal|p2: Ho-Oh|50/100|[from] move: Revival Blessing", "|", "|upkeep", "|turn|3", "|win|Alice"]
    rows = spectator_trajectories(lines, DEXES[9], format_id="gen9randombattle", battle_id="b")
    p2 = [(r["battle_turn"], r["state"]["forced_switch"], r["action"]) for r in rows if r["player_side"] == "p2"]
    assert p2 == [(1, False, -1), (1, True, 4), (2, False, 0), (2, True, -1), (3, False, -1), (3, False, -1)]


# ---------------------------------------------------------------------------- the simulator's own battles
@needs_simulator
@pytest.mark.parametrize("fmt", ["gen5randombattle", "gen6randombattle", "gen7randombattle", "gen8randombattle",
                                 "gen5ou", "gen6ou", "gen7ou", "gen8ou"])
def test_no_simulator_battle_of_gens_5_to_8_is_quarantined(fmt):
    """The project's generator (no Ray): every battle parses from both players' streams and from its spectator
    log, with the same decision points and the same Z-move and Max move flags. OU teams are random-battle sets the
    format's validator accepts (gen 8 OU bans Dynamax)."""
    from pipelines.pokemon import generated

    count = powers = 0
    for battle_id, payload in generated.generate(generated.chunks([fmt], 12, 5, "heuristic", "random", 12)[0]):
        truth, _ = generated.parse(battle_id, payload, DEXES, None)
        recon = spectator_trajectories(json.loads(payload)["spectator_log"], DEXES[int(fmt[3])], format_id=fmt,
                                       battle_id=battle_id)
        assert [r["state"]["forced_switch"] for r in truth] == [r["state"]["forced_switch"] for r in recon]
        truth_powers = [(r["zmove"], r["dynamax"]) for r in truth]
        assert truth_powers == [(r["zmove"], r["dynamax"]) for r in recon], battle_id
        powers += sum(map(any, truth_powers))
        count += 1
    assert count == 12
    # the generator's players use the generation's gimmick (gen 7: Z-moves, gen 8: Dynamax)
    if fmt.endswith("randombattle"):
        assert (powers > 0) == (fmt in ("gen7randombattle", "gen8randombattle"))
    else:
        assert fmt != "gen8ou" or powers == 0

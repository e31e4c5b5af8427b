"""Spectator-log reconstruction: golden values on two real replays, ground truth on simulator battles, fuzz."""

from __future__ import annotations

import json
import random

import pytest
from conftest import needs_simulator, shared_data, simulator_missing

from pipelines.errors import InputError, ProtocolError, TruncatedBattleError
from pipelines.pokemon.agreement import Agreement, action_meaning, add_generated_battles
from pipelines.pokemon.dex import load_dex
from pipelines.pokemon.spectator import spectator_trajectories

DEXES = {g: load_dex(g) for g in range(1, 10)}


def _replay(name):
    data = json.loads(shared_data("pokemon", "showdown_replays", f"{name}.json").read_text())
    lines = data["log"].split("\n")
    gen = int(data["formatid"][3])
    return data, lines, spectator_trajectories(lines, DEXES[gen], format_id=data["formatid"], battle_id=data["id"])


def _by_turn(rows, side):
    return {(r["battle_turn"], r["state"]["forced_switch"]): r for r in rows if r["player_side"] == side}


def test_gen1ou_golden():
    _, _, rows = _replay("smogtours-gen1ou-733374")
    p1, p2 = _by_turn(rows, "p1"), _by_turn(rows, "p2")
    assert sum(r["player_side"] == "p1" for r in rows) == 87 and sum(r["player_side"] == "p2" for r in rows) == 90
    want = {  # turn: (p1's action, p2's action), read off the log
        1: (("switch", "chansey"), ("move", "psychic", False)),
        2: (("move", "icebeam", False), ("move", "psychic", False)),
        3: (("move", "icebeam", False), ("switch", "exeggutor")),
        4: (("switch", "exeggutor"), ("move", "sleeppowder", False)),
        5: (("switch", "chansey"), ("switch", "tauros")),
    }
    for turn, (a1, a2) in want.items():
        r1, r2 = p1[(turn, False)], p2[(turn, False)]
        assert action_meaning(r1["state"], r1["action"]) == a1, turn
        assert action_meaning(r2["state"], r2["action"]) == a2, turn
    # after turn 2: Chansey at 63/100 (both views), Alakazam at 80/100
    assert p1[(3, False)]["state"]["player_active"]["hp_pct"] == pytest.approx(0.63)
    assert p2[(3, False)]["state"]["opponent_active"]["hp_pct"] == pytest.approx(0.63)
    assert p1[(3, False)]["state"]["opponent_active"]["hp_pct"] == pytest.approx(0.80)
    # the player knows its own moves from the start (hindsight), the opponent's only once shown
    assert "softboiled" in [m["name"] for m in p1[(2, False)]["state"]["player_active"]["moves"]]
    assert p2[(2, False)]["state"]["opponent_active"]["moves"] == []
    assert [m["name"] for m in p2[(3, False)]["state"]["opponent_active"]["moves"]] == ["icebeam"]
    assert {r["result"] for r in rows if r["player_side"] == "p1"} == {"win"}
    assert {r["result"] for r in rows if r["player_side"] == "p2"} == {"loss"}
    assert rows[0]["player_name"] == "Green on fire"


def test_gen9ou_golden_tera_forfeit_nicknames():
    _, _, rows = _replay("smogtours-gen9ou-733546")
    p1, p2 = _by_turn(rows, "p1"), _by_turn(rows, "p2")
    # turn 7: amaterus's Enamorus ("Gin") terastallizes Fairy and uses Moonblast
    r = p2[(7, False)]
    assert action_meaning(r["state"], r["action"]) == ("move", "moonblast", True) and r["action"] >= 9
    assert r["state"]["can_tera"]
    assert not p2[(8, False)]["state"]["can_tera"]  # tera is spent
    assert p1[(8, False)]["state"]["opponent_active"]["terastallized"]
    assert p1[(8, False)]["state"]["opponent_active"]["types"] == ["fairy"]
    # nicknames resolve to species; the opponent's Volcanion lost its item to Knock Off on turn 1
    assert p1[(1, False)]["state"]["player_active"]["name"] == "clefable"
    assert p1[(2, False)]["state"]["opponent_active"]["item"] == "noitem"
    assert p1[(2, False)]["state"]["player_active"]["hp_pct"] == pytest.approx(0.94)
    # team preview is known to both
    assert "kingambit" in p1[(1, False)]["state"]["opponent_teampreview"]
    # amaterus forfeits during turn 24: both turn-24 decisions show no action, the battle is won by p1
    assert p1[(24, False)]["action"] == -1 and p2[(24, False)]["action"] == -1
    assert {r["result"] for r in rows if r["player_side"] == "p1"} == {"win"}
    last = [r for r in rows if r["player_side"] == "p2"][-1]
    assert last["done"] and last["reward"] == -1.0 and last["result"] == "loss"


def test_chat_and_timer_lines_carry_no_state():
    data, lines, rows = _replay("smogtours-gen9ou-733546")
    noise = ["|c|☆someone|hello |turn|99 not a turn", "|j|☆guest", "|raw|<b>html</b>", "|t:|1701612999",
             "|inactive|timer", "|-hint|a hint", "|l|guest", "|-crit|p1a: x", "||", "plain text line"]
    noisy = [x for line in lines for x in ([line] + noise if line.startswith("|upkeep") else [line])]
    again = spectator_trajectories(noisy, DEXES[9], format_id="gen9ou", battle_id=data["id"])
    assert [r["state"] for r in again] == [r["state"] for r in rows]
    assert [r["action"] for r in again] == [r["action"] for r in rows]


def test_unknown_messages_are_quarantined_not_ignored():
    from pipelines.errors import UnknownMessageError

    data, lines, _ = _replay("smogtours-gen9ou-733546")
    odd = lines[:60] + ["|-teleportation|p1a: bozo bozo bozo|moon"] + lines[60:]
    with pytest.raises(UnknownMessageError):
        spectator_trajectories(odd, DEXES[9], format_id="gen9ou", battle_id=data["id"])


def test_tie():
    data, lines, _ = _replay("smogtours-gen1ou-733374")
    win = next(i for i, line in enumerate(lines) if line.startswith("|win|"))
    rows = spectator_trajectories(lines[:win] + ["|tie"], DEXES[1], format_id="gen1ou", battle_id=data["id"])
    assert {r["result"] for r in rows} == {"tie"} and all(r["reward"] == 0.0 for r in rows)


def test_matches_metamon_decisions_on_shared_samples():
    """Metamon parsed the same two replays: same decision points, same forced switches, same kind of action
    (move, switch, tera move, not visible) at each. Its slot orders differ (its team inference), so kinds."""
    import lz4.frame

    from pipelines.pokemon import metamon

    def kind(action):
        return "none" if action < 0 else "switch" if 4 <= action <= 8 else "tera" if action >= 9 else "move"

    compared = 0
    for name in ("smogtours-gen1ou-733374", "smogtours-gen9ou-733546"):
        _, _, rows = _replay(name)
        for path in sorted(shared_data("pokemon", "metamon_parsed").glob(f"{name}_*.json.lz4")):
            theirs = json.loads(lz4.frame.decompress(path.read_bytes()))
            ours = [r for r in rows if r["player_name"] == metamon.parse_name(path.name).player]
            assert len(ours) == len(theirs["states"])
            assert [r["state"]["forced_switch"] for r in ours] == [s["forced_switch"] for s in theirs["states"]]
            assert [kind(r["action"]) for r in ours] == [kind(a) for a in theirs["actions"]]
            compared += 1
    assert compared == 4


def test_cut_logs_and_impossible_states_are_typed_errors():
    data, lines, _ = _replay("smogtours-gen1ou-733374")
    cut = lines[: len(lines) // 2]
    with pytest.raises(TruncatedBattleError):
        spectator_trajectories(cut, DEXES[1], format_id="gen1ou", battle_id=data["id"])
    faint_at = next(i for i, line in enumerate(lines) if line.startswith("|faint|"))
    fainted = lines[faint_at].split("|")[2]
    impossible = lines[: faint_at + 1] + [f"|move|{fainted}|Tackle|p1a: Snorlax"] + lines[faint_at + 1:]
    with pytest.raises(ProtocolError, match="fainted"):
        spectator_trajectories(impossible, DEXES[1], format_id="gen1ou", battle_id=data["id"])


def test_spectator_log_fuzz():
    data, lines, _ = _replay("smogtours-gen9ou-733546")
    rng = random.Random(3)
    outcomes = set()
    for _ in range(200):
        mutated = list(lines)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(mutated))
            op = rng.randrange(4)
            if op == 0:
                del mutated[i]
            elif op == 1:
                mutated[i] = mutated[i][: rng.randrange(len(mutated[i]) + 1)]
            elif op == 2:
                mutated.insert(i, rng.choice(mutated))
            else:
                parts = mutated[i].split("|")
                rng.shuffle(parts)
                mutated[i] = "|".join(parts)
        try:
            spectator_trajectories(mutated, DEXES[9], format_id="gen9ou", battle_id="x")
            outcomes.add("ok")
        except InputError as err:
            outcomes.add(err.reason)
    assert "ok" in outcomes and len(outcomes) > 1


@needs_simulator
def test_ground_truth_agreement_on_simulator_battles():
    """Reconstruct generated battles from their spectator logs and compare with the players' own streams."""
    agreement = Agreement()
    for fmt in ("gen9randombattle", "gen1ou"):
        add_generated_battles(agreement, fmt, 100, seed=2024)
    print(agreement.report())
    assert agreement.trajectories == 400
    assert agreement.rate("decision_alignment") >= 0.99
    assert agreement.rate("action.visible_identical") >= 0.99
    assert agreement.rate("action.coverage") >= 0.8
    for name in ("player_active.hp", "player_active.status", "opponent_active.hp", "opponent_active.species",
                 "opponent_active.revealed_moves", "switches.known_subset", "weather", "conditions"):
        assert agreement.rate(name) >= 0.99, name


def test_typeless_after_typechange_is_a_word():
    from pipelines.pokemon.observation import observe

    data, lines, _ = _replay("smogtours-gen9ou-733546")
    at = next(i for i, line in enumerate(lines) if line.startswith("|turn|3"))
    changed = lines[:at] + ["|-start|p1a: the fish song|typechange|???/Fighting|[from] move: Burn Up"] + lines[at:]
    rows = spectator_trajectories(changed, DEXES[9], format_id="gen9ou", battle_id=data["id"])
    row = next(r for r in rows if r["player_side"] == "p1" and r["battle_turn"] == 3)
    assert row["state"]["player_active"]["types"] == ["threequestionmarks", "fighting"]
    assert observe(row["state"], "gen9ou")[3] == 0  # no unknown word


def _turn3_replaced(*new_lines):
    """The gen9ou replay with p1's turn-3 move (Slowking's Future Sight) replaced by ``new_lines``."""
    data, lines, _ = _replay("smogtours-gen9ou-733546")
    at = lines.index("|move|p1a: the fish song|Future Sight|p2a: Leviathan")
    rows = spectator_trajectories(lines[:at] + list(new_lines) + lines[at + 1:], DEXES[9], format_id="gen9ou",
                                  battle_id=data["id"])
    row = _by_turn(rows, "p1")[(3, False)]
    return action_meaning(row["state"], row["action"])


@pytest.mark.parametrize("called_by", ["[from] move: Sleep Talk", "[from] Sleep Talk"])  # gen 9, gen 2 spellings
def test_sleep_talk_after_cant_slp_is_the_choice(called_by):
    me = "p1a: the fish song"
    assert _turn3_replaced(f"|cant|{me}|slp", f"|move|{me}|Sleep Talk|{me}",
                           f"|move|{me}|Future Sight|p2a: Leviathan|{called_by}") == ("move", "sleeptalk", False)
    assert _turn3_replaced(f"|cant|{me}|slp", f"|move|{me}|Snore|p2a: Leviathan") == ("move", "snore", False)
    assert _turn3_replaced(f"|cant|{me}|slp") is None  # asleep and nothing else: the choice is hidden


@pytest.mark.parametrize("reason,move", [
    ("Disable", "Future Sight"), ("move: Taunt", "Calm Mind"), ("move: Imprison", "Future Sight"),
    ("move: Gravity", "Future Sight"), ("move: Heal Block", "Slack Off"), ("nopp", "Future Sight"),
    ("Focus Punch", "Focus Punch"),
])
def test_cant_that_names_the_move_shows_the_choice(reason, move):
    """pokemon-showdown 0.11.11 emits these before the move line, naming the move that was chosen; a move seen
    only there is still one of the player's own moves."""
    from pipelines.pokemon.dex import to_id

    assert _turn3_replaced(f"|cant|p1a: the fish song|{reason}|{move}") == ("move", to_id(move), False)


@pytest.mark.parametrize("reason", ["par", "frz", "flinch", "recharge", "Attract", "ability: Truant",
                                    "move: Throat Chop", "partiallytrapped"])
def test_cant_that_names_no_move_hides_the_choice(reason):
    assert _turn3_replaced(f"|cant|p1a: the fish song|{reason}") is None


def test_blocking_ability_cant_is_the_movers_not_the_holders():
    """``|cant|<holder>|ability: Dazzling|<move>|[of] <mover>`` comes after the mover's move line; the holder's
    own choice of that turn is still to come and must not be lost."""
    data, lines, _ = _replay("smogtours-gen9ou-733546")
    at = lines.index("|move|p2a: Leviathan|U-turn|p1a: bozo bozo bozo") + 1
    blocked = lines[:at] + ["|cant|p1a: bozo bozo bozo|ability: Dazzling|U-turn|[of] p2a: Leviathan"] + lines[at:]
    rows = spectator_trajectories(blocked, DEXES[9], format_id="gen9ou", battle_id=data["id"])
    p1, p2 = _by_turn(rows, "p1")[(1, False)], _by_turn(rows, "p2")[(1, False)]
    assert action_meaning(p1["state"], p1["action"]) == ("move", "knockoff", False)
    assert action_meaning(p2["state"], p2["action"]) == ("move", "uturn", False)


@pytest.fixture(scope="module")
def gen2_battles():
    """20 gen 2 simulator battles (seed 7 has Sleep Talk after |cant|slp and Hidden Power choices): (truth rows,
    reconstructed rows, spectator log) per battle."""
    if reason := simulator_missing():
        pytest.skip(reason)
    from pipelines.pokemon import generated

    out = []
    for battle_id, payload in generated.generate(generated.chunks(["gen2randombattle"], 20, 7, "heuristic",
                                                                  "random", 20)[0]):
        truth, _ = generated.parse(battle_id, payload, DEXES, None)
        log = json.loads(payload)["spectator_log"]
        out.append((truth, spectator_trajectories(log, DEXES[2], format_id="gen2randombattle",
                                                  battle_id=battle_id), log))
    return out


def test_sleep_talk_and_hidden_power_choices_on_simulator_battles(gen2_battles):
    """Ground truth: the players' own choices. Hidden Power is listed as ``hiddenpower`` in a gen 2-7 request and
    as ``hiddenpower<type>`` in the team; the reconstruction must record every one the log shows."""
    from pipelines.pokemon.agreement import visible_choices

    seen = {"sleeptalk": 0, "hiddenpower": 0}
    for truth, recon, log in gen2_battles:
        shown = visible_choices(log, DEXES[2])
        for t, r in zip(truth, recon, strict=True):
            want = action_meaning(t["state"], t["action"])
            copied = "transform" in t["state"]["player_active"]["effects"]  # a Ditto's moves are not its slots
            if want is not None and want[1] in seen and not copied and want[:2] in shown.get(
                    (t["player_side"], t["battle_turn"]), ()):
                seen[want[1]] += 1
                assert action_meaning(r["state"], r["action"]) == want, (t["trajectory_id"], t["battle_turn"])
    assert seen["sleeptalk"] >= 3 and seen["hiddenpower"] >= 10, seen


def test_agreement_counts_a_missed_visible_choice_as_wrong(gen2_battles):
    from pipelines.pokemon.agreement import visible_choices

    truth, recon, log = gen2_battles[0]
    shown = visible_choices(log, DEXES[2])
    truth_p1 = [r for r in truth if r["player_side"] == "p1"]
    recon_p1 = [r for r in recon if r["player_side"] == "p1"]
    i = next(i for i, r in enumerate(recon_p1) if r["action"] >= 0)
    missed = [dict(r, action=-1) if k == i else r for k, r in enumerate(recon_p1)]
    full, blind = Agreement(), Agreement()
    full.add(truth_p1, recon_p1, shown)
    blind.add(truth_p1, missed, shown)
    name = "action.visible_identical"
    assert blind.total[name] == full.total[name] and blind.agree[name] == full.agree[name] - 1
    assert blind.agree["action.coverage"] == full.agree["action.coverage"] - 1


def test_move_called_by_sleep_talk_costs_no_pp_in_either_spelling():
    """Gen 1-3 logs write ``[from] Sleep Talk``, later ones ``[from] move: Sleep Talk``: the called move is not a
    use of its own PP either way, so both logs give the same rows."""
    data, lines, _ = _replay("smogtours-gen9ou-733546")
    at = lines.index("|move|p1a: the fish song|Future Sight|p2a: Leviathan")
    me = "p1a: the fish song"

    def rows(called_by):
        log = lines[:at] + [f"|cant|{me}|slp", f"|move|{me}|Sleep Talk|{me}",
                            f"|move|{me}|Future Sight|p2a: Leviathan|{called_by}"] + lines[at + 1:]
        return spectator_trajectories(log, DEXES[9], format_id="gen9ou", battle_id=data["id"])

    modern, old = rows("[from] move: Sleep Talk"), rows("[from] Sleep Talk")
    assert [r["state"] for r in old] == [r["state"] for r in modern]
    later = [r["state"]["player_active"] for r in old if r["player_side"] == "p1" and r["battle_turn"] > 3]
    slowking = [{m["name"]: (m["current_pp"], m["max_pp"]) for m in mon["moves"]}
                for mon in later if mon and mon["name"] == "slowking"]
    assert slowking and all(moves["futuresight"] == (16, 16) and moves["sleeptalk"] == (15, 16) for moves in slowking)


@pytest.mark.parametrize("source", ["[from] ability: Magic Bounce", "[from] ability: Dancer",
                                    "[from] move: Magic Coat", "[from] move: Snatch"])
def test_moves_an_ability_or_a_stealing_move_uses_are_not_own_moves(source):
    """A bounced (Magic Bounce, Magic Coat), copied (Dancer) or stolen (Snatch) move is the foe's: neither the
    player's own move list nor what the foe learns of its moves; seen in generated gen9 battles as a fifth known
    move that pushed a real one out of the four slots."""
    data, lines, _ = _replay("smogtours-gen9ou-733546")
    at = lines.index("|move|p1a: bozo bozo bozo|Knock Off|p2a: Magatama") + 1
    odd = lines[:at] + [f"|move|p1a: bozo bozo bozo|Thunder Wave|p2a: Magatama|{source}"] + lines[at:]
    rows = spectator_trajectories(odd, DEXES[9], format_id="gen9ou", battle_id=data["id"])
    own = {m["name"] for r in rows if r["player_side"] == "p1" and r["state"]["player_active"]
           and r["state"]["player_active"]["name"] == "clefable" for m in r["state"]["player_active"]["moves"]}
    seen = {m["name"] for r in rows if r["player_side"] == "p2" and r["state"]["opponent_active"]
            and r["state"]["opponent_active"]["name"] == "clefable" for m in r["state"]["opponent_active"]["moves"]}
    assert "knockoff" in own and "knockoff" in seen
    assert "thunderwave" not in own | seen
    assert [r["action"] for r in rows] == [r["action"] for r in _replay("smogtours-gen9ou-733546")[2]]


def _shown_choices_recorded(fmt: str, index: int) -> list[tuple]:
    """Simulator battle ``index`` of seed 31: asserts every choice its spectator log shows is reconstructed equal
    to the player's own; returns (truth row, choice) of those."""
    from pipelines.pokemon import generated
    from pipelines.pokemon.agreement import visible_choices
    from pipelines.pokemon.dex import gen_of_format

    chunk = generated.Chunk(format=fmt, first_index=index, num_battles=1, seed=31, p1="heuristic", p2="random")
    (battle_id, payload), = generated.generate(chunk.__dict__)
    dex = DEXES[gen_of_format(fmt)]
    log = json.loads(payload)["spectator_log"]
    truth, _ = generated.parse(battle_id, payload, DEXES, None)
    recon = spectator_trajectories(log, dex, format_id=fmt, battle_id=battle_id)
    shown = visible_choices(log, dex)
    out = []
    for t, r in zip(truth, recon, strict=True):
        want = action_meaning(t["state"], t["action"])
        if want is None or want[:2] not in shown.get((t["player_side"], t["battle_turn"]), ()):
            continue
        assert action_meaning(r["state"], r["action"]) == want, (t["trajectory_id"], t["battle_turn"])
        out.append((t, want))
    return out


@needs_simulator
@pytest.mark.parametrize("fmt,index", [("gen1ou", 119), ("gen1ou", 135), ("gen9randombattle", 17)])
def test_transformed_pokemon_choices_are_its_copied_moves(fmt, index):
    """Battles with a Ditto: once transformed, its player chooses among the copied moves (its request lists them).
    The reconstruction uses the moves the log reveals for the copied Pokémon, including those the Ditto uses."""
    shown = _shown_choices_recorded(fmt, index)
    assert any("transform" in t["state"]["player_active"]["effects"] for t, _ in shown)


@needs_simulator
@pytest.mark.parametrize("fmt,index,copied", [("gen1ou", 34, "doubleedge"), ("gen2randombattle", 7, "hiddenpower")])
def test_a_move_mimic_copied_takes_mimics_slot(fmt, index, copied):
    """Mimic puts the foe's move in Mimic's slot until its user switches out (gen 1 logs ``|-start|X|Mimic|M``,
    gens 2-4 ``|-activate|X|move: Mimic|M``); choosing it is choosing that slot."""
    shown = _shown_choices_recorded(fmt, index)
    assert any(want[1] == copied for _, want in shown)


def test_a_move_an_encore_begun_this_turn_forces_is_not_the_choice():
    """Encore replaces the target's chosen move when it begins before the target moves (the simulator's
    ``onOverrideAction``): the move shown is the encored one, whatever was chosen."""
    data, lines, _ = _replay("smogtours-gen9ou-733546")
    at = lines.index("|move|p2a: Leviathan|U-turn|p1a: bozo bozo bozo") + 1
    encored = lines[:at] + ["|-start|p1a: bozo bozo bozo|Encore"] + lines[at:]
    rows = spectator_trajectories(encored, DEXES[9], format_id="gen9ou", battle_id=data["id"])
    p1, p2 = _by_turn(rows, "p1")[(1, False)], _by_turn(rows, "p2")[(1, False)]
    assert p1["action"] == -1 and action_meaning(p2["state"], p2["action"]) == ("move", "uturn", False)
    assert action_meaning(*(lambda r: (r["state"], r["action"]))(_by_turn(rows, "p1")[(2, False)])) == (
        "switch", "slowking")


def _tracked_state(mon):
    return mon.species, mon.level, mon.hp_pct, mon.status, mon.types, mon.item, mon.ability, \
        dict(mon.moves), dict(mon.boosts), set(mon.effects), mon.tera_type, mon.terastallized, mon.active


def test_every_change_to_a_pokemon_raises_its_revision():
    """The spectator parser reuses a Pokémon's render while its revision stays (``SpectatorParser._own``): every
    line of the shared replays that changes a tracked Pokémon must raise its revision, or mark it aliased. The
    appended lines reach Pokémon without naming them (a switch-out, Heal Bell, Haze, Illusion breaking)."""
    from pipelines.pokemon.tracker import BattleTracker

    replays = [json.loads(p.read_text()) for p in sorted(shared_data("pokemon", "showdown_replays").glob("*.json"))]
    bench = shared_data("pokemon", "bench_replays")
    for fmt in ("gen1ou", "gen9ou"):
        replays += [json.loads(p.read_text()) for p in sorted((bench / fmt).glob("*.json"))[:25]]
    checked = set()
    for replay in replays:
        lines = replay["log"].split("\n")
        end = next(i for i, line in enumerate(lines) if line.split("|")[1:2] in (["win"], ["tie"]))
        tracker = BattleTracker(DEXES[int(replay["formatid"][3])], replay["formatid"])
        extra = []
        if replay["formatid"] == "gen9ou":
            p1 = [m for m in lines[:end] if m.startswith("|switch|p1a: ")][-1].split("|")
            extra = [f"|-boost|{p1[2]}|atk|2", f"|-cureteam|{p1[2]}|[from] move: Heal Bell", "|-clearallboost",
                     f"|-start|{p1[2]}|confusion", f"|replace|{p1[2].split(':')[0]}: Zorua|Zoroark-Hisui, L80",
                     f"|-boost|{p1[2].split(':')[0]}: Zorua|spe|1"]
        for line in lines[:end] + extra:
            mons = [m for side in tracker.sides.values() for m in side.mons.values()]
            before = [(m, _tracked_state(m), m.revision) for m in mons]
            tracker.apply(line)
            for mon, state, revision in before:
                if _tracked_state(mon) != state:
                    assert mon.revision != revision or mon.aliased, (replay["id"], line, mon.name)
                    checked.add(line.split("|")[1])
    assert {"switch", "-damage", "move", "-boost", "-cureteam", "-clearallboost", "-start", "replace"} <= checked

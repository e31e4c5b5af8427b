"""The ``pokemon_turns`` shard schema: one row per decision point of one player.

The structured state is stored in full (house rule: store game state, derive features in versioned code); the text
and numeric observations beside it are derived from it by the observation spec whose version the manifest records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import pyarrow as pa

from shards_schema.declare import arrow_schema, i8, i16, i32
from shards_schema.versions import AddedColumn, CodeVersions

SCHEMA_NAME = "pokemon_turns"
CODE_VERSIONS = CodeVersions(
    # 2.1.0: rows carry teacher_action, a teacher's label of the decision (-1: none; 2.0.0 versions lack it).
    # 2.0.0: rows say whether the chosen move was a Z-move or a Max move (zmove, dynamax), states can_zmove and
    # can_dynamax (a major: readers compare the row struct exactly)
    schema="2.1.0",
    # 5.1.0: a format the simulator lacks resolves through its aliases and older tier names (gen6oumonotype is
    # gen6monotype), and the game type filters not_singles before the format is looked up (a retired VGC season is
    # filtered, not unknown); rows of battles written before are unchanged.
    # 5.0.0: the legal mask is the request's choices: a request's own move beside switches (Struggle, gen 1's Fight
    # while asleep, frozen or partially trapped) is action 0 with slot 0 in the mask (was -1, slot closed); Revival
    # Blessing's fainted targets are the switch actions and available_switches (was -1, an empty mask).
    # 4.0.0: Illusion read as its owner and its foe saw it (|replace|); forme changes end on switch-out; the zmove and
    # dynamax flags. 3.0.0: Z-moves and Max moves are never move slots (a status or signature Z-move is its base); Sleep
    # Talk's move
    # revealed to the foe, Mirror Move's/Metronome's (gens 1-3) not the user's; Mega/Primal/Ultra Burst items; a
    # Transform's copied moves end with it; Imposter and gen 4-5 Frisk read; older logs' [from]X and format ids.
    # 2.0.0: choices shown by |cant|/Sleep Talk and Hidden Power recorded; "???" move type a word; Metamon ties, case
    parser="5.1.0",
    # 2.0.0: word 2 names the gimmick open now (cantera, canzmove, candynamax, nogimmick); numbers 48-49 the actives'
    # Dynamax turns left
    observation="2.0.0",
    reparse_command="python pipelines/parse_replays.py --source <source> --input <raw inputs> --out <dir>",
    refeaturize_command="python pipelines/pokemon/refeaturize.py --input <this version folder> --out <dir>",
    added_columns=(AddedColumn(name="teacher_action", since="2.1.0", absent=-1),),
)
SCHEMA_VERSION = CODE_VERSIONS.schema

NUM_MOVES = 4
NUM_SWITCHES = 5
NUM_TERA_MOVES = 4
NUM_ACTIONS = NUM_MOVES + NUM_SWITCHES + NUM_TERA_MOVES
"""Action ids (Metamon's layout): 0-3 use move slot 0-3 of the active Pokémon, 4-8 switch to
``available_switches[0-4]``, 9-12 terastallize and use move slot 0-3. -1: no action visible or not a choice."""

OBS_WORDS = 87
OBS_NUMERIC = 50

MOVE_SLOT_WORDS = tuple(tuple(range(20 + 3 * i, 23 + 3 * i)) for i in range(NUM_MOVES))
"""Observation words of each of the player's move slots (move id, move type, category), in action order."""
MOVE_SLOT_NUMBERS = tuple((8 + i, 12 + i, 16 + i, 20 + i) for i in range(NUM_MOVES))
"""Numeric features of each move slot (base power, accuracy, PP left, priority), in action order."""
SWITCH_SLOT_WORDS = tuple(tuple(range(52 + 7 * j, 59 + 7 * j)) for j in range(NUM_SWITCHES))
"""Observation words of each switch slot (species, item, ability, two types, status, tera type), in action order."""
SWITCH_SLOT_NUMBERS = tuple((36 + j,) for j in range(NUM_SWITCHES))
"""Numeric features of each switch slot (its HP fraction), in action order."""



@dataclass(frozen=True, kw_only=True)
class MoveState:
    """One move as a player knows it.

    Attributes:
        name: Showdown id of the move (``thunderbolt``); ``nomove`` for an empty previous-move slot.
        move_type: type id of the move (``electric``).
        category: ``physical``, ``special`` or ``status``.
        base_power: base power from the generation's dex (0 for status or variable-power moves).
        accuracy: hit chance in [0, 1]; 1.0 for moves that never miss.
        priority: move priority bracket.
        current_pp: PP left; exact for the player's own moves, max_pp minus observed uses for the opponent's.
        max_pp: maximum PP (with PP Ups).
    """

    name: str
    move_type: str
    category: str
    base_power: i16
    accuracy: float
    priority: i8
    current_pp: i16
    max_pp: i16


@dataclass(frozen=True, kw_only=True)
class PokemonState:
    """One Pokémon as a player knows it. Unknown facts use explicit ``unknown*`` words, never guesses.

    Attributes:
        name: species id as shown in battle (forme included, e.g. ``rotomwash``).
        base_species: base species id (``rotom``).
        hp_pct: HP fraction in [0, 1]; exact for the player's own team, the displayed percentage for the opponent.
        types: current type ids (one or two; the tera type alone once terastallized).
        item: item id, ``noitem`` when known to have none, ``unknownitem`` when not revealed.
        ability: ability id, ``unknownability`` when not revealed, ``noability`` in generations without abilities.
        level: level.
        status: ``brn``, ``frz``, ``par``, ``psn``, ``tox``, ``slp``, ``fnt`` or ``nostatus``.
        effects: active volatile effects (``confusion``, ``substitute``, ``leechseed``...), sorted.
        moves: known moves in slot order (own team: all; opponent: revealed so far).
        atk_boost: attack stage in [-6, 6].
        def_boost: defense stage.
        spa_boost: special attack stage (the Special stage in gen 1).
        spd_boost: special defense stage (equals the Special stage in gen 1).
        spe_boost: speed stage.
        accuracy_boost: accuracy stage.
        evasion_boost: evasion stage.
        base_hp: base HP stat from the dex.
        base_atk: base attack stat.
        base_def: base defense stat.
        base_spa: base special attack stat.
        base_spd: base special defense stat.
        base_spe: base speed stat.
        tera_type: tera type id, ``unknowntype`` when not revealed, ``notype`` before gen 9.
        terastallized: whether it has terastallized.
        dynamax_turns: turns of Dynamax left at this decision, its own turn included (2 at the first decision after
            it Dynamaxed, then 1; 0 when not Dynamaxed).
    """

    name: str
    base_species: str
    hp_pct: float
    types: list[str]
    item: str
    ability: str
    level: i8
    status: str
    effects: list[str]
    moves: list[MoveState]
    atk_boost: i8
    def_boost: i8
    spa_boost: i8
    spd_boost: i8
    spe_boost: i8
    accuracy_boost: i8
    evasion_boost: i8
    base_hp: i16
    base_atk: i16
    base_def: i16
    base_spa: i16
    base_spd: i16
    base_spe: i16
    tera_type: str
    terastallized: bool
    dynamax_turns: i8


@dataclass(frozen=True, kw_only=True)
class BattleState:
    """What one player knows at one decision point (Metamon's UniversalState, with nothing dropped).

    Attributes:
        player_active: the player's active Pokémon; null only on a trajectory's closing (``done``) row.
            The parsers refuse a decision without one (``NoActivePokemonError``); at the close the player
            may have none, e.g. all fainted.
        opponent_active: the opponent's active Pokémon as revealed (null before the first switch-in).
        available_switches: the player's benched Pokémon that can switch in, in the order switch actions use.
        player_prev_move: the last move the player's side used (null: none yet).
        opponent_prev_move: the last move the opponent's side used (null: none yet).
        player_remaining: the player's Pokémon not fainted.
        opponents_remaining: the opponent's Pokémon not known to have fainted (team size minus faints).
        player_conditions: side conditions on the player's side (``reflect``, ``spikes``...), sorted; a layered
            condition repeats once per layer.
        opponent_conditions: side conditions on the opponent's side, same form.
        weather: weather id or ``noweather``.
        battle_field: field effects (terrains, ``trickroom``...), sorted.
        forced_switch: the decision is a switch forced by a faint or a pivot move.
        can_tera: the player may still terastallize this turn.
        can_zmove: the player may use a Z-move this turn (gen 7: its active holds a Z-crystal, none used yet).
            From a spectator log: the active is seen using one later in the battle and the side has not yet.
        can_dynamax: the player may Dynamax this turn (gen 8: not yet Dynamaxed in this battle).
        opponent_teampreview: species ids the opponent showed at team preview (empty without team preview).
    """

    player_active: PokemonState | None
    opponent_active: PokemonState | None
    available_switches: list[PokemonState]
    player_prev_move: MoveState | None
    opponent_prev_move: MoveState | None
    player_remaining: i8
    opponents_remaining: i8
    player_conditions: list[str]
    opponent_conditions: list[str]
    weather: str
    battle_field: list[str]
    forced_switch: bool
    can_tera: bool
    can_zmove: bool
    can_dynamax: bool
    opponent_teampreview: list[str]


@dataclass(frozen=True, kw_only=True)
class PokemonTurn:
    """One row of ``pokemon_turns``: one decision point of one player.

    Attributes:
        trajectory_id: ``<battle_id>:<player_side>``; unique within a shard version.
        battle_id: battle id as the source names it.
        format: format id (``gen9randombattle``).
        player_side: ``p1`` or ``p2``; ``unknown`` for Metamon files, whose names do not say.
        player_name: the player's name in the battle.
        opponent_name: the opponent's name.
        turn_index: index of this decision within the trajectory, from 0, contiguous.
        battle_turn: the battle's turn counter when the decision was made (0 before turn 1), null if unknown.
        state: the structured state the player saw.
        obs_text: the text observation, exactly 87 space-separated words of the observation spec.
        obs_tokens: the 87 word ids in the spec's vocabulary (1 = unknown word, never clamped).
        obs_numeric: the spec's 48 numeric features.
        obs_unknown_words: how many of the 87 words were outside the vocabulary.
        action: action id chosen (see NUM_ACTIONS); -1 where not visible or not one of the 13 choices. From a
            spectator log, a ``|cant|`` that names the stopped move (Disable, Taunt, ``nopp``...) or a Sleep Talk
            after ``|cant|...|slp`` shows the choice; paralysis, freeze, flinch, a sleep with no Sleep Talk do not.
        teacher_action: the action id a teacher chose at this decision, in the layout of ``action``, legal under
            ``legal_mask``: a generated battle's slot with a teacher (``--p1-teacher search``: a scripted player that
            saw what the player saw and labelled its decisions without playing); -1 where no teacher labelled it
            (every other source, a slot without a teacher, the closing row).
        zmove: the chosen move was used as a Z-move (its move slot is the action; -1 where a spectator cannot
            tell which of the Pokémon's moves became it, the flag still set).
        dynamax: the chosen move was a Max move: the Pokémon Dynamaxed with this choice or was Dynamaxed (the
            action is the slot of the move it was chosen through, as for ``zmove``).
        legal_mask: 13 flags, true where the action id was legal.
        legal_mask_exact: true when the mask comes from the simulator's request, false when derived from state.
        reward: reward after this decision: +1 on the final decision of a won battle, -1 lost, else 0 (a tie
            or an unknown result is 0 everywhere).
        done: true on the trajectory's last row.
        result: ``win``, ``loss``, ``tie`` or ``unknown`` for the whole trajectory. Metamon files write a tie as
            a loss for both players: it is ``tie`` only when both players' files were read in one job (same
            archive, or among the loose files); a lone Metamon ``loss`` may be a tie.
        rating: the player's rating when the source records it.
    """

    trajectory_id: str
    battle_id: str
    format: str
    player_side: str
    player_name: str | None
    opponent_name: str | None
    turn_index: i32
    battle_turn: i32 | None
    state: BattleState
    obs_text: str
    obs_tokens: Annotated[list[int], pa.list_(pa.field("item", pa.int32(), nullable=False), OBS_WORDS)]
    obs_numeric: Annotated[list[float], pa.list_(pa.field("item", pa.float32(), nullable=False), OBS_NUMERIC)]
    obs_unknown_words: i16
    action: i8
    teacher_action: i8
    zmove: bool
    dynamax: bool
    legal_mask: Annotated[list[bool], pa.list_(pa.field("item", pa.bool_(), nullable=False), NUM_ACTIONS)]
    legal_mask_exact: bool
    reward: float
    done: bool
    result: str
    rating: i32 | None


@dataclass(frozen=True, kw_only=True)
class TrajectoryIndexRow:
    """One row of the per-trajectory index (the manifest's ``index_file``): where each trajectory lives.

    Attributes:
        trajectory_id: as in the turns table.
        battle_id: as in the turns table.
        format: format id.
        player_side: ``p1`` or ``p2``.
        input_id: the source input the trajectory came from (file, archive member, battle).
        file: shard file name (``part-<task>-<group>-<k>-<sha>.parquet``) holding all its rows.
        row_start: first row of the trajectory in that file.
        num_rows: number of rows (decision points).
        result: ``win``, ``loss``, ``tie`` or ``unknown``.
        rating: the player's rating when known.
    """

    trajectory_id: str
    battle_id: str
    format: str
    player_side: str
    input_id: str
    file: str
    row_start: i32
    num_rows: i32
    result: str
    rating: i32 | None


TURNS_SCHEMA = arrow_schema(PokemonTurn, name=SCHEMA_NAME, version=SCHEMA_VERSION)
INDEX_SCHEMA = arrow_schema(TrajectoryIndexRow, name=f"{SCHEMA_NAME}.index", version=SCHEMA_VERSION)
STATE_TYPE = TURNS_SCHEMA.field("state").type

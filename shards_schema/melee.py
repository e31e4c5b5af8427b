"""The ``melee_frames`` shard schema: one row per frame of a 1v1 game, sorted by game and frame, plus a games index.

Fields a replay's Slippi version does not record are null, never zero: no state flags, airborne, ground, jumps or
l-cancel before 2.0, no hurtbox before 2.1, no items (projectiles) before 3.0, no item owner before 3.6, no
velocities before 3.5, no hitlag before 3.8.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import pyarrow as pa

from shards_schema.declare import arrow_fields, arrow_schema, i32, u8, u16, u32
from shards_schema.versions import CodeVersions

SCHEMA_NAME = "melee_frames"
CODE_VERSIONS = CodeVersions(
    # 4.0.0: the games index gains incomplete_reasons, and complete is false for every reason listed there (major,
    # as 3.0.0). 3.0.0: the games index gains complete, repaired_events and repaired_codes (major: open_version
    # compares a version's index schema with the declared one, so neither side reads the other's index). 2.0.0:
    # projectile slots are four named structs instead of a fixed-size list.
    schema="4.0.0",
    # 3.2.0: Slippi 3.0-3.6 files are read (peppi-py-vladfi 0.9.2, whose raw frames equal peppi-py 0.8.6's on every
    # file both read); recordings that stopped early (raw length 0, a file cut in its events or metadata) are read up
    # to their last whole frame; a 3.17 file's stage events and a second Gecko List no longer quarantine it; rows of
    # files parsed before are unchanged. 3.1.0: files peppi refuses for events it does not support are repaired
    # (those events dropped) and written; rows of files parsed before are unchanged. 3.0.0: items in hand (blaster,
    # held needles, smoke, a turnip in hand) are not projectiles; the physical L trigger Slippi 0.1-1.x write as 0.0
    # while L is pressed is null; winner_port is the player who did not quit an LRAS no-contest. 2.0.0: physical
    # trigger values outside [0, 1] (garbage in Slippi 0.1-1.0 files) are null.
    parser="3.2.0",
    observation="0.0.0",
    reparse_command="python pipelines/parse_replays.py --source slp --input <replays> --out <dir>",
    refeaturize_command=None,
)
SCHEMA_VERSION = CODE_VERSIONS.schema
PROJECTILE_SLOTS = 4



@dataclass(frozen=True, kw_only=True)
class Controller:
    """One controller's inputs on a frame (pre-frame update).

    Attributes:
        buttons: physical buttons bitmask (0x1 DL, 0x2 DR, 0x4 DD, 0x8 DU, 0x10 Z, 0x20 R, 0x40 L, 0x100 A,
            0x200 B, 0x400 X, 0x800 Y, 0x1000 Start).
        main_x: processed main stick x in [-1, 1].
        main_y: processed main stick y in [-1, 1].
        c_x: processed c-stick x in [-1, 1].
        c_y: processed c-stick y in [-1, 1].
        trigger: processed analog trigger in [0, 1].
        trigger_l: physical L trigger in [0, 1] (null where the file holds a value outside it, and in Slippi 0.1-1.x
            files on frames where digital L is pressed: those files write 0.0 there).
        trigger_r: physical R trigger in [0, 1] (null where the file holds a value outside it: Slippi 0.1-1.0).
    """

    buttons: u16
    main_x: float
    main_y: float
    c_x: float
    c_y: float
    trigger: float
    trigger_l: float | None
    trigger_r: float | None


@dataclass(frozen=True, kw_only=True)
class Character:
    """One character's state after a frame (post-frame update), for a leader or Nana.

    Attributes:
        character: internal character id (changes on Zelda/Sheik transformation).
        action_state: action state id (0-340 common, 341+ character-specific).
        state_age: frames in the current action state (null before 0.2).
        x: position x.
        y: position y.
        facing: -1 left, +1 right.
        percent: damage percent.
        shield: shield size in [0, 60].
        stocks: stocks remaining.
        jumps_left: jumps remaining (null before 2.0).
        airborne: in the air (null before 2.0).
        l_cancel: 0 none, 1 success, 2 fail (null before 2.0).
        hurtbox_state: 0 vulnerable, 1 invulnerable, 2 intangible (null before 2.1).
        ground_id: last ground id (null before 2.0).
        last_attack_landed: attack id of the last hit landed.
        hitlag: hitlag frames remaining (null before 3.8).
        combo_count: combo count.
        vel_self_x_air: self-induced air x speed (null before 3.5).
        vel_self_y: self-induced y speed (null before 3.5).
        vel_attack_x: knockback x speed (null before 3.5).
        vel_attack_y: knockback y speed (null before 3.5).
        vel_self_x_ground: self-induced ground x speed (null before 3.5).
    """

    character: u8
    action_state: u16
    state_age: float | None
    x: float
    y: float
    facing: float
    percent: float
    shield: float
    stocks: u8
    jumps_left: Annotated[int, pa.uint8()] | None
    airborne: bool | None
    l_cancel: Annotated[int, pa.uint8()] | None
    hurtbox_state: Annotated[int, pa.uint8()] | None
    ground_id: Annotated[int, pa.uint16()] | None
    last_attack_landed: u8
    hitlag: float | None
    combo_count: u8
    vel_self_x_air: float | None
    vel_self_y: float | None
    vel_attack_x: float | None
    vel_attack_y: float | None
    vel_self_x_ground: float | None


@dataclass(frozen=True, kw_only=True)
class Player:
    """One port on one frame.

    Attributes:
        port: port index 0-3.
        controller: the leader's controller inputs.
        leader: the character's state.
        nana: Nana's state (Ice Climbers follower), null otherwise or when Nana is gone.
        nearest_projectile_dx: x offset to the nearest opponent projectile, as ``projectiles`` defines one (null:
            none, or owner unknown).
        nearest_projectile_dy: y offset to it.
        nearest_projectile_type: its item type id.
    """

    port: u8
    controller: Controller
    leader: Character
    nana: Character | None
    nearest_projectile_dx: float | None
    nearest_projectile_dy: float | None
    nearest_projectile_type: Annotated[int, pa.uint16()] | None


@dataclass(frozen=True, kw_only=True)
class Projectile:
    """One active projectile: a character-made item in flight, released by its owner.

    Not projectiles: regular items, stage entities (Shy Guys) and Pokémon; character items that never leave their
    owner (the Fox/Falco blaster, Sheik's held needles and smoke, capes, bats, tethers, Game & Watch's props); and
    throwable ones while still in hand (a turnip in Peach's hand, a charging Samus or Mewtwo shot), told by their item
    state. The type and state lists, with their source in the game's item tables, are in
    ``pipelines/melee/slp.py`` (``ATTACHED_TYPES``, ``HELD_STATES``).

    Attributes:
        type: item type id.
        state: item state (per type).
        x: position x.
        y: position y.
        vx: velocity x.
        vy: velocity y.
        owner: owning port 0-3 (null before 3.6, or -1 in the file).
        spawn_id: spawn id (orders the slots).
    """

    type: u16
    state: u8
    x: float
    y: float
    vx: float
    vy: float
    owner: Annotated[int, pa.int8()] | None
    spawn_id: u32


PROJECTILE_TYPE = pa.struct(arrow_fields(Projectile))


@dataclass(frozen=True, kw_only=True)
class ProjectileSlots:
    """The first ``PROJECTILE_SLOTS`` active projectiles of a frame by spawn id; a slot is null when fewer are active.

    Fixed named slots, not a list: Parquet writes a list with repetition levels for every slot of every frame,
    which cost 0.40 µs per frame against 0.16 for these structs (measured on the shared replays), the largest
    share of writing a frame.

    Attributes:
        slot0: the projectile with the lowest spawn id.
        slot1: the next one.
        slot2: the next one.
        slot3: the next one.
    """

    slot0: Projectile | None
    slot1: Projectile | None
    slot2: Projectile | None
    slot3: Projectile | None


SLOT_NAMES = tuple(f"slot{k}" for k in range(PROJECTILE_SLOTS))
assert SLOT_NAMES == tuple(f.name for f in arrow_fields(ProjectileSlots)), "PROJECTILE_SLOTS and the slots differ"


@dataclass(frozen=True, kw_only=True)
class MeleeFrame:
    """One frame of one game.

    Attributes:
        game_id: sha256 of the replay file's bytes.
        frame: frame number (starts at -123; 0 is when the timer starts); unique and contiguous per game.
        p0: the lower port's player.
        p1: the higher port's player.
        num_projectiles: active projectiles this frame, items in hand excluded (see ``Projectile``; null before 3.0:
            no item data).
        projectiles: the first 4 active projectiles by spawn id in named slots (null before 3.0).
    """

    game_id: str
    frame: i32
    p0: Player
    p1: Player
    num_projectiles: Annotated[int, pa.uint8()] | None
    projectiles: ProjectileSlots | None


@dataclass(frozen=True, kw_only=True)
class GameIndexRow:
    """One game: where its frames are and what it is.

    Attributes:
        game_id: sha256 of the file's bytes.
        source: source name.
        input_id: file path or ``archive::member``.
        slippi_version: ``major.minor.build``.
        stage: Slippi stage id.
        ports: the two ports, ascending.
        characters_external: character ids from Game Start (character select screen ids).
        characters_internal: internal character ids of the first frame (what frames use).
        player_types: 0 human, 1 CPU.
        start_time: ``startAt`` from the metadata, if present.
        end_method: Game End method (v2+: 1 TIME, 2 GAME, 7 NO_CONTEST), null without Game End.
        winner_port: port that won (last stock, or placements), null when unknown.
        complete: the file holds the whole recording: its Game End event, every frame, its metadata and closing
            brace (false: ``incomplete_reasons`` says what it lacks; the end method and winner of a game without
            Game End are null or from its last frame); null for rows not parsed from a replay (world-model rollouts).
        incomplete_reasons: what the file lacks, in this order (empty when complete; null for rows not parsed from
            a replay): ``raw_length_zero`` (the file was never closed: its events are read to where they stop),
            ``raw_cut`` (the file ends before its raw element's declared length), ``partial_event`` (it ends inside
            an event, whose bytes are dropped), ``partial_frame`` (the last frame lacks events, and is dropped),
            ``unfinalized_frames`` (a stopped 3.7+ recording's frames after its last finalized one are dropped),
            ``no_game_end``, ``no_metadata`` (start time null), ``no_closing_brace``
            (``pipelines/melee/slp.py`` ``INCOMPLETE_REASONS``).
        repaired_events: events dropped before parsing because peppi does not support them in a file of this
            version (``pipelines/melee/slp.py`` ``repair``; the spec lets a reader skip them): 0 for a file peppi
            read as it is; null for rows not parsed from a replay.
        repaired_codes: the event codes of those events (empty when none). Codes peppi cannot take leave the
            payload table too (a code listed with no events is dropped from the table alone); 16 (0x10, Message
            Splitter) is a second Gecko List's events, which leave the stream only. Null for rows not parsed from a
            replay.
        first_frame: the first frame number (-123 in every known version).
        num_frames: unique frames.
        rollback_frames: duplicate frame rows dropped (rollback).
        file: shard file name holding the game.
        row_start: first row in that file.
        num_rows: rows (equals num_frames).
    """

    game_id: str
    source: str
    input_id: str
    slippi_version: str
    stage: u16
    ports: list[int]
    characters_external: list[int]
    characters_internal: list[int]
    player_types: list[int]
    start_time: str | None
    end_method: Annotated[int, pa.uint8()] | None
    winner_port: Annotated[int, pa.uint8()] | None
    complete: bool | None
    incomplete_reasons: list[str] | None
    repaired_events: Annotated[int, pa.int32()] | None
    repaired_codes: list[u8] | None
    first_frame: i32
    num_frames: i32
    rollback_frames: i32
    file: str
    row_start: i32
    num_rows: i32


FRAMES_SCHEMA = arrow_schema(MeleeFrame, name=SCHEMA_NAME, version=SCHEMA_VERSION)
GAMES_SCHEMA = arrow_schema(GameIndexRow, name=f"{SCHEMA_NAME}.games", version=SCHEMA_VERSION)

"""Semantic versions of everything that shapes a shard version, and the rules readers apply to them.

Bump the major part when old shards can no longer be read as they were meant (a column's meaning, a parser fix
that changes rows, an observation layout change); the minor part for additions that old readers can ignore.
"""

from __future__ import annotations

from dataclasses import dataclass

from shards_schema.manifest import Manifest, major


@dataclass(frozen=True, kw_only=True)
class CodeVersions:
    """The versions this checkout writes and reads for one schema.

    Attributes:
        schema: row schema version.
        parser: parser version.
        observation: observation spec version ("0.0.0" where the schema has no derived observation).
        reparse_command: the command that re-makes shards with this code from raw inputs.
        refeaturize_command: the command that re-derives observations from stored state (None: not applicable).
    """

    schema: str
    parser: str
    observation: str
    reparse_command: str
    refeaturize_command: str | None


POKEMON_TURNS = CodeVersions(
    # 2.0.0: rows say whether the chosen move was a Z-move or a Max move (zmove, dynamax), states can_zmove and
    # can_dynamax (a major: readers compare the row struct exactly)
    schema="2.0.0",
    # 4.0.0: Illusion read as its owner and its foe saw it (|replace|); forme changes end on switch-out; the zmove and
    # dynamax flags. 3.0.0: Z-moves and Max moves are never move slots (a status or signature Z-move is its base); Sleep
    # Talk's move
    # revealed to the foe, Mirror Move's/Metronome's (gens 1-3) not the user's; Mega/Primal/Ultra Burst items; a
    # Transform's copied moves end with it; Imposter and gen 4-5 Frisk read; older logs' [from]X and format ids.
    # 2.0.0: choices shown by |cant|/Sleep Talk and Hidden Power recorded; "???" move type a word; Metamon ties, case
    parser="4.0.0",
    # 2.0.0: word 2 names the gimmick open now (cantera, canzmove, candynamax, nogimmick); numbers 48-49 the actives'
    # Dynamax turns left
    observation="2.0.0",
    reparse_command="python pipelines/parse_replays.py --source <source> --input <raw inputs> --out <dir>",
    refeaturize_command="python pipelines/refeaturize.py --input <this version folder> --out <dir>",
)

MELEE_FRAMES = CodeVersions(
    # 3.0.0: the games index gains complete, repaired_events and repaired_codes (major: open_version compares a
    # version's index schema with the declared one, so neither side reads the other's index). 2.0.0: projectile
    # slots are four named structs instead of a fixed-size list.
    schema="3.0.0",
    # 3.1.0: files peppi refuses for events it does not support are repaired (those events dropped) and written;
    # rows of files parsed before are unchanged. 3.0.0: items in hand (blaster, held needles, smoke, a turnip in
    # hand) are not projectiles; the physical L trigger Slippi 0.1-1.x write as 0.0 while L is pressed is null;
    # winner_port is the player who did not quit an LRAS no-contest. 2.0.0: physical trigger values outside [0, 1]
    # (garbage in Slippi 0.1-1.0 files) are null.
    parser="3.1.0",
    observation="0.0.0",
    reparse_command="python pipelines/parse_replays.py --source slp --input <replays> --out <dir>",
    refeaturize_command=None,
)

MELEE_FEATURES = "1.0.0"
"""Version of the Melee world model's feature spec (``pipelines/melee/features.py``: the field layout, ``featurize``
and ``unfeaturize``). Features are derived from stored frames when training reads them, so shards do not carry it;
checkpoints do, and play, evaluation and fine-tuning refuse a checkpoint whose major differs from this code's. Bump
the major when a field's position, scale or class count changes."""

CODE_VERSIONS: dict[str, CodeVersions] = {"pokemon_turns": POKEMON_TURNS, "melee_frames": MELEE_FRAMES}

UPGRADE_COMMAND = "git pull && make setup"


class VersionMismatchError(RuntimeError):
    """A shard version was written by code whose major version differs from this checkout's."""


def check_versions(manifest: Manifest, *, ignore: tuple[str, ...] = ()) -> None:
    """Refuse a shard version whose schema, parser or observation major differs from the code's.

    ``ignore`` names checks to skip: only the re-featurizer passes ``("observation",)``, since its job is to
    replace the observation columns."""
    code = CODE_VERSIONS.get(manifest.schema_name)
    if code is None:
        raise VersionMismatchError(
            f"unknown schema {manifest.schema_name!r}; this checkout reads {sorted(CODE_VERSIONS)}. "
            f"If it was written by a newer replayforge, upgrade: `{UPGRADE_COMMAND}`."
        )
    for what, stored, ours in (
        ("schema", manifest.schema_version, code.schema),
        ("parser", manifest.parser_version, code.parser),
        ("observation", manifest.observation_version, code.observation),
    ):
        if what in ignore or major(stored) == major(ours):
            continue
        if major(stored) > major(ours):
            fix = f"upgrade replayforge to read it: `{UPGRADE_COMMAND}`"
        elif what == "observation" and code.refeaturize_command:
            fix = f"re-derive the observations from stored state: `{code.refeaturize_command}`"
        else:
            fix = f"re-parse the raw inputs with this code: `{code.reparse_command}`"
        raise VersionMismatchError(
            f"{manifest.dataset}/{manifest.version} has {what} version {stored}, this code reads major "
            f"{major(ours)} ({ours}); {fix}"
        )

"""Battle logs a Pokémon Showdown server writes (``--source showdown-server``): both players' exact trajectories.

A server with ``Config.logchallenges`` (or any rated battle) writes each battle, once it ends, as one JSON file
(``RoomBattle.logBattle``, pokemon-showdown 0.11.11: ``logs/<YYYY-MM>/<format>/<YYYY-MM-DD>/<id>.log.json``). The
fields read, all of the simulator's end-of-battle data and what the room adds:

- ``inputLog``: the battle's inputs, a list of lines: ``>start {"formatid", "seed"}``, ``>player pN {"name",
  "team"|"seed", "rating"...}``, every choice the simulator committed, and how the battle ended where no move
  ended it: ``>forcelose pN`` (a forfeit, or the timer), ``>forcewin pN`` / ``>forcetie`` (staff), ``>tiebreak``;
- ``p1team``, ``p2team``: both full teams, given to the replay where a ``>player`` line has none (a random
  format's, generated from its seed);
- ``log``: the battle log as the room keeps it, a list of lines, each ``|split|`` resolved to its exact-HP line,
  with the room's own lines (joins, chat, the timer's ``|inactive|``, a forfeit's ``|-message|``);
- ``winner`` (a name; ``""`` for a tie), ``turns``, ``p1rating``, ``p2rating``, ``timestamp`` (JavaScript's
  ``Date.toString``), ``roomid`` (``battle-<id>``), ``format``, ``p1``, ``p2``; ``endType`` (``normal``,
  ``forfeit``: a player forfeited or the timer ran out, ``forced``: staff ended it) is kept (``ServerLog``), and
  says what the input log's last line does: the rows take how the battle ended from the replay.

The battle id is ``roomid`` without ``battle-`` (the id its replay would have), else ``id``, else the file's name
without ``.log.json``. The input log is replayed on the pinned simulator (``pipelines/pokemon/input_log.py``), which
gives each player's own stream, and those are read as the generated source's are (``pov_trajectory``): exact states,
the request's legal mask, the committed choice as the action. A forfeit or a forced end comes from the input log
itself; the decisions its players faced then, unanswered, are rows with action -1. The replay is the recorded battle
only if its log is the recorded ``log`` line for line, less the room's lines, with the same winner and turns
(``log_divergence``); if not (another simulator version, a cut input log), the recorded ``log`` is read as a
spectator log is (``spectator_trajectories``: reconstructed, ``legal_mask_exact`` false), or, with
``--on-replay-mismatch quarantine``, the battle is quarantined ``replay_mismatch``. A record with a ``log`` and no
``inputLog`` is read from its log the same way; one with an ``inputLog`` and no ``log`` is checked by its winner and
turns alone. Each row's ``rating`` is its player's: the ``>player`` line's pre-battle rating, else the ladder's
``oldelo``, else its ``elo`` (the rating after the battle, as a server's own ladder writes it).

A file in the public replay API's shape (``id``, a text ``log``) is read as ``showdown-json`` reads it, so a folder
of both is read whole. The replay filters apply (``--formats``, ``--min-rating`` on the lower of the two players'
ratings, ``--date-from``/``--date-to`` on the timestamp's UTC day).
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cache

from pipelines.errors import InputError, InvalidRecordError, ReplayMismatchError, UnknownFormatError
from pipelines.inputs import file_items, input_id, list_sized, resolve_input
from pipelines.pokemon import input_log, replays
from pipelines.pokemon.dex import (
    SHOWDOWN_VERSION,
    Dex,
    game_type,
    gen_of_format,
    known_formats,
    node_env,
    showdown_dir,
    to_id,
)
from pipelines.pokemon.generated import GENERATOR
from pipelines.pokemon.parser import PokemonParser
from pipelines.pokemon.pov import pov_trajectory
from pipelines.pokemon.replays import Replay, ReplayFilterConfig, ReplayFilters, canonical_format, decode
from pipelines.pokemon.spectator import spectator_trajectories
from pipelines.stages import Parsed, Plan, Source, read_row
from shards_schema import storage
from shards_schema.card import SourceLicense

SIDES = ("p1", "p2")
ON_MISMATCH = ("spectator", "quarantine")


@dataclass(frozen=True, kw_only=True)
class ServerLogConfig(ReplayFilterConfig):
    """What a server battle log whose input log does not replay becomes (showdown-server; the replay filters apply).

    Attributes:
        on_replay_mismatch: what a battle whose inputLog, replayed on the pinned simulator, is not the recorded
            battle becomes: spectator (its recorded log is read as a public replay is, the rows reconstructed) or
            quarantine (quarantined replay_mismatch: a version of exact trajectories only).
    """

    on_replay_mismatch: str = "spectator"

    def __post_init__(self):
        super().__post_init__()
        if self.on_replay_mismatch not in ON_MISMATCH:
            raise ValueError(f"--on-replay-mismatch is one of {', '.join(ON_MISMATCH)}, got "
                             f"{self.on_replay_mismatch!r}")


@dataclass(frozen=True, kw_only=True)
class ServerLog:
    """One server battle log, as read.

    Attributes:
        battle_id: the battle's id.
        format: the format id the pinned simulator knows it by (``canonical_format``).
        source_format: the record's format id where ``format`` differs from it, else None.
        log: the recorded battle log's lines, or None.
        input_log: the input log's lines, or None.
        teams: ``p1team``/``p2team`` by side when the record has both, else None.
        players: the players' names by side.
        winner: the winner's name (``""`` for a tie), or None where the record does not say.
        turns: the battle's turns, where the record says.
        end_type: ``endType`` (``normal``, ``forfeit``, ``forced``), or None.
        ratings: each side's rating (``_player_rating``), None where unrated.
        date: the day of ``timestamp`` in UTC (``YYYY-MM-DD``), or None.
    """

    battle_id: str
    format: str
    source_format: str | None
    log: list[str] | None
    input_log: list[str] | None
    teams: dict[str, list] | None
    players: dict[str, str]
    winner: str | None
    turns: int | None
    end_type: str | None
    ratings: dict[str, int | None]
    date: str | None

    def as_replay(self) -> Replay:
        """What the replay filters read: the battle's rating is the lower of its players' ratings."""
        rated = [r for r in self.ratings.values() if r is not None]
        return Replay(battle_id=self.battle_id, format=self.format, log=self.log or [], date=self.date,
                      rating=min(rated) if rated else None, players=self.players, source_format=self.source_format)


def is_server_log(record: dict) -> bool:
    """Whether a decoded record is a server's battle log rather than a public replay (whose ``log`` is text)."""
    return "inputLog" in record or isinstance(record.get("log"), list) or ("roomid" in record and "id" not in record)


def _lines(record: dict, key: str) -> list[str] | None:
    """A record's list of lines (text is split at newlines), None where absent; anything else is a bad record."""
    value = record.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        return value.split("\n") if value else None
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        return value or None
    raise InvalidRecordError(f"server log's `{key}` is neither a list of lines nor text")


def _player_options(lines: list[str] | None) -> dict[str, dict]:
    """Each side's ``>player`` options (the last line of each side, as the simulator applies them in turn)."""
    out: dict[str, dict] = {}
    for line in lines or ():
        if line.startswith(">player "):
            slot, _, options = line[len(">player "):].partition(" ")
            try:
                parsed = json.loads(options)
            except json.JSONDecodeError:
                continue  # the replay says what is wrong with it
            if isinstance(parsed, dict):
                out[slot] = {**out.get(slot, {}), **parsed}
    return out


def _start_format(lines: list[str] | None) -> str | None:
    for line in lines or ():
        if line.startswith(">start "):
            try:
                options = json.loads(line[len(">start "):])
            except json.JSONDecodeError:
                return None
            return str(options.get("formatid")) if isinstance(options, dict) and options.get("formatid") else None
    return None


def _rating_value(value) -> int | None:
    """A rating as a number: a number or numeric text, a ladder entry's ``oldelo`` (before the battle) or ``elo``."""
    if isinstance(value, bool) or value in (None, "", 0):
        return None
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str):
        try:
            return int(float(value)) or None
        except ValueError:
            return None
    if isinstance(value, dict):
        for key in ("oldelo", "elo"):
            if (rating := _rating_value(value.get(key))) is not None:
                return rating
    return None


def _player_rating(record: dict, side: str, options: dict) -> int | None:
    """A side's rating: its ``>player`` line's (the pre-battle rating newer servers give), else its ladder entry's
    ``oldelo``, else the ladder's rating after the battle (a number from a server's own ladder, ``elo``)."""
    return _rating_value(options.get("rating")) or _rating_value(record.get(f"{side}rating"))


_DATE_STRING = re.compile(r"^[A-Z][a-z]{2} ([A-Z][a-z]{2}) (\d{1,2}) (\d{4}) (\d{2}):(\d{2}):(\d{2}) GMT([+-]\d{4})")


def _day(timestamp) -> str | None:
    """The UTC day of a server log's ``timestamp`` (``Date.toString``: ``Tue Mar 05 2024 12:34:56 GMT-0500 (...)``;
    an ISO time or a Unix time too), or None where it says none: a battle is never dropped for its clock."""
    try:
        if isinstance(timestamp, (int, float)) and not isinstance(timestamp, bool):
            return datetime.fromtimestamp(timestamp, tz=timezone.utc).strftime("%Y-%m-%d")
        if not isinstance(timestamp, str):
            return None
        m = _DATE_STRING.match(timestamp)
        if m:
            when = datetime.strptime(" ".join(m.groups()), "%b %d %Y %H %M %S %z")
        else:
            when = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
            when = when if when.tzinfo else when.replace(tzinfo=timezone.utc)
        return when.astimezone(timezone.utc).strftime("%Y-%m-%d")
    except (ValueError, OverflowError, OSError):
        return None


def _battle_id(record: dict, input_id_: str) -> str:
    roomid = record.get("roomid")
    if isinstance(roomid, str) and roomid:
        return roomid[len("battle-"):] if roomid.startswith("battle-") else roomid
    if record.get("id"):
        return str(record["id"])
    name = input_id_.rsplit("/", 1)[-1]
    for suffix in (".log.json", ".json"):
        if name.lower().endswith(suffix):
            return name[:-len(suffix)]
    return name


def normalize(record: dict, input_id_: str) -> ServerLog:
    """A decoded server log → ``ServerLog``; InvalidRecordError where its bytes hold no battle (neither a log nor an
    input log, or no format)."""
    log, inputs = _lines(record, "log"), _lines(record, "inputLog")
    if log is None and inputs is None:
        raise InvalidRecordError("server log has neither `log` nor `inputLog`: no battle in it")
    options = _player_options(inputs)
    fmt = record.get("format") if isinstance(record.get("format"), str) else None
    fmt = to_id(fmt) if fmt else _start_format(inputs)
    if not fmt and log is not None:
        tier = next((line[len("|tier|"):] for line in log[:60] if line.startswith("|tier|")), "")
        fmt = to_id(tier) or None
    if not fmt:
        raise InvalidRecordError("server log names no format (`format`, the inputLog's >start, the log's |tier|)")
    canonical = canonical_format(fmt, "\n".join(log or ()))
    players = {}
    for side in SIDES:
        name = record.get(side) or options.get(side, {}).get("name")
        if not name and log is not None:
            name = next((line.split("|")[3] for line in log[:80]
                         if line.startswith(f"|player|{side}|") and len(line.split("|")) > 3
                         and line.split("|")[3]), None)
        if name:
            players[side] = str(name)
    teams = record.get("p1team"), record.get("p2team")
    winner, turns = record.get("winner"), record.get("turns")
    end_type = record.get("endType")
    return ServerLog(
        battle_id=_battle_id(record, input_id_), format=canonical, source_format=fmt if canonical != fmt else None,
        log=log, input_log=inputs,
        teams=dict(zip(SIDES, teams, strict=True)) if all(isinstance(t, list) for t in teams) else None,
        players=players, winner=winner if isinstance(winner, str) else None,
        turns=turns if isinstance(turns, int) and not isinstance(turns, bool) else None,
        end_type=end_type if isinstance(end_type, str) else None,
        ratings={side: _player_rating(record, side, options.get(side, {})) for side in SIDES},
        date=_day(record.get("timestamp")))


def drop_reason(battle: ServerLog, filters: ReplayFilters) -> str | None:
    """Why a battle is filtered before it is read: a replay filter's reason, or ``not_singles`` (the format's game
    type, a ``|gametype|`` line of the log, a third player in the input log)."""
    reason = filters.reason(battle.as_replay())
    if reason is not None:
        return reason
    kind = game_type(battle.format)
    shown = next((line[len("|gametype|"):] for line in (battle.log or [])[:60] if line.startswith("|gametype|")),
                 None)
    if kind not in (None, "singles") or shown not in (None, "singles") or any(
            line.startswith((">player p3", ">player p4")) for line in battle.input_log or ()):
        return "not_singles"
    return None


def replay_divergence(battle: ServerLog, replay: dict) -> str | None:
    """Why the replay of a battle's input log is not the recorded battle, or None when it is."""
    if replay.get("error"):
        return (f"the pinned simulator (pokemon-showdown {SHOWDOWN_VERSION}) cannot replay its inputLog: "
                f"{replay['error']}")
    end = replay.get("end")
    if not replay.get("ended") or not isinstance(end, dict):
        return "its inputLog ends before the battle does"
    if battle.log is not None and (why := input_log.log_divergence(battle.log, replay["omniscient_log"])):
        return f"the replay of its inputLog is not its log: {why}"
    if battle.winner is not None and battle.winner != end.get("winner"):
        return f"the record's winner is {battle.winner!r}, the replay's {end.get('winner')!r}"
    if battle.turns is not None and battle.turns != end.get("turns"):
        return f"the record's battle has {battle.turns} turns, the replay {end.get('turns')}"
    if replay.get("game_type") != "singles":
        return f"the replay is a {replay.get('game_type')} battle"
    return None


def exact_trajectories(battle: ServerLog, replay: dict, dex: Dex) -> list[dict]:
    """Both players' trajectories from the replay's own streams (p1 then p2), each row with its player's rating."""
    end = replay["end"]
    names = {side: str(end.get(side) or battle.players.get(side) or side) for side in SIDES}
    winner = next((side for side in SIDES if end.get("winner") and names[side] == end["winner"]), None)
    record = {"battle_id": battle.battle_id, "format": battle.format, "winner": winner,
              "players": {side: {"name": names[side]} for side in SIDES}, "streams": replay["streams"]}
    rows = pov_trajectory(record, "p1", dex) + pov_trajectory(record, "p2", dex)
    for row in rows:
        row["rating"] = battle.ratings[row["player_side"]]
    return rows


def parse(input_id_: str, payload: bytes, dexes: dict[int, Dex], filters: ReplayFilters,
          known: frozenset[str], facts: dict, on_mismatch: str = "spectator") -> Parsed:
    """Both players' trajectories of one server log (or public replay), or no rows and the filter's reason.
    ``facts["replay"]``: the read task's replay of its input log (``input_log.replay``)."""
    record = decode(payload)
    if not is_server_log(record):
        return replays.parse("showdown-json", payload, dexes, filters, known)
    battle = normalize(record, input_id_)
    reason = drop_reason(battle, filters)
    if reason is not None:
        return Parsed([], reason)
    if battle.format not in known:
        raise UnknownFormatError(f"format {battle.format!r} is not a format of the pinned simulator "
                                 f"(pokemon-showdown {SHOWDOWN_VERSION})")
    dex = dexes[gen_of_format(battle.format)]
    relabelled = f"{battle.source_format}→{battle.format}" if battle.source_format is not None else None
    if battle.input_log is not None:
        replay = facts.get("replay")
        if not isinstance(replay, dict):
            raise RuntimeError(f"{input_id_}: its inputLog was not replayed by the read task")
        why = replay_divergence(battle, replay)
        if why is None:
            return Parsed(exact_trajectories(battle, replay, dex), relabelled=relabelled)
        if battle.log is None:
            raise ReplayMismatchError(f"{why}; the record has no `log` to read instead")
        if on_mismatch == "quarantine":
            raise ReplayMismatchError(why)
    return Parsed(recorded_log_trajectories(battle, dex), relabelled=relabelled)


def recorded_log_trajectories(battle: ServerLog, dex: Dex) -> list[dict]:
    """Both players' trajectories reconstructed from the battle's recorded log as from a spectator log (the log
    shows both sides' exact HP), each row with its player's rating."""
    rows = spectator_trajectories(battle.log, dex, format_id=battle.format, battle_id=battle.battle_id,
                                  names=battle.players)
    for row in rows:
        row["rating"] = battle.ratings[row["player_side"]]
    return rows


def to_replay(payload: bytes, input_id_: str, filters: ReplayFilters, known: frozenset[str]) -> ServerLog | None:
    """The battle whose input log the read task replays: a server log with an ``inputLog`` that ``parse`` will
    read (not filtered, of a known format); None for any other input, whose parse needs no replay."""
    try:
        record = decode(payload)
        if not is_server_log(record):
            return None
        battle = normalize(record, input_id_)
    except InputError:
        return None  # the parser raises the same error, and the input is quarantined with it
    if battle.input_log is None or drop_reason(battle, filters) is not None or battle.format not in known:
        return None
    return battle


# ---------------------------------------------------------------------------- parser and source
class ServerLogParser(PokemonParser):
    """A server battle log (or a public replay) → both players' trajectories; a battle is written once
    (``battle_id``: a battle's log and its replay share the id)."""

    def __init__(self, *, options: ServerLogConfig, formats: tuple[str, ...], source: str):
        super().__init__(options=options, formats=formats, source=source)
        self.filters = _filters(options, self.formats)

    def parse(self, input_id: str, payload: bytes, sha256: str, facts: dict) -> Parsed:
        return parse(input_id, payload, self.dexes, self.filters, self.known_formats, facts,
                     self.options.on_replay_mismatch)

    def dedupe_key(self, parsed: Parsed) -> str | None:
        return parsed.rows[0]["battle_id"]


def _filters(options: ReplayFilterConfig, formats: frozenset[str] | None) -> ReplayFilters:
    return ReplayFilters(formats=formats, min_rating=options.min_rating, date_from=options.date_from or None,
                         date_to=options.date_to or None)


@cache
def _known_formats() -> frozenset[str]:
    return known_formats()


@cache
def replayer_revision() -> str:
    """The simulator and the replayer script the exact trajectories depend on."""
    digest = hashlib.sha256(input_log.REPLAYER.read_bytes()).hexdigest()[:12]
    return f"pokemon-showdown@{SHOWDOWN_VERSION}+replayer-{digest}"


class ShowdownServerSource(Source):
    """Server battle logs (``.json``, as ``<id>.log.json``) under ``--input`` (a folder, file or URI); one work item
    per file. The read task replays each input log on the simulator (one Node process per worker, at most
    ``--num-parse-actors`` read tasks at once) and hands the parser the file's bytes with the replay."""

    name = "showdown-server"
    parser = ServerLogParser
    options_class = ServerLogConfig
    shard_bytes_per_input_byte = 1.0  # 30 generated server logs (20 gen9randombattle, 10 gen1ou): 364 KB → 348 KB
    # of turns
    bounded_reads = True
    license = SourceLicense(
        hub_id="unknown",
        terms="unknown: check the source. Battle logs written by a Pokémon Showdown server (smogon/pokemon-showdown, "
              "MIT license for its code), from whoever ran the server the files in --input came from.")
    showdown: str | None = None

    def plan(self) -> Plan:
        root, revision = resolve_input(self.inputs, self.name, "main")
        try:  # found on the driver and handed to the read tasks; a job without input logs needs no simulator
            self.showdown = str(showdown_dir())
        except FileNotFoundError:
            self.showdown = None
        return Plan(file_items(root, list_sized(root, (".json",))), revision)

    def read(self, item: dict) -> list[dict]:
        rel = input_id(item["uri"], item["root"])
        payload = storage.read_bytes(item["uri"])
        battle = to_replay(payload, rel, _filters(self.options, frozenset(self.formats) or None), _known_formats())
        if battle is None:
            return [read_row(rel, payload)]
        if self.showdown is None:
            raise RuntimeError(f"{rel}: its inputLog needs the Pokémon Showdown simulator to replay, and it is not "
                               f"installed on the driver (`make setup`, or REPLAYFORGE_SHOWDOWN_DIR)")
        return [read_row(rel, payload, facts={"replay": input_log.replay(battle.input_log, battle.teams,
                                                                         self.showdown)})]

    def output_config(self) -> dict:
        r = self.options
        return {"min_rating": r.min_rating, "date_from": r.date_from, "date_to": r.date_to,
                "on_replay_mismatch": r.on_replay_mismatch, "replayer": replayer_revision()}


# ---------------------------------------------------------------------------- the generator's battles as server logs
def generated_server_logs(fmt: str, num_battles: int, seed: int, *, p1: str = "heuristic", p2: str = "random",
                          first_index: int = 0, end_by: str | None = None, end_turn: int = 5,
                          showdown: str | None = None) -> list[tuple[str, bytes]]:
    """(battle id, server log JSON) of each battle the generator plays with ``--as-server-log`` (the battles of the
    same arguments without it, written as a server writes them; ``end_by``: ``forfeit``, ``timer`` or
    ``forcetie`` ends each battle that reaches ``end_turn`` that way), in index order."""
    cmd = ["node", str(GENERATOR), "--format", fmt, "--num-battles", str(num_battles), "--seed", str(seed),
           "--first-index", str(first_index), "--p1", p1, "--p2", p2, "--as-server-log"]
    if end_by is not None:
        cmd += ["--end-by", end_by, "--end-turn", str(end_turn)]
    proc = subprocess.run(cmd, capture_output=True, env=node_env(showdown), check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"battle generator failed ({proc.returncode}): {proc.stderr.decode()[-2000:]}")
    return [(_battle_id(json.loads(line), ""), line) for line in proc.stdout.splitlines() if line.strip()]

"""Public Showdown replays (spectator logs): replay JSON files, the hub's raw-replay table, the PokéChamp table.

Each input is one battle, normalized to a ``Replay`` and parsed by ``pipelines.pokemon.spectator`` into both
players' first-person trajectories. Filters (formats, minimum rating, date range) return a reason that is counted;
duplicate battle ids are dropped by the writer, also counted.

- ``showdown-json``: files in the public replay API's JSON shape (``id, format, players, log, uploadtime,
  formatid, rating``), loose ``.json`` files under ``--input``.
- ``hf-raw``: ``jakegrigsby/metamon-raw-replays`` (same columns) as Parquet, local or fetched from the hub at a
  pinned revision; read in streamed row groups, only the requested formats kept.
- ``pokechamp``: ``milkkarten/pokechamp`` (``battle_id, gamemode, elo, month_year, text``), Parquet, same way.

Older replays write format ids without the generation (``ou``, ``ubers``, ``randombattle``, ``doublesou``: gen 6
replays with ``formatid: "ou"``); the log's ``|gen|N`` line says which, and such a battle is read, filtered and
written under the id the pinned simulator knows (``gen6ou``, ``canonical_format``): its rows' ``format`` is that id,
and the manifest counts it by ``<source id>→<written id>`` (``Counts.relabelled``). ``Replay.source_format`` keeps the
id as the source wrote it. An unprefixed id whose log has no ``|gen|`` line keeps its id and is quarantined as
``unknown_format``, saying why (or filtered as ``format_not_requested`` when formats are asked for).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import huggingface_hub
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.errors import InvalidJsonError, InvalidRecordError, UnknownFormatError
from pipelines.inputs import file_items, input_id, list_sized, resolve_input
from pipelines.pokemon.dex import Dex, format_aliases, game_type, gen_of_format, known_formats, to_id
from pipelines.pokemon.parser import PokemonParser
from pipelines.pokemon.spectator import spectator_trajectories
from pipelines.stages import Parsed, Plan, Source, read_row, work_item
from shards_schema import storage
from shards_schema.card import SourceLicense

HUB = {
    "hf-raw": ("jakegrigsby/metamon-raw-replays", "v1"),
    "pokechamp": ("milkkarten/pokechamp", "main"),
}
"""Hub dataset and default revision per source; the manifest records the commit the revision resolved to."""

COLUMNS = {
    "hf-raw": ["id", "format", "players", "log", "uploadtime", "formatid", "rating"],
    "pokechamp": ["battle_id", "gamemode", "elo", "month_year", "text"],
}
FORMAT_COLUMN = {"hf-raw": "formatid", "pokechamp": "gamemode"}
LOG_COLUMN = {"hf-raw": "log", "pokechamp": "text"}
ID_COLUMN = {"hf-raw": "id", "pokechamp": "battle_id"}


@dataclass(frozen=True, kw_only=True)
class ReplayFilterConfig:
    """Which public replays to keep (showdown-json, showdown-server, hf-raw, pokechamp).

    Attributes:
        min_rating: keep battles rated at least this (unrated ones are dropped when set).
        date_from: keep battles from this day on (YYYY-MM-DD).
        date_to: keep battles up to this day (YYYY-MM-DD).
    """

    min_rating: int | None = None
    date_from: str = ""
    date_to: str = ""

    def __post_init__(self):
        for day in (self.date_from, self.date_to):
            if day and not (len(day) == 10 and day[4] == day[7] == "-" and day.replace("-", "").isdigit()):
                raise ValueError(f"dates are YYYY-MM-DD, got {day!r}")


@dataclass(frozen=True, kw_only=True)
class Replay:
    """One battle's public log, whatever table or file it came from.

    Attributes:
        battle_id: the battle's id.
        format: format id.
        log: the spectator protocol lines.
        rating: the battle's rating (Elo) when the source has one.
        date: the day it was played or uploaded (``YYYY-MM-DD``), or the month (``YYYY-MM``) when that is all.
        players: player names by side, when the source lists them.
        source_format: the format id as the source wrote it, where ``format`` differs from it (``ou`` for a gen 6
            replay whose ``format`` is ``gen6ou``: ``canonical_format``); None otherwise.
    """

    battle_id: str
    format: str
    log: list[str]
    rating: int | None
    date: str | None
    players: dict[str, str]
    source_format: str | None = None


@dataclass(frozen=True, kw_only=True)
class ReplayFilters:
    """Which battles to keep.

    Attributes:
        formats: format ids to keep (empty: all).
        min_rating: minimum rating; battles without a rating are dropped when set.
        date_from: first day to keep (``YYYY-MM-DD``), inclusive.
        date_to: last day to keep (``YYYY-MM-DD``), inclusive.
    """

    formats: frozenset[str] | None = None
    min_rating: int | None = None
    date_from: str | None = None
    date_to: str | None = None

    def reason(self, replay: Replay) -> str | None:
        if self.formats is not None and replay.format not in self.formats:
            return "format_not_requested"
        if self.min_rating is not None:
            if replay.rating is None:
                return "unrated"
            if replay.rating < self.min_rating:
                return "below_min_rating"
        if self.date_from or self.date_to:
            if replay.date is None:
                return "undated"
            # a month-only date (PokéChamp) is kept when any day of it is in range
            if self.date_from and replay.date < self.date_from[: len(replay.date)]:
                return "before_date_from"
            if self.date_to and replay.date > self.date_to[: len(replay.date)]:
                return "after_date_to"
        return None


def _rating(value) -> int | None:
    if value in (None, "", 0):
        return None
    try:
        return int(float(value))
    except (TypeError, ValueError) as err:
        raise InvalidRecordError(f"rating {value!r} is not a number") from err


def _day(epoch) -> str | None:
    if epoch in (None, ""):
        return None
    try:
        return datetime.fromtimestamp(int(epoch), tz=timezone.utc).strftime("%Y-%m-%d")
    except (TypeError, ValueError, OverflowError, OSError) as err:
        raise InvalidRecordError(f"uploadtime {epoch!r} is not a Unix time") from err


def _month(value) -> str | None:
    """PokéChamp's ``month_year`` (``2024-03``, ``03-2024``, ``March 2024``) → ``YYYY-MM``."""
    if not value:
        return None
    text = str(value).strip()
    for fmt in ("%Y-%m", "%m-%Y", "%B %Y", "%b %Y", "%m/%Y", "%Y/%m"):
        try:
            return datetime.strptime(text, fmt).strftime("%Y-%m")
        except ValueError:
            continue
    raise InvalidRecordError(f"month_year {value!r} is not a month")


def _log(record: dict, key: str) -> list[str]:
    """The protocol lines of a record's log field; a missing, null or non-text log is a bad record, not a cut
    battle (``str(None)`` would have parsed as the one-line log ``None``)."""
    log = record.get(key)
    if not isinstance(log, str) or not log:
        raise InvalidRecordError(f"record's `{key}` is {type(log).__name__ if log is not None else 'null'}"
                                 f"{' and empty' if log == '' else ''}, not a battle log")
    return log.split("\n")


def _format_id(record: dict) -> str:
    """``formatid``, or the id Showdown derives from the display name when it is missing (``toID``: lower case,
    ``[a-z0-9]`` kept, so "[Gen 9] Random Battle" is ``gen9randombattle``)."""
    if record.get("formatid"):
        return str(record["formatid"])
    name = record.get("format")
    if not isinstance(name, str) or not to_id(name):
        raise InvalidRecordError(f"record has neither `formatid` nor a `format` name (format is {name!r})")
    return to_id(name)


_GEN_PREFIX = re.compile(r"gen\d")
_GEN_LINE = re.compile(r"^\|gen\|(\d)\r?$", re.MULTILINE)

LEGACY_TIERS = {"oumonotype": "monotype"}
"""Tier names older logs write that the pinned simulator has under another name and no alias, by id without the
generation: a 2014 gen 6 log's ``|tier|OU Monotype`` is Monotype (``gen6monotype``)."""

_NOT_SINGLES_NAME = re.compile(r"doubles|vgc|triples|multi|freeforall|ffa|2v2|rotation|dubs")
"""Words of a format id that name a game type other than singles: read only for an id the simulator does not have
(a retired VGC season such as ``gen9vgc2023regulationc``) and a log without a ``|gametype|`` line. No singles
format of the pinned simulator has one (tests/pipelines/test_spectator_mechanics.py checks every format)."""


def canonical_format(format_id: str, log: str) -> str:
    """The id the pinned simulator knows a battle's format by (``parse`` says why when none):

    - an id without its generation takes the generation of the log's ``|gen|N`` line (``ou`` with ``|gen|6`` is
      ``gen6ou``; no ``|gen|`` line: ``format_id`` unchanged);
    - an id the simulator does not have resolves through the simulator's format aliases or an older tier name
      (``LEGACY_TIERS``) to the same generation's format when the simulator has it (``gen6mono`` and
      ``gen6oumonotype`` are ``gen6monotype``), else stays as it is.

    ``log``: the log's text (the lines joined by newlines)."""
    if not _GEN_PREFIX.match(format_id):
        gen = _GEN_LINE.search(log)
        if gen is None:
            return format_id
        format_id = f"gen{gen.group(1)}{format_id}"
    return _known_name(format_id)


def _known_name(format_id: str) -> str:
    """``format_id`` (generation first), or the format of its generation that an alias or an older tier name of
    it names, where the simulator has one."""
    known = known_formats()
    if format_id in known:
        return format_id
    prefix, name = format_id[:4], format_id[4:]
    for target in (*format_aliases().get(name, ()), LEGACY_TIERS.get(name)):
        if target is not None and prefix + target in known:
            return prefix + target
    return format_id


def game_type_of(replay: Replay) -> str:
    """The battle's game type: the log's ``|gametype|`` line; without one, the format's in the simulator; for a
    format it does not have, ``doubles`` where the id names another game type (``_NOT_SINGLES_NAME``), else
    ``singles``."""
    for line in replay.log[:40]:
        if line.startswith("|gametype|"):
            return line[len("|gametype|"):].strip() or "singles"
    known = game_type(replay.format)
    if known is not None:
        return known
    return "doubles" if _NOT_SINGLES_NAME.search(replay.source_format or replay.format) else "singles"


def _with_format(replay: Replay) -> Replay:
    """``replay`` under its canonical format id, the source's kept in ``source_format`` when they differ."""
    canonical = canonical_format(replay.format, "\n".join(replay.log))
    if canonical == replay.format:
        return replay
    return Replay(**{**replay.__dict__, "format": canonical, "source_format": replay.format})


def normalize(source: str, record: dict) -> Replay:
    """A raw record of a source → ``Replay``, under its canonical format id (``canonical_format``). Raises
    InvalidRecordError when required fields are missing."""
    if source == "showdown-json" and ("inputLog" in record or isinstance(record.get("log"), list)):
        raise InvalidRecordError("a Showdown server's battle log (`inputLog`, `log` as a list of lines), not a "
                                 "public replay: read it with --source showdown-server")
    try:
        if source in ("showdown-json", "hf-raw"):
            players = record.get("players") or []
            return _with_format(Replay(
                battle_id=str(record["id"]), format=_format_id(record), log=_log(record, "log"),
                rating=_rating(record.get("rating")), date=_day(record.get("uploadtime")),
                players={f"p{i + 1}": str(p) for i, p in enumerate(list(players)[:2])}))
        if source == "pokechamp":
            if not record.get("gamemode"):
                raise InvalidRecordError("pokechamp record has no `gamemode`")
            return _with_format(Replay(battle_id=str(record["battle_id"]), format=str(record["gamemode"]),
                                       log=_log(record, "text"), rating=_rating(record.get("elo")),
                                       date=_month(record.get("month_year")), players={}))
    except KeyError as err:
        raise InvalidRecordError(f"{source} record lacks {err}") from err
    raise ValueError(f"unknown replay source {source!r}")


def decode(payload: bytes) -> dict:
    try:
        record = json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InvalidJsonError(f"replay is not JSON: {err}") from err
    if not isinstance(record, dict):
        raise InvalidRecordError("replay JSON is not an object")
    return record


def parse(source: str, payload: bytes, dexes: dict[int, Dex], filters: ReplayFilters,
          known_formats: frozenset[str]) -> Parsed:
    """Both players' trajectories of one replay, or no rows and the filter's reason; a relabelled format id
    (``source_format``) is said in ``Parsed.relabelled``."""
    replay = normalize(source, decode(payload))
    reason = filters.reason(replay)
    if reason is not None:
        return Parsed([], reason)
    # the game type first: a doubles battle of a format the simulator no longer has is filtered, not unknown
    if game_type_of(replay) != "singles":
        return Parsed([], "not_singles")
    if replay.format not in known_formats:
        raise UnknownFormatError(_unknown_format(replay))
    dex = dexes[gen_of_format(replay.format)]
    rows = spectator_trajectories(replay.log, dex, format_id=replay.format, battle_id=replay.battle_id,
                                  rating=replay.rating, names=replay.players)
    relabelled = f"{replay.source_format}→{replay.format}" if replay.source_format is not None else None
    return Parsed(rows, relabelled=relabelled)


def _unknown_format(replay: Replay) -> str:
    """Why a replay's format is not one the pinned simulator knows."""
    if not _GEN_PREFIX.match(replay.format):
        return (f"format {replay.format!r} does not name its generation (no gen<N> prefix, as older replays write "
                f"it) and the log has no |gen| line to tell it")
    none = "is not a format of the pinned simulator, nor is any alias or older tier name of it"
    if replay.source_format is not None:
        return f"format {replay.format!r} (the source's {replay.source_format!r} in the log's generation) {none}"
    return f"format {replay.format!r} {none}"


def download(source: str, out_dir: Path, revision: str | None, formats: list[str]) -> str:
    """Fetch a hub table's Parquet files (only those of the asked formats when the file names tell) at a
    revision; returns the commit the revision resolved to. huggingface_hub resumes partial downloads."""
    repo, default_revision = HUB[source]
    api = huggingface_hub.HfApi()
    info = api.dataset_info(repo, revision=revision or default_revision)
    files = sorted(f for f in api.list_repo_files(repo, repo_type="dataset", revision=info.sha)
                   if f.endswith(".parquet"))
    named = [f for f in files if any(fmt in f for fmt in formats)] if formats else files
    for name in named or files:  # names that do not tell the format: fetch all, filter rows when reading
        huggingface_hub.hf_hub_download(repo_id=repo, repo_type="dataset", filename=name, revision=info.sha,
                                        local_dir=str(out_dir))
    return info.sha


# ---------------------------------------------------------------------------- parser
class ReplayParser(PokemonParser):
    """A public replay (any of the three sources' records) → both players' trajectories; a battle is written
    once (``battle_id``: the same battle may be in a JSON file and a table)."""

    def __init__(self, *, options: ReplayFilterConfig, formats: tuple[str, ...], source: str):
        super().__init__(options=options, formats=formats, source=source)
        self.filters = ReplayFilters(formats=self.formats, min_rating=options.min_rating,
                                     date_from=options.date_from or None, date_to=options.date_to or None)

    def parse(self, input_id: str, payload: bytes, sha256: str, facts: dict) -> Parsed:
        return parse(self.source, payload, self.dexes, self.filters, self.known_formats)

    def dedupe_key(self, parsed: Parsed) -> str | None:
        return parsed.rows[0]["battle_id"]


# ---------------------------------------------------------------------------- sources
class _ReplaySource(Source):
    parser = ReplayParser
    options_class = ReplayFilterConfig
    shard_bytes_per_input_byte = 1.2  # the 400 shared bench battles: 4.97 MB of replay JSON → 5.91 MB of turns

    def output_config(self) -> dict:
        r = self.options
        return {"min_rating": r.min_rating, "date_from": r.date_from, "date_to": r.date_to}


class ShowdownJsonSource(_ReplaySource):
    """Replay JSON files under ``--input`` (a folder, file or URI); one read task per file."""

    name = "showdown-json"
    license = SourceLicense(
        hub_id="unknown",
        terms="unknown: check the source. Pokémon Showdown replays in the JSON shape of its public replay API "
              "(replay.pokemonshowdown.com), from wherever the files in --input came from.")

    def plan(self) -> Plan:
        root, revision = resolve_input(self.inputs, self.name, "main")
        return Plan(file_items(root, list_sized(root, (".json",))), revision)

    def read(self, item: dict) -> list[dict]:
        rel = input_id(item["uri"], item["root"])
        return [read_row(rel, storage.read_bytes(item["uri"]))]


class _TableSource(_ReplaySource):
    """A replay table's Parquet files under ``--input`` (a folder, file or URI; ``hf://datasets/<repo>@<rev>``
    reads the hub in place at that commit), or fetched into the local ``--input`` with ``--download``. One read
    task per row group, planned from the footers on the driver."""

    def plan(self) -> Plan:
        repo, default_revision = HUB[self.name]

        def fetch(folder: Path, revision: str | None) -> str:
            return f"{repo}@{download(self.name, folder, revision, list(self.formats))}"

        root, revision = resolve_input(self.inputs, self.name, default_revision, fetch)
        listed = list_sized(root, (".parquet",))
        if not listed:
            raise FileNotFoundError(f"no .parquet files under --input {root}")
        return Plan(plan_row_groups(root, listed, self.name, list(self.formats)), revision)

    def read(self, item: dict) -> list[dict]:
        return read_row_group(item)


class HfRawSource(_TableSource):
    __doc__ = _TableSource.__doc__
    name = "hf-raw"
    license = SourceLicense(
        hub_id="unknown",
        terms=f"unknown: check the source. Public Pokémon Showdown replays as collected in the hub dataset "
              f"{HUB['hf-raw'][0]} (Metamon's authors).")


class PokechampSource(_TableSource):
    __doc__ = _TableSource.__doc__
    name = "pokechamp"
    license = SourceLicense(
        hub_id="unknown",
        terms=f"unknown: check the source. Pokémon Showdown battle logs as collected in the hub dataset "
              f"{HUB['pokechamp'][0]} (PokéChamp's authors).")


def plan_row_groups(root: str, listed: list[tuple[str, int]], source: str, formats: list[str]) -> list[dict]:
    """One work item per row group, planned from the footers: streamed, bounded by the row-group size, ordered;
    its bytes are the row group's stored (compressed) size. A file whose footer cannot be read (truncated, damaged)
    is one item that quarantines the file."""
    items = []
    for uri, size in listed:
        rel = input_id(uri, root)
        task = {"uri": uri, "source": source, "formats": formats}
        try:
            with storage.open_input(uri) as fh:
                meta = pq.ParquetFile(fh).metadata
        except (OSError, pa.ArrowException, UnicodeDecodeError) as err:  # a damaged footer's column names
            items.append(work_item(rel, size, **task, row_group=None,
                                   read_error=f"Parquet footer: {type(err).__name__}: {err}"))
            continue
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            stored = sum(group.column(c).total_compressed_size for c in range(group.num_columns))
            items.append(work_item(f"{rel}#rg{g}", stored, **task, row_group=g, read_error=None))
    return items


def read_row_group(item: dict) -> list[dict]:
    """One Parquet row group of a replay table → one input per battle of the asked formats (its row as JSON).
    Rows of other formats are not inputs of this job: the table is read for the asked ones.

    Corrupt data becomes quarantined inputs at the finest grain that can be told apart: a file whose footer
    could not be read is one input (its name; ``plan_row_groups`` found it while planning), a row group whose
    pages cannot be read or decompressed is one (``file.parquet#rg3``), and a row holding bytes that are not
    UTF-8 (a damaged uncompressed page) is one, named by its battle id when that still decodes
    (``file.parquet#rg3:row1`` otherwise). Page checksums are verified where the file has them, which catches
    damage that still decodes."""
    source, formats = item["source"], set(item["formats"])
    id_column, format_column, log_column = ID_COLUMN[source], FORMAT_COLUMN[source], LOG_COLUMN[source]
    name = storage.name(item["uri"])
    if item.get("read_error") is not None:
        return [read_row(name, read_error=item["read_error"])]
    group = f"{name}#rg{item['row_group']}"
    try:
        with storage.open_input(item["uri"]) as fh:
            table = pq.ParquetFile(fh, page_checksum_verification=True).read_row_group(
                item["row_group"], columns=COLUMNS[source])
    except (OSError, pa.ArrowException, UnicodeDecodeError) as err:
        return [read_row(group, read_error=f"row group {item['row_group']}: {type(err).__name__}: {err}")]
    out = []
    for i, row, error in _decoded_rows(table):
        if error is not None:
            battle, fmt = _cell(table, id_column, i), _cell(table, format_column, i)
            # an unprefixed id's generation is in the log, which may be what cannot be read: kept
            if formats and isinstance(fmt, str) and fmt not in formats and _GEN_PREFIX.match(fmt):
                continue
            input_id_ = f"{name}::{battle}" if battle is not None else f"{group}:row{i}"
            out.append(read_row(input_id_, read_error=f"row {i} of row group {item['row_group']}: {error}"))
            continue
        fmt = row.get(format_column)
        if isinstance(fmt, str) and isinstance(row.get(log_column), str):
            fmt = canonical_format(fmt, row[log_column])
        if formats and fmt not in formats:
            continue
        out.append(read_row(f"{name}::{row.get(id_column)}", json.dumps(row, default=str, sort_keys=True).encode()))
    return out


def _decoded_rows(table: pa.Table):
    """``(row number, row, None)`` per row, or ``(row number, None, why)`` for a row whose values are invalid:
    one bad string makes ``to_pylist`` raise ``UnicodeDecodeError`` for the whole table, so a table that fails
    full validation is converted row by row."""
    try:
        table.validate(full=True)
    except pa.ArrowException:
        pass
    else:
        yield from ((i, row, None) for i, row in enumerate(table.to_pylist()))
        return
    for i in range(table.num_rows):
        one = table.slice(i, 1)
        bad = []
        for column in one.column_names:
            try:
                one.column(column).validate(full=True)
            except pa.ArrowException as err:
                bad.append(f"column {column}: {err}")
        yield (i, None, "; ".join(bad)) if bad else (i, one.to_pylist()[0], None)


def _cell(table: pa.Table, column: str, i: int):
    """One value of a row that failed validation, or None where that value is itself invalid."""
    try:
        value = table.column(column)[i]
        value.validate(full=True)
        return value.as_py()
    except (pa.ArrowException, UnicodeDecodeError):
        return None

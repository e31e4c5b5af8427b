"""Public Showdown replays (spectator logs): replay JSON files, the hub's raw-replay table, the PokéChamp table.

Each input is one battle, normalized to a ``Replay`` and parsed by ``pipelines.pokemon.spectator`` into both
players' first-person trajectories. Filters (formats, minimum rating, date range) return a reason that is counted;
duplicate battle ids are dropped by the writer, also counted.

- ``showdown-json``: files in the public replay API's JSON shape (``id, format, players, log, uploadtime,
  formatid, rating``), loose ``.json`` files under ``--input``.
- ``hf-raw``: ``jakegrigsby/metamon-raw-replays`` (same columns) as Parquet, local or fetched from the hub at a
  pinned revision; read in streamed row groups, only the requested formats kept.
- ``pokechamp``: ``milkkarten/pokechamp`` (``battle_id, gamemode, elo, month_year, text``), Parquet, same way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from pipelines.errors import InvalidJsonError, InvalidRecordError, UnknownFormatError
from pipelines.pokemon.dex import Dex, gen_of_format, to_id
from pipelines.pokemon.spectator import spectator_trajectories
from pipelines.sources import list_files

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
    """

    battle_id: str
    format: str
    log: list[str]
    rating: int | None
    date: str | None
    players: dict[str, str]


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


def normalize(source: str, record: dict) -> Replay:
    """A raw record of a source → ``Replay``. Raises InvalidRecordError when required fields are missing."""
    try:
        if source in ("showdown-json", "hf-raw"):
            players = record.get("players") or []
            return Replay(battle_id=str(record["id"]), format=_format_id(record), log=_log(record, "log"),
                          rating=_rating(record.get("rating")), date=_day(record.get("uploadtime")),
                          players={f"p{i + 1}": str(p) for i, p in enumerate(list(players)[:2])})
        if source == "pokechamp":
            if not record.get("gamemode"):
                raise InvalidRecordError("pokechamp record has no `gamemode`")
            return Replay(battle_id=str(record["battle_id"]), format=str(record["gamemode"]),
                          log=_log(record, "text"), rating=_rating(record.get("elo")),
                          date=_month(record.get("month_year")), players={})
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
          known_formats: frozenset[str]) -> tuple[list[dict], str | None]:
    """Both players' trajectories of one replay, or (``[]``, filter reason)."""
    replay = normalize(source, decode(payload))
    reason = filters.reason(replay)
    if reason is not None:
        return [], reason
    if replay.format not in known_formats:
        raise UnknownFormatError(f"format {replay.format!r} is not a format of the pinned simulator")
    if any(line.startswith("|gametype|") and line != "|gametype|singles" for line in replay.log[:40]):
        return [], "not_singles"
    dex = dexes[gen_of_format(replay.format)]
    return spectator_trajectories(replay.log, dex, format_id=replay.format, battle_id=replay.battle_id,
                                  rating=replay.rating, names=replay.players), None


def list_json(root: Path) -> list[str]:
    return list_files(root, (".json",))


def list_parquet(root: Path) -> list[str]:
    return list_files(root, (".parquet",))


def download(source: str, out_dir: Path, revision: str | None, formats: list[str]) -> str:
    """Fetch a hub table's Parquet files (only those of the asked formats when the file names tell) at a
    revision; returns the commit the revision resolved to. huggingface_hub resumes partial downloads."""
    from huggingface_hub import HfApi, hf_hub_download

    repo, default_revision = HUB[source]
    api = HfApi()
    info = api.dataset_info(repo, revision=revision or default_revision)
    files = sorted(f for f in api.list_repo_files(repo, repo_type="dataset", revision=info.sha)
                   if f.endswith(".parquet"))
    named = [f for f in files if any(fmt in f for fmt in formats)] if formats else files
    for name in named or files:  # names that do not tell the format: fetch all, filter rows when reading
        hf_hub_download(repo_id=repo, repo_type="dataset", filename=name, revision=info.sha, local_dir=str(out_dir))
    return info.sha

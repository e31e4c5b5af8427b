"""Metamon's parsed replays: one ``.json.lz4`` per player per battle, loose or in archives (the hub has one
``.tar.gz`` per format).

Files are named ``{battle_id}_{rating|Unrated}_{player}_vs_{opponent}_{MM-DD-YYYY}_{WIN|LOSS}.json.lz4`` (names may
hold spaces) and hold ``{"states": [UniversalState...], "actions": [int...]}``. Archives (``.tar.gz``, ``.tgz``,
``.tar``, ``.zip``, ``.7z``) are read member by member by ``pipelines/archives.py``, never unpacked to disk, with
its damage handling: a damaged member is quarantined under its own id and the members after it are still read as
far as the format allows. A member's id is ``<archive's path below --input>::<member name>`` (an archive in a
sub-folder of ``--input`` carries the sub-folder, as a loose file's id does). The hub dataset is
``jakegrigsby/metamon-parsed-replays``, one ``<format>.tar.gz`` per format, downloaded at a pinned revision with
huggingface_hub (which resumes partial downloads).

Results. Metamon's parser writes a tie as a loss for both players: ``WIN`` in the name and ``battle_won`` in the last
state only for the winner's file, ``LOSS`` and ``battle_lost`` otherwise (``POVReplay.winner`` is "this side won",
false for both sides of a tie; UT-Austin-RPL/metamon c80f1f1, ``replay_parser/backward.py`` and
``parse_replays.py``). A file alone cannot tell a lost battle from a tie. When both players' files of one battle
are read (``tie_names``: the same battle id, players swapped, both ``LOSS``), the read task hands the parser the
fact ``{"result": "tie"}`` and the trajectory's result is ``tie`` (reward 0); a ``LOSS`` file whose opponent's file
is absent stays ``loss``, which is wrong for the ties among them. Pairs are found within one archive, or among the
loose files of one ``--input``, not across the two.

Older Metamon versions wrote move types and categories as poke-env enum names (``GROUND``, ``STATUS``,
``THREE_QUESTION_MARKS``: ``interface.py`` ``reference.type.name``); newer ones lower-case ids. Both are read as
the ids of the observation vocabulary.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import lz4.frame
from huggingface_hub import hf_hub_download

from pipelines.archives import is_archive, iter_path
from pipelines.errors import (
    CorruptCompressionError,
    IllegalActionError,
    InvalidJsonError,
    InvalidRecordError,
    UnknownFormatError,
)
from pipelines.inputs import file_items, list_sized, resolve_input
from pipelines.pokemon.dex import TYPELESS, to_id
from pipelines.pokemon.parser import PokemonParser
from pipelines.pokemon.trajectory import TrajectoryMeta, build_rows, derived_mask
from pipelines.stages import Parsed, Plan, Source, SourceInputs, read_row
from shards_schema import storage
from shards_schema.card import SourceLicense

HUB_REPO = "jakegrigsby/metamon-parsed-replays"
HUB_REVISION = "v1"
"""Metamon's release tag for its parsed replays (the revision its own loader pins)."""

_NAME = re.compile(
    r"^(?P<battle>[^_]+)_(?P<rating>\d+|Unrated)_(?P<players>.+)_(?P<date>\d{2}-\d{2}-\d{4})_(?P<result>WIN|LOSS)"
    r"(?i:\.json\.lz4)$"
)
REPLAY = (".json.lz4",)
"""The suffix of a Metamon trajectory file (any case: ``.JSON.LZ4`` too); other files and archive members are
filtered ``not_a_replay``."""


@dataclass(frozen=True)
class FileName:
    """What a Metamon file name says about its trajectory."""

    battle_id: str
    rating: int | None
    player: str
    opponent: str
    date: str
    won: bool

    @property
    def format(self) -> str:
        """Battle ids are ``[prefix-]<format>-<number>``."""
        parts = self.battle_id.split("-")
        return next((p for p in parts if p.startswith("gen")), parts[0])


def parse_name(name: str) -> FileName:
    match = _NAME.match(Path(name).name)
    if match is None:
        raise InvalidRecordError(f"{name!r} does not follow Metamon's file naming")
    player, sep, opponent = match["players"].partition("_vs_")
    if not sep:
        raise InvalidRecordError(f"{name!r} has no `_vs_` between the player names")
    rating = None if match["rating"] == "Unrated" else int(match["rating"])
    return FileName(match["battle"], rating, player, opponent, match["date"], match["result"] == "WIN")


def tie_names(names: list[str]) -> set[str]:
    """The names among ``names`` (paths or ``archive::member`` ids) whose battle is a tie: both players' files are
    present and both say ``LOSS`` (see the module docstring). Names that do not follow Metamon's naming are left to
    the parser, which quarantines them."""
    losses: dict[tuple[str, str, str], list[str]] = {}
    for name in names:
        try:
            parsed = parse_name(name.rsplit("::", 1)[-1])
        except InvalidRecordError:
            continue
        if not parsed.won:
            losses.setdefault((parsed.battle_id, parsed.player, parsed.opponent), []).append(name)
    out: set[str] = set()
    for (battle, player, opponent), mine in losses.items():
        theirs = losses.get((battle, opponent, player))
        if theirs and player != opponent:
            out.update(mine)
    return out


def download(formats: list[str], out_dir: Path, revision: str = HUB_REVISION) -> Path:
    """Fetch only the asked formats' archives from the hub; resumable, and a no-op once present."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for fmt in formats:
        hf_hub_download(repo_id=HUB_REPO, repo_type="dataset", filename=f"{fmt}.tar.gz", revision=revision,
                        local_dir=str(out_dir))
    return out_dir


def _types(raw: str) -> list[str]:
    return [t for t in raw.split() if t != "notype"]


def _word(raw: str) -> str:
    """A Metamon move type or category as a vocabulary id: ``GROUND`` and ``ground`` → ``ground``,
    ``THREE_QUESTION_MARKS`` → ``threequestionmarks``, ``???`` → ``threequestionmarks``."""
    return to_id(raw) or TYPELESS


def _move(raw: dict | None) -> dict | None:
    if raw is None or raw.get("name") in (None, "nomove"):
        return None
    return {"name": raw["name"], "move_type": _word(raw["move_type"]), "category": _word(raw["category"]),
            "base_power": int(raw["base_power"]), "accuracy": float(raw["accuracy"]),
            "priority": int(raw["priority"]), "current_pp": int(raw["current_pp"]), "max_pp": int(raw["max_pp"])}


def _words(raw: str, empty: str) -> list[str]:
    return sorted(w for w in raw.split() if w != empty)


def _mon(raw: dict | None) -> dict | None:
    if raw is None:
        return None
    effect = raw.get("effect", "noeffect")
    tera = raw.get("tera_type", "notype")
    types = _types(raw["types"])
    return {
        "name": raw["name"], "base_species": raw.get("base_species", raw["name"]), "hp_pct": float(raw["hp_pct"]),
        "types": types, "item": raw["item"], "ability": raw["ability"], "level": int(raw["lvl"]),
        "status": raw["status"], "effects": [] if effect == "noeffect" else [effect],
        "moves": [_move(m) for m in raw["moves"] if m.get("name") != "nomove"],
        **{k: int(raw[k]) for k in ("atk_boost", "def_boost", "spa_boost", "spd_boost", "spe_boost",
                                    "accuracy_boost", "evasion_boost")},
        **{k: int(raw[k]) for k in ("base_hp", "base_atk", "base_def", "base_spa", "base_spd", "base_spe")},
        "tera_type": tera,
        # Metamon's UniversalState has no terastallized flag; unknown here, so never claimed.
        "terastallized": False,
        "dynamax_turns": 0,  # nor Dynamax (its data is gens 1-4 and 9)
    }


def universal_state(raw: dict) -> dict:
    """Metamon's UniversalState dict → our BattleState dict (explicit empties instead of sentinel words)."""
    player_active = _mon(raw["player_active_pokemon"])
    switches = [_mon(m) for m in raw["available_switches"]]
    fainted_active = player_active is None or player_active["status"] == "fnt" or player_active["hp_pct"] <= 0
    return {
        "player_active": player_active, "opponent_active": _mon(raw["opponent_active_pokemon"]),
        "available_switches": switches,
        "player_prev_move": _move(raw.get("player_prev_move")),
        "opponent_prev_move": _move(raw.get("opponent_prev_move")),
        "player_remaining": len(switches) + (0 if fainted_active else 1),
        "opponents_remaining": int(raw["opponents_remaining"]),
        "player_conditions": _words(raw.get("player_conditions", ""), "noconditions"),
        "opponent_conditions": _words(raw.get("opponent_conditions", ""), "noconditions"),
        "weather": raw.get("weather", "noweather"),
        "battle_field": _words(raw.get("battle_field", ""), "nofield"),
        "forced_switch": bool(raw["forced_switch"]), "can_tera": bool(raw.get("can_tera", False)),
        "can_zmove": False, "can_dynamax": False,  # Metamon's UniversalState has neither (its data is gens 1-4, 9)
        "opponent_teampreview": list(raw.get("opponent_teampreview") or []),
    }


def _universal_move(move: dict | None) -> dict:
    if move is None:
        return {"name": "nomove", "move_type": "nomove", "category": "nomove", "base_power": 0, "accuracy": 1.0,
                "priority": 0, "current_pp": 0, "max_pp": 0}
    return dict(move)


def _universal_mon(mon: dict | None) -> dict | None:
    if mon is None:
        return None
    types = (mon["types"] + ["notype"])[:2]
    out = {k: v for k, v in mon.items()
           if k not in ("types", "effects", "moves", "level", "terastallized", "dynamax_turns")}
    return {**out, "types": " ".join(types), "lvl": mon["level"],
            "effect": mon["effects"][0] if mon["effects"] else "noeffect",
            "moves": [_universal_move(m) for m in mon["moves"]]}


def to_universal_state(state: dict, format_id: str, *, won: bool = False, lost: bool = False) -> dict:
    """Our BattleState dict → Metamon's UniversalState dict (the inverse of ``universal_state`` where Metamon has a
    field; it has one effect slot and no terastallized flag). Used to write Metamon-format files."""
    return {
        "format": format_id, "player_active_pokemon": _universal_mon(state["player_active"]),
        "opponent_active_pokemon": _universal_mon(state["opponent_active"]),
        "available_switches": [_universal_mon(m) for m in state["available_switches"]],
        "player_prev_move": _universal_move(state["player_prev_move"]),
        "opponent_prev_move": _universal_move(state["opponent_prev_move"]),
        "opponents_remaining": state["opponents_remaining"],
        "player_conditions": " ".join(state["player_conditions"]) or "noconditions",
        "opponent_conditions": " ".join(state["opponent_conditions"]) or "noconditions",
        "weather": state["weather"], "battle_field": " ".join(state["battle_field"]) or "nofield",
        "forced_switch": state["forced_switch"], "battle_won": won, "battle_lost": lost,
        "can_tera": state["can_tera"], "opponent_teampreview": state["opponent_teampreview"],
    }


def file_name(battle_id: str, rating: int | None, player: str, opponent: str, date: str, won: bool) -> str:
    return f"{battle_id}_{rating or 'Unrated'}_{player}_vs_{opponent}_{date}_{'WIN' if won else 'LOSS'}.json.lz4"


def decode(payload: bytes) -> dict:
    try:
        text = lz4.frame.decompress(payload)
    except RuntimeError as err:  # lz4.frame raises RuntimeError on corrupt frames
        raise CorruptCompressionError(f"lz4 frame does not decompress: {err}") from err
    try:
        data = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InvalidJsonError(f"decompressed bytes are not JSON: {err}") from err
    if not isinstance(data, dict) or not isinstance(data.get("states"), list) or not isinstance(
            data.get("actions"), list):
        raise InvalidRecordError("expected an object with `states` and `actions` lists")
    return data


def parse(input_id: str, payload: bytes, formats: frozenset[str] | None, known_formats: frozenset[str],
          facts: dict | None = None) -> tuple[list[dict], str | None]:
    """Rows of one Metamon file, or (``[]``, filter reason). Raises a typed InputError for bad input.

    ``facts``: what the read task saw beyond this file; ``{"result": "tie"}`` when the opponent's file of the same
    battle also says ``LOSS`` (``tie_names``)."""
    name = parse_name(input_id.rsplit("::", 1)[-1])
    data = decode(payload)
    states, actions = data["states"], data["actions"]
    if not states:
        raise InvalidRecordError("trajectory has no states")
    if len(states) != len(actions):
        raise InvalidRecordError(f"{len(states)} states but {len(actions)} actions")
    try:
        fmt = states[0]["format"]
        converted = [universal_state(s) for s in states]
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise InvalidRecordError(f"state does not have the UniversalState shape: {type(err).__name__}: {err}") from err
    if fmt not in known_formats:
        raise UnknownFormatError(f"format {fmt!r} is not a format of the pinned simulator")
    if formats is not None and fmt not in formats:
        return [], "format_not_requested"
    final = states[-1]
    tie = (facts or {}).get("result") == "tie"
    if tie and (name.won or final.get("battle_won")):
        raise InvalidRecordError("the read task says tie, but this file says its player won")
    if tie:
        result = "tie"
    elif final.get("battle_won"):
        result = "win"
    elif final.get("battle_lost"):
        result = "loss"  # or a tie whose opponent file was not read (see the module docstring)
    else:
        result = "win" if name.won else "loss"
    steps = []
    for i, (state, action) in enumerate(zip(converted, actions, strict=True)):
        if not isinstance(action, int) or action < -1:
            raise IllegalActionError(f"decision {i}: action {action!r} is not an action id")
        steps.append((state, action, derived_mask(state)))
    meta = TrajectoryMeta(battle_id=name.battle_id, format=fmt, player_side="unknown", player_name=name.player,
                          opponent_name=name.opponent, result=result, rating=name.rating)
    return build_rows(meta, steps, mask_exact=False, battle_turns=[None] * len(steps)), None


def sha256(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


class MetamonParser(PokemonParser):
    """A Metamon file → one player's trajectory; a trajectory is written once (``trajectory_id``)."""

    def parse(self, input_id: str, payload: bytes, sha256: str, facts: dict) -> Parsed:
        return Parsed(*parse(input_id, payload, self.formats, self.known_formats, facts))

    def dedupe_key(self, parsed: Parsed) -> str | None:
        return parsed.rows[0]["trajectory_id"]


class MetamonSource(Source):
    """Metamon's files under ``--input`` (a folder, file or URI; ``hf://datasets/jakegrigsby/metamon-parsed-
    replays@<rev>`` reads the hub in place), or the asked formats' archives fetched into the local ``--input``
    with ``--download``. One work item per archive or loose file."""

    name = "metamon"
    parser = MetamonParser
    license = SourceLicense(
        hub_id="cc-by-nc-4.0",
        terms=f"CC BY-NC 4.0, as the hub card of {HUB_REPO} gives it: Metamon's parsed replays, made by Metamon "
              "(UT-Austin-RPL/metamon, MIT license for its code) from public Pokémon Showdown replays. Metamon files "
              "from anywhere else: unknown, check the source.")
    shard_bytes_per_input_byte = 2.3  # the 4 shared .json.lz4 files: 45 KB → 105 KB of turns

    @classmethod
    def check(cls, inputs: SourceInputs, options) -> None:
        super().check(inputs, options)
        if inputs.download and not inputs.formats:
            raise ValueError("--download needs --formats: the hub holds one archive per format")

    def plan(self) -> Plan:
        asked = self.inputs.formats

        def fetch(folder: Path, revision: str | None) -> str:
            download(list(self.formats), folder, revision or HUB_REVISION)
            return f"{HUB_REPO}@{revision or HUB_REVISION}"

        root, revision = resolve_input(self.inputs, self.name, HUB_REVISION, fetch)
        listed = list_sized(root, None)
        if asked:  # skip archives of other formats without opening them; loose files are filtered by content
            listed = [(u, n) for u, n in listed if not is_archive(u) or any(
                storage.name(u).split(".")[0].lower() == f for f in asked)]
        ties = tie_names([u for u, _ in listed if not is_archive(u)])
        items = file_items(root, listed)
        for item in items:
            if item["uri"] in ties:
                item["facts"] = {"result": "tie"}
        return Plan(items, revision)

    def read(self, item: dict) -> list[dict]:
        """One archive (all its members) or one loose file. A tie is seen only with both players' files, so it
        is decided here for an archive's members and by the driver for loose files (``item["facts"]``). A file
        or member that is not a Metamon file is a row filtered ``not_a_replay``."""
        members = list(iter_path(item["uri"], item["root"], REPLAY))
        if is_archive(item["uri"]):
            ties = tie_names([m.input_id for m in members if m.read_error is None and m.filter_reason is None])
            facts = [{"result": "tie"} if m.input_id in ties else None for m in members]
        else:
            facts = [item.get("facts")] * len(members)
        return [read_row(m.input_id, m.data, read_error=m.read_error, filter_reason=m.filter_reason, facts=f)
                for m, f in zip(members, facts, strict=True)]

"""Per-generation Pokédex facts (species, moves, items, abilities) exported from the pinned simulator.

The simulator's TypeScript data is the ground truth; ``pipelines/showdown/export_dex.js`` writes one JSON file per
generation, and this module loads it. Lookups of names a dex does not know raise ``UnknownDexEntry`` so a parser can
quarantine the battle instead of inventing numbers.
"""

from __future__ import annotations

import json
import lzma
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SHOWDOWN_VERSION = "0.11.11"

_NON_ID = re.compile(r"[^a-z0-9]+")

TYPELESS = "threequestionmarks"
"""The ``???`` type (Curse in gens 2-4, Bide in gen 1, a Pokémon that lost its type): a word of its own, since its
id (``toID("???")``) is empty and an empty word would vanish from the observation text."""


@lru_cache(maxsize=1 << 14)  # bounded: logs may hold any text; real ones repeat a few thousand names
def to_id(name: str) -> str:
    """Showdown's ``toID``: lowercase alphanumerics only. Parsers call it several times per protocol line; the
    regex took 0.75 us a call, a cached name 0.07 us (measured on move, item and effect names)."""
    return _NON_ID.sub("", name.lower())


@lru_cache(maxsize=1 << 12)
def move_id(name: str) -> str:
    """The id of the move a ``|move|`` line names. A status move used as a Z-move is that move, named
    ``Z-<move>``: pokemon-showdown 0.11.11's ``useMoveInner`` prefixes the name of a status move's Z-powered copy
    (its gen7randombattle logs: ``|move|p1a: Tyrantrum|Z-Dragon Dance|p1a: Tyrantrum|[anim]Dragon Dance``).
    No move's name starts with ``Z-``."""
    return to_id(name[2:]) if name.startswith("Z-") else to_id(name)


Z_MOVE_TYPES = {
    "aciddownpour": "poison", "alloutpummeling": "fighting", "blackholeeclipse": "dark", "bloomdoom": "grass",
    "breakneckblitz": "normal", "continentalcrush": "rock", "corkscrewcrash": "steel", "devastatingdrake": "dragon",
    "gigavolthavoc": "electric", "hydrovortex": "water", "infernooverdrive": "fire",
    "neverendingnightmare": "ghost", "savagespinout": "bug", "shatteredpsyche": "psychic",
    "subzeroslammer": "ice", "supersonicskystrike": "flying", "tectonicrage": "ground", "twinkletackle": "fairy",
}
"""The Z-move any damaging move of a type becomes (``BattleActions.Z_MOVES`` of pokemon-showdown 0.11.11): the
type is the base move's dex type (``getZMove``; Weather Ball's after the weather, ``useMoveInner``), whatever the
user's ability. The log names the Z-move, not the base (``|move|p2a: Beautifly|Savage Spin-Out|...|[zeffect]``)."""

SIGNATURE_Z_MOVES = {
    "10000000voltthunderbolt": "thunderbolt", "catastropika": "volttackle", "clangoroussoulblaze": "clangingscales",
    "extremeevoboost": "lastresort", "genesissupernova": "psychic", "guardianofalola": "naturesmadness",
    "letssnuggleforever": "playrough", "lightthatburnsthesky": "photongeyser",
    "maliciousmoonsault": "darkestlariat", "menacingmoonrazemaelstrom": "moongeistbeam",
    "oceanicoperetta": "sparklingaria", "pulverizingpancake": "gigaimpact", "searingsunrazesmash": "sunsteelstrike",
    "sinisterarrowraid": "spiritshackle", "soulstealing7starstrike": "spectralthief",
    "splinteredstormshards": "stoneedge", "stokedsparksurfer": "thunderbolt",
}
"""Z-moves made from one move only: each Z-crystal's ``zMove`` → its ``zMoveFrom`` (pokemon-showdown 0.11.11
``data/items.ts``), so the log's Z-move names its base exactly."""


class UnknownDexEntry(KeyError):
    """A name that the generation's dex does not contain."""


def showdown_dir() -> Path:
    """Where the pinned ``pokemon-showdown`` package is installed (``make setup`` puts it in node_modules/)."""
    env = os.environ.get("REPLAYFORGE_SHOWDOWN_DIR")
    path = Path(env) if env else REPO_ROOT / "node_modules" / "pokemon-showdown"
    if not (path / "package.json").is_file():
        raise FileNotFoundError(
            f"pokemon-showdown is not installed at {path}; run `make setup` (or set REPLAYFORGE_SHOWDOWN_DIR)"
        )
    return path


def node_env(showdown: str | Path | None = None) -> dict[str, str]:
    """The environment for our Node scripts: ``require('pokemon-showdown')`` resolves to the simulator at
    ``showdown`` (default ``showdown_dir()``) wherever it is installed, not only in the checkout's node_modules."""
    return {**os.environ, "NODE_PATH": str(Path(showdown or showdown_dir()).parent)}


DEX_FILE = Path(__file__).resolve().parent / "dex" / f"showdown-{SHOWDOWN_VERSION}.json.xz"
"""The dex of the pinned simulator, committed (60 KB) so parsers run on any Ray node without Node.js."""


def export_dex(out: Path = DEX_FILE) -> Path:
    """Re-export the committed dex from the installed simulator (when bumping SHOWDOWN_VERSION)."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["node", str(REPO_ROOT / "pipelines" / "showdown" / "export_dex.js"), "--out", tmp],
                       check=True, env=node_env(), cwd=REPO_ROOT, stdout=subprocess.DEVNULL)
        dexes = {f"gen{g}": json.loads((Path(tmp) / f"gen{g}.json").read_text()) for g in range(1, 10)}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(lzma.compress(json.dumps(dexes, sort_keys=True, separators=(",", ":")).encode(), preset=9))
    return out


@cache
def _all_gens() -> dict:
    return json.loads(lzma.decompress(DEX_FILE.read_bytes()))


@dataclass(frozen=True)
class Dex:
    """One generation's dex."""

    gen: int
    species: dict
    moves: dict
    items: dict
    abilities: dict
    power_moves: dict = field(default_factory=dict)
    """Z-moves and Max moves of this dex → the one move the protocol names as their base (signature Z-moves), or
    "" where it does not (a type's Z-move, a Max or G-Max move). None of them is ever one of a Pokémon's moves."""

    def species_id(self, name: str) -> str:
        """The dex id of a species as a log names it. Cosmetic formes (``Florges-Yellow``, ``Gastrodon-East``)
        are not dex entries and play exactly as their base forme, so they resolve to it."""
        sid = to_id(name)
        if sid in self.species:
            return sid
        parts = name.split("-")
        while len(parts) > 1:
            parts.pop()
            sid = to_id("-".join(parts))
            if sid in self.species:
                return sid
        raise UnknownDexEntry(f"species {name!r} is not in the gen {self.gen} dex")

    def species_entry(self, name: str) -> dict:
        return self.species[self.species_id(name)]

    def move_entry(self, name: str) -> dict:
        mid = to_id(name)
        entry = self.moves.get(mid)
        if entry is None and mid.startswith("hiddenpower"):
            entry = self.moves.get(mid.rstrip("0123456789")) or self.moves.get("hiddenpower")
        if entry is None:
            raise UnknownDexEntry(f"move {name!r} is not in the gen {self.gen} dex")
        return entry


@cache
def load_dex(gen: int) -> Dex:
    raw = _all_gens()[f"gen{gen}"]
    # export_dex.js writes toID(type), which is "" for "???"
    moves = {mid: {**m, "type": m["type"] or TYPELESS} for mid, m in raw["moves"].items()}
    species = {sid: {**sp, "types": [t or TYPELESS for t in sp["types"]]} for sid, sp in raw["species"].items()}
    # Max and G-Max moves are the dex's ids starting with "max"/"gmax" (52 in gens 8-9, none before; no other
    # move's id starts so): BattleActions.MAX_MOVES and the species' G-Max moves of pokemon-showdown 0.11.11
    power_moves = {mid: SIGNATURE_Z_MOVES.get(mid, "") for mid in moves
                   if mid in SIGNATURE_Z_MOVES or mid in Z_MOVE_TYPES or mid.startswith(("max", "gmax"))}
    return Dex(gen, species, moves, raw["items"], raw["abilities"], power_moves)


@cache
def known_formats() -> frozenset[str]:
    """Every format id of the pinned simulator, all generations."""
    return frozenset(f for raw in _all_gens().values() for f in raw["formats"])


def game_type(format_id: str) -> str | None:
    """The game type of a format of the pinned simulator (``singles``, ``doubles``, ``triples``, ``multi``,
    ``freeforall``), or None for a format it does not have."""
    if format_id not in known_formats():
        return None
    return _all_gens()[f"gen{gen_of_format(format_id)}"]["game_types"].get(format_id, "singles")


@cache
def format_aliases() -> dict[str, tuple[str, ...]]:
    """The simulator's format aliases without their generation: alias → the formats it names, each without its
    generation (``mono`` → ``("monotype",)``: ``mono`` names gen 9's Monotype, ``gen7mono`` gen 7's). An older
    generation's battle under an alias is looked up as the same format in its own generation."""
    names: dict[str, set[str]] = {}
    for raw in _all_gens().values():
        for alias, format_id in raw["format_aliases"].items():
            names.setdefault(_GEN_ID.sub("", alias), set()).add(_GEN_ID.sub("", format_id))
    return {alias: tuple(sorted(targets)) for alias, targets in names.items()}


_GEN_ID = re.compile(r"^gen\d")


def export_main() -> None:
    print(export_dex())


if __name__ == "__main__":
    export_main()


def gen_of_format(format_id: str) -> int:
    match = re.match(r"gen(\d)", format_id)
    if not match:
        raise ValueError(f"format {format_id!r} does not start with gen<N>")
    return int(match.group(1))

"""Per-generation Pokédex facts (species, moves, items, abilities) exported from the pinned simulator.

The simulator's TypeScript data is the ground truth; ``pipelines/showdown/export_dex.js`` writes one JSON file per
generation, and this module loads it. Lookups of names a dex does not know raise ``UnknownDexEntry`` so a parser can
quarantine the battle instead of inventing numbers.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SHOWDOWN_VERSION = "0.11.11"

_NON_ID = re.compile(r"[^a-z0-9]+")


def to_id(name: str) -> str:
    """Showdown's ``toID``: lowercase alphanumerics only."""
    return _NON_ID.sub("", name.lower())


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


def dex_dir() -> Path:
    """The exported dex folder, written on first use when missing."""
    env = os.environ.get("REPLAYFORGE_DEX_DIR")
    path = Path(env) if env else REPO_ROOT / ".cache" / f"dex-showdown-{SHOWDOWN_VERSION}"
    if not (path / "gen9.json").is_file():
        export_dex(path)
    return path


def export_dex(out: Path) -> None:
    """Run the Node exporter into ``out`` (atomically: a half-written dex is never used)."""
    tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "NODE_PATH": str(showdown_dir().parent)}
    subprocess.run(
        ["node", str(REPO_ROOT / "pipelines" / "showdown" / "export_dex.js"), "--out", str(tmp)],
        check=True, env=env, cwd=REPO_ROOT,
    )
    try:
        tmp.rename(out)
    except OSError:  # another process published it first; theirs is identical
        subprocess.run(["rm", "-rf", str(tmp)], check=False)


@dataclass(frozen=True)
class Dex:
    """One generation's dex."""

    gen: int
    species: dict
    moves: dict
    items: dict
    abilities: dict

    def species_entry(self, name: str) -> dict:
        sid = to_id(name)
        entry = self.species.get(sid)
        if entry is None:
            raise UnknownDexEntry(f"species {name!r} is not in the gen {self.gen} dex")
        return entry

    def move_entry(self, name: str) -> dict:
        mid = to_id(name)
        entry = self.moves.get(mid)
        if entry is None and mid.startswith("hiddenpower"):
            entry = self.moves.get(mid.rstrip("0123456789")) or self.moves.get("hiddenpower")
        if entry is None:
            raise UnknownDexEntry(f"move {name!r} is not in the gen {self.gen} dex")
        return entry


@cache
def load_dex(gen: int, directory: str | None = None) -> Dex:
    path = Path(directory) if directory else dex_dir()
    raw = json.loads((path / f"gen{gen}.json").read_text())
    return Dex(gen, raw["species"], raw["moves"], raw["items"], raw["abilities"])


def gen_of_format(format_id: str) -> int:
    match = re.match(r"gen(\d)", format_id)
    if not match:
        raise ValueError(f"format {format_id!r} does not start with gen<N>")
    return int(match.group(1))

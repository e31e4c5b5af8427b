"""Raw-input sources. A source lists and reads raw items with stable ids; it never parses (parsers do)."""

from __future__ import annotations

from pathlib import Path


def has_suffix(name: str, suffixes: tuple[str, ...]) -> bool:
    """Whether ``name`` ends with one of ``suffixes``, ignoring case: ``GAME.SLP`` is a replay like ``game.slp``
    (Windows and camera-card tools write upper-case names)."""
    return name.lower().endswith(tuple(s.lower() for s in suffixes))


def list_files(root: str | Path, suffixes: tuple[str, ...] | None) -> list[str]:
    """Files under ``root`` whose names end with one of ``suffixes`` in any case (or ``root`` itself when it is a
    file), sorted, as paths: the deterministic input order every file source starts from.

    ``suffixes=None`` lists every file, for a source that counts the files it does not read instead of leaving
    them out without trace."""
    root = Path(root)
    if root.is_file():
        return [str(root)]
    if not root.is_dir():
        raise FileNotFoundError(f"--input {root} does not exist")
    return sorted(str(p) for p in root.rglob("*")
                  if p.is_file() and (suffixes is None or has_suffix(p.name, suffixes)))

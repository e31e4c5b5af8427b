"""Raw-input sources. A source lists and reads raw items with stable ids; it never parses (parsers do)."""

from __future__ import annotations

from pathlib import Path


def list_files(root: str | Path, suffixes: tuple[str, ...]) -> list[str]:
    """Files under ``root`` whose names end with one of ``suffixes`` (or ``root`` itself when it is a file),
    sorted, as paths: the deterministic input order every file source starts from."""
    root = Path(root)
    if root.is_file():
        return [str(root)]
    if not root.is_dir():
        raise FileNotFoundError(f"--input {root} does not exist")
    return sorted(str(p) for p in root.rglob("*") if p.is_file() and p.name.endswith(suffixes))

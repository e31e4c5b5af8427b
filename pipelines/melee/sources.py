"""Where Slippi replays come from: loose ``.slp`` files, archives of them read member by member (``.zip``,
``.7z``, ``.tar``, ``.tar.gz``; never unpacked to disk), a Hugging Face dataset at a pinned revision, or synthetic
games for the no-download demo."""

from __future__ import annotations

import os
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

ARCHIVES = (".zip", ".7z", ".tar", ".tar.gz", ".tgz")


def list_inputs(root: Path) -> list[str]:
    root = Path(root)
    if root.is_file():
        return [str(root)]
    if not root.is_dir():
        raise FileNotFoundError(f"--input {root} does not exist")
    return sorted(str(p) for p in root.rglob("*") if p.is_file() and (p.name.endswith(".slp")
                                                                     or p.name.endswith(ARCHIVES)))


def iter_path(path: str, root: str) -> Iterator[tuple[str, bytes | None, str | None]]:
    """(input id, bytes or None, read error) for a file, or for each ``.slp`` member of an archive."""
    rel = os.path.relpath(path, root) if os.path.isdir(root) else os.path.basename(path)
    try:
        if path.endswith(".zip"):
            with zipfile.ZipFile(path) as archive:
                for name in sorted(n for n in archive.namelist() if n.endswith(".slp")):
                    yield f"{rel}::{name}", archive.read(name), None
        elif path.endswith(".7z"):
            yield from _iter_7z(path, rel)
        elif path.endswith((".tar", ".tar.gz", ".tgz")):
            with tarfile.open(path, mode="r|*") as archive:
                for member in archive:
                    if member.isfile() and member.name.endswith(".slp"):
                        handle = archive.extractfile(member)
                        yield f"{rel}::{member.name}", handle.read() if handle else None, None
        else:
            with open(path, "rb") as fh:
                yield rel, fh.read(), None
    except (OSError, EOFError, zipfile.BadZipFile, tarfile.TarError) as err:
        yield f"{rel}::<rest of archive>", None, f"{type(err).__name__}: {err}"


def _iter_7z(path: str, rel: str, group: int = 64):
    import py7zr

    with py7zr.SevenZipFile(path) as archive:
        names = sorted(n for n in archive.getnames() if n.endswith(".slp"))
    # py7zr decompresses into memory; reading in groups keeps memory bounded by the group's size
    for start in range(0, len(names), group):
        with py7zr.SevenZipFile(path) as archive:
            chunk = archive.read(targets=names[start:start + group])
        for name in names[start:start + group]:
            data = chunk.get(name)
            yield f"{rel}::{name}", data.read() if data is not None else None, None if data else "member unreadable"


def download(repo: str, out_dir: Path, revision: str | None, patterns: list[str]) -> str:
    """Fetch the dataset files matching ``patterns`` at ``revision`` (resolved to a commit, which is returned)."""
    from fnmatch import fnmatch

    from huggingface_hub import HfApi, hf_hub_download

    api = HfApi()
    info = api.dataset_info(repo, revision=revision or "main")
    files = sorted(f for f in api.list_repo_files(repo, repo_type="dataset", revision=info.sha)
                   if f.endswith((".slp", *ARCHIVES)) and (not patterns or any(fnmatch(f, p) for p in patterns)))
    for name in files:
        hf_hub_download(repo_id=repo, repo_type="dataset", filename=name, revision=info.sha, local_dir=str(out_dir))
    return f"{repo}@{info.sha}"


def synthetic_game(index: int, seed: int) -> bytes:
    """A deterministic synthetic 1v1 (Fox vs Marth, lasers, a rollback frame), about 40 s long."""
    from pipelines.melee.synthetic import SyntheticGame, write_slp

    return write_slp(SyntheticGame(num_frames=2400 + 60 * (index % 5), seed=seed * 100_003 + index,
                                   rollback_frames=(100 + index % 50,), shyguys=index % 2 == 1))

"""Where Slippi replays come from: loose ``.slp`` files, archives of them read member by member (``.zip``,
``.7z``, ``.tar``, ``.tar.gz``; never unpacked to disk), a Hugging Face dataset at a pinned revision, or synthetic
games for the no-download demo."""

from __future__ import annotations

import os
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

from pipelines.sources import list_files

ARCHIVES = (".zip", ".7z", ".tar", ".tar.gz", ".tgz")


def list_inputs(root: Path) -> list[str]:
    return list_files(root, (".slp", *ARCHIVES))


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


def _iter_7z(path: str, rel: str):
    """Members of a .7z in one decompression pass: py7zr writes each member into a buffer we hand it, and a
    bounded queue passes finished members to this generator (memory: a few members at a time)."""
    import queue
    import threading

    import py7zr

    done = object()
    members: queue.Queue = queue.Queue(maxsize=4)

    class Member(py7zr.Py7zIO):
        def __init__(self, name: str):
            self.name, self.buffer = name, bytearray()

        def write(self, s):
            self.buffer += s
            return len(s)

        def read(self, size=None):
            return bytes(self.buffer)

        def seek(self, offset, whence=0):
            return offset

        def flush(self):
            return None

        def size(self):
            return len(self.buffer)

        def close(self):
            members.put((self.name, bytes(self.buffer)))

    class Factory(py7zr.WriterFactory):
        def create(self, filename):
            return Member(filename)

    failure: list[BaseException] = []

    def extract():
        try:
            with py7zr.SevenZipFile(path) as archive:
                names = sorted(n for n in archive.getnames() if n.endswith(".slp"))
                archive.extract(targets=names, factory=Factory())
        except Exception as err:  # noqa: BLE001 - reported below as the archive's read error
            failure.append(err)
        finally:
            members.put(done)

    thread = threading.Thread(target=extract, daemon=True)
    thread.start()
    while (item := members.get()) is not done:
        yield f"{rel}::{item[0]}", item[1], None
    thread.join()
    if failure:
        yield f"{rel}::<rest of archive>", None, f"{type(failure[0]).__name__}: {failure[0]}"


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

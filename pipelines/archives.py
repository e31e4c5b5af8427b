"""Reading a source's inputs from files and from archives of them, member by member: ``.zip``, ``.7z``, ``.tar``,
``.tar.gz`` / ``.tgz``, never unpacked to disk, from a local folder or any storage URI. Every file source that
reads archives (Melee's ``slp``, ``metamon``) reads them here, naming the suffixes of its replays.

Ids: a loose file is its path below ``--input``; an archive member is ``<archive's path below --input>::<member
name>`` (an archive in a sub-folder of ``--input`` carries the sub-folder, like a loose file). A member whose name
does not end with one of the source's replay suffixes is a row filtered ``not_a_replay``; directories are not
inputs.

Damage is charged to the member it hits and the next members are read as far as the format allows: a zip member
with a bad CRC or broken deflate data; a tar region whose header fails its checksum (stepped over with
``ignore_zeros`` and reported as its own row); a 7z member whose CRC does not match; what cannot be read past a
cut or corrupt compressed stream, one ``<rest of archive>`` row. A store that fails raises ``StorageError`` (an
outage, not bad bytes: the job re-reads the work item).

Archives are opened for random access through a read buffer (``storage.open_buffered``): a zip's directory is at
its end, a 7z's header too. A tar is read front to back once (a ``.tar.gz`` is decompressed once, with the memory
of one member at a time); it seeks back only to report a damaged region."""

from __future__ import annotations

import contextlib
import queue
import tarfile
import threading
import zipfile
import zlib
from collections.abc import Iterator
from typing import NamedTuple

# py7zr costs 50 ms of import (measured: 0.26 s for pipelines.inputs, then 0.05 s for py7zr), once per process.
import py7zr

from pipelines.inputs import NOT_A_REPLAY, has_suffix, input_id
from shards_schema import storage

ARCHIVES = (".zip", ".7z", ".tar", ".tar.gz", ".tgz")
REST = "<rest of archive>"
"""The member name of the row for what cannot be read past a point of damage (or of an archive that cannot be
opened)."""


class Member(NamedTuple):
    """One input as read: a loose file or one archive member (see ``pipelines.stages.read_row``)."""

    input_id: str
    data: bytes | None = None
    read_error: str | None = None
    filter_reason: str | None = None


def is_archive(name: str) -> bool:
    """Whether ``name`` (a path or URI) is read as an archive, by its suffix in any case."""
    return has_suffix(name, ARCHIVES)


def iter_path(uri: str, root: str, replay_suffixes: tuple[str, ...]) -> Iterator[Member]:
    """The inputs of one listed file (a local path or URI) below ``root`` (``--input``): the file itself, or each
    member of an archive. Files and members whose names end with one of ``replay_suffixes`` (any case) are read;
    others are filtered ``not_a_replay``."""
    rel = input_id(uri, root)
    if has_suffix(uri, (".zip",)):
        yield from _iter_zip(uri, rel, replay_suffixes)
    elif has_suffix(uri, (".7z",)):
        yield from _iter_7z(uri, rel, replay_suffixes)
    elif has_suffix(uri, (".tar", ".tar.gz", ".tgz")):
        yield from _iter_tar(uri, rel, replay_suffixes)
    elif has_suffix(uri, replay_suffixes):
        yield Member(rel, storage.read_bytes(uri))
    else:
        yield Member(rel, filter_reason=NOT_A_REPLAY)


def _describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


def _unread(rel: str, name: str, replay_suffixes: tuple[str, ...]) -> Member | None:
    """The row of a member that is not a replay (None: a replay, to be read)."""
    return None if has_suffix(name, replay_suffixes) else Member(f"{rel}::{name}", filter_reason=NOT_A_REPLAY)


def _iter_zip(path: str, rel: str, replay_suffixes: tuple[str, ...]) -> Iterator[Member]:
    """Members of a .zip, sorted by name."""
    with contextlib.ExitStack() as files:  # closes the buffered file the archive reads
        try:
            archive = zipfile.ZipFile(files.enter_context(storage.open_buffered(path)))
        # No readable central directory (or one naming a zip version, or a file name, Python cannot read): no member
        # can be listed.
        except (OSError, EOFError, zipfile.BadZipFile, NotImplementedError, ValueError) as err:
            yield Member(f"{rel}::{REST}", read_error=f"the zip cannot be opened: {_describe(err)}")
            return
        with archive:
            for info in sorted(archive.infolist(), key=lambda i: i.filename):
                if info.is_dir():
                    continue
                if (skip := _unread(rel, info.filename, replay_suffixes)) is not None:
                    yield skip
                    continue
                # The central directory gives every member its own offset, size and CRC, so one damaged member (bad
                # CRC, broken deflate data, an unsupported method or a password) leaves the others readable.
                try:
                    yield Member(f"{rel}::{info.filename}", archive.read(info))
                except (OSError, EOFError, zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError,
                        ValueError) as err:
                    yield Member(f"{rel}::{info.filename}", read_error=_describe(err))


_TAR_ERRORS = (OSError, EOFError, tarfile.TarError, zlib.error, KeyError)


class _NonzeroWatch:
    """The (decompressed) tar stream as tarfile reads it, noting where the last nonzero byte read so far ends.

    After the last member tarfile reads every block to the end of the stream; when none of them held a nonzero
    byte they are the zero blocks tar pads with, and they need not be read again. Reading them again means seeking
    back, and a gzip stream seeks back by decompressing again from its start: a second pass over the archive."""

    def __init__(self, fileobj):
        self.fileobj, self.nonzero_end = fileobj, 0

    def read(self, size: int = -1) -> bytes:
        at = self.fileobj.tell()
        data = self.fileobj.read(size)
        # A member's data is one read that seldom ends in a zero byte: no copy of it is made to strip them.
        if end := len(data) if data[-1:] not in (b"", b"\0") else len(data.rstrip(b"\0")):
            self.nonzero_end = max(self.nonzero_end, at + end)
        return data

    def __getattr__(self, name: str):  # seek, tell, close, name: the stream's own
        return getattr(self.fileobj, name)


def _iter_tar(path: str, rel: str, replay_suffixes: tuple[str, ...]) -> Iterator[Member]:
    """Members of a .tar, .tar.gz or .tgz in archive order.

    ``ignore_zeros`` makes tarfile step over a header that fails its checksum, block by block, to the next valid
    one, instead of ending the archive there as if it were complete (which silently loses every later member). The
    region it stepped over is reported as a damaged member. A gzip stream that is cut or corrupt cannot be read past
    the damage (deflate has no resync points and the tar headers after it are in the lost bytes), so what follows
    is recorded as one ``<rest of archive>`` input."""
    with contextlib.ExitStack() as files:  # closes the buffered file the archive reads
        try:
            archive = tarfile.open(fileobj=files.enter_context(storage.open_buffered(path)), mode="r:*",
                                   ignore_zeros=True)
        except _TAR_ERRORS as err:
            yield Member(f"{rel}::{REST}", read_error=f"the archive cannot be opened: {_describe(err)}")
            return
        with archive:
            # TarFile reads every header and member through its ``fileobj``. What it read while opening (the first
            # header, or every block of an archive whose headers all fail) counts as nonzero.
            archive.fileobj = watch = _NonzeroWatch(archive.fileobj)
            watch.nonzero_end = watch.tell()
            member_id, expected = None, 0  # the member being read; where the next header should start
            try:
                for member in archive:
                    if member.offset > expected:
                        yield from _damaged_tar_region(archive, rel, expected, member.offset, replay_suffixes)
                    expected = archive.offset
                    if member.isdir():
                        continue
                    if (skip := _unread(rel, member.name, replay_suffixes)) is not None:
                        yield skip
                        continue
                    member_id = f"{rel}::{member.name}"
                    handle = archive.extractfile(member)  # regular files and links to them; None for devices
                    if handle is None:
                        yield Member(member_id, filter_reason=NOT_A_REPLAY)
                    else:
                        yield Member(member_id, handle.read())
                    member_id = None
                if watch.nonzero_end > expected:
                    yield from _damaged_tar_region(archive, rel, expected, None, replay_suffixes)
            except _TAR_ERRORS as err:
                if member_id is not None:
                    yield Member(member_id, read_error=_describe(err))
                yield Member(f"{rel}::{REST}",
                             read_error=f"the archive cannot be read past this point: {_describe(err)}")


def _damaged_tar_region(archive: tarfile.TarFile, rel: str, start: int, end: int | None,
                        replay_suffixes: tuple[str, ...]) -> Iterator[Member]:
    """A row for bytes between two members (or after the last one) that are not the zero blocks tar pads with:
    a member whose header failed its checksum. Named from its header when the name field still reads as one."""
    fileobj = archive.fileobj
    fileobj.seek(start)
    first_nonzero, offset = None, start
    while end is None or offset < end:
        block = fileobj.read(1 << 20 if end is None else min(1 << 20, end - offset))
        if not block:
            break
        nonzero = block.lstrip(b"\0")
        if nonzero:
            first_nonzero = offset + (len(block) - len(nonzero)) // tarfile.BLOCKSIZE * tarfile.BLOCKSIZE
            break
        offset += len(block)
    if first_nonzero is None:
        return
    fileobj.seek(first_nonzero)
    header = fileobj.read(tarfile.BLOCKSIZE)
    name = header[:100].split(b"\0")[0].decode("utf-8", "replace")
    readable = header[257:262] == b"ustar" and name.isprintable() and name
    label = name if readable else f"<damaged header at byte {first_nonzero}>"
    if readable and not has_suffix(name, replay_suffixes):
        yield Member(f"{rel}::{label}", filter_reason=NOT_A_REPLAY)
        return
    yield Member(f"{rel}::{label}", read_error=f"the tar header at byte {first_nonzero} fails its checksum; "
                 f"the member's data cannot be located")


def _iter_7z(path: str, rel: str, replay_suffixes: tuple[str, ...]) -> Iterator[Member]:
    """Members of a .7z, decompressed in one pass per attempt.

    py7zr checks each member against its CRC after decoding it and stops the whole extraction at the first
    mismatch, though the stream itself decoded. Such a member is recorded under its own name and the extraction
    resumes with the members not read yet, told not to check that one again. Any other failure means the data
    cannot be decoded past that point (a solid LZMA block has no resync points): every member not read yet is
    then recorded under its own name with that error."""
    try:
        with storage.open_buffered(path) as fh, py7zr.SevenZipFile(fh) as archive:
            entries = sorted((f.filename, f.is_directory) for f in archive.files)
    except storage.StorageError:
        raise
    except Exception as err:  # noqa: BLE001 - py7zr raises struct/LZMA/index errors on a damaged header too
        yield Member(f"{rel}::{REST}", read_error=f"the 7z cannot be opened: {_describe(err)}")
        return
    replays = []
    for name, is_directory in entries:
        if is_directory:
            continue
        if (skip := _unread(rel, name, replay_suffixes)) is not None:
            yield skip
        else:
            replays.append(name)
    names = {name for name, _ in entries}
    done: set[str] = set()
    unchecked: set[str] = set()
    while todo := [n for n in replays if n not in done and n not in unchecked]:
        failure = yield from _extract_7z(path, rel, todo, unchecked, done)
        if failure is None:
            break
        damaged = failure.args[2] if isinstance(failure, py7zr.exceptions.CrcError) else None
        if damaged in names and damaged not in unchecked:  # a non-replay member is decoded past and checked too
            unchecked.add(damaged)
            if damaged in todo:
                yield Member(f"{rel}::{damaged}", read_error=f"CrcError: the member's bytes do not match its "
                             f"CRC-32 (stored {failure.args[1]:#010x}, decoded {failure.args[0]:#010x})")
            continue
        for name in todo:
            if name not in done:
                yield Member(f"{rel}::{name}", read_error="the 7z data cannot be decoded up to this member: "
                             f"{_describe(failure)}")
        break


def _extract_7z(path: str, rel: str, targets: list[str], unchecked: set[str], done: set[str]):
    """Yield the ``targets`` py7zr decodes, in archive order, and return the error that stopped it (None: all).

    py7zr writes each member into a buffer we hand it, and a bounded queue passes finished members to this
    generator (memory: a few members at a time)."""
    finished = object()
    members: queue.Queue = queue.Queue(maxsize=4)

    class Buffer(py7zr.Py7zIO):
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
            return Buffer(filename)

    failure: list[BaseException] = []

    def extract():
        try:
            with storage.open_buffered(path) as fh, py7zr.SevenZipFile(fh) as archive:
                for f in archive.files:
                    if f.filename in unchecked:
                        # file_properties() is the archive's own record of the member: without a digest py7zr
                        # decodes it past without a check, so the members after it can be read.
                        f.file_properties()["digest"] = None
                archive.extract(targets=targets, factory=Factory())
        except Exception as err:  # noqa: BLE001 - handed to the caller, which records it on the members it hit
            failure.append(err)
        finally:
            members.put(finished)

    thread = threading.Thread(target=extract, daemon=True)
    thread.start()
    while (item := members.get()) is not finished:
        if item[0] in done:  # a member decoded in an earlier attempt is only decoded past
            continue
        done.add(item[0])
        yield Member(f"{rel}::{item[0]}", item[1])
    thread.join()
    if failure and isinstance(failure[0], storage.StorageError):  # the store failed, not the archive's bytes
        raise failure[0]
    return failure[0] if failure else None

"""Storage by URI: every path a job, reader or trainer takes goes through here, because a cluster has no shared disk.

A URI is a local path (``out/``, ``/abs/out``, ``file:///abs/out``) or an object-store URI: ``s3://bucket/key``
and ``gs://bucket/key`` through pyarrow's native filesystems, ``hf://datasets/<owner>/<name>@<revision>/<path>``
through huggingface_hub's fsspec filesystem, and any other fsspec protocol the environment has. Credentials and
endpoints come from the standard variables, so one command works against AWS and a local S3-compatible server:
``AWS_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL_S3``), ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``
(or ``AWS_DEFAULT_REGION``); ``HF_TOKEN`` for the hub.

Functions take and return URI strings (picklable, and re-resolved on each node with that node's credentials); the
filesystem object is an implementation detail of ``resolve``. Listings are sorted: the deterministic input order
every job starts from.

Failures of the store are not failures of the data. Every operation here is retried with bounded, jittered
backoff (``RETRY``) on top of the store client's own retries (the AWS SDK's standard strategy in pyarrow, boto3's
adaptive mode), and what still fails raises ``StorageError``, which is deliberately not an ``OSError``: the
readers of archives and tables treat an ``OSError`` from a decoder (``gzip.BadGzipFile``, a Parquet footer that
does not deserialize) as bad bytes of one input, and must never see a timed-out or throttled request that way. The
file objects ``open_*`` return raise ``StorageError`` from their reads too, so the boundary is the byte source,
whatever decoder reads from it.
"""

from __future__ import annotations

import functools
import io
import os
import posixpath
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import boto3
import fsspec
import pyarrow.fs as pafs
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

_NATIVE = ("s3", "gs", "gcs")
T = TypeVar("T")


# ---------------------------------------------------------------------------- failures of the store
class StorageError(Exception):
    """A store operation that kept failing after its retries (a timeout, throttling, a reset connection, a file
    this node cannot see): an outage of the infrastructure, never a property of an input's bytes. Jobs stop on it
    and publish nothing (``pipelines/parse_replays.py``)."""

    def __init__(self, op: str, uri: str, why: str, attempts: int):
        super().__init__(op, uri, why, attempts)
        self.op, self.uri, self.why, self.attempts = op, uri, why, attempts

    def __str__(self) -> str:
        tries = f" after {self.attempts} attempts" if self.attempts > 1 else ""
        return f"{self.op} {self.uri} failed{tries}: {self.why}"


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff with full jitter (AWS's recommendation for throttled clients: the waits of many
    clients spread out instead of retrying in lockstep).

    Attributes:
        attempts: tries in all (1: no retry).
        base_s: the first wait's upper bound; each later one doubles.
        cap_s: no wait longer than this.
    """

    attempts: int = 5
    base_s: float = 0.2
    cap_s: float = 5.0

    def wait_s(self, attempt: int) -> float:
        """Seconds to wait after failed try number ``attempt`` (1-based)."""
        return random.uniform(0.0, min(self.cap_s, self.base_s * 2 ** (attempt - 1)))


ATTEMPTS_VAR = "REPLAYFORGE_STORAGE_ATTEMPTS"
"""Tries per store operation (default 5); each try is itself retried by the store's client."""
RETRY = RetryPolicy(attempts=int(os.environ.get(ATTEMPTS_VAR) or 5))


def _permanent(uri: str, err: OSError) -> bool:
    """A local file that is missing, forbidden or of the wrong kind stays so: retrying only delays the error. On a
    remote store the same codes can be passing (eventual consistency, a credential being refreshed)."""
    return is_local(uri) and isinstance(err, (FileNotFoundError, PermissionError, IsADirectoryError,
                                              NotADirectoryError))


def _describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


def retrying(op: str, uri: str, call: Callable[[], T], policy: RetryPolicy | None = None) -> T:
    """``call()``, retried on ``OSError`` under ``policy`` (default ``RETRY``); ``StorageError`` once it keeps
    failing. ``call`` must be safe to repeat (whole reads, whole-object writes, listings)."""
    policy = policy or RETRY
    for attempt in range(1, policy.attempts + 1):
        try:
            return call()
        except OSError as err:
            if attempt == policy.attempts or _permanent(uri, err):
                raise StorageError(op, uri, _describe(err), attempt) from err
        time.sleep(policy.wait_s(attempt))
    raise AssertionError("unreachable")


class _Guarded(io.RawIOBase):
    """A file of the store whose failures raise ``StorageError`` (see the module docstring).

    A read of a random-access file is one ranged request at a known offset, so a failed one is retried under
    ``policy`` from the same offset: a Parquet row group of an hf-raw table is a dozen ranged reads, and one reset
    among them must not cost the whole work item. A sequential stream cut mid-body cannot resume (the decoder
    reading it is half-way through), so its reads are not retried here: its caller re-reads it whole (a parse
    job's read task re-reads the work item)."""

    def __init__(self, native, uri: str, policy: RetryPolicy | None = None):
        super().__init__()
        self._native, self._uri, self._policy = native, uri, policy
        self._random_access = bool(native.seekable())

    def _call(self, op: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except OSError as err:
            raise StorageError(op, self._uri, _describe(err), 1) from err

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return self._native.seekable()

    def read(self, size: int = -1) -> bytes:
        def once() -> bytes:
            return self._native.read() if size is None or size < 0 else self._native.read(size)

        if not self._random_access:
            return self._call("read", once)
        at = self._native.tell()

        def from_offset() -> bytes:
            if self._native.tell() != at:
                self._native.seek(at)
            return once()

        return retrying("read", self._uri, from_offset, self._policy)

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._call("seek in", lambda: self._native.seek(offset, whence))

    def tell(self) -> int:
        return self._native.tell()

    def size(self) -> int:
        return self._call("size of", self._native.size)

    def close(self) -> None:
        if not self.closed:
            try:
                self._native.close()
            finally:
                super().close()


def scheme(uri: str) -> str:
    """``"s3"``, ``"hf"``..., or ``""`` for a local path (``file://`` included)."""
    head, sep, _ = str(uri).partition("://")
    if not sep or head == "file":
        return ""
    return head.lower()


def is_local(uri: str) -> bool:
    return scheme(uri) == ""


def local_path(uri: str) -> str:
    """The absolute local path of a local URI (``file://`` stripped). Raises ValueError for a remote URI."""
    if not is_local(uri):
        raise ValueError(f"{uri} is not a local path")
    uri = str(uri)
    return os.path.abspath(uri[len("file://"):] if uri.startswith("file://") else uri)


def normalize(uri: str) -> str:
    """A URI in one spelling: local paths absolute (a relative path means the driver's working folder, which a
    worker on another node does not share), remote URIs without a trailing slash."""
    return local_path(uri) if is_local(uri) else str(uri).rstrip("/")


def join(uri: str, *parts: str) -> str:
    """``uri/part/...``: ``os.path.join`` for local paths, ``/`` for remote URIs."""
    if is_local(uri):
        return os.path.join(local_path(uri), *parts)
    return posixpath.join(str(uri).rstrip("/"), *parts)


def relative(uri: str, root: str) -> str:
    """``uri``'s path below ``root`` with ``/`` separators (an input id); the base name when ``uri`` is ``root``."""
    uri, root = normalize(uri), normalize(root)
    if uri == root:
        return posixpath.basename(uri.replace(os.sep, "/"))
    prefix = root.rstrip("/" + os.sep) + ("/" if not is_local(root) else os.sep)
    if not uri.startswith(prefix):
        raise ValueError(f"{uri} is not below {root}")
    return uri[len(prefix):].replace(os.sep, "/")


def parent(uri: str) -> str:
    return os.path.dirname(local_path(uri)) if is_local(uri) else posixpath.dirname(str(uri).rstrip("/"))


def name(uri: str) -> str:
    return os.path.basename(local_path(uri)) if is_local(uri) else posixpath.basename(str(uri).rstrip("/"))


def resolve(uri: str) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path inside it) for a URI."""
    kind = scheme(uri)
    if kind == "":
        return _local(), local_path(uri)
    rest = str(uri).split("://", 1)[1].rstrip("/")
    if kind == "s3":
        return _s3(*_s3_settings(), s3_client_attempts()), rest
    if kind in ("gs", "gcs"):
        return _gcs(), rest
    return _fsspec(kind), rest


@functools.lru_cache(maxsize=1)
def _local() -> pafs.FileSystem:
    return pafs.LocalFileSystem()


def _s3_settings() -> tuple[str | None, str | None]:
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None
    return endpoint, region


@functools.lru_cache(maxsize=8)
def _s3(endpoint: str | None, region: str | None, attempts: int) -> pafs.FileSystem:
    """One S3 filesystem per endpoint and region (the key variables are read by the AWS SDK's default chain:
    environment, profile, instance role)."""
    kwargs = {}
    if endpoint:
        scheme_, _, host = endpoint.partition("://")
        kwargs.update(endpoint_override=host or scheme_, scheme=scheme_ if host else "https")
    if region:
        kwargs["region"] = region
    # The SDK retries throttling (503 SlowDown), 5xx and connection errors itself, with its own backoff; ``retrying``
    # and the job's re-read of a work item come on top.
    return pafs.S3FileSystem(retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=attempts), **kwargs)


def s3_client_attempts() -> int:
    """Tries of each request inside the S3 clients (pyarrow's and boto3's): the standard ``AWS_MAX_ATTEMPTS``, else
    6 (the SDKs' default of 3 left 6 of 48 reads failed through a proxy failing half of the GETs)."""
    return int(os.environ.get("AWS_MAX_ATTEMPTS") or 6)


@functools.lru_cache(maxsize=1)
def _gcs() -> pafs.FileSystem:
    return pafs.GcsFileSystem()


@functools.lru_cache(maxsize=8)
def _fsspec(protocol: str) -> pafs.FileSystem:
    """Any fsspec protocol (``hf`` through huggingface_hub, which reads ``HF_TOKEN``), wrapped for pyarrow."""
    try:
        fs = fsspec.filesystem(protocol)
    except (ImportError, ValueError) as err:
        raise ValueError(f"no filesystem for {protocol}:// URIs ({err}); local paths, s3://, gs:// and hf:// "
                         "are supported") from err
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs))


LOCATION_VARS = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION")
"""Where the object store is. Ray tasks of a local instance started before these were set (a test session, a
notebook's ``ray.init``) would not see them, so jobs hand them to their tasks' runtime_env. Credentials are never
handed on: Ray writes a task's runtime_env into its logs (``runtime_env_agent.log``), so workers take theirs from
their own node (the environment the raylet was started with, ``~/.aws``, or the instance profile)."""


def location_env() -> dict[str, str]:
    """This process's ``LOCATION_VARS`` that are set: a Ray task's ``runtime_env`` env_vars."""
    return {k: os.environ[k] for k in LOCATION_VARS if os.environ.get(k)}


# ---------------------------------------------------------------------------- operations
def _info(uri: str) -> pafs.FileInfo:
    fs, path = resolve(uri)
    return retrying("stat", uri, lambda: fs.get_file_info(path))


def exists(uri: str) -> bool:
    return _info(uri).type != pafs.FileType.NotFound


def is_file(uri: str) -> bool:
    return _info(uri).type == pafs.FileType.File


def is_dir(uri: str) -> bool:
    return _info(uri).type == pafs.FileType.Directory


def size(uri: str) -> int:
    info = _info(uri)
    if info.type != pafs.FileType.File:
        raise FileNotFoundError(f"{uri} is not a file")
    return info.size


def read_bytes(uri: str) -> bytes:
    """The object's bytes as stored. pyarrow's streams decompress by file extension unless told not to
    (``compression="detect"``: a ``.json.lz4`` or ``.tar.gz`` came back decompressed)."""
    fs, path = resolve(uri)

    def read() -> bytes:
        with fs.open_input_stream(path, compression=None) as fh:
            return fh.read()

    return retrying("read", uri, read)


def open_stream(uri: str, buffer_size: int = 1 << 20):
    """A sequential binary stream of the bytes as stored, read ahead ``buffer_size`` bytes at a time (a tar
    archive read member by member: without the buffer each 512-byte header is its own request on S3)."""
    fs, path = resolve(uri)
    native = retrying("open", uri, lambda: fs.open_input_stream(path, compression=None, buffer_size=buffer_size))
    return _Guarded(native, uri)


def write_bytes(uri: str, data: bytes) -> None:
    """Write a whole object (local: parent folders made as needed)."""
    fs, path = resolve(uri)

    def write() -> None:
        if is_local(uri):
            fs.create_dir(os.path.dirname(path), recursive=True)
        with fs.open_output_stream(path, compression=None) as fh:
            fh.write(data)

    retrying("write", uri, write)


def open_input(uri: str):
    """A seekable binary file (random access: Parquet footers, zip directories)."""
    fs, path = resolve(uri)
    return _Guarded(retrying("open", uri, lambda: fs.open_input_file(path)), uri)


def open_buffered(uri: str, buffer_size: int = 1 << 20):
    """A seekable binary file for Python readers that make many small reads (``zipfile``, ``tarfile``,
    ``py7zr``): each read of ``open_input`` on S3 is one ranged request, so reads go through a buffer."""
    return io.BufferedReader(open_input(uri), buffer_size)


def open_output(uri: str):
    fs, path = resolve(uri)
    if is_local(uri):
        fs.create_dir(os.path.dirname(path), recursive=True)
    return fs.open_output_stream(path, compression=None)


def make_dirs(uri: str) -> None:
    """Create a folder (a no-op on object stores, where prefixes need no creation)."""
    fs, path = resolve(uri)
    retrying("create folder", uri, lambda: fs.create_dir(path, recursive=True))


def delete(uri: str, *, missing_ok: bool = True) -> None:
    """Delete a file or a folder with everything below it."""
    fs, path = resolve(uri)
    info = _info(uri)
    if info.type == pafs.FileType.NotFound:
        if not missing_ok:
            raise FileNotFoundError(uri)
        return

    def remove() -> bool:
        try:
            (fs.delete_dir if info.type == pafs.FileType.Directory else fs.delete_file)(path)
        except FileNotFoundError:  # removed by another writer since the stat
            return False
        return True

    if not retrying("delete", uri, remove) and not missing_ok:
        raise FileNotFoundError(uri)


def copy(src: str, dst: str) -> None:
    """Copy one file within a store (S3: a server-side copy, no bytes through this process)."""
    fs, path = resolve(src)
    dst_fs, dst_path = resolve(dst)
    if is_local(dst):
        os.makedirs(os.path.dirname(dst_path), exist_ok=True)
    if type(fs) is not type(dst_fs):
        raise ValueError(f"copy across stores ({src} → {dst}): read and write instead")
    retrying("copy", src, lambda: fs.copy_file(path, dst_path))


def list_files(root: str, suffixes: Iterable[str] | None = None) -> list[str]:
    """URIs of the files below ``root`` (or ``root`` itself when it is a file) whose names end with one of
    ``suffixes`` in any case (all files when None), sorted. Raises FileNotFoundError when ``root`` does not exist."""
    return [uri for uri, _ in list_sizes(root, suffixes)]


def list_sizes(root: str, suffixes: Iterable[str] | None = None) -> list[tuple[str, int]]:
    """``list_files`` with each file's size in bytes, from the same listing (no request per file)."""
    fs, path = resolve(root)
    info = _info(root)
    ends = tuple(s.lower() for s in suffixes) if suffixes is not None else None
    if info.type == pafs.FileType.File:
        return [(normalize(root), info.size)]
    if info.type == pafs.FileType.NotFound:
        raise FileNotFoundError(f"{root} does not exist")
    out = []
    for entry in retrying("list", root, lambda: fs.get_file_info(pafs.FileSelector(path, recursive=True))):
        if entry.type != pafs.FileType.File:
            continue
        if ends is None or entry.base_name.lower().endswith(ends):
            out.append((join(root, relative_path(entry.path, path)), entry.size))
    return sorted(out)


# ---------------------------------------------------------------------------- writes readers may race with
def put_file(uri: str, data: bytes) -> bool:
    """Write the object ``uri`` unless it exists; True when this call wrote it.

    For content-named files (the name holds a hash of ``data``): an existing object already holds these bytes. A
    reader never sees part of the object: a local file is written under a hidden temporary name in the same folder
    and renamed; an object store's PUT replaces an object whole."""
    if exists(uri):
        return False
    if not is_local(uri):
        write_bytes(uri, data)
        return True
    path = local_path(uri)
    tmp = _local_tmp(path)

    def write() -> bool:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except FileNotFoundError:
            # the temporary file was removed under us: a run that published this version deletes what its manifest
            # does not name; the object is there if that run wrote the same bytes
            if os.path.exists(path):
                return False
            raise
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return True

    return retrying("write", uri, write)


def _local_tmp(path: str) -> str:
    return os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp-{os.urandom(6).hex()}")


CONDITIONAL_WRITES_VAR = "REPLAYFORGE_CONDITIONAL_WRITES"
"""Set to ``off`` for an S3-compatible store that does not honour ``If-None-Match: *`` on PUT (AWS S3 has since
2024-08; MinIO, Ceph RGW and older appliances may answer 501 or, worse, ignore the header): ``create_exclusive``
then checks, writes and reads back instead (see there for what that cannot rule out)."""


class ConditionalWriteUnsupported(Exception):
    """The store cannot create an object only if it is absent (``create_exclusive`` falls back)."""


def supports_exclusive_create(uri: str) -> bool:
    """Whether ``create_exclusive`` is atomic on this URI's store: local files (a hard link fails on an existing
    name) and S3 (a conditional PUT), unless ``REPLAYFORGE_CONDITIONAL_WRITES=off``."""
    if os.environ.get(CONDITIONAL_WRITES_VAR, "").lower() in ("off", "0", "false", "no"):
        return False
    return scheme(uri) in ("", "s3")


def create_exclusive(uri: str, data: bytes) -> bool:
    """Create the object ``uri`` holding ``data`` only if no object has that name; True when this call created it.

    Atomic where ``supports_exclusive_create``: two writers racing on one name, exactly one gets True. Elsewhere
    (gs://, hf://, stores without conditional PUT) the fallback checks that the name is free, writes, and reads
    the object back: a writer that finds other bytes there gets False; two writers that both check before either
    writes may both get True and the later write stays (last writer wins; each object is still whole)."""
    if supports_exclusive_create(uri):
        try:
            # A retried create whose first try did land finds the name taken and answers False: the caller then
            # reads the object and compares, as for any other writer's.
            return retrying("create", uri, lambda: _create_exclusive_atomic(uri, data))
        except ConditionalWriteUnsupported:
            pass
    if exists(uri):
        return False
    write_bytes(uri, data)
    return read_bytes(uri) == data


def _create_exclusive_atomic(uri: str, data: bytes) -> bool:
    if is_local(uri):
        path = local_path(uri)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = _local_tmp(path)
        with open(tmp, "wb") as fh:
            fh.write(data)
        try:
            os.link(tmp, path)  # fails on an existing name, atomically; the file appears with all its bytes
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
        return True
    return _s3_put_if_absent(uri, data)


def _s3_put_if_absent(uri: str, data: bytes) -> bool:
    """A PUT with ``If-None-Match: *`` through boto3 (pyarrow's S3 filesystem sends no conditions)."""
    endpoint, region = _s3_settings()
    bucket, _, key = str(uri).split("://", 1)[1].partition("/")
    client = boto3.client("s3", endpoint_url=endpoint, region_name=region,
                          config=Config(retries={"mode": "adaptive", "max_attempts": s3_client_attempts()}))
    for attempt in range(5):
        try:
            client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
            return True
        except ClientError as err:
            code = err.response.get("Error", {}).get("Code", "")
            status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code == "PreconditionFailed" or status == 412:
                return False
            if code == "NotImplemented" or status == 501:
                raise ConditionalWriteUnsupported(str(err)) from err
            if code != "ConditionalRequestConflict" and status != 409:
                raise OSError(f"PUT {uri}: {code or status}: {err}") from err
        except BotoCoreError as err:  # connection reset, read timeout: ``retrying`` tries the create again
            raise OSError(f"PUT {uri}: {err}") from err
        # another conditional PUT of this key is in flight (AWS answers 409): ask again once it has ended
        time.sleep(0.5 * 2**attempt)
    raise TimeoutError(f"{uri}: conditional PUT kept conflicting with another writer of the same key")


def relative_path(path: str, root_path: str) -> str:
    """A filesystem path below ``root_path`` (both as ``resolve`` returns them), with ``/`` separators.

    Some fsspec filesystems list their entries with a leading ``/`` that the path they were asked for lacks
    (``memory://bk/r`` lists ``/bk/r/a``), so the two are compared without it when they differ there."""
    if not path.startswith(root_path):
        path, root_path = path.lstrip("/"), root_path.lstrip("/")
    if not path.startswith(root_path):
        raise ValueError(f"the filesystem listed {path} below {root_path}")
    return path[len(root_path):].lstrip("/" + os.sep).replace(os.sep, "/")

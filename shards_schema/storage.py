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
"""

from __future__ import annotations

import functools
import os
import posixpath
import time
from collections.abc import Iterable

import pyarrow.fs as pafs

_NATIVE = ("s3", "gs", "gcs")


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
        return _s3(*_s3_settings()), rest
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
def _s3(endpoint: str | None, region: str | None) -> pafs.FileSystem:
    """One S3 filesystem per endpoint and region (the key variables are read by the AWS SDK's default chain:
    environment, profile, instance role)."""
    kwargs = {}
    if endpoint:
        scheme_, _, host = endpoint.partition("://")
        kwargs.update(endpoint_override=host or scheme_, scheme=scheme_ if host else "https")
    if region:
        kwargs["region"] = region
    return pafs.S3FileSystem(**kwargs)


@functools.lru_cache(maxsize=1)
def _gcs() -> pafs.FileSystem:
    return pafs.GcsFileSystem()


@functools.lru_cache(maxsize=8)
def _fsspec(protocol: str) -> pafs.FileSystem:
    """Any fsspec protocol (``hf`` through huggingface_hub, which reads ``HF_TOKEN``), wrapped for pyarrow."""
    import fsspec

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
def exists(uri: str) -> bool:
    fs, path = resolve(uri)
    return fs.get_file_info(path).type != pafs.FileType.NotFound


def is_file(uri: str) -> bool:
    fs, path = resolve(uri)
    return fs.get_file_info(path).type == pafs.FileType.File


def is_dir(uri: str) -> bool:
    fs, path = resolve(uri)
    return fs.get_file_info(path).type == pafs.FileType.Directory


def size(uri: str) -> int:
    fs, path = resolve(uri)
    info = fs.get_file_info(path)
    if info.type != pafs.FileType.File:
        raise FileNotFoundError(f"{uri} is not a file")
    return info.size


def read_bytes(uri: str) -> bytes:
    """The object's bytes as stored. pyarrow's streams decompress by file extension unless told not to
    (``compression="detect"``: a ``.json.lz4`` or ``.tar.gz`` came back decompressed)."""
    fs, path = resolve(uri)
    with fs.open_input_stream(path, compression=None) as fh:
        return fh.read()


def open_stream(uri: str, buffer_size: int = 1 << 20):
    """A sequential binary stream of the bytes as stored, read ahead ``buffer_size`` bytes at a time (a tar
    archive read member by member: without the buffer each 512-byte header is its own request on S3)."""
    fs, path = resolve(uri)
    return fs.open_input_stream(path, compression=None, buffer_size=buffer_size)


def write_bytes(uri: str, data: bytes) -> None:
    """Write a whole object (local: parent folders made as needed)."""
    fs, path = resolve(uri)
    if is_local(uri):
        fs.create_dir(os.path.dirname(path), recursive=True)
    with fs.open_output_stream(path, compression=None) as fh:
        fh.write(data)


def open_input(uri: str):
    """A seekable binary file (random access: Parquet footers, zip directories)."""
    fs, path = resolve(uri)
    return fs.open_input_file(path)


def open_buffered(uri: str, buffer_size: int = 1 << 20):
    """A seekable binary file for Python readers that make many small reads (``zipfile``, ``tarfile``,
    ``py7zr``): each read of ``open_input`` on S3 is one ranged request, so reads go through a buffer."""
    import io

    return io.BufferedReader(open_input(uri), buffer_size)


def open_output(uri: str):
    fs, path = resolve(uri)
    if is_local(uri):
        fs.create_dir(os.path.dirname(path), recursive=True)
    return fs.open_output_stream(path, compression=None)


def make_dirs(uri: str) -> None:
    """Create a folder (a no-op on object stores, where prefixes need no creation)."""
    fs, path = resolve(uri)
    fs.create_dir(path, recursive=True)


def delete(uri: str, *, missing_ok: bool = True) -> None:
    """Delete a file or a folder with everything below it."""
    fs, path = resolve(uri)
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        if not missing_ok:
            raise FileNotFoundError(uri)
        return
    if info.type == pafs.FileType.Directory:
        fs.delete_dir(path)
    else:
        fs.delete_file(path)


def list_files(root: str, suffixes: Iterable[str] | None = None) -> list[str]:
    """URIs of the files below ``root`` (or ``root`` itself when it is a file) whose names end with one of
    ``suffixes`` in any case (all files when None), sorted. Raises FileNotFoundError when ``root`` does not exist."""
    return [uri for uri, _ in list_sizes(root, suffixes)]


def list_sizes(root: str, suffixes: Iterable[str] | None = None) -> list[tuple[str, int]]:
    """``list_files`` with each file's size in bytes, from the same listing (no request per file)."""
    fs, path = resolve(root)
    info = fs.get_file_info(path)
    ends = tuple(s.lower() for s in suffixes) if suffixes is not None else None
    if info.type == pafs.FileType.File:
        return [(normalize(root), info.size)]
    if info.type == pafs.FileType.NotFound:
        raise FileNotFoundError(f"{root} does not exist")
    out = []
    for entry in fs.get_file_info(pafs.FileSelector(path, recursive=True)):
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
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = _local_tmp(path)
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
            return _create_exclusive_atomic(uri, data)
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
    import boto3
    from botocore.exceptions import ClientError

    endpoint, region = _s3_settings()
    bucket, _, key = str(uri).split("://", 1)[1].partition("/")
    client = boto3.client("s3", endpoint_url=endpoint, region_name=region)
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
                raise
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

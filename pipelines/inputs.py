"""What every file source shares: listing inputs with stable ids, reading the hub in place at a pinned commit, and
``--download``'s local mirror. A source (``pipelines/<game>/``) lists and reads raw items with these; parsing is
its parser's job.

Inputs are URIs (``shards_schema.storage``): a local path, ``s3://``, ``gs://``, or ``hf://datasets/...`` read
straight from the hub. The driver lists them; read tasks, on any node, open them by URI. Input ids are the paths
relative to ``--input``, the same for a local folder and its copy in a bucket, so both give one version name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from huggingface_hub import HfApi

from pipelines.stages import SourceInputs, work_item
from shards_schema import storage

NOT_A_REPLAY = "not_a_replay"
"""The filter reason of a file or archive member under --input that is not an input of the source."""

HUB_BOOKKEEPING = ".cache/huggingface/"
"""Where ``--download`` (``hf_hub_download(local_dir=...)``) keeps its metadata and locks below ``--input``:
not inputs."""


def has_suffix(name: str, suffixes: tuple[str, ...]) -> bool:
    """Whether ``name`` ends with one of ``suffixes``, ignoring case: ``GAME.SLP`` is a replay like ``game.slp``
    (Windows and camera-card tools write upper-case names)."""
    return name.lower().endswith(tuple(s.lower() for s in suffixes))


def list_files(root: str, suffixes: tuple[str, ...] | None) -> list[str]:
    """URIs of the files below ``root`` (local path or URI) whose names end with one of ``suffixes`` in any case
    (every file when None), or ``root`` itself when it is a file, sorted: the deterministic input order every file
    source starts from. ``--download``'s bookkeeping folder is left out. Local URIs are absolute paths."""
    return [uri for uri, _ in list_sized(root, suffixes)]


def list_sized(root: str, suffixes: tuple[str, ...] | None) -> list[tuple[str, int]]:
    """``list_files`` with each file's listed size in bytes."""
    root = str(root)
    try:
        listed = storage.list_sizes(root, suffixes)
    except FileNotFoundError:
        raise FileNotFoundError(f"--input {root} does not exist: give an existing folder, file or URI (for s3:// "
                                "check the bucket, key and AWS_ENDPOINT_URL)") from None
    return [(u, n) for u, n in listed if not storage.relative(u, root).startswith(HUB_BOOKKEEPING)]


def file_items(root: str, listed: list[tuple[str, int]], **fields) -> list[dict]:
    """One work item per listed file: its id is its path below ``--input`` (the same for a folder and its copy in a
    bucket), its bytes its listed size."""
    return [work_item(input_id(uri, root), size, uri=uri, root=root, **fields) for uri, size in listed]


def input_id(uri: str, root: str) -> str:
    """The id of a listed file: its path below ``--input`` with ``/`` separators, or its name when ``--input`` is
    the file itself."""
    return storage.relative(uri, root)


# ---------------------------------------------------------------------------- the hub, read in place
@dataclass(frozen=True)
class HubUri:
    """The parts of ``hf://datasets/<owner>/<name>[@<revision>]/<path>``.

    Attributes:
        repo: ``owner/name``.
        revision: a branch, tag or commit, or "" when the URI names none.
        path: the path inside the repository ("" for its root).
    """

    repo: str
    revision: str
    path: str

    def uri(self, revision: str) -> str:
        return "hf://datasets/" + self.repo + f"@{revision}" + (f"/{self.path}" if self.path else "")


def parse_hub_uri(uri: str) -> HubUri:
    """Split an ``hf://datasets/...`` URI; ValueError for anything else (a model or a space is not an input)."""
    parts = str(uri).split("://", 1)[-1].strip("/").split("/")
    if storage.scheme(uri) != "hf" or len(parts) < 3 or parts[0] != "datasets":
        raise ValueError(f"--input {uri}: hub inputs are hf://datasets/<owner>/<name>[@<revision>][/<path>]")
    name, _, revision = parts[2].partition("@")
    return HubUri(repo=f"{parts[1]}/{name}", revision=unquote(revision), path="/".join(parts[3:]))


def pin_hub_input(uri: str, revision: str, default_revision: str) -> tuple[str, str]:
    """``(uri at a commit, "owner/name@commit")`` for an ``hf://datasets/...`` input: its branch or tag (from the
    URI, else ``revision`` (``--revision``), else ``default_revision``) resolved once, on the driver, so every read
    task reads the same files even if the branch moves during the job. Needs the hub (``HF_TOKEN`` for a gated
    or private dataset)."""
    hub = parse_hub_uri(uri)
    if hub.revision and revision and hub.revision != revision:
        raise ValueError(f"--input names revision {hub.revision!r} and --revision {revision!r}: give one")
    info = HfApi().dataset_info(hub.repo, revision=hub.revision or revision or default_revision)
    return hub.uri(info.sha), f"{hub.repo}@{info.sha}"


def is_hub(uri: str) -> bool:
    return storage.scheme(uri) == "hf"


def local_root(cfg_input: str, what: str) -> str:
    """``--input`` as a local folder, for ``--download`` (which mirrors the hub onto this machine's disk)."""
    if not storage.is_local(cfg_input):
        raise ValueError(f"{what}: --download mirrors the hub into a local folder, but --input is {cfg_input}; "
                         "read the hub in place with --input hf://datasets/<owner>/<name>@<revision> instead")
    return storage.local_path(cfg_input)


def resolve_input(inputs: SourceInputs, source: str, default_revision: str,
                  download: Callable[[Path, str | None], str] | None = None) -> tuple[str, str | None]:
    """``(root, revision)`` of a file source's inputs: ``--input`` as given (no revision); an ``hf://datasets/...``
    input pinned to a commit (``pin_hub_input``); with ``--download``, the local ``--input`` folder after
    ``download(folder, --revision or None)`` mirrored the source's hub dataset into it and returned what it is
    pinned to."""
    if inputs.download:
        if download is None:
            raise ValueError(f"--source {source} has no hub dataset to --download; give --input")
        root = local_root(inputs.input, f"--source {source}")
        return root, download(Path(root), inputs.revision or None)
    if is_hub(inputs.input):
        return pin_hub_input(inputs.input, inputs.revision, default_revision)
    return inputs.input, None

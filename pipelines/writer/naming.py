"""A version's name and where it goes: ``VersionSpec`` (everything the name comes from, known before any input is
read), the shard layout that enters it, plain-name checks for user-given folder names, and the commit a manifest
records."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from shards_schema import storage
from shards_schema.versions import CodeVersions

BYTES_PER_MIB = 1 << 20
"""``--shard-size-mb`` (``shard_size_mb``) and the sizes the jobs print are MiB: 2**20 bytes, not 10**6."""


SHARD_LAYOUT = 2
"""How the parse job cuts a version's inputs into read tasks, groups and shards; it enters the version's name through
the job's output config (``shard_layout``), so a change of the cut, which changes a version's files but not its rows
(no schema, parser or observation bump: ``shards_schema/versions.py``), gets a new name instead of conflicting with
a version the old cut published. 2: read tasks cut where their items say (``pipelines.stages.pack_tasks``), named by
their items (``task_key``); versions carry their tasks file (``Manifest.tasks``). Versions without the key were cut
by a running total (layout 1)."""


REPO_ROOT = Path(__file__).resolve().parents[2]


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")


def check_name(name: str, what: str) -> str:
    """``name`` when it is one plain path component, else a ValueError that says which option was wrong.

    User-given names become folder or file names (``OUT/<dataset>/``, a hub archive ``<format>.tar.gz`` in
    --input): ``../x`` or ``a/b`` would write outside the folder the user gave. Letters, digits, ``_ - .`` only,
    not starting with a dot (hidden, and the writer's own ``.tmp-*`` folders start with one): such names are
    the same on every filesystem and need no escaping in a URI or an object-store key."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"{what} must be a single folder or file name (letters, digits, '_', '-', '.', not "
                         f"starting with '.', at most 128 characters), got {name!r}")
    return name


@dataclass(frozen=True, kw_only=True)
class VersionSpec:
    """Everything a version's name comes from, known before any input is read; picklable, handed to workers.

    Attributes:
        out_root: the job's ``--out`` (a local folder or a URI).
        dataset: dataset folder name.
        code: the code versions of its rows.
        source: source name.
        source_revision: what the inputs are pinned to (a hub commit, a generator version), or None.
        config: the config fields that shape the output.
        planned_inputs: the planned inputs' identity (``pipelines.stages.Plan.identity``; for in-process writers,
            whatever names their inputs: the version they were made from, a rollout's checkpoint and seeds).
        lost_inputs: ids of the planned inputs the store did not deliver, accepted by ``--max-unreadable``: a
            version that lacks inputs is named for what it holds, never with the complete version's name.
    """

    out_root: str
    dataset: str
    code: CodeVersions
    source: str
    source_revision: str | None
    config: dict
    planned_inputs: str
    lost_inputs: tuple[str, ...] = ()

    def __post_init__(self):
        check_name(self.dataset, "the dataset name (--dataset)")
        object.__setattr__(self, "out_root", storage.normalize(str(self.out_root)))

    @cached_property
    def version(self) -> str:
        c = self.code
        fields = {"inputs": self.planned_inputs, "schema": c.schema, "parser": c.parser,
                  "observation": c.observation, "source": self.source, "revision": self.source_revision,
                  "config": self.config}
        if self.lost_inputs:  # only then: a complete version's name stays what it always was
            fields["lost_inputs"] = sorted(self.lost_inputs)
        identity = json.dumps(fields, sort_keys=True)
        return f"v{c.schema}-p{c.parser}-o{c.observation}-{hashlib.sha256(identity.encode()).hexdigest()[:16]}"

    @property
    def uri(self) -> str:
        """The version folder: ``OUT/<dataset>/<version>``."""
        return storage.join(self.out_root, self.dataset, self.version)

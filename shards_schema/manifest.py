"""The typed manifest every shard version carries, and the version rules readers enforce."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from shards_schema import storage

MANIFEST_NAME = "manifest.json"
CARD_NAME = "README.md"
"""A version's dataset card (``shards_schema/card.py``), under the name the Hugging Face hub reads."""
MANIFEST_FORMAT = 1
"""The manifest layout this checkout writes and reads; a reader refuses any other (bump it when a field's
meaning changes or a field is removed)."""
UPGRADE_COMMAND = "git pull && make setup"
"""What brings this checkout up to a newer replayforge's files."""
REPUBLISH_COMMAND = "python pipelines/parse_replays.py --source <source> --input <raw inputs> --out <dir>"


class ManifestError(RuntimeError):
    """A ``manifest.json`` that this checkout cannot read: corrupt, not a manifest, or another layout."""


@dataclass(frozen=True, kw_only=True)
class FileEntry:
    """One file of a shard version.

    Attributes:
        path: file name relative to the version folder.
        rows: number of rows.
        bytes: file size in bytes.
        sha256: hex sha256 of the file's bytes.
    """

    path: str
    rows: int
    bytes: int
    sha256: str


@dataclass(frozen=True, kw_only=True)
class CardFile:
    """A version's dataset card, as its manifest names it (``Manifest.card``).

    Attributes:
        path: file name relative to the version folder (``README.md``).
        bytes: file size in bytes, as written.
        sha256: hex sha256 of the bytes written.
    """

    path: str
    bytes: int
    sha256: str


@dataclass(frozen=True, kw_only=True)
class Counts:
    """Inputs in and out, all in units of inputs (a file, an archive member, a battle, a game).

    ``inputs == written + sum(filtered.values()) + sum(quarantined.values())`` always holds.

    Attributes:
        inputs: inputs the source yielded.
        written: inputs that became at least one row.
        filtered: inputs a filter excluded, by reason.
        quarantined: inputs that were bad, by reason.
        trajectories: trajectories written (beside the input counts).
        rows: rows written.
        unknown_words: observation words outside the vocabulary, over all rows.
        relabelled: written inputs whose source format id is not the one their rows carry, by
            ``<source id>→<written id>`` (older replays' ``ou`` → ``gen6ou``).
    """

    inputs: int
    written: int
    filtered: dict[str, int]
    quarantined: dict[str, int]
    trajectories: int
    rows: int
    unknown_words: int = 0
    relabelled: dict[str, int] = field(default_factory=dict)

    def reconciles(self) -> bool:
        return self.inputs == self.written + sum(self.filtered.values()) + sum(self.quarantined.values())


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """What a shard version is, where it came from, and what is in it.

    Attributes:
        manifest_format: version of this manifest layout.
        dataset: dataset name (the folder above the version).
        version: the version folder name, derived from inputs, parser and observation spec.
        schema_name: name of the row schema (``pokemon_turns``).
        schema_version: semantic version of the row schema.
        parser_version: semantic version of the parser that made the rows.
        observation_version: semantic version of the observation spec that made the obs columns.
        source: source name (``generated``, ``metamon``...).
        source_revision: pinned revision of the source (hub commit, simulator version), if any.
        inputs_sha256: sha256 over the ordered input ids and input hashes: the identity of the inputs.
        config: the job config fields that shape the output.
        counts: inputs in and out.
        files: the shard files, in order.
        index_file: the per-trajectory (or per-game) index.
        quarantine_file: the quarantine table.
        git_commit: commit of the code that wrote it (``unknown`` outside a git checkout).
        extra: entries beside the layout, which readers of this ``manifest_format`` that do not know them ignore:
            ``card``, the dataset card (``CardFile`` fields; absent from versions published without one);
            ``tasks``, the read tasks' group records (``FileEntry`` fields; ``pipelines.writer.wire.TASKS_SCHEMA``),
            what a later job over more inputs reuses this version's shards from (absent from versions published
            before them, and from versions not written by the parse job).
    """

    manifest_format: int
    dataset: str
    version: str
    schema_name: str
    schema_version: str
    parser_version: str
    observation_version: str
    source: str
    source_revision: str | None
    inputs_sha256: str
    config: dict
    counts: Counts
    files: list[FileEntry]
    index_file: FileEntry
    quarantine_file: FileEntry
    git_commit: str
    extra: dict = field(default_factory=dict)

    @property
    def card(self) -> CardFile | None:
        """The dataset card the writer wrote with this version, or None for a version published without one."""
        entry = self.extra.get("card")
        return CardFile(**entry) if entry is not None else None

    @property
    def tasks(self) -> FileEntry | None:
        """The file of the version's read tasks and their groups (``extra.tasks``), or None where there is none."""
        entry = self.extra.get("tasks")
        return FileEntry(**entry) if entry is not None else None

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, *, where: str = MANIFEST_NAME) -> Manifest:
        """Parse and check a manifest; ``where`` (the file) is named in every error."""
        rewrite = f"delete the version folder and re-run the job that made it: `{REPUBLISH_COMMAND}`"
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as err:
            raise ManifestError(f"{where} is not valid JSON ({err}): the file is corrupt; {rewrite}") from err
        layout = raw.get("manifest_format") if isinstance(raw, dict) else None
        if type(layout) is not int or layout != MANIFEST_FORMAT:  # `is`: JSON true is a bool, and True == 1
            if type(layout) is int and layout > MANIFEST_FORMAT:
                fix = f"it was written by a newer replayforge; upgrade to read it: `{UPGRADE_COMMAND}`"
            else:
                fix = f"no replayforge writes that: the file is corrupt or not a shard manifest; {rewrite}"
            raise ManifestError(f"{where} has manifest_format {layout!r}, this code reads {MANIFEST_FORMAT}; {fix}")
        try:
            raw["counts"] = Counts(**raw["counts"])
            raw["files"] = [FileEntry(**f) for f in raw["files"]]
            raw["index_file"] = FileEntry(**raw["index_file"])
            raw["quarantine_file"] = FileEntry(**raw["quarantine_file"])
            return cls(**raw)
        except (KeyError, TypeError) as err:  # a missing or unknown field (TypeError from the constructors)
            why = f"{type(err).__name__}: {err}"
            raise ManifestError(f"{where} is not a complete manifest ({why}); {rewrite}") from err

    @classmethod
    def load(cls, version_dir: str | Path) -> Manifest:
        """The manifest of a version folder (a local path or a URI: ``s3://bucket/out/<dataset>/<version>``)."""
        path = storage.join(str(version_dir), MANIFEST_NAME)
        try:
            text = storage.read_bytes(path).decode("utf-8")
        except UnicodeDecodeError as err:
            raise ManifestError(f"{path} is not UTF-8 text: the file is corrupt; delete the version folder and "
                                f"re-run the job that made it: `{REPUBLISH_COMMAND}`") from err
        return cls.from_json(text, where=str(path))


def major(version: str) -> int:
    """The major part of a semantic version string."""
    try:
        return int(version.split(".", 1)[0])
    except ValueError as err:
        raise ValueError(f"not a semantic version: {version!r}") from err

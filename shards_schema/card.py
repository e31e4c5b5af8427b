"""A shard version's dataset card: the ``README.md`` the Hugging Face hub reads, so that a version folder uploaded
as it is (``hf upload <repo> <folder> --repo-type dataset``) is a hub dataset that its viewer and
``datasets.load_dataset`` open.

The card's YAML front matter names the version's files as the hub's ``configs``: one config per kind of file (the
rows, under the schema's name; ``index``; ``quarantine``), each listing exactly the version's files of that kind by
name, in the manifest's order, as one ``train`` split (a kind without rows has no config: ``datasets`` refuses an
empty split). Its text states the source, its revision and the license its inputs come under (``SourceLicense``,
declared by each source), the code versions, the output config, the counts (filtered and quarantined inputs by
reason), each file's rows and bytes, and every field of the rows, index and quarantine schemas with its doc, read
from the Arrow fields' ``doc`` metadata (``shards_schema.declare``).

It is a function of the manifest's contents other than ``git_commit`` and ``extra``, and of the schemas and the
license: re-runs of a version write the same bytes. The writer writes it before the manifest and names it in the
manifest's ``extra`` (``Manifest.card``), so the next run keeps it. Readers do not verify it: it documents the
rows, and the hub lets its users edit a card in place.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

import pyarrow as pa

from shards_schema.manifest import CARD_NAME, CardFile, Manifest
from shards_schema.quarantine import QUARANTINE_SCHEMA

INDEX_CONFIG = "index"
QUARANTINE_CONFIG = "quarantine"
SPLIT = "train"
"""The one split of every config: a version is one body of rows, not a train/test partition."""


@dataclass(frozen=True, kw_only=True)
class SourceLicense:
    """The terms a source's inputs come under, as the dataset card of every version made from them states them.

    Attributes:
        hub_id: the hub's license identifier for the card's front matter (``mit``, ``cc-by-nc-4.0``), ``unknown``
            when the inputs' terms are not known.
        terms: where the inputs come from and under which terms, in words; starts with ``unknown: check the
            source`` when they are not known, and says where to look.
    """

    hub_id: str
    terms: str


UNKNOWN_LICENSE = SourceLicense(hub_id="unknown", terms="unknown: check the source")
"""The license of inputs whose source declares none (a rollout's, a test's)."""


def dataset_card(manifest: Manifest, *, rows: pa.Schema, index: pa.Schema, license: SourceLicense) -> str:
    """The card of the version ``manifest`` describes, whose shards have the ``rows`` schema and whose index has
    the ``index`` schema."""
    m = manifest
    kinds = _kinds(m)
    configs = [(name, files) for name, files in kinds if sum(f.rows for f in files)]
    lines = ["---", f"license: {_quote(license.hub_id)}", f"pretty_name: {_quote(f'{m.dataset} {m.version}')}",
             "tags:", "- replayforge", f"- {_quote(m.schema_name)}", "configs:"]
    for name, files in configs:
        lines += [f"- config_name: {_quote(name)}", "  data_files:", f"  - split: {SPLIT}", "    path:"]
        lines += [f"    - {_quote(f.path)}" for f in files]
        if name == m.schema_name:
            lines.append("  default: true")
    lines += ["---", "", f"# {m.dataset} · {m.version}", ""]
    lines += _about(m, kinds, configs)
    lines += _source(m, license)
    lines += _versions(m)
    lines += _counts(m)
    lines += _files(kinds)
    lines += ["## Schemas", ""]
    described = [(m.schema_name, "Rows", rows), (INDEX_CONFIG, "Index", index),
                 (QUARANTINE_CONFIG, "Quarantine", QUARANTINE_SCHEMA)]
    for name, title, schema in described:
        lines += [f"### {title} (`{name}`)", "", "| field | type | nullable | doc |", "|---|---|---|---|"]
        lines += [f"| `{path}` | `{kind}` | {'yes' if nullable else 'no'} | {_cell(doc)} |"
                  for path, kind, nullable, doc in schema_fields(schema)]
        lines.append("")
    lines += _loading(m)
    return "\n".join(lines).rstrip("\n") + "\n"


def card_file(card: bytes) -> CardFile:
    """The manifest's entry for a card's bytes."""
    return CardFile(path=CARD_NAME, bytes=len(card), sha256=hashlib.sha256(card).hexdigest())


def schema_fields(schema: pa.Schema) -> list[tuple[str, str, bool, str]]:
    """(path, type, nullable, doc) of every field of ``schema``, nested ones included, in declaration order: a
    struct's children as ``parent.child``, a list of structs' as ``parent[].child``."""
    out: list[tuple[str, str, bool, str]] = []

    def walk(fields, prefix: str) -> None:
        for f in fields:
            path = prefix + f.name
            out.append((path, type_name(f.type), f.nullable, (f.metadata or {}).get(b"doc", b"").decode()))
            inner, suffix = f.type, "."
            if pa.types.is_list(inner) or pa.types.is_large_list(inner) or pa.types.is_fixed_size_list(inner):
                inner, suffix = inner.value_type, "[]."
            if pa.types.is_struct(inner):
                walk(list(inner), path + suffix)

    walk(list(schema), "")
    return out


def type_name(arrow_type: pa.DataType) -> str:
    """A field's Arrow type, with a struct's children listed as fields of their own: ``list<int32>``,
    ``list<struct>``, ``struct``."""
    if pa.types.is_struct(arrow_type):
        return "struct"
    if pa.types.is_fixed_size_list(arrow_type):
        return f"list<{type_name(arrow_type.value_type)}>[{arrow_type.list_size}]"
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return f"list<{type_name(arrow_type.value_type)}>"
    return str(arrow_type)


def _kinds(m: Manifest) -> list[tuple[str, list]]:
    """(config name, files) of each kind of file a version has: its shards (none when no input was written), its
    index, its quarantine table."""
    return [(m.schema_name, list(m.files)), (INDEX_CONFIG, [m.index_file]), (QUARANTINE_CONFIG, [m.quarantine_file])]


def _about(m: Manifest, kinds: list[tuple[str, list]], configs: list[tuple[str, list]]) -> list[str]:
    what = {m.schema_name: "the rows", INDEX_CONFIG: "one row per trajectory or game, pointing at its rows",
            QUARANTINE_CONFIG: "every input that did not become rows, and why"}
    lines = [f"Shard version `{m.version}` of the `{m.dataset}` dataset: `{m.schema_name}` rows written by "
             "replayforge. Each kind of file with rows is a config of its own (one split, `train`):", ""]
    for name, files in kinds:
        if (name, files) in configs:
            lines.append(f"- `{name}`: {what[name]} ({len(files)} file{'s' if len(files) != 1 else ''})")
        else:
            lines.append(f"- `{name}`: {what[name]}: none in this version, so no config")
    lines += ["", "`manifest.json` holds the same facts for programs (with each file's sha256 and the commit of the "
                  "code that wrote it); replayforge's reader checks it before reading any row.", ""]
    return lines


def _source(m: Manifest, license: SourceLicense) -> list[str]:
    return ["## Source", "", "| | |", "|---|---|", f"| source | `{m.source}` |",
            f"| revision | {f'`{m.source_revision}`' if m.source_revision else 'none'} |",
            f"| inputs | sha256 of their ids and bytes, in order: `{m.inputs_sha256}` |",
            f"| license | `{license.hub_id}` |", f"| terms | {_cell(license.terms)} |", ""]


def _versions(m: Manifest) -> list[str]:
    return ["## Versions", "", "| | |", "|---|---|", f"| schema | `{m.schema_version}` |",
            f"| parser | `{m.parser_version}` |", f"| observation | `{m.observation_version}` |",
            f"| manifest format | `{m.manifest_format}` |", "", "The output config (it enters the version's name):",
            "", "```json", json.dumps(m.config, indent=2, sort_keys=True), "```", ""]


def _counts(m: Manifest) -> list[str]:
    """The manifest's counts: the numbers in one table, each count by reason in a table of its own."""
    numbers, by_reason = [], []
    for f in dataclasses.fields(m.counts):
        value = getattr(m.counts, f.name)
        if isinstance(value, dict):
            by_reason.append((f.name, value))
        else:
            numbers.append(f"| {f.name} | {value} |")
    lines = ["## Counts", "", "Inputs are counted whole (a file, an archive member, a table row); `inputs = written "
             "+ filtered + quarantined`.", "", "| count | value |", "|---|---:|", *numbers, ""]
    for name, value in by_reason:
        lines += [f"### {name}", ""]
        if value:
            lines += ["| reason | inputs |", "|---|---:|", *(f"| {_cell(k)} | {v} |" for k, v in value.items())]
        else:
            lines.append("none")
        lines.append("")
    return lines


def _files(kinds: list[tuple[str, list]]) -> list[str]:
    lines = ["## Files", "", "| kind | file | rows | bytes |", "|---|---|---:|---:|"]
    lines += [f"| `{name}` | `{f.path}` | {f.rows} | {f.bytes} |" for name, files in kinds for f in files]
    return lines + [""]


def _loading(m: Manifest) -> list[str]:
    return ["## Loading", "", "```python", "from datasets import load_dataset", "",
            f"rows = load_dataset(\"<owner>/<name>\", \"{m.schema_name}\", split=\"{SPLIT}\")", "```", "",
            "or, verified against `manifest.json` (versions, sizes, sha256) with replayforge:", "", "```python",
            "from shards_schema.reader import open_version", "",
            "version = open_version(\"hf://datasets/<owner>/<name>@<commit>\")", "```"]


def _quote(text: str) -> str:
    """A YAML scalar that reads back as ``text`` whatever it holds (a JSON string is a YAML double-quoted one)."""
    return json.dumps(text)


def _cell(text: str) -> str:
    """``text`` inside one Markdown table cell."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")

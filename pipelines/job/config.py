"""The parse job's typed config (``ParseConfig``: one declaration feeds the command line, ``ray job submit`` and
the tests) and the version it names before any input is read (``version_spec``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from pipelines import registry, stages
from pipelines.cli import chosen_section, nest
from pipelines.writer.naming import SHARD_LAYOUT, VersionSpec, check_name


@dataclass(frozen=True, kw_only=True)
class ParseConfig:
    """Configuration of the replay-parsing job.

    Attributes:
        source: where inputs come from (``pipelines/registry.py``): ``generated`` (simulator battles),
            ``metamon`` (parsed .json.lz4), ``showdown-json`` (replay JSON files), ``hf-raw`` or ``pokechamp``
            (replay tables, Parquet), ``slp`` (Melee replays and their .zip/.7z/.tar/.tar.gz archives; synthetic
            games when --input is empty).
        out: output root; the version is published under OUT/<dataset>/<version>/.
        input: input folder, file or URI (``s3://``, ``gs://``, ``hf://datasets/<owner>/<name>@<revision>``);
            with --download, the local folder hub files are put in.
        formats: formats to keep (generated: formats to play); empty keeps all.
        dataset: dataset folder name under OUT (default: the schema's name).
        download: mirror the source's hub dataset into the local --input first (resumable).
        revision: hub revision to read or download (default: the source's pinned one).
        shard_size_mb: target size of each Parquet shard in MiB (2**20 bytes).
        num_parse_actors: parse actors in the pool.
        cpus_per_actor: CPUs each parse or generate actor reserves (fractional, so Ray Data is not starved).
        inputs_per_batch: inputs handed to a parse actor at once.
        num_cpus: CPUs of the local Ray instance (plain-script runs; ignored under ray job submit).
        progress_every_s: seconds between progress lines (inputs read of the total, parsed, rows/s, quarantined,
            ETA: ``ParseProgress``).
        max_unreadable: work items the store may fail to deliver, after every retry, before the job stops without
            publishing (default 0: any lost input stops it). Accepted losses are quarantined ``unreadable``, and
            the version's name says which inputs it lacks, so it never takes the name of the complete version.
        reuse_from: an earlier version (its folder's URI, on the same store as --out) made by the same code and
            config from some of these inputs: the read tasks it already parsed are not read or parsed again, their
            shards are copied (server-side on S3, hard-linked on local disk) and checked against its sha256s, and
            only the other tasks are parsed. The version published is the one a run from scratch makes, byte for
            byte. Default: parse everything.
        options: the source's own options (its dataclass is the source's ``options_class``: flags of another
            source's options are refused); default: that dataclass's defaults.
    """

    source: str
    out: str
    input: str = ""
    formats: list[str] = field(default_factory=list)
    dataset: str = ""
    download: bool = False
    revision: str = ""
    shard_size_mb: float = 128.0
    num_parse_actors: int = 2
    cpus_per_actor: float = 0.5
    inputs_per_batch: int = 16
    num_cpus: int = 2
    progress_every_s: float = 10.0
    max_unreadable: int = 0
    reuse_from: str = ""
    options: object = chosen_section("source", registry.options_classes)

    def __post_init__(self):
        source = registry.source_class(self.source)
        if self.options is None:
            object.__setattr__(self, "options", source.options_class())
        elif not isinstance(self.options, source.options_class):
            raise ValueError(f"--source {self.source} takes {source.options_class.__name__} options, got "
                             f"{type(self.options).__name__}")
        source.check(self.inputs, self.options)
        if self.shard_size_mb <= 0 or self.num_parse_actors < 1 or not 0 < self.cpus_per_actor <= 1:
            raise ValueError("need shard_size_mb > 0, num_parse_actors >= 1 and 0 < cpus_per_actor <= 1")
        if self.max_unreadable < 0:
            raise ValueError(f"--max-unreadable must be >= 0, got {self.max_unreadable}")
        if self.dataset:  # the folder under --out
            check_name(self.dataset, "--dataset")
        for fmt in self.formats:  # hub archives are fetched as <format>.tar.gz into --input
            check_name(fmt, "--formats")

    @classmethod
    def tiny(cls, *, source: str = "generated", out: str = "out", **overrides) -> ParseConfig:
        """A few inputs, small shards: tests and the demo (the source's options from their own ``tiny()`` where
        they have one). Keyword overrides win; an option may be given by name (``min_frames=100``), as on the
        command line."""
        flat = {"shard_size_mb": 0.5, "inputs_per_batch": 4, "progress_every_s": 5.0, **overrides}
        given = nest(cls, {"source": source, **flat})
        options_class = registry.source_class(source).options_class
        if "options" not in flat and hasattr(options_class, "tiny"):
            given["options"] = options_class.tiny(**(dataclasses.asdict(given["options"]) if "options" in given
                                                     else {}))
        return cls(out=out, **given)

    @property
    def inputs(self) -> stages.SourceInputs:
        return stages.SourceInputs(input=self.input, formats=tuple(self.formats), download=self.download,
                                   revision=self.revision)

    def make_source(self) -> stages.Source:
        return registry.source_class(self.source)(self.inputs, self.options)

    @property
    def parser(self) -> type[stages.Parser]:
        return registry.source_class(self.source).parser

    @property
    def schema_name(self) -> str:
        return self.parser.schema_name()

    @property
    def effective_formats(self) -> list[str]:
        return list(self.make_source().formats)

    def output_config(self) -> dict:
        """The fields that shape the output (they enter the version's identity): the common ones and the
        source's own."""
        out = {"source": self.source, "formats": self.effective_formats, "dataset": self.dataset,
               "shard_size_mb": self.shard_size_mb, "shard_layout": SHARD_LAYOUT, **self.make_source().output_config()}
        return dict(sorted(out.items()))


def version_spec(cfg: ParseConfig, plan: stages.Plan):
    """The version this job writes, named before any input is read."""
    return VersionSpec(out_root=cfg.out, dataset=cfg.dataset or cfg.schema_name, code=cfg.parser.versions,
                       source=cfg.source, source_revision=plan.revision, config=cfg.output_config(),
                       planned_inputs=plan.identity())

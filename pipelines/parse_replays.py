"""Parse replays into a versioned shard version (``pokemon_turns`` or ``melee_frames``), on Ray Data.

    python pipelines/parse_replays.py --source generated --out out/            # the built-in default
    python pipelines/parse_replays.py --source metamon --input DIR --out out/ --formats gen1ou
    python pipelines/parse_replays.py --source hf-raw --input hf://datasets/jakegrigsby/metamon-raw-replays@v1 ...
    ray job submit --working-dir . -- python pipelines/parse_replays.py --source slp --input s3://bucket/slp ...

Stages (``pipelines/stages.py``): the ``Source`` named by ``--source`` plans work items on the driver and reads raw
inputs in Ray tasks, by URI (``--input`` is a local path, ``s3://``, ``gs://`` or ``hf://``) → an actor pool runs
the source's ``Parser`` on each input: rows cast to the declared schema, or one drop record → the driver's
``ShardWriter`` packs whole trajectories into shards in input order and publishes ``OUT/<dataset>/<version>/``
with one rename. The last line printed is the published path.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # runs as a plain script and under `ray job submit --working-dir .`
    sys.path.insert(0, str(REPO_ROOT))

import pyarrow as pa  # noqa: E402

from pipelines import stages  # noqa: E402
from pipelines.errors import InputError, ReadError  # noqa: E402
from pipelines.sources.generated import GeneratedConfig  # noqa: E402
from pipelines.sources.replays import ReplayFilterConfig  # noqa: E402
from pipelines.sources.slp import SlpConfig  # noqa: E402
from pipelines.stages import InputRecord, ParsedBatch  # noqa: E402


@dataclass(frozen=True, kw_only=True)
class ParseConfig:
    """Configuration of the replay-parsing job.

    Attributes:
        source: where inputs come from (``pipelines/sources/``): ``generated`` (simulator battles), ``metamon``
            (parsed .json.lz4), ``showdown-json`` (replay JSON files), ``hf-raw`` or ``pokechamp`` (replay tables,
            Parquet), ``slp`` (Melee replays and their .zip/.7z/.tar/.tar.gz archives; synthetic games when
            --input is empty).
        out: output root; the version is published under OUT/<dataset>/<version>/.
        input: input folder, file or URI (``s3://``, ``gs://``, ``hf://datasets/<owner>/<name>@<revision>``);
            with --download, the local folder hub files are put in.
        formats: formats to keep (generated: formats to play); empty keeps all.
        dataset: dataset folder name under OUT (default: the schema's name).
        download: mirror the source's hub dataset into the local --input first (resumable).
        revision: hub revision to read or download (default: the source's pinned one).
        shard_size_mb: target size of each Parquet shard in MB.
        num_parse_actors: parse actors in the pool.
        cpus_per_actor: CPUs each parse or generate actor reserves (fractional, so Ray Data is not starved).
        inputs_per_batch: inputs handed to a parse actor at once.
        num_cpus: CPUs of the local Ray instance (plain-script runs; ignored under ray job submit).
        progress_every_s: seconds between progress lines.
        generated: battles and games the job makes itself.
        replays: which public replays to keep.
        slp: which Melee games to keep.
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
    generated: GeneratedConfig = field(default_factory=GeneratedConfig)
    replays: ReplayFilterConfig = field(default_factory=ReplayFilterConfig)
    slp: SlpConfig = field(default_factory=SlpConfig)

    def __post_init__(self):
        stages.source_class(self.source).check(self)
        if self.shard_size_mb <= 0 or self.num_parse_actors < 1 or not 0 < self.cpus_per_actor <= 1:
            raise ValueError("need shard_size_mb > 0, num_parse_actors >= 1 and 0 < cpus_per_actor <= 1")
        from pipelines.writer import check_name

        if self.dataset:  # the folder under --out
            check_name(self.dataset, "--dataset")
        for fmt in self.formats:  # hub archives are fetched as <format>.tar.gz into --input
            check_name(fmt, "--formats")

    @classmethod
    def tiny(cls, *, source: str = "generated", out: str = "out", **overrides) -> ParseConfig:
        """A few battles per format, small shards: tests and the demo. Keyword overrides win; a section's fields
        may be given by name (``min_frames=100``), as on the command line."""
        from pipelines.cli import nest

        flat = {"num_battles": 6, "battles_per_chunk": 3, "shard_size_mb": 0.5, "inputs_per_batch": 4,
                "progress_every_s": 5.0, **overrides}
        return cls(source=source, out=out, **nest(cls, flat))

    def make_source(self) -> stages.Source:
        return stages.source_class(self.source)(self)

    @property
    def parser(self) -> type[stages.Parser]:
        return stages.parser_class(stages.source_class(self.source).parser)

    @property
    def schema_name(self) -> str:
        return self.parser.schema_name()

    @property
    def effective_formats(self) -> list[str]:
        return list(self.formats) or list(stages.source_class(self.source).default_formats)

    def output_config(self) -> dict:
        """The fields that shape the output (they enter the version's identity): the common ones and the
        source's own."""
        out = {"source": self.source, "formats": self.effective_formats, "dataset": self.dataset,
               "shard_size_mb": self.shard_size_mb, **self.make_source().output_config()}
        return dict(sorted(out.items()))


# ---------------------------------------------------------------------------- parse stage (runs in actors)
class ParseInputs:
    """Runs the source's parser on a batch of raw inputs (the ``read_row`` rows of a read task); the parser's
    expensive set-up (dex, vocabulary) happens once per actor. Returns a ``ParsedBatch`` as one Arrow block."""

    def __init__(self, cfg: ParseConfig):
        self.source = cfg.source
        self.parser = cfg.parser(cfg, cfg.source)

    def __call__(self, batch: pa.Table) -> pa.Table:
        return self.parse_batch(batch).to_arrow()

    def parse_batch(self, batch: pa.Table) -> ParsedBatch:
        import gc
        import hashlib
        import json

        records, parsed = [], []
        # The parsers allocate many small objects and free them by reference counting; the cyclic collector
        # would run hundreds of times per batch for nothing (measured: a third of parse time).
        gc.disable()
        try:
            for input_id, payload, read_error, source_filter, facts_json in zip(
                    batch["input_id"].to_pylist(), batch["payload"].to_pylist(), batch["read_error"].to_pylist(),
                    batch["filter_reason"].to_pylist(), batch["facts_json"].to_pylist(), strict=True):
                sha = hashlib.sha256(payload).hexdigest() if payload is not None else None
                record = InputRecord(input_id=input_id, source=self.source, input_sha256=sha)
                try:
                    if source_filter is not None:
                        records.append(record.dropped("filtered", stage="read", error_type="filter",
                                                      reason=source_filter,
                                                      message=f"excluded by the source: {source_filter}"))
                        continue
                    if read_error is not None or payload is None:
                        raise ReadError(read_error or "input could not be read")
                    result = self.parser.parse(input_id, payload, sha, json.loads(facts_json) if facts_json else {})
                    if result.filter_reason is not None:
                        record = record.dropped("filtered", stage="filter", error_type="filter",
                                                reason=result.filter_reason,
                                                message=f"excluded by filter {result.filter_reason}")
                    elif result.rows is None or len(result.rows) == 0:
                        record = record.dropped("filtered", stage="filter", error_type="filter",
                                                reason="no_decisions", message="the input holds no decision point")
                    else:
                        record = InputRecord(input_id=input_id, source=self.source, input_sha256=sha,
                                             num_rows=len(result.rows), dedupe_key=self.parser.dedupe_key(result),
                                             index_rows=result.index_rows)
                        parsed.append((len(records), result.rows))
                except InputError as err:
                    record = record.dropped("quarantined", stage=err.stage, error_type=type(err).__name__,
                                            reason=err.reason, message=str(err)[:2000])
                except Exception as err:  # noqa: BLE001 - a parser bug must not kill the job; it is recorded loudly
                    record = record.dropped("quarantined", stage="parse", error_type=type(err).__name__,
                                            reason="parser_bug", message=traceback.format_exc(limit=6)[-2000:])
                records.append(record)
            table = self._to_table(parsed, records) if parsed else self.parser.schema.empty_table()
        finally:
            gc.enable()
        return ParsedBatch(records, table)

    def _to_table(self, parsed: list[tuple[int, list[dict] | pa.Table]], records: list[InputRecord]) -> pa.Table:
        """One conversion for the batch; if a value does not fit the declared schema, convert input by input so
        only the offending inputs are quarantined (their records replaced in ``records``)."""
        from shards_schema.declare import to_table

        schema = self.parser.schema
        if isinstance(parsed[0][1], pa.Table):  # columnar parsers (Melee) build their tables themselves
            return pa.concat_tables([rows for _, rows in parsed])
        try:
            return to_table([r for _, rows in parsed for r in rows], schema)
        except (ValueError, TypeError, KeyError, pa.ArrowException):
            pass
        tables = []
        for at, rows in parsed:
            try:
                tables.append(to_table(rows, schema))
            except (ValueError, TypeError, KeyError, pa.ArrowException) as err:
                records[at] = records[at].dropped("quarantined", stage="validate", error_type=type(err).__name__,
                                                  reason="schema_violation",
                                                  message=f"rows do not fit {schema.metadata}: {err}")
        return pa.concat_tables(tables) if tables else schema.empty_table()


# ---------------------------------------------------------------------------- read stage (the source's)
def _storage_env() -> dict[str, str]:
    """Where the object store is, for the tasks of a local Ray instance: one started before these were set hands
    its workers the environment of its start. Never the keys (see ``storage.LOCATION_VARS``); on a cluster
    (``RAY_ADDRESS``) each node keeps its own settings."""
    from shards_schema import storage

    return {} if os.environ.get("RAY_ADDRESS") else storage.location_env()


def read_stage(cfg: ParseConfig, source: stages.Source):
    """(dataset of read rows, number of read tasks, source revision)."""
    import ray.data

    plan = source.plan()
    blocks = len(plan.items) if source.max_read_blocks is None else min(len(plan.items), source.max_read_blocks)
    ds = ray.data.from_items(plan.items, override_num_blocks=max(1, blocks))
    env = _storage_env()
    ds = ds.flat_map(source.read, num_cpus=cfg.cpus_per_actor,
                     concurrency=cfg.num_parse_actors if source.bounded_reads else None,
                     **({"runtime_env": {"env_vars": env}} if env else {}))
    return ds, len(plan.items), plan.revision


# ---------------------------------------------------------------------------- driver
def init_ray(cfg: ParseConfig) -> None:
    """The job's cluster under ``ray job submit``, else a local Ray on 127.0.0.1; token auth on for both."""
    from pipelines.ray_start import start_ray

    start_ray(num_cpus=cfg.num_cpus, log_to_driver=False)


def run(cfg: ParseConfig, *, log=print):
    """Run the job; returns the writer's ``PublishResult``."""
    init_ray(cfg)  # before the first `import ray`: a local instance then binds 127.0.0.1 only (pipelines/ray_start.py)
    import ray.data

    from pipelines.writer import ShardWriter

    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True  # deterministic shard contents and names
    ctx.enable_progress_bars = False
    source, parser = cfg.make_source(), cfg.parser
    ds, planned, revision = read_stage(cfg, source)
    log(f"[parse] source={cfg.source} formats={cfg.effective_formats or 'all'} read tasks={planned}")
    env = _storage_env()
    ds = ds.map_batches(
        ParseInputs, batch_format="pyarrow", batch_size=cfg.inputs_per_batch,
        compute=ray.data.ActorPoolStrategy(size=cfg.num_parse_actors),
        num_cpus=cfg.cpus_per_actor, fn_constructor_kwargs={"cfg": cfg},
        **({"runtime_env": {"env_vars": env}} if env else {}),
    )
    writer = ShardWriter(out_root=Path(cfg.out).resolve(), dataset=cfg.dataset or parser.schema_name(),
                         schema=parser.schema, index_schema=parser.index_schema, code=parser.versions,
                         shard_size_bytes=int(cfg.shard_size_mb * 1024 * 1024),
                         parquet_options=parser.parquet_options)
    for path in writer.removed_tmp:
        log(f"[parse] removed {path}: the temporary folder of a writer that is gone (a killed run)")
    start = last = time.monotonic()
    try:
        for block in ds.iter_batches(batch_format="pyarrow", batch_size=None):
            writer.add_batch(ParsedBatch.from_arrow(block, parser.schema))
            now = time.monotonic()
            if now - last >= cfg.progress_every_s:
                last = now
                log(f"[parse] {writer.inputs} inputs, {writer.trajectories} trajectories, {writer.rows} rows, "
                    f"{writer.rows / (now - start):.0f} rows/s, {sum(writer.quarantined.values())} quarantined")
        published = writer.publish(source=cfg.source, source_revision=revision, config=cfg.output_config())
    except BaseException:
        writer.abort()
        raise
    elapsed = time.monotonic() - start
    _summary(published, elapsed, log)
    return published


def _summary(published, elapsed_s: float, log) -> None:
    m = published.manifest
    c = m.counts
    total_mb = sum(f.bytes for f in m.files) / 1e6
    log(f"[parse] inputs {c.inputs} = written {c.written} + filtered {sum(c.filtered.values())} "
        f"+ quarantined {sum(c.quarantined.values())}")
    for kind, reasons in (("filtered", c.filtered), ("quarantined", c.quarantined)):
        for reason, n in reasons.items():
            log(f"[parse]   {kind} {reason}: {n}")
    if m.schema_name == "melee_frames":
        what = f"{c.trajectories} games, {c.rows} frames"
    else:
        what = f"{c.trajectories} trajectories, {c.rows} rows, {c.unknown_words} unknown observation words,"
    log(f"[parse] {what} in {len(m.files)} shards ({total_mb:.1f} MB), {c.rows / max(elapsed_s, 1e-9):.0f} rows/s "
        f"over {elapsed_s:.1f}s")
    log("[parse] " + ("already published with identical contents: " if published.reused else "published: ")
        + f"{m.dataset}/{m.version}")
    log(str(published.path))


def main(argv: list[str] | None = None) -> None:
    from pipelines.cli import parse_config

    run(parse_config(ParseConfig, argv))


if __name__ == "__main__":
    main()

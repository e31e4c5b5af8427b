"""Parse replays into a versioned ``pokemon_turns`` shard version, on Ray Data.

    python pipelines/parse_replays.py --source generated --out out/            # the built-in default
    python pipelines/parse_replays.py --source metamon --input DIR --out out/ --formats gen1ou
    ray job submit --working-dir . -- python pipelines/parse_replays.py --source generated --out /abs/out

Stages: the source reads raw inputs (files, archive members, simulator battles) → an actor pool parses each input
into rows cast to the declared schema, or into one quarantine record → the driver's ``ShardWriter`` packs whole
trajectories into shards in input order and publishes ``OUT/<dataset>/<version>/`` with one rename. The last line
printed is the published path.
"""

from __future__ import annotations

import dataclasses
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

from pipelines.errors import InputError, ReadError  # noqa: E402

SOURCES = ("generated", "metamon", "showdown-json", "hf-raw", "pokechamp", "slp")
DEFAULT_FORMATS = {"generated": ["gen9randombattle", "gen1ou"]}
REPLAY_SOURCES = ("showdown-json", "hf-raw", "pokechamp")

RESULT_SCHEMA = pa.schema([
    ("input_id", pa.string()), ("source", pa.string()), ("input_sha256", pa.string()), ("status", pa.string()),
    ("stage", pa.string()), ("error_type", pa.string()), ("reason", pa.string()), ("message", pa.string()),
    ("dedupe_key", pa.string()), ("num_rows", pa.int64()), ("index_json", pa.string()), ("turns_ipc", pa.binary()),
])
"""One row per input out of the parse stage: its outcome and row count. The rows of a whole parse batch travel
as one Arrow IPC stream on the batch's first result (one conversion per batch, not per input); the writer
slices each written input's ``num_rows`` from it in order. ``dedupe_key`` names what must be unique (a battle, a
game's bytes); ``index_json`` carries index rows a parser knows and the rows do not (a Melee game's metadata)."""


@dataclass(frozen=True, kw_only=True)
class ParseConfig:
    """Configuration of the replay-parsing job.

    Attributes:
        source: where inputs come from: ``generated`` (simulator battles), ``metamon`` (parsed .json.lz4),
            ``showdown-json`` (replay JSON files), ``hf-raw`` or ``pokechamp`` (replay tables, Parquet), ``slp``
            (Melee replays and their .zip/.7z/.tar/.tar.gz archives; synthetic games when --input is empty).
        out: output root; the version is published under OUT/<dataset>/<version>/.
        input: input folder or file; with --download, where hub files are put.
        formats: formats to keep (generated: formats to play); empty keeps all.
        min_rating: replays: keep battles rated at least this (unrated ones are dropped when set).
        date_from: replays: keep battles from this day on (YYYY-MM-DD).
        date_to: replays: keep battles up to this day (YYYY-MM-DD).
        dataset: dataset folder name under OUT (default: the schema's name).
        min_frames: slp: minimum unique frames of a game.
        allow_cpu: slp: keep games with a CPU player.
        hub_repo: slp: Hugging Face dataset to --download from.
        hub_patterns: slp: file name patterns of the hub archives to --download (e.g. ``*FOX*``).
        num_battles: generated: battles per format.
        seed: generated: seed of all battles.
        p1: generated: policy of player 1 (random or heuristic).
        p2: generated: policy of player 2 (random or heuristic).
        battles_per_chunk: generated: battles per simulator process.
        download: metamon, hf-raw, pokechamp: download the asked formats from the hub into --input (resumable).
        revision: hub revision to download (default: the source's pinned one).
        shard_size_mb: target size of each Parquet shard in MB.
        num_parse_actors: parse actors in the pool.
        cpus_per_actor: CPUs each parse or generate actor reserves (fractional, so Ray Data is not starved).
        inputs_per_batch: inputs handed to a parse actor at once.
        num_cpus: CPUs of the local Ray instance (plain-script runs; ignored under ray job submit).
        progress_every_s: seconds between progress lines.
    """

    source: str
    out: str
    input: str = ""
    formats: list[str] = field(default_factory=list)
    min_rating: int | None = None
    date_from: str = ""
    date_to: str = ""
    dataset: str = ""
    min_frames: int = 1200
    allow_cpu: bool = False
    hub_repo: str = "erickfm/melee-ranked-replays"
    hub_patterns: list[str] = field(default_factory=list)
    num_battles: int = 100
    seed: int = 0
    p1: str = "heuristic"
    p2: str = "random"
    battles_per_chunk: int = 25
    download: bool = False
    revision: str = ""
    shard_size_mb: float = 128.0
    num_parse_actors: int = 2
    cpus_per_actor: float = 0.5
    inputs_per_batch: int = 16
    num_cpus: int = 2
    progress_every_s: float = 10.0

    def __post_init__(self):
        if self.source not in SOURCES:
            raise ValueError(f"--source must be one of {SOURCES}, got {self.source!r}")
        if self.source not in ("generated", "slp") and not self.input:
            raise ValueError(f"--source {self.source} needs --input (a folder or file of inputs)")
        if self.source == "metamon" and self.download and not self.formats:
            raise ValueError("--download needs --formats: the hub holds one archive per format")
        for day in (self.date_from, self.date_to):
            if day and not (len(day) == 10 and day[4] == day[7] == "-" and day.replace("-", "").isdigit()):
                raise ValueError(f"dates are YYYY-MM-DD, got {day!r}")
        if self.shard_size_mb <= 0 or self.num_parse_actors < 1 or not 0 < self.cpus_per_actor <= 1:
            raise ValueError("need shard_size_mb > 0, num_parse_actors >= 1 and 0 < cpus_per_actor <= 1")
        if self.p1 not in ("random", "heuristic") or self.p2 not in ("random", "heuristic"):
            raise ValueError("--p1/--p2 must be random or heuristic")
        from pipelines.writer import check_name

        if self.dataset:  # the folder under --out
            check_name(self.dataset, "--dataset")
        for fmt in self.formats:  # hub archives are fetched as <format>.tar.gz into --input
            check_name(fmt, "--formats")

    @classmethod
    def tiny(cls, *, source: str = "generated", out: str = "out", **overrides) -> ParseConfig:
        """A few battles per format, small shards: tests and the demo. Keyword overrides win."""
        fields = {"num_battles": 6, "battles_per_chunk": 3, "shard_size_mb": 0.5, "inputs_per_batch": 4,
                  "progress_every_s": 5.0, **overrides}
        return cls(source=source, out=out, **fields)

    @property
    def schema_name(self) -> str:
        return "melee_frames" if self.source == "slp" else "pokemon_turns"

    @property
    def effective_formats(self) -> list[str]:
        return list(self.formats) or DEFAULT_FORMATS.get(self.source, [])

    def output_config(self) -> dict:
        """The fields that shape the output (they enter the version's identity)."""
        keep = {"source", "formats", "dataset", "shard_size_mb"}
        if self.source == "slp":
            keep |= {"min_frames", "allow_cpu"} | ({"num_battles", "seed"} if not self.input else set())
        if self.source in REPLAY_SOURCES:
            keep |= {"min_rating", "date_from", "date_to"}
        if self.source == "generated":
            keep |= {"num_battles", "seed", "p1", "p2"}
        out = {k: v for k, v in dataclasses.asdict(self).items() if k in keep}
        out["formats"] = self.effective_formats
        return out


# ---------------------------------------------------------------------------- read rows (source → parse)
def read_row(input_id: str, payload: bytes | None = None, *, read_error: str | None = None,
             filter_reason: str | None = None, facts: dict | None = None) -> dict:
    """One raw input as a read task hands it to the parse stage; every read function builds its rows here.

    Args:
        input_id: the input's stable id (a path relative to --input, ``archive::member``, ``table::battle``).
        payload: the input's bytes (None when it could not be read or is not parsed).
        read_error: why the input could not be read (it is quarantined with stage ``read``).
        filter_reason: why the source excludes this input without parsing it (e.g. ``not_a_replay``); counted
            as filtered under that reason.
        facts: what the source knows about the input that its bytes do not say (JSON-able), handed to the
            parser.
    """
    import json

    return {"input_id": input_id, "payload": payload, "read_error": read_error, "filter_reason": filter_reason,
            "facts_json": json.dumps(facts, sort_keys=True) if facts else None}


def _column(batch: pa.Table, name: str) -> list:
    """A read-row column, or Nones where a read task built its rows without it (tests, older callers)."""
    return batch[name].to_pylist() if name in batch.column_names else [None] * batch.num_rows


# ---------------------------------------------------------------------------- parse stage (runs in actors)
class ParseInputs:
    """Parses a batch of raw inputs; expensive set-up (dex, vocabulary) happens once per actor."""

    def __init__(self, source: str, formats: list[str], min_rating: int | None = None, date_from: str = "",
                 date_to: str = "", min_frames: int = 1200, allow_cpu: bool = False):
        from pipelines.melee.slp import SlpFilters
        from pipelines.pokemon.dex import known_formats, load_dex
        from pipelines.pokemon.observation import vocabulary
        from pipelines.sources.replays import ReplayFilters
        from shards_schema.pokemon import TURNS_SCHEMA

        self.source = source
        self.formats = frozenset(formats) if formats else None
        self.filters = ReplayFilters(formats=self.formats, min_rating=min_rating, date_from=date_from or None,
                                     date_to=date_to or None)
        self.known_formats = known_formats()
        self.dexes = {g: load_dex(g) for g in range(1, 10)}
        self.schema = TURNS_SCHEMA
        self.slp_filters = SlpFilters(min_frames=min_frames, allow_cpu=allow_cpu)
        if source == "slp":
            from shards_schema.melee import FRAMES_SCHEMA

            self.schema = FRAMES_SCHEMA
        vocabulary()

    def _parse_one(self, input_id: str, payload: bytes, sha256: str, facts: dict) -> tuple[
            list[dict] | pa.Table, str | None, list | None]:
        """(rows or a table, filter reason, index rows the rows cannot tell) for one input; ``facts`` is what its
        read task knew about it (see ``read_row``)."""
        if self.source == "slp":
            from pipelines.melee.slp import parse_slp

            table, info = parse_slp(payload, input_id=input_id, source=self.source, filters=self.slp_filters,
                                    sha256=sha256)
            return (None, info, None) if table is None else (table, None, [info])
        rows, reason = self._parse_pokemon(input_id, payload, facts)
        return rows, reason, None

    def _parse_pokemon(self, input_id: str, payload: bytes, facts: dict) -> tuple[list[dict], str | None]:
        if self.source == "generated":
            from pipelines.sources import generated

            return generated.parse(input_id, payload, self.dexes, self.formats)
        if self.source in REPLAY_SOURCES:
            from pipelines.sources import replays

            return replays.parse(self.source, payload, self.dexes, self.filters, self.known_formats)
        from pipelines.sources import metamon

        return metamon.parse(input_id, payload, self.formats, self.known_formats, facts)

    def __call__(self, batch: pa.Table) -> pa.Table:
        import gc
        import hashlib
        import json

        out, all_rows = [], []
        # The parsers allocate many small objects and free them by reference counting; the cyclic collector
        # would run hundreds of times per batch for nothing (measured: a third of parse time).
        gc.disable()
        try:
            for input_id, payload, read_error, source_filter, facts_json in zip(
                    batch["input_id"].to_pylist(), batch["payload"].to_pylist(), _column(batch, "read_error"),
                    _column(batch, "filter_reason"), _column(batch, "facts_json"), strict=True):
                sha = hashlib.sha256(payload).hexdigest() if payload is not None else None
                record = {"input_id": input_id, "source": self.source, "input_sha256": sha, "status": "written",
                          "stage": None, "error_type": None, "reason": None, "message": None, "dedupe_key": None,
                          "num_rows": 0, "index_json": None, "turns_ipc": None}
                try:
                    if source_filter is not None:
                        record.update(status="filtered", stage="read", error_type="filter", reason=source_filter,
                                      message=f"excluded by the source: {source_filter}")
                        out.append(record)
                        continue
                    if read_error is not None or payload is None:
                        raise ReadError(read_error or "input could not be read")
                    facts = json.loads(facts_json) if facts_json else {}
                    rows, filter_reason, index_rows = self._parse_one(input_id, payload, sha, facts)
                    if filter_reason is not None:
                        record.update(status="filtered", stage="filter", error_type="filter", reason=filter_reason,
                                      message=f"excluded by filter {filter_reason}")
                    elif rows is None or len(rows) == 0:
                        record.update(status="filtered", stage="filter", error_type="filter", reason="no_decisions",
                                      message="the input holds no decision point")
                    else:
                        record.update(num_rows=len(rows), dedupe_key=self._dedupe_key(rows, index_rows),
                                      index_json=json.dumps(index_rows) if index_rows else None)
                        all_rows.append(rows)
                except InputError as err:
                    record.update(status="quarantined", stage=err.stage, error_type=type(err).__name__,
                                  reason=err.reason, message=str(err)[:2000])
                except Exception as err:  # noqa: BLE001 - a parser bug must not kill the job; it is recorded loudly
                    record.update(status="quarantined", stage="parse", error_type=type(err).__name__,
                                  reason="parser_bug", message=traceback.format_exc(limit=6)[-2000:])
                out.append(record)
            if all_rows:
                table = self._to_table(all_rows, [r for r in out if r["status"] == "written"])
            if all_rows and table.num_rows:
                sink = pa.BufferOutputStream()
                with pa.ipc.new_stream(sink, self.schema) as writer:
                    writer.write_table(table)
                out[0]["turns_ipc"] = sink.getvalue().to_pybytes()
        finally:
            gc.enable()
        return pa.Table.from_pylist(out, schema=RESULT_SCHEMA)

    def _to_table(self, per_input: list[list[dict]], records: list[dict]) -> pa.Table:
        """One conversion for the batch; if a value does not fit the declared schema, convert input by input so
        only the offending inputs are quarantined."""
        from shards_schema.declare import to_table

        if isinstance(per_input[0], pa.Table):  # columnar parsers (Melee) build their tables themselves
            return pa.concat_tables(per_input)
        try:
            return to_table([r for rows in per_input for r in rows], self.schema)
        except (ValueError, TypeError, KeyError, pa.ArrowException):
            pass
        tables = []
        for rows, record in zip(per_input, records, strict=True):
            try:
                tables.append(to_table(rows, self.schema))
            except (ValueError, TypeError, KeyError, pa.ArrowException) as err:
                record.update(status="quarantined", stage="validate", error_type=type(err).__name__,
                              reason="schema_violation", message=f"rows do not fit {self.schema.metadata}: {err}",
                              num_rows=0, dedupe_key=None)
        return pa.concat_tables(tables) if tables else self.schema.empty_table()

    def _dedupe_key(self, rows, index_rows: list | None) -> str | None:
        """Generated battles are unique by construction; a Metamon file is one player's trajectory (two per
        battle); replay logs are one battle each; a Melee game is its file's bytes."""
        if self.source == "slp":
            return index_rows[0]["game_id"]
        if self.source == "generated":
            return None
        if self.source == "metamon":
            return rows[0]["trajectory_id"]
        return rows[0]["battle_id"]


# ---------------------------------------------------------------------------- read stage (per source)
def _read_file(item: dict) -> list[dict]:
    path, root = item["path"], item["root"]
    rel = os.path.relpath(path, root) if os.path.isdir(root) else os.path.basename(path)
    try:
        with open(path, "rb") as fh:
            return [read_row(rel, fh.read())]
    except OSError as err:
        return [read_row(rel, read_error=f"{type(err).__name__}: {err}")]


def _read_row_group(item: dict) -> list[dict]:
    """One Parquet row group of a replay table → one input per battle of the asked formats (its row as JSON).
    Rows of other formats are not inputs of this job: the table is read for the asked ones.

    Corrupt data becomes quarantined inputs at the finest grain that can be told apart: a file whose footer
    could not be read is one input (its name; ``_read_replays`` found it while planning), a row group whose
    pages cannot be read or decompressed is one (``file.parquet#rg3``), and a row holding bytes that are not
    UTF-8 (a damaged uncompressed page) is one, named by its battle id when that still decodes
    (``file.parquet#rg3:row1`` otherwise). Page checksums are verified where the file has them, which catches
    damage that still decodes."""
    import json

    import pyarrow.parquet as pq

    from pipelines.sources.replays import COLUMNS, FORMAT_COLUMN

    source, formats = item["source"], set(item["formats"])
    id_column, format_column = ("id" if source == "hf-raw" else "battle_id"), FORMAT_COLUMN[source]
    name = os.path.basename(item["path"])
    if item.get("read_error") is not None:
        return [read_row(name, read_error=item["read_error"])]
    group = f"{name}#rg{item['row_group']}"
    try:
        table = pq.ParquetFile(item["path"], page_checksum_verification=True).read_row_group(
            item["row_group"], columns=COLUMNS[source])
    except (OSError, pa.ArrowException) as err:
        return [read_row(group, read_error=f"row group {item['row_group']}: {type(err).__name__}: {err}")]
    out = []
    for i, row, error in _decoded_rows(table):
        if error is not None:
            battle, fmt = _cell(table, id_column, i), _cell(table, format_column, i)
            if formats and fmt is not None and fmt not in formats:
                continue
            input_id = f"{name}::{battle}" if battle is not None else f"{group}:row{i}"
            out.append(read_row(input_id, read_error=f"row {i} of row group {item['row_group']}: {error}"))
            continue
        if formats and row.get(format_column) not in formats:
            continue
        out.append(read_row(f"{name}::{row.get(id_column)}", json.dumps(row, default=str, sort_keys=True).encode()))
    return out


def _decoded_rows(table: pa.Table):
    """``(row number, row, None)`` per row, or ``(row number, None, why)`` for a row whose values are invalid:
    one bad string makes ``to_pylist`` raise ``UnicodeDecodeError`` for the whole table, so a table that fails
    full validation is converted row by row."""
    try:
        table.validate(full=True)
    except pa.ArrowException:
        pass
    else:
        yield from ((i, row, None) for i, row in enumerate(table.to_pylist()))
        return
    for i in range(table.num_rows):
        one = table.slice(i, 1)
        bad = []
        for column in one.column_names:
            try:
                one.column(column).validate(full=True)
            except pa.ArrowException as err:
                bad.append(f"column {column}: {err}")
        yield (i, None, "; ".join(bad)) if bad else (i, one.to_pylist()[0], None)


def _cell(table: pa.Table, column: str, i: int):
    """One value of a row that failed validation, or None where that value is itself invalid."""
    try:
        value = table.column(column)[i]
        value.validate(full=True)
        return value.as_py()
    except (pa.ArrowException, UnicodeDecodeError):
        return None


def _read_metamon(item: dict) -> list[dict]:
    """One archive (all its members) or one loose file. A tie is seen only with both players' files, so it is
    decided here for an archive's members and by the driver for loose files (``item["facts"]``). A file or member
    that is not a Metamon file is a row filtered ``not_a_replay``."""
    from pipelines.sources import metamon

    path = item["path"]
    if metamon.is_archive(path):
        members = list(metamon.iter_archive(path))
        ties = metamon.tie_names([mid for mid, _, err, skip in members if err is None and skip is None])
        return [read_row(mid, data, read_error=err, filter_reason=skip,
                         facts={"result": "tie"} if mid in ties else None) for mid, data, err, skip in members]
    if not metamon.is_replay(path):
        root = item["root"]
        rel = os.path.relpath(path, root) if os.path.isdir(root) else os.path.basename(path)
        return [read_row(rel, filter_reason=metamon.NOT_A_REPLAY)]
    rows = _read_file(item)
    if item.get("facts"):
        rows = [read_row(r["input_id"], r["payload"], read_error=r["read_error"], facts=item["facts"]) for r in rows]
    return rows


class GenerateBattles:
    """Runs the simulator for one chunk of battles (flat_map: one chunk in, one row per battle out)."""

    def __init__(self, showdown: str):
        self.showdown = showdown

    def __call__(self, chunk: dict) -> list[dict]:
        from pipelines.sources import generated

        return [read_row(bid, line) for bid, line in generated.generate(chunk, self.showdown)]


def read_stage(cfg: ParseConfig):
    import ray.data

    if cfg.source == "generated":
        from pipelines.pokemon.dex import showdown_dir
        from pipelines.sources import generated

        plan = generated.chunks(cfg.effective_formats, cfg.num_battles, cfg.seed, cfg.p1, cfg.p2,
                                cfg.battles_per_chunk)
        ds = ray.data.from_items(plan, override_num_blocks=max(1, len(plan)))
        ds = ds.flat_map(GenerateBattles, fn_constructor_kwargs={"showdown": str(showdown_dir())},
                         compute=ray.data.ActorPoolStrategy(size=cfg.num_parse_actors), num_cpus=cfg.cpus_per_actor)
        return ds, len(plan), generated.generator_revision()
    if cfg.source in REPLAY_SOURCES:
        return _read_replays(cfg)
    if cfg.source == "slp":
        return _read_slp(cfg)
    from pipelines.sources import metamon

    root = Path(cfg.input).resolve()
    if cfg.download:
        metamon.download(cfg.effective_formats, root, cfg.revision)
    paths = metamon.list_inputs(root)
    if cfg.formats:  # skip archives of other formats without opening them; loose files are filtered by content
        paths = [p for p in paths if not metamon.is_archive(p) or any(
            Path(p).name.split(".")[0].lower() == f for f in cfg.formats)]
    ties = metamon.tie_names([p for p in paths if not metamon.is_archive(p)])
    items = [{"path": p, "root": str(root), **({"facts": {"result": "tie"}} if p in ties else {})} for p in paths]
    ds = ray.data.from_items(items, override_num_blocks=max(1, min(len(items), 200)))
    ds = ds.flat_map(_read_metamon, num_cpus=cfg.cpus_per_actor)
    revision = cfg.revision or metamon.HUB_REVISION
    return ds, len(items), f"{metamon.HUB_REPO}@{revision}" if cfg.download else None


def _read_slp_item(item: dict) -> list[dict]:
    from pipelines.melee import sources

    if "synthetic" in item:
        game = sources.synthetic_game(item["synthetic"], item["seed"])
        return [read_row(f"synthetic-{item['synthetic']:06d}.slp", game)]
    return [read_row(m.input_id, m.data, read_error=m.read_error, filter_reason=m.filter_reason)
            for m in sources.iter_path(item["path"], item["root"])]


def _read_slp(cfg: ParseConfig):
    import ray.data

    from pipelines.melee import sources

    revision = None
    if not cfg.input:  # the built-in default: synthetic games, no download
        items = [{"synthetic": i, "seed": cfg.seed} for i in range(cfg.num_battles)]
        revision = "synthetic"
    else:
        root = Path(cfg.input).resolve()
        if cfg.download:
            revision = sources.download(cfg.hub_repo, root, cfg.revision or None, cfg.hub_patterns)
        items = [{"path": p, "root": str(root)} for p in sources.list_inputs(root)]
    ds = ray.data.from_items(items, override_num_blocks=max(1, min(len(items), 1000)))
    return ds.flat_map(_read_slp_item, num_cpus=cfg.cpus_per_actor), len(items), revision


def _read_replays(cfg: ParseConfig):
    import ray.data

    from pipelines.sources import replays

    root = Path(cfg.input).resolve()
    revision = None
    if cfg.download and cfg.source != "showdown-json":
        sha = replays.download(cfg.source, root, cfg.revision or None, cfg.effective_formats)
        revision = f"{replays.HUB[cfg.source][0]}@{sha}"
    if cfg.source == "showdown-json":
        paths = replays.list_json(root)
        items = [{"path": p, "root": str(root)} for p in paths]
        ds = ray.data.from_items(items, override_num_blocks=max(1, min(len(items), 200)))
        return ds.flat_map(_read_file, num_cpus=cfg.cpus_per_actor), len(items), revision
    paths = replays.list_parquet(root)
    if not paths:
        raise FileNotFoundError(f"no .parquet files under {root}")
    items = _plan_row_groups(paths, cfg.source, cfg.effective_formats)
    ds = ray.data.from_items(items, override_num_blocks=max(1, min(len(items), 1000)))
    return ds.flat_map(_read_row_group, num_cpus=cfg.cpus_per_actor), len(items), revision


def _plan_row_groups(paths: list[str], source: str, formats: list[str]) -> list[dict]:
    """One read task per row group, planned from the footers: streamed, bounded by the row-group size, ordered.
    A file whose footer cannot be read (truncated, damaged) is one task that quarantines the file."""
    import pyarrow.parquet as pq

    items = []
    for path in paths:
        task = {"path": path, "source": source, "formats": formats, "read_error": None}
        try:
            num_row_groups = pq.ParquetFile(path).num_row_groups
        except (OSError, pa.ArrowException) as err:
            items.append({**task, "row_group": None, "read_error": f"Parquet footer: {type(err).__name__}: {err}"})
            continue
        items.extend({**task, "row_group": g} for g in range(num_row_groups))
    return items


# ---------------------------------------------------------------------------- driver
def init_ray(cfg: ParseConfig) -> None:
    """The job's cluster under ``ray job submit``, else a local Ray on 127.0.0.1; token auth on for both."""
    from pipelines.ray_start import start_ray

    start_ray(num_cpus=cfg.num_cpus, log_to_driver=False)


def run(cfg: ParseConfig, *, log=print):
    """Run the job; returns the writer's ``PublishResult``."""
    init_ray(cfg)  # before the first `import ray`: a local instance then binds 127.0.0.1 only (pipelines/ray_start.py)
    import ray.data

    from pipelines.writer import FRAME_PARQUET_OPTIONS, ShardWriter
    from shards_schema.melee import FRAMES_SCHEMA, GAMES_SCHEMA
    from shards_schema.pokemon import INDEX_SCHEMA, TURNS_SCHEMA
    from shards_schema.versions import MELEE_FRAMES, POKEMON_TURNS

    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True  # deterministic shard contents and names
    ctx.enable_progress_bars = False
    ds, planned, revision = read_stage(cfg)
    log(f"[parse] source={cfg.source} formats={cfg.effective_formats or 'all'} read tasks={planned}")
    ds = ds.map_batches(
        ParseInputs, batch_format="pyarrow", batch_size=cfg.inputs_per_batch,
        compute=ray.data.ActorPoolStrategy(size=cfg.num_parse_actors),
        num_cpus=cfg.cpus_per_actor,
        fn_constructor_kwargs={"source": cfg.source, "formats": cfg.effective_formats,
                               "min_rating": cfg.min_rating, "date_from": cfg.date_from, "date_to": cfg.date_to,
                               "min_frames": cfg.min_frames, "allow_cpu": cfg.allow_cpu},
    )
    schema, index_schema, code = ((FRAMES_SCHEMA, GAMES_SCHEMA, MELEE_FRAMES) if cfg.source == "slp"
                                  else (TURNS_SCHEMA, INDEX_SCHEMA, POKEMON_TURNS))
    writer = ShardWriter(out_root=Path(cfg.out).resolve(), dataset=cfg.dataset or cfg.schema_name, schema=schema,
                         index_schema=index_schema, code=code, shard_size_bytes=int(cfg.shard_size_mb * 1024 * 1024),
                         parquet_options=FRAME_PARQUET_OPTIONS if cfg.source == "slp" else None)
    for path in writer.removed_tmp:
        log(f"[parse] removed {path}: the temporary folder of a writer that is gone (a killed run)")
    start = last = time.monotonic()
    try:
        for batch in ds.iter_batches(batch_format="pyarrow", batch_size=None):
            for result in batch.to_pylist():
                writer.add_result(result)
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

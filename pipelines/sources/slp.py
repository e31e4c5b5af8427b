"""Melee replays (``--source slp``): ``.slp`` files and their archives under ``--input`` (a folder, file or URI),
a Hugging Face dataset mirrored into the local ``--input`` with ``--download``, or synthetic games when
``--input`` is empty (the no-download default). Reading archives is ``pipelines/melee/sources.py``'s job, parsing
``pipelines/melee/slp.py``'s; this module wires both into the job's stages."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pipelines.melee import sources
from pipelines.sources import file_items, is_hub, list_sized, local_root, pin_hub_input
from pipelines.stages import Parsed, Parser, Plan, Source, read_row, register_parser, register_source, work_item
from pipelines.writer import FRAME_PARQUET_OPTIONS
from shards_schema.melee import FRAMES_SCHEMA, GAMES_SCHEMA
from shards_schema.versions import MELEE_FRAMES

SYNTHETIC_GAME_BYTES = 944_000
"""Bytes of one synthetic game (measured: 4 games, 3.78 MB), to pack their work items into read tasks."""


@dataclass(frozen=True, kw_only=True)
class SlpConfig:
    """Which Melee games to keep, and where ``--download`` fetches them from.

    Attributes:
        min_frames: minimum unique frames of a game.
        allow_cpu: keep games with a CPU player.
        hub_repo: Hugging Face dataset to --download from.
        hub_patterns: file name patterns of the hub archives to --download (e.g. ``*FOX*``).
    """

    min_frames: int = 1200
    allow_cpu: bool = False
    hub_repo: str = "erickfm/melee-ranked-replays"
    hub_patterns: list[str] = field(default_factory=list)


@register_source("slp")
class SlpSource(Source):
    """One read task per listed file (a replay, or an archive read member by member), or per synthetic game."""

    parser = "slp"
    shard_bytes_per_input_byte = 0.06  # the 20 shared replays: 10.6 MB of .slp → 0.63 MB of frames (0.069 synthetic)
    needs_input = False

    def plan(self) -> Plan:
        cfg = self.cfg
        if not cfg.input:  # the built-in default: synthetic games, no download
            g = cfg.generated
            return Plan([work_item(f"synthetic-{i:06d}", None, estimate_bytes=SYNTHETIC_GAME_BYTES, inputs=1,
                                   synthetic=i, seed=g.seed) for i in range(g.num_battles)], "synthetic")
        root, revision = cfg.input, None
        if cfg.download:
            root = local_root(cfg.input, "--source slp")
            revision = sources.download(cfg.slp.hub_repo, Path(root), cfg.revision or None, cfg.slp.hub_patterns)
        elif is_hub(root):
            root, revision = pin_hub_input(root, cfg.revision, "main")
        return Plan(file_items(root, list_sized(root, None)), revision)

    def read(self, item: dict) -> list[dict]:
        if "synthetic" in item:
            game = sources.synthetic_game(item["synthetic"], item["seed"])
            return [read_row(f"synthetic-{item['synthetic']:06d}.slp", game)]
        return [read_row(m.input_id, m.data, read_error=m.read_error, filter_reason=m.filter_reason)
                for m in sources.iter_path(item["uri"], item["root"])]

    def output_config(self) -> dict:
        out = {"min_frames": self.cfg.slp.min_frames, "allow_cpu": self.cfg.slp.allow_cpu}
        if not self.cfg.input:
            out |= {"num_battles": self.cfg.generated.num_battles, "seed": self.cfg.generated.seed}
        return out


@register_parser("slp")
class SlpParser(Parser):
    """A Slippi replay's bytes → its frames (columnar) and its games-index row; a game is written once (its
    ``game_id`` is the sha256 of its bytes)."""

    schema = FRAMES_SCHEMA
    index_schema = GAMES_SCHEMA
    versions = MELEE_FRAMES
    parquet_options = FRAME_PARQUET_OPTIONS

    def __init__(self, cfg, source: str):
        from pipelines.melee.slp import SlpFilters

        super().__init__(cfg, source)
        self.filters = SlpFilters(min_frames=cfg.slp.min_frames, allow_cpu=cfg.slp.allow_cpu)

    def parse(self, input_id: str, payload: bytes, sha256: str, facts: dict) -> Parsed:
        from pipelines.melee.slp import parse_slp

        table, info = parse_slp(payload, input_id=input_id, source=self.source, filters=self.filters, sha256=sha256)
        return Parsed(None, info) if table is None else Parsed(table, None, [info])

    def dedupe_key(self, parsed: Parsed) -> str | None:
        return parsed.index_rows[0]["game_id"]

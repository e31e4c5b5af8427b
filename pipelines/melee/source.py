"""Melee replays (``--source slp``): ``.slp`` files and their archives under ``--input`` (a folder, file or URI),
a Hugging Face dataset mirrored into the local ``--input`` with ``--download``, or synthetic games when
``--input`` is empty (the no-download default). Reading files and archives is ``pipelines/archives.py``'s job (for
the suffixes ``pipelines/melee/archives.py`` names, which also downloads and makes the synthetic games), parsing
``pipelines/melee/slp.py``'s; this module wires them into the job's stages."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipelines.archives import is_archive, iter_path
from pipelines.inputs import file_items, has_suffix, list_sized, resolve_input
from pipelines.melee import archives
from pipelines.melee.slp import FRAME_PARQUET_OPTIONS, SlpFilters, parse_slp
from pipelines.stages import Parsed, Parser, Plan, Source, read_row, work_item
from shards_schema.card import SourceLicense
from shards_schema.manifest import Counts
from shards_schema.melee import CODE_VERSIONS, FRAMES_SCHEMA, GAMES_SCHEMA

SYNTHETIC_GAME_BYTES = 944_000
"""Bytes of one synthetic game (measured: 4 games, 3.78 MB), to pack their work items into read tasks."""


@dataclass(frozen=True, kw_only=True)
class SlpConfig:
    """Which Melee games to keep, where ``--download`` fetches them from, and the synthetic games made without
    ``--input``.

    Attributes:
        min_frames: minimum unique frames of a game.
        allow_cpu: keep games with a CPU player.
        hub_repo: Hugging Face dataset to --download from.
        hub_patterns: file name patterns of the hub archives to --download (e.g. ``*FOX*``).
        num_battles: synthetic games to make when --input is empty.
        seed: seed of the synthetic games.
    """

    min_frames: int = 1200
    allow_cpu: bool = False
    hub_repo: str = "erickfm/melee-ranked-replays"
    hub_patterns: list[str] = field(default_factory=list)
    num_battles: int = 100
    seed: int = 0

    def __post_init__(self):
        if self.num_battles < 0:
            raise ValueError("need --num-battles >= 0")

    @classmethod
    def tiny(cls, **overrides) -> SlpConfig:
        return cls(**{"num_battles": 6, **overrides})


class SlpParser(Parser):
    """A Slippi replay's bytes → its frames (columnar) and its games-index row; a game is written once (its
    ``game_id`` is the sha256 of its bytes)."""

    schema = FRAMES_SCHEMA
    index_schema = GAMES_SCHEMA
    versions = CODE_VERSIONS
    parquet_options = FRAME_PARQUET_OPTIONS
    next_steps = (
        ("look at it", "REPLAYFORGE_VERSION={uri} make notebook"),
        ("train a world model", "{python} training/melee/world_model.py --shards {uri} --out runs/wm --preset tiny "
                                "--steps 200"),
        ("play it", "{python} training/melee/world_model_play.py --checkpoint runs/wm --shards {uri} --out runs/play "
                    "--preset tiny"),
    )

    def __init__(self, *, options: SlpConfig, formats: tuple[str, ...], source: str):
        super().__init__(options=options, formats=formats, source=source)
        self.filters = SlpFilters(min_frames=options.min_frames, allow_cpu=options.allow_cpu)

    def parse(self, input_id: str, payload: bytes, sha256: str, facts: dict) -> Parsed:
        table, info = parse_slp(payload, input_id=input_id, source=self.source, filters=self.filters, sha256=sha256)
        return Parsed(None, info) if table is None else Parsed(table, None, [info])

    def dedupe_key(self, parsed: Parsed) -> str | None:
        return parsed.index_rows[0]["game_id"]

    @classmethod
    def describe(cls, counts: Counts) -> str:
        return f"{counts.trajectories} games, {counts.rows} frames"


class SlpSource(Source):
    """One read task per listed file (a replay, or an archive read member by member), or per synthetic game."""

    name = "slp"
    parser = SlpParser
    options_class = SlpConfig
    shard_bytes_per_input_byte = 0.06  # the 20 shared replays: 10.6 MB of .slp → 0.63 MB of frames (0.069 synthetic)
    needs_input = False
    license = SourceLicense(
        hub_id="unknown",
        terms="unknown: check the source. Slippi replays (.slp) from --input or from the hub dataset --download "
              "mirrors (SlpConfig.hub_repo): each recording's terms are those of whoever recorded or published it. "
              "Synthetic games (no --input) are made by replayforge itself and carry no third-party terms.")

    def plan(self) -> Plan:
        inputs, options = self.inputs, self.options
        if not inputs.input:  # the built-in default: synthetic games, no download
            return Plan([work_item(f"synthetic-{i:06d}", None, estimate_bytes=SYNTHETIC_GAME_BYTES, inputs=1,
                                   synthetic=i, seed=options.seed) for i in range(options.num_battles)], "synthetic")
        root, revision = resolve_input(inputs, self.name, "main", lambda folder, revision: archives.download(
            options.hub_repo, folder, revision, options.hub_patterns))
        return Plan(file_items(root, list_sized(root, None)), revision)

    def read(self, item: dict) -> list[dict]:
        if "synthetic" in item:
            game = archives.synthetic_game(item["synthetic"], item["seed"])
            return [read_row(f"synthetic-{item['synthetic']:06d}.slp", game)]
        return [read_row(m.input_id, m.data, read_error=m.read_error, filter_reason=m.filter_reason)
                for m in iter_path(item["uri"], item["root"], archives.REPLAY)]

    def read_by_parser(self, item: dict) -> bool:
        """A loose replay file: one input, its listed bytes (archives hold unknown members; synthetic games are
        made, not read)."""
        uri = item.get("uri")
        return (uri is not None and item.get("bytes") is not None and not is_archive(uri)
                and has_suffix(uri, archives.REPLAY))

    def output_config(self) -> dict:
        out = {"min_frames": self.options.min_frames, "allow_cpu": self.options.allow_cpu}
        if not self.inputs.input:
            out |= {"num_battles": self.options.num_battles, "seed": self.options.seed}
        return out

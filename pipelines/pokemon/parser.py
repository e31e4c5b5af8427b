"""What every parser of ``pokemon_turns`` rows shares: the schema, index and versions, and its set-up (the dex of
each generation, the formats of the pinned simulator, the observation vocabulary), done once per parse actor."""

from __future__ import annotations

import pyarrow as pa

from pipelines.pokemon.trajectory import turns_table
from pipelines.stages import Parser
from shards_schema.pokemon import INDEX_SCHEMA, TURNS_SCHEMA
from shards_schema.versions import POKEMON_TURNS


class PokemonParser(Parser):
    schema = TURNS_SCHEMA
    index_schema = INDEX_SCHEMA
    versions = POKEMON_TURNS

    def __init__(self, cfg, source: str):
        from pipelines.pokemon.dex import known_formats, load_dex
        from pipelines.pokemon.observation import vocabulary

        super().__init__(cfg, source)
        formats = cfg.effective_formats
        self.formats = frozenset(formats) if formats else None
        self.known_formats = known_formats()
        self.dexes = {g: load_dex(g) for g in range(1, 10)}
        vocabulary()

    def table(self, rows: list[dict]) -> pa.Table:
        """The rows' fields, and their observation columns derived from their states for the whole batch."""
        return turns_table(rows)

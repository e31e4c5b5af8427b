"""What every parser of ``pokemon_turns`` rows shares: the schema, index and versions, and its set-up (the dex of
each generation, the formats of the pinned simulator, the observation vocabulary), done once per parse actor."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.pokemon.dex import known_formats, load_dex
from pipelines.pokemon.observation import vocabulary
from pipelines.pokemon.trajectory import turns_table
from pipelines.stages import Parser
from shards_schema.manifest import Counts
from shards_schema.pokemon import CODE_VERSIONS, INDEX_SCHEMA, TURNS_SCHEMA

INDEX_META = ("battle_id", "format", "player_side", "result", "rating")
"""Row fields every trajectory's index row repeats (constant within a trajectory)."""


class PokemonParser(Parser):
    schema = TURNS_SCHEMA
    index_schema = INDEX_SCHEMA
    versions = CODE_VERSIONS
    next_steps = (
        ("look at it", "REPLAYFORGE_VERSION={uri} make notebook"),
        ("train a policy", "{python} training/pokemon/offline_rl.py --shards {uri} --out runs/bc --preset tiny "
                           "--steps 200"),
        ("battle it", "{python} training/pokemon/evaluate.py --checkpoint runs/bc --battles 20 --port 8123"),
    )

    def __init__(self, *, options, formats: tuple[str, ...], source: str):
        super().__init__(options=options, formats=formats, source=source)
        self.known_formats = known_formats()
        self.dexes = {g: load_dex(g) for g in range(1, 10)}
        vocabulary()

    def table(self, rows: list[dict]) -> pa.Table:
        """The rows' fields, and their observation columns derived from their states for the whole batch."""
        return turns_table(rows)

    @staticmethod
    def index_rows(rows: pa.Table) -> list[dict]:
        """One index row per trajectory of an input's rows (a trajectory's rows are contiguous): where the
        trajectory id changes, found by Arrow kernels, and only those rows converted to Python. The parse job's
        writer calls it once per input: converting every row's six fields (``index_rows_reference``) took 0.61 ms
        per battle, about 5% of a battle's parse, table and encode, this 0.08 ms (benchmarks/job_overhead.py)."""
        n = rows.num_rows
        if n == 0:
            return []
        ids = rows.column("trajectory_id")  # not nullable (TURNS_SCHEMA)
        changed = pc.not_equal(ids.slice(1), ids.slice(0, n - 1)).to_numpy(zero_copy_only=False)
        starts = [0, *(np.flatnonzero(changed) + 1).tolist()]
        columns = {k: rows.column(k) for k in ("trajectory_id", *INDEX_META)}
        return [{**{k: column[start].as_py() for k, column in columns.items()}, "row_start": start,
                 "num_rows": end - start} for start, end in zip(starts, [*starts[1:], n], strict=True)]

    @staticmethod
    def index_rows_reference(rows: pa.Table) -> list[dict]:
        """``index_rows`` row by row in Python: the readable reference its test compares it with."""
        ids = rows.column("trajectory_id").to_pylist()
        meta = {k: rows.column(k).to_pylist() for k in INDEX_META}
        out, start = [], 0
        while start < len(ids):
            end = start
            while end < len(ids) and ids[end] == ids[start]:
                end += 1
            out.append({"trajectory_id": ids[start], **{k: v[start] for k, v in meta.items()}, "row_start": start,
                        "num_rows": end - start})
            start = end
        return out

    @staticmethod
    def unknown_words(rows: pa.Table) -> int:
        return pc.sum(rows.column("obs_unknown_words")).as_py() or 0

    @classmethod
    def describe(cls, counts: Counts) -> str:
        return (f"{counts.trajectories} trajectories, {counts.rows} rows, {counts.unknown_words} unknown observation "
                "words,")

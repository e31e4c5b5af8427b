"""A battle whose rows the shards cannot hold is that battle's quarantine row, never the job's failure (issue 25):
the parser refuses a decision without an active Pokémon, and a job over it and 25 real battles publishes the 25."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import pytest
from conftest import shared_data

from pipelines.errors import NoActivePokemonError
from pipelines.parse_replays import ParseConfig, run
from pipelines.pokemon.dex import known_formats, load_dex
from pipelines.pokemon.replays import ReplayFilters, parse
from shards_schema.reader import open_version

_LEADS = "|switch|p1a: Great Tusk|Great Tusk|100/100\n|switch|p2a: Darkrai|Darkrai|100/100"
_LOG = """|j|☆Alice
|j|☆Bob
|t:|1735689600
|gametype|singles
|player|p1|Alice||
|player|p2|Bob||
|teamsize|p1|2
|teamsize|p2|2
|gen|9
|tier|[Gen 9] OU
|rule|Species Clause: Limit one of each Pokémon
|clearpoke
|poke|p1|Great Tusk|
|poke|p1|Dragonite, F|
|poke|p2|Darkrai|
|poke|p2|Skarmory, F|
|teampreview
|
|t:|1735689630
|start
{opening}
|
|t:|1735689650
|move|p2a: Darkrai|Dark Pulse|p1a: Great Tusk
|-damage|p1a: Great Tusk|52/100
|move|p1a: Great Tusk|Headlong Rush|p2a: Darkrai
|-damage|p2a: Darkrai|0 fnt
|faint|p2a: Darkrai
|-unboost|p1a: Great Tusk|def|1
|-unboost|p1a: Great Tusk|spd|1
|
|upkeep
|switch|p2a: Skarmory|Skarmory, F|100/100
|turn|2
|c|☆Bob|gg
|
|t:|1735689670
|move|p1a: Great Tusk|Rapid Spin|p2a: Skarmory
|-damage|p2a: Skarmory|0 fnt
|faint|p2a: Skarmory
|
|win|Alice"""
TURN_FIRST = _LOG.format(opening="|turn|1\n" + _LEADS)
"""A gen9 log whose ``|turn|1`` comes before its leads switch in: at that turn neither side has an active
Pokémon, and the leads' switch-ins read as decisions without one."""
LEADS_FIRST = _LOG.format(opening=_LEADS + "\n|turn|1")
"""The same battle in the order Showdown writes it."""


def _replay_json(battle_id: str, log: str) -> bytes:
    """The public replay API's JSON shape, as the showdown-json source reads it."""
    return json.dumps({"id": battle_id, "format": "[Gen 9] OU", "players": ["Alice", "Bob"], "log": log,
                       "uploadtime": 1735689600, "formatid": "gen9ou", "rating": None}).encode()


def _parse(log: str) -> list[dict]:
    parsed = parse("showdown-json", _replay_json("gen9ou-odd", log), {9: load_dex(9)}, ReplayFilters(),
                   known_formats())
    assert parsed.filter_reason is None
    return parsed.rows


def test_a_decision_without_an_active_pokemon_is_refused():
    rows = _parse(LEADS_FIRST)  # the battle itself is fine: two decisions for p1, three for p2, each terminal
    assert Counter(r["player_side"] for r in rows) == {"p1": 3, "p2": 4}
    assert all(r["state"]["player_active"] is not None for r in rows)
    with pytest.raises(NoActivePokemonError, match=r"gen9ou-odd:p1 decision 0 \(battle turn 1\)") as caught:
        _parse(TURN_FIRST)
    assert (caught.value.stage, caught.value.reason) == ("validate", "no_active_pokemon")


def test_the_job_quarantines_the_odd_battle_and_publishes_the_others(ray_local, tmp_path):
    bench = shared_data("pokemon", "bench_replays")
    others = sorted(bench.glob("gen9ou/*.json"))[:13] + sorted(bench.glob("gen1ou/*.json"))[:12]
    root = tmp_path / "replays"
    root.mkdir()
    for path in others:
        shutil.copy(path, root / path.name)
    (root / "gen9ou-odd.json").write_bytes(_replay_json("gen9ou-odd", TURN_FIRST))

    published = run(ParseConfig.tiny(source="showdown-json", input=str(root), out=str(tmp_path / "out")),
                    log=lambda *_: None)
    version = open_version(published.path)
    c = version.manifest.counts
    assert (c.inputs, c.written, c.filtered, c.quarantined) == (26, 25, {}, {"no_active_pokemon": 1})
    assert c.reconciles()
    [row] = version.quarantine().to_pylist()
    assert (row["input_id"], row["stage"], row["error_type"]) == (
        "gen9ou-odd.json", "validate", "NoActivePokemonError")
    written = set(version.index().column("input_id").to_pylist())
    assert written == {path.name for path in others}
    assert "gen9ou-odd" not in set(version.table(["battle_id"]).column("battle_id").to_pylist())

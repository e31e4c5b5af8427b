"""Replay sources through the Ray job: filters and duplicates counted with reasons, bad replays quarantined."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import shared_data

from pipelines.parse_replays import ParseConfig, run
from pipelines.pokemon.replays import Replay, ReplayFilters, normalize
from shards_schema.reader import open_version

GEN1 = "smogtours-gen1ou-733374.json"
GEN9 = "smogtours-gen9ou-733546.json"


def _replays():
    root = shared_data("pokemon", "showdown_replays")
    return {name: json.loads((root / name).read_text()) for name in (GEN1, GEN9)}


def test_filters_give_reasons():
    replay = Replay(battle_id="b", format="gen9ou", log=[], rating=1500, date="2023-12-03", players={})
    assert ReplayFilters().reason(replay) is None
    assert ReplayFilters(formats=frozenset({"gen1ou"})).reason(replay) == "format_not_requested"
    assert ReplayFilters(min_rating=1600).reason(replay) == "below_min_rating"
    assert ReplayFilters(min_rating=1000).reason(replay) is None
    assert ReplayFilters(min_rating=1).reason(Replay(**{**replay.__dict__, "rating": None})) == "unrated"
    assert ReplayFilters(date_from="2023-12-04").reason(replay) == "before_date_from"
    assert ReplayFilters(date_to="2023-12-02").reason(replay) == "after_date_to"
    month = Replay(**{**replay.__dict__, "date": "2023-12"})
    assert ReplayFilters(date_from="2023-12-31", date_to="2023-12-31").reason(month) is None
    assert normalize("pokechamp", {"battle_id": "x", "gamemode": "gen9ou", "elo": "1712", "month_year": "March 2024",
                                   "text": "|a\n|b"}).date == "2024-03"


def test_showdown_json_job(ray_local, tmp_path):
    replays = _replays()
    root = tmp_path / "json"
    root.mkdir()
    for name, data in replays.items():
        (root / name).write_text(json.dumps(data))
    (root / "copy-of-gen1.json").write_text(json.dumps(replays[GEN1]))  # same battle id: a duplicate
    (root / "broken.json").write_text("{not json")
    cut = dict(replays[GEN9], id="cut-1", log="\n".join(replays[GEN9]["log"].split("\n")[:120]))
    (root / "cut.json").write_text(json.dumps(cut))  # ends mid-battle
    (root / "nofmt.json").write_text(json.dumps(dict(replays[GEN1], id="odd-1", formatid="gen1nonsense")))
    # a format id from before the ids named the generation: written as the log's |gen| says, and counted so
    (root / "old.json").write_text(json.dumps(dict(replays[GEN1], id="old-1", formatid="ou")))
    # a retired VGC season the simulator no longer has: doubles by its |gametype| line, filtered, not unknown
    doubles_log = replays[GEN9]["log"].replace("|gametype|singles", "|gametype|doubles")
    (root / "vgc.json").write_text(json.dumps(dict(replays[GEN9], id="vgc-1", formatid="gen9vgc2023regulationc",
                                                   log=doubles_log)))
    # an older tier name, read from the format's name as a record without formatid has it: the same tier today
    (root / "mono.json").write_text(json.dumps({k: v for k, v in dict(replays[GEN9], id="mono-1",
                                                                      format="[Gen 9] OU Monotype").items()
                                                if k != "formatid"}))
    # a server's battle log is another source's: quarantined with the source that reads it
    (root / "server.json").write_text(json.dumps({"log": replays[GEN9]["log"].split("\n"), "inputLog": [">start {}"],
                                                  "format": "gen9ou", "winner": "amaterus"}))
    cfg = ParseConfig.tiny(source="showdown-json", input=str(root), out=str(tmp_path / "out"))
    version = open_version(run(cfg, log=lambda *_: None).path)
    c = version.manifest.counts
    assert (c.inputs, c.written, c.trajectories) == (10, 4, 8)
    assert c.relabelled == {"ou→gen1ou": 1, "gen9oumonotype→gen9monotype": 1}
    assert c.filtered == {"duplicate": 1, "not_singles": 1}
    assert c.quarantined == {"invalid_json": 1, "truncated_battle": 1, "unknown_format": 1, "invalid_record": 1}
    q = {r["input_id"]: r for r in version.quarantine().to_pylist()}
    assert q["cut.json"]["reason"] == "truncated_battle"
    assert "--source showdown-server" in q["server.json"]["message"]
    assert set(version.index().column("battle_id").to_pylist()) == {"smogtours-gen1ou-733374",
                                                                      "smogtours-gen9ou-733546", "old-1", "mono-1"}


@pytest.mark.parametrize("source", ["hf-raw", "pokechamp"])
def test_hub_table_sources(ray_local, tmp_path, source):
    replays = _replays()
    rows = []
    for i, rating in enumerate([1100, 1350, None, 1500]):
        for name in (GEN1, GEN9):
            data = replays[name]
            battle_id = f"{data['id']}-{i}"
            if source == "hf-raw":
                rows.append({"id": battle_id, "format": data["format"], "players": data["players"],
                             "log": data["log"], "uploadtime": data["uploadtime"] + i * 86400,
                             "formatid": data["formatid"], "rating": rating})
            else:
                rows.append({"battle_id": battle_id, "gamemode": data["formatid"], "elo": rating,
                             "month_year": "2023-12", "text": data["log"]})
    table = pa.Table.from_pylist(rows)
    root = tmp_path / "table"
    root.mkdir()
    pq.write_table(table.slice(0, 4), root / "part-0.parquet", row_group_size=2)
    pq.write_table(table.slice(4), root / "part-1.parquet", row_group_size=2)
    cfg = ParseConfig.tiny(source=source, input=str(root), out=str(tmp_path / "out"), formats=["gen9ou"],
                           min_rating=1300)
    version = open_version(run(cfg, log=lambda *_: None).path)
    c = version.manifest.counts
    # 8 battles in the table, 4 of them gen9ou (the asked format); of those, 1100 and unrated are filtered
    assert (c.inputs, c.written) == (4, 2) and c.reconciles()
    assert c.filtered == {"below_min_rating": 1, "unrated": 1}
    assert set(version.table(["format"]).column("format").to_pylist()) == {"gen9ou"}
    assert sorted(set(version.table(["rating"]).column("rating").to_pylist())) == [1350, 1500]
    assert Counter(version.index().column("result").to_pylist()) == {"win": 2, "loss": 2}


def test_hub_download_resolves_and_pins_the_revision(monkeypatch, tmp_path):
    """The network call is the hub's; what we own: resolve the revision to a commit, fetch only Parquet files of
    the asked formats at that commit."""
    import huggingface_hub

    from pipelines.pokemon import replays

    class FakeApi:
        def dataset_info(self, repo, revision):
            assert (repo, revision) == ("jakegrigsby/metamon-raw-replays", "v1")
            return type("Info", (), {"sha": "c0ffee"})()

        def list_repo_files(self, repo, repo_type, revision):
            assert revision == "c0ffee"
            return ["README.md", "data/gen1ou-0.parquet", "data/gen9ou-0.parquet", "data/gen9ou-1.parquet"]

    fetched = []
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda **kw: fetched.append((kw["filename"],
                                                                                          kw["revision"])))
    assert replays.download("hf-raw", tmp_path, None, ["gen9ou"]) == "c0ffee"
    assert fetched == [("data/gen9ou-0.parquet", "c0ffee"), ("data/gen9ou-1.parquet", "c0ffee")]


@pytest.mark.parametrize("source,field", [("showdown-json", "log"), ("hf-raw", "log"), ("pokechamp", "text")])
@pytest.mark.parametrize("value", [None, "", 7])
def test_null_log_is_an_invalid_record_not_a_cut_battle(source, field, value):
    from pipelines.errors import InvalidRecordError
    from pipelines.pokemon import replays
    from pipelines.pokemon.dex import known_formats, load_dex

    record = _replays()[GEN1]
    if source == "pokechamp":
        record = {"battle_id": record["id"], "gamemode": "gen1ou", "elo": 1500, "month_year": "2023-12",
                  "text": record["log"]}
    record[field] = value
    with pytest.raises(InvalidRecordError, match=f"`{field}`"):
        replays.parse(source, json.dumps(record).encode(), {1: load_dex(1)}, ReplayFilters(), known_formats())


@pytest.mark.parametrize("display,want", [("[Gen 1] OU", "gen1ou"), ("[Gen 9] Random Battle", "gen9randombattle"),
                                          ("[Gen 9] National Dex UU", "gen9nationaldexuu")])
def test_missing_formatid_comes_from_the_display_name(display, want):
    record = {**_replays()[GEN1], "format": display}
    for missing in ({k: v for k, v in record.items() if k != "formatid"}, {**record, "formatid": None},
                    {**record, "formatid": ""}):
        assert normalize("hf-raw", missing).format == want
    assert normalize("hf-raw", {**record, "formatid": "gen1ou"}).format == "gen1ou"


def test_replay_without_formatid_parses_like_with_it():
    from pipelines.pokemon import replays
    from pipelines.pokemon.dex import known_formats, load_dex

    record = _replays()[GEN1]
    assert record["formatid"] == "gen1ou"
    dexes, filters = {1: load_dex(1)}, ReplayFilters()
    want = replays.parse("showdown-json", json.dumps(record).encode(), dexes, filters, known_formats()).rows
    bare = {k: v for k, v in record.items() if k != "formatid"}
    got = replays.parse("showdown-json", json.dumps(bare).encode(), dexes, filters, known_formats()).rows
    assert got == want and got[0]["format"] == "gen1ou"


def test_index_rows_match_the_reference():
    """The writer's index rows of each input (Arrow kernels) against the row-by-row reference, on one input's
    rows, on several inputs' (many trajectories), on a chunked table and a slice, one row and none."""
    from pipelines.pokemon.parser import PokemonParser
    from pipelines.pokemon.replays import ReplayFilterConfig, ReplayParser

    parser = ReplayParser(options=ReplayFilterConfig(), formats=(), source="showdown-json")
    tables = [parser.table(parser.parse(name, json.dumps(record).encode(), "", {}).rows)
              for name, record in _replays().items()]
    both = pa.concat_tables(tables)
    cases = [*tables, both, both.combine_chunks(), both.slice(7, 150), both.slice(0, 1), both.slice(0, 0)]
    for rows in cases:
        assert PokemonParser.index_rows(rows) == PokemonParser.index_rows_reference(rows)
    assert len(PokemonParser.index_rows(both)) == 4  # two battles, two players each
    assert [r["row_start"] for r in PokemonParser.index_rows(tables[0])][0] == 0

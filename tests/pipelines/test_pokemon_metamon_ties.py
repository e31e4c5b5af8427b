"""Metamon ties: both players' files say LOSS; the read stage, which sees both names, hands the parser a tie."""

from __future__ import annotations

import json
import tarfile
from collections import Counter

import lz4.frame
import pyarrow as pa
from conftest import shared_data

from pipelines.job.parse import ParseInputs
from pipelines.parse_replays import ParseConfig, run
from pipelines.pokemon import metamon
from pipelines.pokemon.dex import load_dex
from pipelines.pokemon.spectator import spectator_trajectories
from shards_schema.reader import open_version


def _metamon_files(ending: str) -> dict[str, bytes]:
    """Both players' Metamon files of the shared gen1ou replay, its end replaced by ``ending`` (``|tie`` or
    ``|win|<name>``), written as Metamon's parser writes them: a tie is LOSS (name and last state) for both."""
    data = json.loads(shared_data("pokemon", "showdown_replays", "smogtours-gen1ou-733374.json").read_text())
    lines = data["log"].split("\n")
    end = next(i for i, line in enumerate(lines) if line.startswith("|win|"))
    battle_id = f"{data['id']}{'t' if ending == '|tie' else 'w'}"
    rows = spectator_trajectories(lines[:end] + [ending], load_dex(1), format_id="gen1ou", battle_id=battle_id)
    out = {}
    for side in ("p1", "p2"):
        mine = [r for r in rows if r["player_side"] == side]
        won = mine[0]["result"] == "win"
        states = [metamon.to_universal_state(r["state"], "gen1ou", won=won and r["done"],
                                             lost=not won and r["done"]) for r in mine]
        name = metamon.file_name(battle_id, None, mine[0]["player_name"], mine[0]["opponent_name"], "12-02-2023",
                                 won)
        out[name] = lz4.frame.compress(json.dumps({"states": states, "actions": [r["action"] for r in mine]}).encode())
    return out


def _results(read_rows: list[dict]) -> dict[str, set[str]]:
    """input id → results of its rows, through the parse stage's actor class (no Ray needed)."""
    parse = ParseInputs(ParseConfig(source="metamon", input="unused", out="unused").make_source())
    out = parse.parse_batch(pa.Table.from_pylist(read_rows))
    assert {r.status for r in out.records} == {"written"}
    table = out.rows
    results: dict[str, set[str]] = {}
    for battle, player, result in zip(table["battle_id"].to_pylist(), table["player_name"].to_pylist(),
                                      table["result"].to_pylist(), strict=True):
        results.setdefault(f"{battle}:{player}", set()).add(result)
    return results


def test_archive_members_of_a_tie_are_read_as_a_tie(tmp_path):
    files = {**_metamon_files("|tie"), **_metamon_files("|win|Green on fire")}
    assert Counter(n.endswith("_LOSS.json.lz4") for n in files) == {True: 3, False: 1}
    archive = tmp_path / "gen1ou.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, payload in files.items():
            path = tmp_path / name
            path.write_bytes(payload)
            tar.add(path, arcname=f"gen1ou/{name}")
    rows = ParseConfig(source="metamon", input=str(tmp_path), out="unused").make_source().read(
        {"uri": str(archive), "root": str(tmp_path)})
    facts = {r["input_id"].split("_")[0].split("/")[-1]: r["facts_json"] for r in rows}
    assert facts == {"smogtours-gen1ou-733374t": '{"result": "tie"}', "smogtours-gen1ou-733374w": None}
    assert _results(rows) == {
        "smogtours-gen1ou-733374t:Green on fire": {"tie"}, "smogtours-gen1ou-733374t:squirtlnthasheldr": {"tie"},
        "smogtours-gen1ou-733374w:Green on fire": {"win"}, "smogtours-gen1ou-733374w:squirtlnthasheldr": {"loss"}}


def test_loose_files_of_a_tie_are_found_by_the_driver(ray_local, tmp_path):
    """Through the job: the driver pairs loose files in different folders; other files and archive members are
    counted as filtered ``not_a_replay``; upper-case suffixes are read."""
    root = tmp_path / "in"
    (root / "sub").mkdir(parents=True)
    tie = _metamon_files("|tie")
    for i, (name, payload) in enumerate(sorted(tie.items())):  # the two files in different folders
        (root / ("sub" if i else "") / name).write_bytes(payload)
    lone_loss = next(n for n, _ in _metamon_files("|win|Green on fire").items() if n.endswith("_LOSS.json.lz4"))
    (root / lone_loss).write_bytes(_metamon_files("|win|Green on fire")[lone_loss])
    # what else a folder holds is counted, not dropped; suffixes in any case
    (root / "notes.txt").write_text("not a trajectory")
    gen9 = sorted(shared_data("pokemon", "metamon_parsed").glob("smogtours-gen9ou-*.json.lz4"))
    with tarfile.open(root / "GEN9OU.TAR.GZ", "w:gz") as tar:
        for path in gen9:
            tar.add(path, arcname=f"gen9ou/{path.name[:-len('.json.lz4')]}.JSON.LZ4")
        tar.add(root / "notes.txt", arcname="gen9ou/notes.txt")
    published = run(ParseConfig.tiny(source="metamon", out=str(tmp_path / "out"), input=str(root)),
                    log=lambda *_: None)
    version = open_version(published.path)
    counts = version.manifest.counts
    assert (counts.inputs, counts.written, counts.filtered) == (7, 5, {"not_a_replay": 2}) and counts.reconciles()
    index = version.index().to_pylist()
    assert Counter((r["battle_id"], r["result"]) for r in index) == {
        ("smogtours-gen1ou-733374t", "tie"): 2, ("smogtours-gen1ou-733374w", "loss"): 1,
        ("smogtours-gen9ou-733546", "win"): 1, ("smogtours-gen9ou-733546", "loss"): 1}
    rewards = version.table(["battle_id", "reward", "done"]).to_pylist()
    assert {r["reward"] for r in rewards if r["battle_id"].endswith("t")} == {0.0}

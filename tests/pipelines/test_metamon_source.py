"""Golden tests on the shared Metamon samples: state count, action sequence, a named turn's HP, the result."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import zipfile

import lz4.frame
import pyarrow.compute as pc
import pytest
from conftest import shared_data

from pipelines.errors import CorruptCompressionError, InvalidJsonError, InvalidRecordError
from pipelines.parse_replays import ParseConfig
from pipelines.pokemon import dex, metamon
from pipelines.pokemon.trajectory import turns_table
from shards_schema.pokemon import TURNS_SCHEMA

GEN1_WIN = "smogtours-gen1ou-733374_Unrated_Green on fire_vs_squirtlnthasheldr_12-02-2023_WIN.json.lz4"
GEN9_LOSS = "smogtours-gen9ou-733546_Unrated_amaterus_vs_jealousy jealousy_12-03-2023_LOSS.json.lz4"


@pytest.fixture(scope="module")
def known_formats():
    return dex.known_formats()


def _parse(name, known_formats, formats=None):
    payload = shared_data("pokemon", "metamon_parsed", name).read_bytes()
    return metamon.parse(name, payload, formats, known_formats)


def test_file_name_with_spaces():
    name = metamon.parse_name(GEN1_WIN)
    assert (name.battle_id, name.player, name.opponent, name.won, name.rating) == (
        "smogtours-gen1ou-733374", "Green on fire", "squirtlnthasheldr", True, None)
    assert name.format == "gen1ou"


def test_gen1_golden(known_formats):
    rows, reason = _parse(GEN1_WIN, known_formats)
    assert reason is None
    assert len(rows) == 87
    assert [r["action"] for r in rows[:14]] == [4, 1, 1, 4, 4, 6, 6, 1, 4, 3, 2, 3, 5, 3]
    assert rows[14]["action"] == -1  # not visible to a spectator
    assert rows[-1]["action"] == -1 and rows[-1]["done"] and rows[-1]["reward"] == 1.0
    assert all(r["result"] == "win" for r in rows)
    assert sum(r["done"] for r in rows) == 1
    # Turn 2 of the replay: Chansey switched in on turn 1 and took a Psychic to 81/100.
    assert rows[1]["state"]["player_active"]["name"] == "chansey"
    assert rows[1]["state"]["player_active"]["hp_pct"] == pytest.approx(0.81)
    assert rows[1]["state"]["opponent_active"]["name"] == "alakazam"
    assert rows[0]["trajectory_id"] == "smogtours-gen1ou-733374:Green on fire"


def test_gen9_golden(known_formats):
    rows, _ = _parse(GEN9_LOSS, known_formats)
    assert len(rows) == 31
    assert [r["action"] for r in rows[:9]] == [3, 8, 2, 4, 3, 7, 3, 5, 12]  # 12: terastallize + move slot 3
    assert rows[-1]["result"] == "loss" and rows[-1]["reward"] == -1.0
    table = turns_table(rows)
    assert table.num_rows == 31 and table.schema.equals(TURNS_SCHEMA, check_metadata=True)
    assert all(r["legal_mask"][r["action"]] for r in rows if r["action"] >= 0)


def test_format_filter(known_formats):
    rows, reason = _parse(GEN1_WIN, known_formats, formats=frozenset({"gen9ou"}))
    assert rows == [] and reason == "format_not_requested"


def test_bad_inputs_raise_typed_errors(known_formats):
    with pytest.raises(CorruptCompressionError):
        metamon.parse(GEN1_WIN, b"not lz4 at all", None, known_formats)
    with pytest.raises(InvalidJsonError):
        metamon.parse(GEN1_WIN, lz4.frame.compress(b"{not json"), None, known_formats)
    with pytest.raises(InvalidRecordError):
        metamon.parse(GEN1_WIN, lz4.frame.compress(b'{"states": [], "actions": []}'), None, known_formats)
    with pytest.raises(InvalidRecordError):
        metamon.parse("badname.json.lz4", lz4.frame.compress(b"{}"), None, known_formats)


def test_universal_state_round_trip(known_formats):
    rows, _ = _parse(GEN9_LOSS, known_formats)
    for row in rows:
        state = row["state"]
        back = metamon.universal_state(metamon.to_universal_state(state, row["format"]))
        assert back == state


def test_download_asks_only_for_requested_formats_at_the_pinned_revision(monkeypatch, tmp_path):
    """The hub call itself needs the network; what we own is which files at which revision we ask for."""
    calls = []
    monkeypatch.setattr(metamon, "hf_hub_download", lambda **kw: calls.append(kw))
    metamon.download(["gen1ou", "gen9ou"], tmp_path, revision="v1")
    assert [(c["repo_id"], c["repo_type"], c["filename"], c["revision"]) for c in calls] == [
        (metamon.HUB_REPO, "dataset", "gen1ou.tar.gz", "v1"), (metamon.HUB_REPO, "dataset", "gen9ou.tar.gz", "v1")]
    assert all(c["local_dir"] == str(tmp_path) for c in calls)


def _upper_moves(state: dict) -> None:
    """Spell every move type and category as older Metamon versions did: poke-env enum names."""
    mons = [state["player_active_pokemon"], state["opponent_active_pokemon"], *state["available_switches"]]
    moves = [m for mon in mons if mon for m in mon["moves"]] + [state["player_prev_move"], state["opponent_prev_move"]]
    for m in moves:
        if m and m["name"] != "nomove":
            m["move_type"] = "THREE_QUESTION_MARKS" if m["move_type"] == "threequestionmarks" else m[
                "move_type"].upper()
            m["category"] = m["category"].upper()


def test_upper_case_move_types_and_categories_read_as_lower_case(known_formats):
    """Older Metamon files write ``GROUND``/``STATUS`` (poke-env enum names): the same rows, no unknown words."""
    payload = shared_data("pokemon", "metamon_parsed", GEN9_LOSS).read_bytes()
    data = json.loads(lz4.frame.decompress(payload))
    for state in data["states"]:
        _upper_moves(state)
    text = json.dumps(data)
    assert '"move_type": "POISON"' in text and '"category": "STATUS"' in text
    upper = lz4.frame.compress(text.encode())
    want, _ = metamon.parse(GEN9_LOSS, payload, None, known_formats)
    got, _ = metamon.parse(GEN9_LOSS, upper, None, known_formats)
    got_table, want_table = turns_table(got), turns_table(want)
    assert pc.sum(got_table["obs_unknown_words"]).as_py() == pc.sum(want_table["obs_unknown_words"]).as_py() == 0
    assert got_table["obs_text"].equals(want_table["obs_text"])
    assert [r["state"] for r in got] == [r["state"] for r in want]


def test_typeless_move_type_spellings_are_one_word():
    for raw in ("THREE_QUESTION_MARKS", "threequestionmarks", "???"):
        move = metamon._move({"name": "curse", "move_type": raw, "category": "STATUS", "base_power": 0,
                              "accuracy": 1.0, "priority": 0, "current_pp": 10, "max_pp": 16})
        assert (move["move_type"], move["category"]) == ("threequestionmarks", "status")


def test_tie_names_pairs_both_losses_of_one_battle():
    name = metamon.file_name
    tie_a = name("gen1ou-1", None, "ann", "bob", "01-02-2024", won=False)
    tie_b = name("gen1ou-1", None, "bob", "ann", "01-02-2024", won=False)
    win = name("gen1ou-2", 1500, "ann", "cy", "01-02-2024", won=True)
    loss = name("gen1ou-2", 1500, "cy", "ann", "01-02-2024", won=False)
    alone = name("gen1ou-3", None, "dee", "eve", "01-02-2024", won=False)
    names = [f"a/{tie_a}", f"x.tar.gz::gen1ou/{tie_b}", win, loss, alone, "notes.json.lz4"]
    assert metamon.tie_names(names) == {f"a/{tie_a}", f"x.tar.gz::gen1ou/{tie_b}"}


def test_tie_fact_makes_a_tie_and_a_loss_stays_a_loss(known_formats):
    """Metamon writes a tie as LOSS (name and last state) for both players; only the read task, seeing both files,
    can say tie."""
    name = "smogtours-gen1ou-733374_Unrated_squirtlnthasheldr_vs_Green on fire_12-02-2023_LOSS.json.lz4"
    payload = shared_data("pokemon", "metamon_parsed", name).read_bytes()
    alone, _ = metamon.parse(name, payload, None, known_formats)
    assert {r["result"] for r in alone} == {"loss"} and alone[-1]["reward"] == -1.0
    tie, _ = metamon.parse(name, payload, None, known_formats, {"result": "tie"})
    assert {r["result"] for r in tie} == {"tie"} and [r["reward"] for r in tie] == [0.0] * len(tie)
    with pytest.raises(InvalidRecordError, match="won"):
        metamon.parse(GEN1_WIN, shared_data("pokemon", "metamon_parsed", GEN1_WIN).read_bytes(), None,
                      known_formats, {"result": "tie"})


@pytest.mark.parametrize("kind", ["tar.gz", "zip"])
def test_an_archive_with_a_damaged_member_keeps_the_others(tmp_path, kind):
    """Archives are read by the shared reader (``pipelines/archives.py``): a member whose tar header fails its
    checksum, or whose zip CRC does not match, is one row with a read error under its own id; the members after it
    are read. An archive in a sub-folder of --input carries the sub-folder in its ids."""
    files = {f"gen1ou/{p.name}": p.read_bytes()
             for p in sorted(shared_data("pokemon", "metamon_parsed").glob("*.json.lz4"))}
    names = list(files)
    damaged = names[1]
    (tmp_path / "hub").mkdir()
    archive = tmp_path / "hub" / f"gen1ou.{kind}"
    if kind == "zip":
        with zipfile.ZipFile(archive, "w") as out:
            for name, data in files.items():
                out.writestr(name, data)
        raw = bytearray(archive.read_bytes())
        raw[raw.find(files[damaged][:64]) + 1000] ^= 0xFF  # stored: a bad CRC-32
        archive.write_bytes(bytes(raw))
    else:
        plain, offsets = io.BytesIO(), {}
        with tarfile.open(fileobj=plain, mode="w", format=tarfile.USTAR_FORMAT) as out:
            for name, data in files.items():
                offsets[name] = out.offset
                info = tarfile.TarInfo(name)
                info.size = len(data)
                out.addfile(info, io.BytesIO(data))
        raw = bytearray(plain.getvalue())
        raw[offsets[damaged] + 148] ^= 0x07  # the header checksum field
        archive.write_bytes(gzip.compress(bytes(raw)))
    source = ParseConfig(source="metamon", input=str(tmp_path), out="unused").make_source()
    rows = {r["input_id"]: r for r in source.read({"uri": str(archive), "root": str(tmp_path)})}
    assert sorted(rows) == [f"hub/gen1ou.{kind}::{n}" for n in names]
    for name, data in files.items():
        row = rows[f"hub/gen1ou.{kind}::{name}"]
        if name == damaged:
            assert row["payload"] is None and row["read_error"], row
        else:
            assert (row["payload"], row["read_error"], row["filter_reason"]) == (data, None, None)
    expected = "BadZipFile: Bad CRC-32" if kind == "zip" else "the tar header at byte "
    assert rows[f"hub/gen1ou.{kind}::{damaged}"]["read_error"].startswith(expected)

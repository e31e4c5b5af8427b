"""Golden tests on the shared Metamon samples: state count, action sequence, a named turn's HP, the result."""

from __future__ import annotations

import lz4.frame
import pytest
from conftest import shared_data

from pipelines.errors import CorruptCompressionError, InvalidJsonError, InvalidRecordError
from pipelines.sources import metamon

GEN1_WIN = "smogtours-gen1ou-733374_Unrated_Green on fire_vs_squirtlnthasheldr_12-02-2023_WIN.json.lz4"
GEN9_LOSS = "smogtours-gen9ou-733546_Unrated_amaterus_vs_jealousy jealousy_12-03-2023_LOSS.json.lz4"


@pytest.fixture(scope="module")
def known_formats():
    from pipelines.pokemon.dex import known_formats as known

    return known()


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
    assert all(len(r["obs_tokens"]) == 87 and len(r["obs_numeric"]) == 48 for r in rows)
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
    import huggingface_hub

    calls = []
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda **kw: calls.append(kw))
    metamon.download(["gen1ou", "gen9ou"], tmp_path, revision="v1")
    assert [(c["repo_id"], c["repo_type"], c["filename"], c["revision"]) for c in calls] == [
        (metamon.HUB_REPO, "dataset", "gen1ou.tar.gz", "v1"), (metamon.HUB_REPO, "dataset", "gen9ou.tar.gz", "v1")]
    assert all(c["local_dir"] == str(tmp_path) for c in calls)

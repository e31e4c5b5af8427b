"""The notebooks run top to bottom on real shard versions (their code cells, executed in order, without Jupyter)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def run_notebook(path: Path, monkeypatch, env: dict[str, str]) -> dict:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(path.parent)
    namespace: dict = {}
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] == "code":
            exec(compile("".join(cell["source"]), f"{path.name}", "exec"), namespace)  # noqa: S102
    return namespace


def test_inspect_shards_on_pokemon_turns(tiny_generated, monkeypatch):
    _, published, _ = tiny_generated
    ns = run_notebook(NOTEBOOKS / "inspect_shards.ipynb", monkeypatch, {"REPLAYFORGE_VERSION": str(published.path)})
    assert ns["summary"].collect()["turns"].sum() == ns["lazy"].select("format").collect().height > 0


def test_inspect_shards_on_s3(s3_bucket, tiny_generated, monkeypatch):
    """The same notebook on the same version in an S3 bucket (moto's server): polars reads through the store."""
    from conftest import copy_tree

    _, published, _ = tiny_generated
    uri = f"{s3_bucket}/out/pokemon_turns/{published.path.name}"
    copy_tree(str(published.path), uri)
    ns = run_notebook(NOTEBOOKS / "inspect_shards.ipynb", monkeypatch, {"REPLAYFORGE_VERSION": uri})
    assert ns["version"].path == uri
    assert ns["summary"].collect()["turns"].sum() == ns["m"].counts.rows > 0


@pytest.fixture(scope="module")
def synthetic_melee(three_synthetic_games):
    """The session's version of 3 synthetic games (tests/conftest.py), read only."""
    return three_synthetic_games


def test_inspect_shards_on_melee_frames(synthetic_melee, monkeypatch):
    ns = run_notebook(NOTEBOOKS / "inspect_shards.ipynb", monkeypatch, {"REPLAYFORGE_VERSION": str(synthetic_melee)})
    frames = ns["summary"].collect()
    assert frames.height == len(ns["index"]) and frames["frames"].sum() == ns["index"]["num_frames"].sum()


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def headless():
    """Figures drawn with Agg (no display), closed after the test."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    yield
    plt.close("all")


def assert_drawn(ns: dict, folder: Path, names: set[str]) -> None:
    """Every figure the notebook kept has axes with data, and was saved as a PNG under ``folder``."""
    assert set(ns["figures"]) == names
    for name, fig in ns["figures"].items():
        assert fig.axes and all(ax.has_data() for ax in fig.axes), name
        assert (folder / f"{name}.png").read_bytes()[:8] == PNG_MAGIC, name


def test_pokemon_shards_notebook(tiny_generated, headless, monkeypatch, tmp_path):
    cfg, published, _ = tiny_generated
    figures = tmp_path / "figures"
    ns = run_notebook(NOTEBOOKS / "pokemon_shards.ipynb", monkeypatch,
                      {"REPLAYFORGE_VERSION": str(published.path), "REPLAYFORGE_FIGURES": str(figures)})
    assert_drawn(ns, figures, {"outcomes", "actions_formats", "results_lengths"})
    counts = ns["m"].counts
    assert ns["outcomes"]["inputs"].sum() == counts.inputs > 0
    assert ns["actions"]["turns"].sum() == ns["formats"]["turns"].sum() == counts.rows
    assert set(ns["formats"]["format"]) == set(cfg.effective_formats)
    assert ns["index"]["num_rows"].sum() == counts.rows
    # the decoded observation is the row's own text, word for word, and each word is the stored value its field names
    decoded, row = ns["decoded"], ns["row"]
    assert decoded.height == 87 and decoded["decoded word"].to_list() == row["obs_text"].split()
    strings = decoded.filter(pl.col("stored value").is_in(["None", "True", "False"]).not_())
    assert strings.height > 20 and (strings["decoded word"] == strings["stored value"]).all()
    assert decoded.row(12, named=True)["stored value"] == row["state"]["player_active"]["name"]


def test_melee_shards_notebook(synthetic_melee, headless, monkeypatch, tmp_path):
    """On the synthetic games (``pipelines/melee/synthetic.py``), whose positions and lasers are known exactly; a
    one-stage enum table stands in for ../shared's, so names and bare ids are both shown."""
    from pipelines.melee.synthetic import FIRST_FRAME, SyntheticGame, position

    enums = tmp_path / "enums"
    enums.mkdir()
    (enums / "stage.json").write_text(json.dumps({"Stage": {"known_values": {"32": {"ident": "FINAL_DESTINATION"}}}}))
    figures = tmp_path / "figures"
    rollout_frames = 120
    ns = run_notebook(NOTEBOOKS / "melee_shards.ipynb", monkeypatch, {
        "REPLAYFORGE_VERSION": str(synthetic_melee), "REPLAYFORGE_FIGURES": str(figures),
        "REPLAYFORGE_MELEE_ENUMS": str(enums), "REPLAYFORGE_ROLLOUT_FRAMES": str(rollout_frames)})
    assert_drawn(ns, figures, {"stages_characters", "game_over_time", "projectiles", "rollout"})
    games = ns["games"]
    assert ns["per_stage"]["games"].sum() == games.height > 0
    assert ns["per_character"]["players"].sum() == 2 * games.height
    assert ns["label"]([32, 2], ns["STAGE"]) == ["FINAL_DESTINATION (32)", "2"]
    # the plotted game: every frame, at the synthetic path
    track, game = ns["track"], ns["game"]
    assert track.height == game["num_frames"] and track["frame"][0] == FIRST_FRAME
    at = track.row(500, named=True)
    assert (at["p1.x"], at["p1.y"]) == pytest.approx(position(1, at["frame"]), abs=1e-3)
    # port 0 fires a Fox laser (type 54) every `laser_every` frames from the first
    every = SyntheticGame().laser_every
    assert ns["projectiles"].rows() == [(54, sum((n - 1) // every + 1 for n in games["num_frames"]), games.height)]
    # the rollout: seed, real and generated lines of each player's x and y over the asked frames
    assert len(ns["r"].generated["cont"]) == len(ns["real"]["cont"]) == rollout_frames
    for ax in ns["figures"]["rollout"].axes:
        assert [len(line.get_xdata()) for line in ax.get_lines()[:3]] == [ns["SEED_FRAMES"], rollout_frames,
                                                                          rollout_frames]
    assert "untrained" in ns["model_name"]


def test_make_notebook_serves_the_notebooks_on_loopback_only():
    import shutil
    import subprocess

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    root = Path(__file__).resolve().parents[1]
    dry = subprocess.run(["make", "-n", "notebook", "NOTEBOOK_PORT=18123"], cwd=root, capture_output=True,
                         text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    assert "jupyter notebook --ip=127.0.0.1 --port=18123 --no-browser" in dry.stdout and "notebooks/" in dry.stdout

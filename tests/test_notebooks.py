"""The notebooks run top to bottom on real shard versions (their code cells, executed in order, without Jupyter)."""

from __future__ import annotations

import json
from pathlib import Path

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
def synthetic_melee(ray_local, tmp_path_factory):
    from pipelines.parse_replays import ParseConfig, run

    return run(ParseConfig.tiny(source="slp", out=str(tmp_path_factory.mktemp("melee")))).path


def test_inspect_shards_on_melee_frames(synthetic_melee, monkeypatch):
    ns = run_notebook(NOTEBOOKS / "inspect_shards.ipynb", monkeypatch, {"REPLAYFORGE_VERSION": str(synthetic_melee)})
    frames = ns["summary"].collect()
    assert frames.height == len(ns["index"]) and frames["frames"].sum() == ns["index"]["num_frames"].sum()

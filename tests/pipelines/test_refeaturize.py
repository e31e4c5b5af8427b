"""Re-featurizing stored state into the current observation spec needs no re-parse."""

from __future__ import annotations

import dataclasses
import shutil

import pytest
from conftest import older_minor_copy

from pipelines.pokemon.refeaturize import RefeaturizeConfig, run
from shards_schema.manifest import Manifest
from shards_schema.pokemon import CODE_VERSIONS as POKEMON_TURNS
from shards_schema.reader import open_version
from shards_schema.versions import VersionMismatchError


def test_old_observation_version_is_refeaturized(tiny_generated, tmp_path):
    _, published, _ = tiny_generated
    old = tmp_path / "old" / "pokemon_turns" / published.path.name
    shutil.copytree(published.path, old)
    manifest = Manifest.load(old)
    (old / "manifest.json").write_text(dataclasses.replace(manifest, observation_version="0.4.0").to_json())
    with pytest.raises(VersionMismatchError, match="refeaturize.py"):
        open_version(old)
    logs: list[str] = []
    new = run(RefeaturizeConfig.tiny(input=str(old), out=str(tmp_path / "new")), log=logs.append)
    assert logs[-1] == str(new.path)
    reopened = open_version(new.path)
    assert reopened.manifest.observation_version == POKEMON_TURNS.observation
    assert reopened.manifest.counts.rows == manifest.counts.rows
    assert reopened.manifest.counts.inputs == manifest.counts.inputs
    before, after = open_version(published.path).table(), reopened.table()
    for column in ("trajectory_id", "state", "action", "obs_tokens", "obs_numeric", "obs_text"):
        assert after.column(column).equals(before.column(column)), column
    assert reopened.index().num_rows == open_version(published.path).index().num_rows


def test_a_version_made_before_teacher_action_is_refeaturized_with_it(tiny_generated, tmp_path):
    """A 2.0.0 version (no ``teacher_action``) re-featurizes into this schema version, every row unlabelled (-1)."""
    _, published, _ = tiny_generated
    old = older_minor_copy(published.path, tmp_path / "old" / "pokemon_turns" / published.path.name, "2.0.0")
    new = open_version(run(RefeaturizeConfig.tiny(input=str(old), out=str(tmp_path / "new")),
                           log=lambda *_: None).path)
    assert new.manifest.schema_version == POKEMON_TURNS.schema
    after = new.table()
    assert set(after.column("teacher_action").to_pylist()) == {-1}
    assert after.drop_columns(["teacher_action"]).equals(open_version(old).table())

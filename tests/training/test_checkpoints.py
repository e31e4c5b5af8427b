"""Self-describing checkpoints: a model rebuilt from the checkpoint alone, the data identity it records, and the
refusals (another feature spec or vocabulary, another model family, an older format, a resume that would not be
exact); a fine-tuning run started from a checkpoint with --init-from."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

from training.checkpoints import (
    CheckpointError,
    DataIdentity,
    check_features,
    live_identity,
    payload,
    read_checkpoint,
)
from training.registry import MELEE_FEATURES, POKEMON_OBSERVATION


def _melee(**changes) -> DataIdentity:
    return dataclasses.replace(live_identity(MELEE_FEATURES), dataset="melee_frames", version="v-test",
                               schema_version="2.0.0", parser_version="3.0.0", **changes)


def _save_world_model(path, data: DataIdentity, **config):
    from models.world_model import WorldModel, WorldModelConfig
    from training.melee.world_model import WorldModelTrainConfig

    model_config = WorldModelConfig.preset("tiny", **config)
    model = WorldModel(model_config)
    state = payload(kind="world_model", model_config=model_config,
                    train_config=WorldModelTrainConfig.tiny(shards="s", out="o"), step=7, data=data, model=model,
                    optimizer=torch.optim.AdamW(model.parameters()))
    path.mkdir(parents=True, exist_ok=True)
    torch.save({**state, "rng": []}, path / "state.pt")
    return model


def test_a_world_model_is_rebuilt_from_its_checkpoint_alone(tmp_path):
    from training.melee.world_model import load_model

    model = _save_world_model(tmp_path / "run", _melee(), backbone="mlp", mlp_context=3)
    loaded = load_model(tmp_path / "run")  # the folder, as the trainer prints it
    assert loaded.cfg.backbone == "mlp" and loaded.cfg.mlp_context == 3  # not the preset's defaults
    pairs = zip(model.state_dict().values(), loaded.state_dict().values(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    ckpt = read_checkpoint(tmp_path / "run" / "state.pt")
    assert (ckpt.kind, ckpt.step, ckpt.data, ckpt.train_config["context"]) == ("world_model", 7, _melee(), 32)
    # the git commit that wrote it (``git_commit()`` says "unknown" outside a checkout: these tests run in one)
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", ckpt.code), ckpt.code


def test_a_policy_config_round_trips_with_its_tuples():
    from models.pokemon_policy import PolicyConfig
    from training.checkpoints import config_from_dict

    cfg = dataclasses.replace(PolicyConfig.preset("tiny", 50), gammas=(0.5, 0.9))
    assert config_from_dict(PolicyConfig, dataclasses.asdict(cfg)) == cfg


def test_another_feature_version_is_refused_with_which(tmp_path):
    from training.melee.world_model import load_model

    _save_world_model(tmp_path / "run", _melee(features_version="2.0.0"))
    with pytest.raises(CheckpointError, match=r"melee_features 2\.0\.0.*gives melee_features 1\.0\.0"):
        load_model(tmp_path / "run")


def test_another_model_family_and_an_old_format_are_refused(tmp_path):
    from training.pokemon.player import load_policy

    _save_world_model(tmp_path / "wm", _melee())
    with pytest.raises(CheckpointError, match="holds a world_model model, not a pokemon_policy"):
        load_policy(str(tmp_path / "wm"))
    torch.save({"model": {}, "step": 1, "config": {"preset": "tiny"}}, tmp_path / "old.pt")
    with pytest.raises(CheckpointError, match="format 1.*train it again"):
        read_checkpoint(tmp_path / "old.pt")


def test_pokemon_observation_and_vocabulary_mismatches_say_which():
    given = live_identity(POKEMON_OBSERVATION)
    older = dataclasses.replace(given, features_version="0.9.0")
    with pytest.raises(CheckpointError, match="pokemon_observation 0.9.0.*refeaturize"):
        check_features(older, given, what="ckpt")
    edited = dataclasses.replace(given, vocabulary_sha256="0" * 64)
    with pytest.raises(CheckpointError, match="vocabulary"):
        check_features(edited, given, what="ckpt")
    with pytest.raises(CheckpointError, match="reads melee_features"):
        check_features(live_identity(MELEE_FEATURES), given, what="ckpt")
    check_features(given, given, what="ckpt")  # the same spec passes


def test_a_resume_that_would_not_be_exact_is_refused_before_training():
    """Other data, another stream-shaping flag, another architecture or nothing left to do: each named."""
    from models.pokemon_policy import PolicyConfig
    from training.checkpoints import Checkpoint
    from training.fit import _resume_problem
    from training.pokemon.offline_rl import PolicyRecipe, TrainConfig

    cfg = TrainConfig.tiny(shards="s", out="o", steps=12)
    recipe = PolicyRecipe(cfg, {"vocab_size": 50})
    data = dataclasses.replace(live_identity(POKEMON_OBSERVATION), dataset="pokemon_turns", version="v1")
    model_config = recipe.model_config()
    ckpt = Checkpoint(kind="pokemon_policy", model_config=dataclasses.asdict(model_config),
                      train_config=dataclasses.asdict(cfg), step=4, data=data, model={}, optimizer={}, rng=[],
                      code="", where="x")
    assert _resume_problem(ckpt, cfg, recipe, data, model_config) is None
    other_data = dataclasses.replace(data, version="v2")
    assert "--init-from" in _resume_problem(ckpt, cfg, recipe, other_data, model_config)
    assert "--context 8" in _resume_problem(ckpt, dataclasses.replace(cfg, context=16), recipe, data, model_config)
    assert "--sides" in _resume_problem(ckpt, dataclasses.replace(cfg, sides=["p1"]), recipe, data, model_config)
    bigger = PolicyConfig.preset("small", 50)
    assert "architecture" in _resume_problem(ckpt, cfg, recipe, data, bigger)
    assert "nothing to do" in _resume_problem(ckpt, dataclasses.replace(cfg, steps=4), recipe, data, model_config)
    assert "world_model" in _resume_problem(dataclasses.replace(ckpt, kind="world_model"), cfg, recipe, data,
                                            model_config)


def test_fine_tuning_starts_from_a_checkpoint_and_records_the_data(tiny_generated, slot_checkpoint, tmp_path):
    """--init-from takes the checkpoint's architecture (whatever --preset and --action-head say) and weights, starts
    at step 0, and the new checkpoints record the shards they were trained on; --resume with another --context is
    refused. The checkpoint fine-tuned is the session's (``slot_checkpoint``: 4 steps on ``tiny_generated``)."""
    from shards_schema.reader import open_version
    from training.checkpoints import shard_identity
    from training.loop import latest_checkpoint
    from training.pokemon.offline_rl import TrainConfig, run

    _, published, _ = tiny_generated
    source = read_checkpoint(slot_checkpoint)
    assert source.step == 4 and source.data == shard_identity(open_version(published.path))
    assert re.fullmatch(r"[0-9a-f]{64}", source.data.vocabulary_sha256), source.data
    assert source.data.features == POKEMON_OBSERVATION
    tuned = tmp_path / "tuned"
    run(TrainConfig.tiny(shards=str(published.path), out=str(tuned), steps=2, preset="small", action_head="linear",
                         init_from=slot_checkpoint))
    result = read_checkpoint(latest_checkpoint(tuned))
    assert result.step == 2 and result.model_config == source.model_config  # tiny with slots, not small or linear
    assert result.model_config["action_head"] == "slots"
    assert result.train_config["init_from"] == slot_checkpoint
    assert result.data == source.data
    assert not all(torch.equal(result.model[k], source.model[k]) for k in source.model)  # it trained from there
    with pytest.raises(CheckpointError, match="--context 8, this run asks for 16"):
        run(TrainConfig.tiny(shards=str(published.path), out=str(tuned), steps=8, context=16, resume=True))


def test_the_versions_trained_on_together_are_recorded_and_older_checkpoints_load(tmp_path):
    """A checkpoint written before --extra-shards (no ``extra_versions``) reads as one version; several versions
    round-trip (a store may give the tuple back as a list); a resume on another list of versions names both."""
    from training.checkpoints import Checkpoint, load_state
    from training.fit import _resume_problem
    from training.pokemon.offline_rl import PolicyRecipe, TrainConfig

    _save_world_model(tmp_path / "old", _melee())
    state = load_state(tmp_path / "old" / "state.pt")
    del state["data"]["extra_versions"]
    torch.save(state, tmp_path / "old" / "state.pt")
    assert read_checkpoint(tmp_path / "old").data.versions == ("v-test",)
    two = DataIdentity(**{**dataclasses.asdict(_melee()), "extra_versions": ["v-more"]})
    assert two.extra_versions == ("v-more",) and two.describe() == "melee_frames/v-test + v-more"

    cfg = TrainConfig.tiny(shards="s", extra_shards=["t"], out="o", steps=12)
    recipe = PolicyRecipe(cfg, {"vocab_size": 50})
    data = dataclasses.replace(live_identity(POKEMON_OBSERVATION), dataset="pokemon_turns", version="v1",
                               extra_versions=("v2",))
    model_config = recipe.model_config()
    ckpt = Checkpoint(kind="pokemon_policy", model_config=dataclasses.asdict(model_config),
                      train_config=dataclasses.asdict(cfg), step=4, data=data, model={}, optimizer={}, rng=[],
                      code="", where="x")
    assert _resume_problem(ckpt, cfg, recipe, data, model_config) is None
    alone = dataclasses.replace(data, extra_versions=())
    assert "trained on pokemon_turns/v1 + v2, --shards is pokemon_turns/v1;" in _resume_problem(
        ckpt, cfg, recipe, alone, model_config)
    other = dataclasses.replace(data, extra_versions=("v3",))
    assert "--shards and --extra-shards are pokemon_turns/v1 + v3" in _resume_problem(ckpt, cfg, recipe, other,
                                                                                       model_config)

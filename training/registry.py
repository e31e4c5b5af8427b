"""The model families checkpoints hold and the feature specs models read, registered once with explicit imports.

Checkpoints (``training/checkpoints.py``) name a model family by key and the features it was trained on by name;
this module maps both to code. It is the one place in training's core that names a game: a new game (or a test's
toy game) registers its own with ``register_model_kind`` and ``register_features``. Lookups happen on the driver;
Ray Train workers get the resolved classes from it (``training/fit.py``), so a family registered by a driver-side
caller needs no import in the workers.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from models.pokemon_policy import PokemonPolicy, PolicyConfig
from models.ppo_policy import RecurrentPolicy, RecurrentPolicyConfig
from models.world_model import WorldModel, WorldModelConfig
from pipelines.pokemon.observation import VOCAB_DIR
from shards_schema import melee, pokemon
from shards_schema.manifest import UPGRADE_COMMAND, Manifest
from shards_schema.melee_features import FEATURES_VERSION as MELEE_FEATURES_VERSION


@dataclass(frozen=True, kw_only=True)
class FeatureSpec:
    """What a model reads from a dataset, and how its version is known.

    Attributes:
        name: the spec's name, recorded in checkpoints (``pokemon_observation``).
        dataset: the schema name of the shards it is read from.
        version: the version this code makes during play (observations made live, features derived now).
        stored: whether the shards store the features (their manifest's ``observation_version`` says which
            version), else they are derived from stored state when read (always this code's ``version``).
        vocabulary_dir: where the vocabulary file of each version lives (``obs-<version>.txt``; token ids are its
            line numbers), or None for a spec without one.
        refresh: what to do when a checkpoint's major version differs from the data's.
    """

    name: str
    dataset: str
    version: str
    stored: bool
    vocabulary_dir: Path | None
    refresh: str

    def version_of(self, manifest: Manifest) -> str:
        """The version of these features a shard version gives a model."""
        return manifest.observation_version if self.stored else self.version

    def vocabulary_sha256(self, version: str) -> str:
        """The sha256 of the vocabulary of ``version`` ("" for a spec without one)."""
        if self.vocabulary_dir is None:
            return ""
        path = self.vocabulary_dir / f"obs-{version}.txt"
        if not path.exists():
            raise LookupError(f"no vocabulary for {self.name} version {version} ({path}): this code cannot read "
                              f"it; upgrade replayforge (`{UPGRADE_COMMAND}`)")
        return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass(frozen=True, kw_only=True)
class ModelKind:
    """A model family a checkpoint can hold: its config dataclass, its module, and the features it reads."""

    config: type
    module: type
    features: str

    def classes(self) -> tuple[type, type]:
        return self.config, self.module


FEATURES: dict[str, FeatureSpec] = {}
MODEL_KINDS: dict[str, ModelKind] = {}


def register_features(spec: FeatureSpec) -> FeatureSpec:
    if FEATURES.get(spec.name, spec) != spec:
        raise ValueError(f"feature spec {spec.name!r} is registered twice with different definitions")
    FEATURES[spec.name] = spec
    return spec


def register_model_kind(name: str, kind: ModelKind) -> ModelKind:
    if MODEL_KINDS.get(name, kind) != kind:
        raise ValueError(f"model kind {name!r} is registered twice with different classes")
    MODEL_KINDS[name] = kind
    return kind


def features(name: str) -> FeatureSpec:
    if name not in FEATURES:
        raise LookupError(f"unknown feature spec {name!r}; this code knows {sorted(FEATURES)}")
    return FEATURES[name]


def features_of_dataset(dataset: str) -> FeatureSpec:
    """The spec models read from shards of schema ``dataset``."""
    for spec in FEATURES.values():
        if spec.dataset == dataset:
            return spec
    raise LookupError(f"no model reads schema {dataset!r}; feature specs are registered for "
                      f"{sorted(s.dataset for s in FEATURES.values())}")


def model_kind(name: str) -> ModelKind:
    if name not in MODEL_KINDS:
        raise LookupError(f"unknown model kind {name!r}; this code knows {sorted(MODEL_KINDS)}")
    return MODEL_KINDS[name]


POKEMON_OBSERVATION = register_features(FeatureSpec(
    name="pokemon_observation", dataset=pokemon.SCHEMA_NAME, version=pokemon.CODE_VERSIONS.observation, stored=True,
    vocabulary_dir=VOCAB_DIR,
    refresh="re-derive the observations with `python pipelines/pokemon/refeaturize.py` or train on shards of version "
            "{version}",
)).name
MELEE_FEATURES = register_features(FeatureSpec(
    name="melee_features", dataset=melee.SCHEMA_NAME, version=MELEE_FEATURES_VERSION, stored=False,
    vocabulary_dir=None, refresh="train a model with this code (the feature layout changed)",
)).name
register_model_kind("pokemon_policy", ModelKind(config=PolicyConfig, module=PokemonPolicy,
                                                features=POKEMON_OBSERVATION))
register_model_kind("world_model", ModelKind(config=WorldModelConfig, module=WorldModel, features=MELEE_FEATURES))
register_model_kind("melee_selfplay", ModelKind(config=RecurrentPolicyConfig, module=RecurrentPolicy,
                                                features=MELEE_FEATURES))
register_model_kind("pokemon_selfplay", ModelKind(config=RecurrentPolicyConfig, module=RecurrentPolicy,
                                                  features=POKEMON_OBSERVATION))

"""Checkpoints that describe themselves: what model they hold, how it was trained, where training stood, and what
data it was trained on.

A checkpoint is one ``state.pt`` of tensors and plain values (read with ``torch.load(weights_only=True)``)::

    format         CHECKPOINT_FORMAT
    kind           which model family: a key of ``training.registry.MODEL_KINDS`` ("pokemon_policy", "world_model")
    model_config   the model's config dataclass as a dict: the model is rebuilt from it alone
    train_config   the trainer's resolved config as a dict
    step           optimizer steps taken
    model          state_dict
    optimizer      optimizer state_dict (resume)
    rng            every worker's Python/NumPy/torch RNG states (resume)
    data           DataIdentity as a dict: the shard version (and the versions trained on beside it), its
                   schema/parser versions, the observation or feature spec the model reads and the vocabulary's sha256
    code           the git commit of the code that wrote it
    extra          what else a trainer resumes from (PPO: the league's snapshots and ratings)

Loading rebuilds the model from ``kind`` and ``model_config``; evaluation, play, fine-tuning and resume compare
``data`` with what they are about to feed the model and refuse a different feature spec (``check_features``).
"""

from __future__ import annotations

import dataclasses
import io
import pickle
import random
import typing
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pipelines.writer.naming import git_commit
from shards_schema import storage
from shards_schema.manifest import major
from training import registry
from training.loop import latest_checkpoint

CHECKPOINT_FORMAT = 2
"""1: the trainers' first checkpoints (no kind, no data identity; the policy's architecture was not stored)."""


class UnsafeCheckpointError(ValueError):
    """A checkpoint holds objects other than tensors and plain values: reading it could run code from the file."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be used here: an older format, another model family, or data it was not trained
    for."""


@dataclass(frozen=True, kw_only=True)
class DataIdentity:
    """What a model was trained on, or what it is about to be fed.

    Attributes:
        dataset: the shard dataset's schema name; ``live`` for observations made by this code during play (no
            shards).
        version: the shard version name (empty for live data).
        schema_version: the shards' row schema version (empty for live data).
        parser_version: the parser version that wrote the shards (empty for live data).
        features: the feature spec the model reads (a ``training.registry.FEATURES`` name).
        features_version: that spec's version (stored features: the shards' observation version; derived ones:
            the code's).
        vocabulary_sha256: sha256 of the observation vocabulary file the token ids index (empty without one).
        extra_versions: the names of the other versions of the same dataset and feature spec trained on together
            with ``version`` (``--extra-shards``), in their order: the window order depends on it. Empty for one
            version (and in checkpoints written before it was recorded).
    """

    dataset: str
    version: str
    schema_version: str
    parser_version: str
    features: str
    features_version: str
    vocabulary_sha256: str = ""
    extra_versions: tuple[str, ...] = ()

    def __post_init__(self):
        # a stored checkpoint may give the tuple back as a list (config_from_dict's note)
        object.__setattr__(self, "extra_versions", tuple(self.extra_versions))

    @property
    def versions(self) -> tuple[str, ...]:
        """Every version trained on, ``version`` first."""
        return (self.version, *self.extra_versions)

    def describe(self) -> str:
        """``dataset/version`` (``dataset/version + other + ...`` for several)."""
        return f"{self.dataset}/{' + '.join(self.versions)}"


def _vocabulary(spec: registry.FeatureSpec, version: str) -> str:
    try:
        return spec.vocabulary_sha256(version)
    except LookupError as err:
        raise CheckpointError(str(err)) from None


def shard_identity(version, extra: tuple = ()) -> DataIdentity:
    """The identity of a shard version (a ``ShardVersion``) as a model trained on it reads it; with ``extra``
    versions trained on together with it (``--extra-shards``), the identity of all of them, refused unless every one
    is the same dataset (schema name) and feature spec (observation version and vocabulary) as ``version``, and each
    is given once."""
    identity = _one_identity(version)
    names = [identity.version]
    for other in extra:
        theirs = _one_identity(other)
        differ = [f"{what} {mine or 'none'} (--shards: {first or 'none'})" for what, mine, first in (
            ("schema", other.manifest.schema_name, version.manifest.schema_name),
            ("feature spec", theirs.features, identity.features),
            ("feature version", theirs.features_version, identity.features_version),
            ("vocabulary sha256", theirs.vocabulary_sha256[:12], identity.vocabulary_sha256[:12])) if mine != first]
        if differ:
            raise CheckpointError(f"--extra-shards {other.path} differs from --shards {version.path} in "
                                  f"{'; '.join(differ)}: versions trained on together must be one dataset and one "
                                  "feature spec (re-featurize the older one, or train on each separately)")
        if theirs.version in names:
            raise CheckpointError(f"--extra-shards {other.path}: version {theirs.version} is already given "
                                  "(each version once: a repeated one would be trained on twice as often)")
        names.append(theirs.version)
    return dataclasses.replace(identity, extra_versions=tuple(names[1:]))


def _one_identity(version) -> DataIdentity:
    m = version.manifest
    try:
        spec = registry.features_of_dataset(m.schema_name)
    except LookupError as err:
        raise CheckpointError(f"{m.dataset}/{m.version}: {err}") from None
    features_version = spec.version_of(m)
    return DataIdentity(dataset=m.dataset, version=m.version, schema_version=m.schema_version,
                        parser_version=m.parser_version, features=spec.name, features_version=features_version,
                        vocabulary_sha256=_vocabulary(spec, features_version))


def live_identity(features: str) -> DataIdentity:
    """What this code feeds a model outside the shards: features made during play by this checkout (a
    ``training.registry.FEATURES`` name)."""
    try:
        spec = registry.features(features)
    except LookupError as err:
        raise CheckpointError(str(err)) from None
    return DataIdentity(dataset="live", version="", schema_version="", parser_version="", features=spec.name,
                        features_version=spec.version, vocabulary_sha256=_vocabulary(spec, spec.version))


def check_features(trained: DataIdentity, given: DataIdentity, *, what: str) -> None:
    """Refuse to feed a model data of another spec than it was trained on: another feature spec, another major
    version of it, or another vocabulary. ``what`` names the checkpoint in the message."""
    source = f"{given.dataset}/{given.version}" if given.version else "this code"
    if trained.features != given.features:
        raise CheckpointError(f"{what} reads {trained.features}, but {source} gives {given.features}: "
                              "use a checkpoint trained on this kind of data")
    if major(trained.features_version) != major(given.features_version):
        refresh = registry.FEATURES.get(trained.features)
        fix = (refresh.refresh.format(version=given.features_version) if refresh
               else "train a model with this code")
        raise CheckpointError(f"{what} was trained on {trained.features} {trained.features_version}, but {source} "
                              f"gives {given.features} {given.features_version}: {fix}")
    if trained.vocabulary_sha256 and given.vocabulary_sha256 and \
            trained.vocabulary_sha256 != given.vocabulary_sha256:
        raise CheckpointError(f"{what} was trained with observation vocabulary sha256 "
                              f"{trained.vocabulary_sha256[:12]}…, {source} uses {given.vocabulary_sha256[:12]}… "
                              f"under the same version {given.features_version}: the vocabulary file changed in "
                              "place; restore it or bump the observation version and re-featurize")


def config_from_dict(cls, values: dict):
    """A config dataclass from ``dataclasses.asdict`` output (torch saves tuples as lists: they come back as
    tuples where the field is declared a tuple)."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        if f.name not in values:
            continue
        value = values[f.name]
        if typing.get_origin(hints[f.name]) is tuple and isinstance(value, list):
            value = tuple(value)
        out[f.name] = value
    unknown = sorted(set(values) - set(out))
    if unknown:
        raise CheckpointError(f"the checkpoint's {cls.__name__} has fields this code does not know: {unknown}; "
                              "upgrade replayforge (`git pull && make setup`)")
    return cls(**out)


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    """A loaded checkpoint (see the module docstring for each field)."""

    kind: str
    model_config: dict
    train_config: dict
    step: int
    data: DataIdentity
    model: dict
    optimizer: dict | None
    rng: list
    code: str
    where: str
    extra: dict = dataclasses.field(default_factory=dict)

    def build_model(self, **overrides):
        """The model rebuilt from ``model_config`` (``overrides`` replace runtime fields, e.g. ``use_fused``), with
        the checkpoint's weights, in eval mode."""
        _, model_cls = registry.model_kind(self.kind).classes()
        model = model_cls(self.build_config(**overrides))
        model.load_state_dict(self.model)
        return model.eval()

    def build_config(self, **overrides):
        config_cls, _ = registry.model_kind(self.kind).classes()
        return dataclasses.replace(config_from_dict(config_cls, self.model_config), **overrides)

    def check_features(self, given: DataIdentity) -> None:
        check_features(self.data, given, what=f"checkpoint {self.where} ({self.kind}, step {self.step})")


def payload(*, kind: str, model_config, train_config, step: int, data: DataIdentity, model, optimizer,
            extra: dict | None = None) -> dict:
    """A checkpoint's contents but the RNG states (``report_checkpoint`` gathers them from every worker);
    ``extra``: what else a trainer resumes from (tensors and plain values: PPO's league). ``kind`` is a registered
    family: the driver resolved it before training started (``training.registry.model_kind``)."""
    return {"format": CHECKPOINT_FORMAT, "kind": kind, "model_config": dataclasses.asdict(model_config),
            "train_config": dataclasses.asdict(train_config), "step": int(step), "data": dataclasses.asdict(data),
            "model": getattr(model, "module", model).state_dict(),
            "optimizer": optimizer.state_dict() if optimizer is not None else None, "code": git_commit(),
            "extra": extra or {}}


def state_file(uri: str | Path) -> str:
    """A checkpoint folder or its ``state.pt`` → the ``state.pt`` (a local path or a URI). A run folder (a trainer's
    ``--out``) stands for its newest checkpoint (``training/loop.latest_checkpoint``)."""
    uri = str(uri)
    if uri.endswith(".pt"):
        return uri
    state = storage.join(uri, "state.pt")
    if not storage.is_file(state) and (newest := latest_checkpoint(uri)) is not None:
        return storage.join(newest, "state.pt")
    return state


def load_state(path, device="cpu", *, data: bytes | None = None) -> dict:
    """A ``state.pt`` read with ``torch.load(weights_only=True)``: tensors, dicts, lists, tuples, numbers and strings
    only. A pickle may name any callable for the reader to call (``__reduce__``), so a checkpoint handed to
    ``evaluate.py`` or ``--resume`` could otherwise run code; checkpoints here hold nothing else (configs as
    ``dataclasses.asdict``, RNG states from ``rng_state``). ``data``: the file's bytes, already read."""
    try:  # through storage: a checkpoint on S3 is read by whichever node resumes
        data = storage.read_bytes(str(path)) if data is None else data
        return torch.load(io.BytesIO(data), map_location=device, weights_only=True)
    except pickle.UnpicklingError as err:
        # torch's message is several paragraphs; its "WeightsUnpickler error: Unsupported global: ..." line names
        # what the file asked for
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        reason = next((line for line in lines if line.startswith("WeightsUnpickler error")), lines[0] if lines else "")
        raise UnsafeCheckpointError(
            f"{path}: refused: it holds objects other than tensors and plain values, and reading them could run "
            f"code from the file ({reason}). Load only checkpoints written by replayforge's trainers.") from err


def from_state(state: dict, where: str, kind: str | None = None) -> Checkpoint:
    """A ``Checkpoint`` from a loaded ``state.pt``; older formats are refused with what to do. ``kind``: the model
    family the caller expects (another is refused); None: any family registered in ``training.registry``."""
    if state.get("format") != CHECKPOINT_FORMAT:
        found = state.get("format", 1)
        if isinstance(found, int) and found > CHECKPOINT_FORMAT:
            fix = "upgrade replayforge to read it (`git pull && make setup`)"
        else:
            fix = ("it does not record its architecture or the data it was trained on; train it again with this "
                   "code (training/pokemon/offline_rl.py or training/melee/world_model.py)")
        raise CheckpointError(f"{where} has checkpoint format {found}, this code reads {CHECKPOINT_FORMAT}: {fix}")
    if kind is not None and state["kind"] != kind:
        raise CheckpointError(f"{where} holds a {state['kind']} model, not a {kind}")
    if kind is None and state["kind"] not in registry.MODEL_KINDS:
        raise CheckpointError(f"{where} holds a {state['kind']!r} model; this code knows "
                              f"{sorted(registry.MODEL_KINDS)}")
    return Checkpoint(kind=state["kind"], model_config=state["model_config"], train_config=state["train_config"],
                      step=int(state["step"]), data=DataIdentity(**state["data"]), model=state["model"],
                      optimizer=state.get("optimizer"), rng=state.get("rng") or [], code=state.get("code", ""),
                      where=where, extra=state.get("extra") or {})


def read_checkpoint(uri: str | Path, device="cpu", *, kind: str | None = None) -> Checkpoint:
    """The checkpoint in a folder or ``state.pt`` (a local path or a URI); ``kind`` refuses another model family."""
    path = state_file(uri)
    return from_state(load_state(path, device), path, kind)


# ---------------------------------------------------------------------------- RNG states
def rng_state() -> dict:
    """This process's Python, NumPy and torch RNG states as tensors and plain values (what ``load_state`` reads)."""
    numpy_state = np.random.get_state(legacy=False)  # {'bit_generator', 'state': {'key': uint32[624], 'pos'}, ...}
    numpy_state["state"] = {"key": numpy_state["state"]["key"].tolist(), "pos": int(numpy_state["state"]["pos"])}
    return {"python": random.getstate(), "numpy": numpy_state, "torch": torch.get_rng_state()}


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    numpy_state = dict(state["numpy"])
    numpy_state["state"] = {"key": np.asarray(numpy_state["state"]["key"], dtype=np.uint32),
                            "pos": numpy_state["state"]["pos"]}
    np.random.set_state(numpy_state)
    torch.set_rng_state(state["torch"])

"""The self-play environments, registered once with explicit imports, and the command's config: the core's fields,
``--env`` and the options of the environment it names (one ``--help`` section per environment).

This is the one module of self-play that names the games (lerobot's ``policies/factory.py`` is the model). A game
defined elsewhere (a new game's package, a test's toy game) is added with ``register_environment``; the executor
sends the registered class to its Ray Train worker, which registers it there too.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pipelines.cli import chosen_section, nest
from training.melee.selfplay import MeleeSelfPlay
from training.pokemon.selfplay import PokemonSelfPlay
from training.selfplay_base import SelfPlayCoreConfig, SelfPlayEnvironment

ENVIRONMENTS: dict[str, type[SelfPlayEnvironment]] = {}


def register_environment(cls: type[SelfPlayEnvironment]) -> type[SelfPlayEnvironment]:
    """Make ``cls`` available as ``--env <cls.name>``; another class under a taken name is an error (the same class
    unpickled again, as a test's game travels to a worker by value, is not another)."""
    taken = ENVIRONMENTS.get(cls.name, cls)
    if (taken.__module__, taken.__qualname__) != (cls.__module__, cls.__qualname__):
        raise ValueError(f"environment {cls.name!r} is registered twice ({ENVIRONMENTS[cls.name].__module__}, "
                         f"{cls.__module__})")
    ENVIRONMENTS[cls.name] = cls
    return cls


def environment_class(name: str) -> type[SelfPlayEnvironment]:
    if name not in ENVIRONMENTS:
        raise ValueError(f"--env must be one of {sorted(ENVIRONMENTS)}, got {name!r}")
    return ENVIRONMENTS[name]


def options_classes() -> dict[str, type]:
    """``--env`` value → that environment's options dataclass (the command line's per-environment sections)."""
    return {name: cls.options_class for name, cls in sorted(ENVIRONMENTS.items())}


@dataclass(frozen=True, kw_only=True)
class SelfPlayConfig(SelfPlayCoreConfig):
    """Configuration of a self-play run: the core's fields (``training/selfplay_base.SelfPlayCoreConfig``), the
    environment and its own options.

    Attributes:
        env: the environment (``ENVIRONMENTS``): ``melee`` (the world model) or ``pokemon`` (real battles on local
            Showdown servers).
        options: the environment's own options (its ``options_class``: flags of another environment's options are
            refused); default: that dataclass's defaults.
    """

    env: str = "melee"
    options: object = chosen_section("env", options_classes)

    def __post_init__(self):
        cls = environment_class(self.env)
        if self.options is None:
            object.__setattr__(self, "options", cls.options_class())
        elif not isinstance(self.options, cls.options_class):
            raise ValueError(f"--env {self.env} takes {cls.options_class.__name__} options, got "
                             f"{type(self.options).__name__}")
        super().__post_init__()
        problem = cls.config_problem(self)
        if problem:
            raise ValueError(problem)

    @classmethod
    def from_flags(cls, **flat) -> SelfPlayConfig:
        """A config from flat field names, as the command line gives them (``shards=...`` is a Melee option)."""
        return cls(**nest(cls, flat))

    @classmethod
    def from_dict(cls, values: dict) -> SelfPlayConfig:
        """A config from its ``dataclasses.asdict`` (a checkpoint's ``train_config``, a trial's
        ``selfplay_config.json``), or from an older flat dict that held every environment's fields side by side (the
        named environment's are kept). A key that is no field of the config nor of any environment's options is an
        error, not dropped."""
        values = dict(values)
        options_class = environment_class(values.get("env", cls.env)).options_class
        options = values.pop("options", None)
        if options is None:
            options = {f.name: values[f.name] for f in dataclasses.fields(options_class) if f.name in values}
        own = {f.name for f in dataclasses.fields(cls)}
        any_options = {f.name for c in options_classes().values() for f in dataclasses.fields(c)}
        unknown = sorted(set(values) - own - any_options)
        if unknown:
            raise ValueError(f"{cls.__name__} has no fields {unknown} (nor has any environment's options): a config "
                             "of another replayforge version? Upgrade (`git pull && make setup`) or drop them")
        return cls(**{k: v for k, v in values.items() if k in own}, options=options_class(**options))

    @classmethod
    def tiny(cls, *, out: str, env: str = "melee", **overrides) -> SelfPlayConfig:
        """A few short updates of a small policy: tests and the demo (the options from their own ``tiny()``).
        Keyword overrides win; an option may be given by name (``max_frames=12``), as on the command line."""
        options_class = environment_class(env).options_class
        if "options" not in overrides:
            names = {f.name for f in dataclasses.fields(options_class)}
            overrides["options"] = options_class.tiny(**{k: overrides.pop(k) for k in names & set(overrides)})
        flat = {"preset": "test", "num_runners": 2, "rollout_steps": 8, "opponent_window": 3, "d_lstm": 16,
                "snapshot_every": 2, "wandb_mode": "disabled", **overrides}
        given = nest(cls, {"env": env, **flat})
        return cls(out=out, **given)

    def normalized(self) -> SelfPlayConfig:
        return dataclasses.replace(super().normalized(), options=self.options.normalized())

    def environment(self) -> SelfPlayEnvironment:
        """The environment's side of the run."""
        return environment_class(self.env)(self)


for _environment in (MeleeSelfPlay, PokemonSelfPlay):
    register_environment(_environment)

"""The sources the parse job knows, registered once with explicit imports: each game's package
(``pipelines/<game>/``) holds its sources, their options and their parsers; this module names them. The job
(``pipelines/parse_replays.py``), the stages and the writer look sources up here and name no game.

A source defined elsewhere (a new game's package, a test's toy game) is added with ``register_source``. Lookups
happen on the driver: read tasks and parse actors get the ``Source`` instance itself, so a source registered by the
driver's caller needs no import in the workers.
"""

from __future__ import annotations

from pipelines.melee.source import SlpSource
from pipelines.pokemon.generated import GeneratedSource
from pipelines.pokemon.metamon import MetamonSource
from pipelines.pokemon.replays import HfRawSource, PokechampSource, ShowdownJsonSource
from pipelines.pokemon.server_logs import ShowdownServerSource
from pipelines.stages import Source
from shards_schema.card import UNKNOWN_LICENSE, SourceLicense

SOURCES: dict[str, type[Source]] = {}


def register_source(cls: type[Source]) -> type[Source]:
    """Make ``cls`` available as ``--source <cls.name>``; another class under a taken name is an error."""
    if SOURCES.get(cls.name, cls) is not cls:
        raise ValueError(f"source {cls.name!r} is registered twice ({SOURCES[cls.name].__module__}, "
                         f"{cls.__module__})")
    SOURCES[cls.name] = cls
    return cls


def source_names() -> list[str]:
    return sorted(SOURCES)


def source_class(name: str) -> type[Source]:
    if name not in SOURCES:
        raise ValueError(f"--source must be one of {tuple(sorted(SOURCES))}, got {name!r}")
    return SOURCES[name]


def source_license(name: str) -> SourceLicense:
    """The terms of a source's inputs, for the dataset card of a version made from them: the registered source's,
    else unknown (a version whose manifest names no registered source: a rollout's)."""
    return SOURCES[name].license if name in SOURCES else UNKNOWN_LICENSE


def options_classes() -> dict[str, type]:
    """``--source`` value → the dataclass of that source's options (the command line's per-source sections)."""
    return {name: cls.options_class for name, cls in sorted(SOURCES.items())}


for _source in (GeneratedSource, MetamonSource, ShowdownJsonSource, ShowdownServerSource, HfRawSource, PokechampSource,
                SlpSource):
    register_source(_source)

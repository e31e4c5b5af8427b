"""Build an argparse CLI from a typed, keyword-only config dataclass (one declaration feeds both).

A field whose type is itself a config dataclass is a section: its fields become flags of their own name
(``TrainConfig.model.d_model`` would be ``--d-model``), listed under the section's heading. Flag names are unique
across sections; a clash is an error when the parser is built.

A field declared with ``chosen_section(by, choices)`` is a section whose dataclass depends on another field's value:
the parse job's ``options`` are those of the ``--source`` it names (``--min-frames`` is an option of ``--source
slp``). Every choice's fields are flags, each listed under its dataclass's heading; alternatives may share a flag
(``--seed``) when they declare it alike, and a flag of another choice than the one named is an error that says
whose it is. Where ``by`` has a default, a choice's flags need not name it.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable

from pipelines.console import filter_known_noise

CHOICES = "replayforge.cli.choices"
"""The ``dataclasses.field`` metadata key of a chosen section: ``(by, choices)``."""


def chosen_section(by: str, choices: Callable[[], dict[str, type]]):
    """A dataclass field (default None) whose section's dataclass is ``choices()[<value of field by>]``.
    ``choices`` is called when a command line or config is built, so registrations made before then count."""
    return dataclasses.field(default=None, metadata={CHOICES: (by, choices)})


def chosen_sections(cls: type) -> dict[str, tuple[str, Callable[[], dict[str, type]]]]:
    """Field name → (the field that chooses, the choices) of ``cls``'s chosen sections."""
    return {f.name: f.metadata[CHOICES] for f in dataclasses.fields(cls) if CHOICES in f.metadata}


def field_help(cls: type) -> dict[str, str]:
    """Each field's whole doc, from the ``Attributes:`` sections of the docstrings of ``cls`` and its bases (a
    field declared on a base config gets the base's doc; a subclass's doc of the same field wins)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        docs.update(_own_field_help(vars(klass).get("__doc__") or ""))
    return docs


def _own_field_help(doc: str) -> dict[str, str]:
    """``name: text`` entries of a docstring's ``Attributes:`` section, each with its continuation lines (indented
    deeper than the names, blank lines between paragraphs allowed), on one line. The section ends at the first line
    that is neither: a line indented less than the names (``Returns:``) or one at their depth that names no field."""
    docs: dict[str, str] = {}
    key, indent, in_attrs = None, None, False
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped == "Attributes:" and not in_attrs:
            in_attrs = True
            continue
        if not in_attrs or not stripped:
            continue
        depth = len(line) - len(line.lstrip())
        indent = depth if indent is None else indent
        name, sep, text = stripped.partition(":")
        if depth == indent and sep and name.isidentifier():
            key = name
            docs[key] = text.strip()
        elif depth > indent and key is not None:
            docs[key] = (docs[key] + " " + stripped).strip()
        else:
            break
    return docs


def _description(cls: type) -> str:
    """The first paragraph of a docstring, on one line."""
    return " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())


def _base(annotation):
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return _base(next(a for a in typing.get_args(annotation) if a is not type(None)))
    return annotation


def sections(cls: type) -> dict[str, type]:
    """Field name → dataclass type, for the fields of ``cls`` that are config sections."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if dataclasses.is_dataclass(hints[f.name])}


def _alternatives(cls: type) -> list[tuple[str, type]]:
    """(field, dataclass) of every choice of ``cls``'s chosen sections, each dataclass once."""
    out = []
    for name, (_, choices) in chosen_sections(cls).items():
        for section in dict.fromkeys(choices().values()):
            out.append((name, section))
    return out


def _leaves(cls: type) -> dict[str, tuple[str | None, type, str, type]]:
    """Flag field name → (section or None, annotation, help, the dataclass declaring it), over ``cls``, its
    sections and every choice of its chosen sections."""
    out: dict[str, tuple[str | None, type, str, type]] = {}
    nested, chosen = sections(cls), chosen_sections(cls)
    for owner, section in [(None, cls), *nested.items(), *_alternatives(cls)]:
        hints, docs = typing.get_type_hints(section), field_help(section)
        for f in dataclasses.fields(section):
            if owner is None and (f.name in nested or f.name in chosen):
                continue
            if f.name in out:
                theirs = out[f.name]
                if owner in chosen and theirs[0] == owner and theirs[1] == hints[f.name]:
                    continue  # two choices of one section declare the flag alike: one flag serves both
                raise TypeError(f"{cls.__name__}: field {f.name!r} of section {owner or 'top'} clashes with "
                                f"section {theirs[0] or 'top'}: flags are named by field")
            out[f.name] = (owner, hints[f.name], docs.get(f.name, ""), section)
    return out


def nest(cls: type, flat: dict) -> dict:
    """Keyword arguments of ``cls`` from flat field names (as flags give them): a section's fields are gathered
    into that section's dataclass. A section given whole (``slp=SlpConfig(...)``) is kept as given."""
    leaves = _leaves(cls)
    nested = sections(cls)
    chosen = chosen_sections(cls)
    out, per_section = {}, {name: {} for name in [*nested, *chosen]}
    for key, value in flat.items():
        if key in nested or key in chosen:
            out[key] = value
            continue
        if key not in leaves:
            raise TypeError(f"{cls.__name__} has no field {key!r}")
        owner = leaves[key][0]
        if owner is None:
            out[key] = value
        elif owner in out:
            raise TypeError(f"{key!r} given both alone and in a whole {owner!r} section")
        else:
            per_section[owner][key] = value
    for name, values in per_section.items():
        if values and name in nested:
            out[name] = nested[name](**values)
        elif values:
            out[name] = _chosen(cls, name, flat, values)
    return out


def _chosen(cls: type, name: str, flat: dict, values: dict):
    """The chosen section ``name`` of ``cls`` built from the flags given for it; ValueError for a flag of another
    choice."""
    by, choices = chosen_sections(cls)[name]
    options = choices()
    chosen = flat[by] if by in flat else _default(next(f for f in dataclasses.fields(cls) if f.name == by))
    if chosen not in options:
        raise ValueError(f"{', '.join(_flag(k) for k in values)} need {_flag(by)} (one of {sorted(options)})")
    section = options[chosen]
    known = {f.name for f in dataclasses.fields(section)}
    foreign = sorted(k for k in values if k not in known)
    if foreign:
        owners = {k: sorted(v for v, c in options.items() if k in {f.name for f in dataclasses.fields(c)})
                  for k in foreign}
        raise ValueError("; ".join(f"{_flag(k)} is an option of {_flag(by)} {' or '.join(owners[k])}, not "
                                   f"{chosen}" for k in foreign))
    return section(**values)


def _default(f: dataclasses.Field):
    """A field's default, from ``default`` or ``default_factory``; ``dataclasses.MISSING`` when it is required."""
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def parser_for(cls: type, description: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description or _description(cls))
    parser.add_argument("--tiny", action="store_true", help="start from the tiny() preset (tests, demo)")
    groups = {section: parser.add_argument_group(name, _description(section))
              for name, section in sections(cls).items()}
    for name, (by, choices) in chosen_sections(cls).items():
        by_section: dict[type, list[str]] = {}
        for value, section in choices().items():
            by_section.setdefault(section, []).append(value)
        for section, values in by_section.items():
            if not dataclasses.fields(section):
                continue
            groups[section] = parser.add_argument_group(f"{name} of {_flag(by)} {', '.join(values)}",
                                                        _description(section))
    for name, (owner, annotation, doc, declared_by) in _leaves(cls).items():
        base = _base(annotation)
        # argparse expands %-formats in help (``%(default)s``): a doc's own "50%" would break --help
        kwargs = {"help": doc.replace("%", "%%"), "dest": name, "default": argparse.SUPPRESS}
        if base is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif typing.get_origin(base) is list:
            kwargs.update(nargs="+", type=typing.get_args(base)[0])
        else:
            kwargs["type"] = base
        (groups[declared_by] if owner else parser).add_argument("--" + name.replace("_", "-"), **kwargs)
    return parser


def parse_config(cls: type, argv: list[str] | None = None):
    """Parse argv into ``cls``: fields given on the command line override the defaults (or ``tiny()``)."""
    parser = parser_for(cls)
    args = vars(parser.parse_args(argv))
    tiny = args.pop("tiny")
    missing = [f for f in _required(cls) if f not in args]
    if missing and not tiny:
        parser.error("missing required " + ", ".join("--" + m.replace("_", "-") for m in missing))
    try:
        return cls.tiny(**args) if tiny else cls(**nest(cls, args))
    except ValueError as err:  # a cross-field check in __post_init__: usage and the reason, not a traceback
        parser.error(str(err))


def _required(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]


def command_config(cls: type, argv: list[str] | None = None):
    """``parse_config`` for a command line's ``main``: the typed config, and from then on the console without the
    known-benign lines of Ray and W&B (``pipelines/console.filter_known_noise``; library calls keep their caller's
    output as it is)."""
    cfg = parse_config(cls, argv)
    filter_known_noise()
    return cfg

"""Build an argparse CLI from a typed, keyword-only config dataclass (one declaration feeds both).

A field whose type is itself a config dataclass is a section: its fields become flags of their own name
(``ParseConfig.slp.min_frames`` is ``--min-frames``), listed under the section's heading. Flag names are unique
across sections; a clash is an error when the parser is built.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing


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


def _leaves(cls: type) -> dict[str, tuple[str | None, type, str]]:
    """Flag field name → (section or None, annotation, help), over ``cls`` and its sections."""
    out: dict[str, tuple[str | None, type, str]] = {}
    nested = sections(cls)
    for owner, section in [(None, cls), *nested.items()]:
        hints, docs = typing.get_type_hints(section), field_help(section)
        for f in dataclasses.fields(section):
            if owner is None and f.name in nested:
                continue
            if f.name in out:
                raise TypeError(f"{cls.__name__}: field {f.name!r} of section {owner or 'top'} clashes with "
                                f"section {out[f.name][0] or 'top'}: flags are named by field")
            out[f.name] = (owner, hints[f.name], docs.get(f.name, ""))
    return out


def nest(cls: type, flat: dict) -> dict:
    """Keyword arguments of ``cls`` from flat field names (as flags give them): a section's fields are gathered
    into that section's dataclass. A section given whole (``slp=SlpConfig(...)``) is kept as given."""
    leaves = _leaves(cls)
    nested = sections(cls)
    out, per_section = {}, {name: {} for name in nested}
    for key, value in flat.items():
        if key in nested:
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
        if values:
            out[name] = nested[name](**values)
    return out


def parser_for(cls: type, description: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description or _description(cls))
    parser.add_argument("--tiny", action="store_true", help="start from the tiny() preset (tests, demo)")
    groups = {name: parser.add_argument_group(name, _description(section))
              for name, section in sections(cls).items()}
    for name, (owner, annotation, doc) in _leaves(cls).items():
        base = _base(annotation)
        # argparse expands %-formats in help (``%(default)s``): a doc's own "50%" would break --help
        kwargs = {"help": doc.replace("%", "%%"), "dest": name, "default": argparse.SUPPRESS}
        if base is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif typing.get_origin(base) is list:
            kwargs.update(nargs="+", type=typing.get_args(base)[0])
        else:
            kwargs["type"] = base
        (groups[owner] if owner else parser).add_argument("--" + name.replace("_", "-"), **kwargs)
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
    from pipelines.console import filter_known_noise

    cfg = parse_config(cls, argv)
    filter_known_noise()
    return cfg

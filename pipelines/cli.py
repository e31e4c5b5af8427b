"""Build an argparse CLI from a typed, keyword-only config dataclass (one declaration feeds both)."""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing

from shards_schema.declare import field_docs


def _base(annotation):
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return _base(next(a for a in typing.get_args(annotation) if a is not type(None)))
    return annotation


def parser_for(cls: type, description: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description or (cls.__doc__ or "").split("\n")[0])
    parser.add_argument("--tiny", action="store_true", help="start from the tiny() preset (tests, demo)")
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        base = _base(hints[f.name])
        kwargs = {"help": docs.get(f.name, ""), "dest": f.name, "default": argparse.SUPPRESS}
        if base is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif typing.get_origin(base) is list:
            kwargs.update(nargs="+", type=typing.get_args(base)[0])
        else:
            kwargs["type"] = base
        parser.add_argument(flag, **kwargs)
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
        return cls.tiny(**args) if tiny else cls(**args)
    except ValueError as err:  # a cross-field check in __post_init__: usage and the reason, not a traceback
        parser.error(str(err))


def _required(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]

"""Derive Arrow types from typed dataclasses, so each schema is declared once, in Python.

A field annotated ``int``/``float``/``str``/``bool`` maps to a non-nullable Arrow scalar; ``X | None`` makes it
nullable; ``list[X]`` is an Arrow list; a nested dataclass is an Arrow struct. Width is chosen per field with
``typing.Annotated`` (e.g. ``Annotated[int, pa.int16()]``), so the Python declaration stays the single source.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from functools import cache

import pyarrow as pa

_SCALARS: dict[type, pa.DataType] = {
    int: pa.int64(),
    float: pa.float32(),
    str: pa.string(),
    bool: pa.bool_(),
    bytes: pa.binary(),
}


def _arrow_type(annotation: typing.Any) -> tuple[pa.DataType, bool]:
    """Return (Arrow type, nullable) for one resolved annotation."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        base, arrow_type = typing.get_args(annotation)[:2]
        _, nullable = _arrow_type(base)
        return arrow_type, nullable
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"only `X | None` unions are supported, got {annotation!r}")
        arrow_type, _ = _arrow_type(args[0])
        return arrow_type, True
    if origin is list:
        (item,) = typing.get_args(annotation)
        item_type, item_nullable = _arrow_type(item)
        return pa.list_(pa.field("item", item_type, nullable=item_nullable)), False
    if dataclasses.is_dataclass(annotation):
        return pa.struct(arrow_fields(annotation)), False
    if annotation in _SCALARS:
        return _SCALARS[annotation], False
    raise TypeError(f"no Arrow mapping for annotation {annotation!r}")


@cache
def arrow_fields(cls: type) -> tuple[pa.Field, ...]:
    """Arrow fields of a dataclass, in declaration order, with each field's docstring as metadata."""
    hints = typing.get_type_hints(cls, include_extras=True)
    docs = field_docs(cls)
    out = []
    for f in dataclasses.fields(cls):
        arrow_type, nullable = _arrow_type(hints[f.name])
        meta = {"doc": docs[f.name]} if f.name in docs else None
        out.append(pa.field(f.name, arrow_type, nullable=nullable, metadata=meta))
    return tuple(out)


def arrow_schema(cls: type, *, name: str, version: str) -> pa.Schema:
    """The Arrow schema of a row dataclass, tagged with its schema name and version."""
    return pa.schema(list(arrow_fields(cls)), metadata={"replayforge.schema": name, "replayforge.version": version})


def field_docs(cls: type) -> dict[str, str]:
    """Per-field docs, taken from a ``__field_docs__`` mapping or from ``Attributes:`` lines in the docstring."""
    docs: dict[str, str] = dict(getattr(cls, "__field_docs__", {}))
    in_attrs = False
    for line in (cls.__doc__ or "").splitlines():
        stripped = line.strip()
        if stripped == "Attributes:":
            in_attrs = True
            continue
        if in_attrs and ":" in stripped:
            key, _, text = stripped.partition(":")
            if key.isidentifier():
                docs.setdefault(key, text.strip())
    return docs

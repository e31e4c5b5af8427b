"""Derive Arrow types from typed dataclasses, so each schema is declared once, in Python.

A field annotated ``int``/``float``/``str``/``bool`` maps to a non-nullable Arrow scalar; ``X | None`` makes it
nullable; ``list[X]`` is an Arrow list; a nested dataclass is an Arrow struct. Width is chosen per field with
``typing.Annotated`` (e.g. ``Annotated[int, pa.int16()]``), so the Python declaration stays the single source.
"""

from __future__ import annotations

import dataclasses
import itertools
import types
import typing
from functools import cache
from operator import itemgetter

import pyarrow as pa

i8 = typing.Annotated[int, pa.int8()]
u8 = typing.Annotated[int, pa.uint8()]
i16 = typing.Annotated[int, pa.int16()]
u16 = typing.Annotated[int, pa.uint16()]
i32 = typing.Annotated[int, pa.int32()]
u32 = typing.Annotated[int, pa.uint32()]
"""Integer widths for declarations (``x: u16``); a plain ``int`` is int64."""

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


def _distinct(values: list) -> tuple[list, list[int] | None, bool]:
    """(distinct objects by identity in first-seen order, each value's position among them or None when all are
    distinct, whether one is None), with the loops in C (``map``, ``dict``, ``zip``)."""
    ids = list(map(id, values))
    first = dict(zip(ids, values, strict=True))
    has_null = id(None) in first
    if len(first) == len(values):
        return values, None, has_null
    position = dict(zip(first, range(len(first)), strict=True))
    return list(first.values()), list(map(position.__getitem__, ids)), has_null


def _field_values(objects: list, names: list[str]) -> list[list]:
    """``[[o[name] for o in objects] for name in names]``, each field's values gathered by ``map`` in C. (One
    ``itemgetter`` over all names, transposed by ``zip``, held a tuple per object at once: 26% of ``to_table``'s
    time went to the cyclic collector walking them.)"""
    return [list(map(itemgetter(name), objects)) for name in names]


def _children(objects: list, arrow_type: pa.StructType) -> list[pa.Array]:
    """The child arrays of a struct column. Children of the same nested struct type, alone or as list items (a
    state's player_active, opponent_active and available_switches), are converted together and sliced apart:
    one conversion per field of the struct instead of one per child, and an object shared between the children
    (a Pokémon that was on the bench, then active) converted once. On 96 gen1ou bench battles in blocks of 16:
    16.2k distinct Pokémon instead of 18.4k counted child by child, and 0.90-0.97x the time of ``to_table``
    converting each child alone (two runs, same process)."""
    columns = _field_values(objects, arrow_type.names)
    children: list[pa.Array | None] = [None] * len(columns)
    groups: dict[pa.DataType, list[int]] = {}
    for i, f in enumerate(arrow_type):
        item = f.type.value_type if pa.types.is_list(f.type) else f.type
        if pa.types.is_struct(item) and any(pa.types.is_nested(g.type) for g in item):
            groups.setdefault(item, []).append(i)
    for item_type, members in groups.items():
        if len(members) < 2:
            continue
        gathered: list = []
        spans = []
        for i in members:
            values, offsets = columns[i], None
            if pa.types.is_list(arrow_type[i].type):
                offsets = [0, *itertools.accumulate(map(len, values))]
                values = list(itertools.chain.from_iterable(values))
            spans.append((i, len(gathered), len(values), offsets))
            gathered += values
        combined = _column(gathered, item_type, nullable=True)
        for i, start, count, offsets in spans:
            f, part = arrow_type[i], combined.slice(start, count)
            if part.null_count and not (f.nullable if offsets is None else f.type.value_field.nullable):
                raise ValueError(f"null in non-nullable struct column {item_type}")
            children[i] = part if offsets is None else pa.ListArray.from_arrays(
                pa.array(offsets, type=pa.int32()), part, type=f.type)
    return [child if child is not None else _column(column, f.type, f.nullable)
            for child, column, f in zip(children, columns, arrow_type, strict=True)]


@cache
def _empty_value(arrow_type: pa.StructType) -> dict:
    """The value ``pa.Table.from_pylist`` gives the children of a null struct (zeros, empty strings and lists, even
    for nullable children), as a row dict; taken from Arrow itself so it matches for every type."""
    null = pa.array([None], type=arrow_type)
    return {f.name: null.field(i)[0].as_py() for i, f in enumerate(arrow_type)}


def _column(values: list, arrow_type: pa.DataType, nullable: bool) -> pa.Array:
    """Build one Arrow column from Python values, recursing into structs and lists.

    Struct values that are the same Python object (renderers share unchanged sub-states between rows) are
    converted once and repeated with ``take``, which is what makes wide nested rows cheap to convert.
    """
    if pa.types.is_struct(arrow_type):
        objects, positions, has_null = _distinct(values)
        if has_null and not nullable:
            raise ValueError(f"null in non-nullable struct column {arrow_type}")
        if has_null:  # _distinct keeps one None: it becomes the empty value, then a null slot (below)
            null_at = objects.index(None)
            objects = objects.copy()
            objects[null_at] = _empty_value(arrow_type)
        if all(not pa.types.is_nested(f.type) for f in arrow_type):  # flat struct: Arrow's C++ path is faster
            built = pa.array(objects, type=arrow_type)
            for i, f in enumerate(arrow_type):
                if not f.nullable and built.field(i).null_count:
                    raise ValueError(f"null in non-nullable field {f.name!r}")
        else:
            built = pa.StructArray.from_arrays(_children(objects, arrow_type), fields=list(arrow_type))
        if has_null:
            # A null struct's children hold the empty value, as ``from_pylist`` builds them: Parquet refuses a
            # null slot whose child lists are not empty ("Lists with non-zero length null components are not
            # supported", pyarrow 21, once such a slot sits between present ones) and non-nullable children that
            # are null. Only the validity changes here: the children are reused, not copied.
            validity = [False] * len(objects)
            validity[null_at] = True
            built = pa.StructArray.from_arrays([built.field(i) for i in range(built.type.num_fields)],
                                               fields=list(arrow_type), mask=pa.array(validity, type=pa.bool_()))
        if positions is None:
            return built
        return built.take(pa.array(positions, type=pa.int32()))
    if pa.types.is_fixed_size_list(arrow_type):
        flat = list(itertools.chain.from_iterable(values))
        if len(flat) != len(values) * arrow_type.list_size:
            raise ValueError(f"a value does not have {arrow_type.list_size} items")
        return pa.FixedSizeListArray.from_arrays(pa.array(flat, type=arrow_type.value_type), arrow_type.list_size)
    if pa.types.is_list(arrow_type):
        offsets = [0, *itertools.accumulate(map(len, values))]
        child = _column(list(itertools.chain.from_iterable(values)), arrow_type.value_type,
                        arrow_type.value_field.nullable)
        return pa.ListArray.from_arrays(pa.array(offsets, type=pa.int32()), child, type=arrow_type)
    array = pa.array(values, type=arrow_type)
    if not nullable and array.null_count:
        raise ValueError(f"null in non-nullable column of type {arrow_type}")
    return array


def to_table(rows: list[dict], schema: pa.Schema) -> pa.Table:
    """Rows (dicts in the declared shape) → an Arrow table of exactly ``schema``; equals
    ``pa.Table.from_pylist(rows, schema=schema)`` (its readable reference;
    ``tests/shards_schema/test_shards_schema.py`` compares them), several times faster on rows that share
    sub-objects."""
    try:
        columns = _field_values(rows, schema.names)
    except KeyError as err:
        raise ValueError(f"row lacks field {err}") from err
    return pa.Table.from_arrays([_column(c, f.type, f.nullable) for c, f in zip(columns, schema, strict=True)],
                                schema=schema)

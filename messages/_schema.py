"""Describe the catalog: a listing for humans and a JSON Schema for tools."""

from __future__ import annotations

import enum
import types
import typing
from typing import Any

import msgspec

from ._catalog import FAMILIES, AnyMessage
from ._envelope import PROTOCOL_VERSION, Envelope


class FieldInfo(msgspec.Struct, frozen=True):
    name: str
    type: str
    required: bool
    default: str | None


class KindInfo(msgspec.Struct, frozen=True):
    family: str
    kind: str
    name: str
    doc: str
    fields: list[FieldInfo]


def _type_name(tp: Any) -> str:
    """A short readable spelling of a field type: ``int >= 0``, ``list[str]``, ``float | None``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        base, *metas = args
        bounds = [
            f"{sym} {getattr(meta, attr)}"
            for meta in metas
            for attr, sym in (("ge", ">="), ("gt", ">"), ("le", "<="), ("max_length", "len <="))
            if getattr(meta, attr, None) is not None
        ]
        return " ".join([_type_name(base), *bounds])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin is not None:
        return f"{origin.__name__}[{', '.join(_type_name(a) for a in args)}]"
    if tp is type(None):
        return "None"
    return tp.__name__ if isinstance(tp, type) else repr(tp)


def describe() -> list[KindInfo]:
    """Every kind with its fields, in catalog order."""
    kinds = []
    for family, classes in FAMILIES.items():
        for cls in classes:
            fields = []
            for f in msgspec.structs.fields(cls):
                required = f.required
                default = None if required else repr(
                    f.default if f.default is not msgspec.NODEFAULT else f.default_factory()
                )
                fields.append(FieldInfo(f.encode_name, _type_name(f.type), required, default))
            doc = (cls.__doc__ or "").strip().splitlines()
            kinds.append(KindInfo(family, cls.wire_tag(), cls.__name__, doc[0] if doc else "", fields))
    return kinds


def json_schema() -> dict[str, Any]:
    """JSON Schema (2020-12) of the message catalog and the envelope."""
    (message_schema, envelope_schema), components = msgspec.json.schema_components(
        [AnyMessage, Envelope], ref_template="#/$defs/{name}"
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "actorwire message catalog",
        "description": (
            f"Protocol version {PROTOCOL_VERSION}. The body frame is one of `message`; "
            "the envelope frame is `envelope` (a positional array on the wire)."
        ),
        "type": "object",
        "properties": {"message": message_schema, "envelope": envelope_schema},
        "$defs": components,
    }


def _sample(tp: Any) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return _sample(args[0])
    if origin in (typing.Union, types.UnionType):
        non_none = [a for a in args if a is not type(None)]
        return _sample(non_none[0])
    if origin is list:
        return [_sample(args[0])]
    if origin is dict:
        return {"a": _sample(args[1])}
    if isinstance(tp, type):
        if issubclass(tp, enum.Enum):
            return next(iter(tp))
        if issubclass(tp, msgspec.Struct):
            return example(tp)
        return {bool: True, int: 3, float: 1.5, str: "x", bytes: b"\x01" * 8}[tp]
    raise TypeError(f"no sample for {tp!r}")


def example(cls: type[msgspec.Struct]) -> Any:
    """A representative instance of ``cls`` with every field set (for docs and benchmarks)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    values = {f.name: _sample(hints[f.name]) for f in msgspec.structs.fields(cls)}
    if "stride" in values and "shape" in values:  # TensorRef: dims must agree
        values["shape"], values["stride"] = [4, 8], [8, 1]
    return cls(**values)

"""Hypothesis strategies that build valid values of every message kind from its type hints."""

from __future__ import annotations

import enum
import types
import typing

import msgspec
from hypothesis import strategies as st

from actorwire import messages

_INT64 = 2**63 - 1


def _for_type(tp: object) -> st.SearchStrategy:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        base, *metas = args
        meta = next((m for m in metas if isinstance(m, msgspec.Meta)), None)
        if base is int:
            lo = meta.ge if meta is not None and meta.ge is not None else -_INT64
            return st.integers(min_value=lo, max_value=_INT64)
        if base is float:
            lo = meta.ge if meta is not None and meta.ge is not None else None
            return st.floats(min_value=lo, allow_nan=False)
        if base is str:
            lo = meta.min_length or 0 if meta is not None else 0
            hi = meta.max_length if meta is not None else None
            return st.text(min_size=lo, max_size=min(hi or 40, 40))
        return _for_type(base)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*[_for_type(a) for a in args])
    if origin is list:
        return st.lists(_for_type(args[0]), max_size=4)
    if origin is dict:
        return st.dictionaries(st.text(max_size=12), _for_type(args[1]), max_size=3)
    if tp is type(None):
        return st.none()
    assert isinstance(tp, type), tp
    if issubclass(tp, enum.Enum):
        return st.sampled_from(list(tp))
    if tp is messages.TensorRef:
        return tensor_refs()
    if issubclass(tp, msgspec.Struct):
        return struct_of(tp)
    return {
        bool: st.booleans(),
        int: st.integers(min_value=-_INT64, max_value=_INT64),
        float: st.floats(allow_nan=False),
        str: st.text(max_size=40),
        bytes: st.binary(max_size=160),
    }[tp]


def struct_of(cls: type) -> st.SearchStrategy:
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = {f.name: _for_type(hints[f.name]) for f in msgspec.structs.fields(cls)}
    return st.builds(cls, **fields)


@st.composite
def tensor_refs(draw: st.DrawFn) -> messages.TensorRef:
    ndim = draw(st.integers(0, 4))
    shape = draw(st.lists(st.integers(0, 1 << 20), min_size=ndim, max_size=ndim))
    stride = draw(st.lists(st.integers(-(1 << 20), 1 << 20), min_size=ndim, max_size=ndim))
    base = draw(struct_of_plain_tensor())
    return msgspec.structs.replace(base, shape=shape, stride=stride)


def struct_of_plain_tensor() -> st.SearchStrategy:
    return st.builds(
        messages.TensorRef,
        dtype=st.sampled_from(["float32", "bfloat16", "int8", "uint8"]),
        shape=st.just([]),
        stride=st.just([]),
        storage_offset=st.integers(0, 1 << 40),
        device=st.sampled_from(["cpu", "cuda:0", "cuda:7"]),
        plane=st.sampled_from(list(messages.Plane)),
        handle=st.binary(max_size=64),
        offset=st.integers(0, 1 << 40),
        nbytes=st.integers(0, 1 << 40),
        digest=st.none() | st.text(max_size=64),
    )


#: Any valid message of the catalog.
any_message = st.one_of(*[struct_of(cls) for cls in messages.MESSAGE_TYPES])

"""The base every message derives from, and the field types they share.

Messages are frozen :class:`msgspec.Struct` values encoded as msgpack maps.
Each concrete kind carries a stable tag string in the ``type`` key; the tag is
part of the wire protocol and of every recording, so it is written out by hand
on each class and never derived from the class or module name.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

#: A rank, a count or an index: an int that can never be negative.
Count = Annotated[int, msgspec.Meta(ge=0)]
#: A duration or a size measured as a float; negative values are rejected.
NonNegFloat = Annotated[float, msgspec.Meta(ge=0.0)]
#: An actor name such as ``"worker/3"``.
ActorName = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]

TAG_FIELD = "type"


class Message(
    msgspec.Struct,
    frozen=True,
    tag_field=TAG_FIELD,
    omit_defaults=True,
    kw_only=True,
):
    """Base of every message kind.

    Fields with defaults are left out of the encoded map when they hold the
    default, and a receiver fills them back in; that is what lets a new field
    be added (with a default) without breaking older peers.
    """

    @classmethod
    def wire_tag(cls) -> str:
        """The stable wire tag of this message kind."""
        tag = cls.__struct_config__.tag
        assert isinstance(tag, str), f"{cls.__name__} has no string tag"
        return tag


class Record(msgspec.Struct, frozen=True, omit_defaults=True, kw_only=True):
    """A nested value inside a message (no tag of its own)."""

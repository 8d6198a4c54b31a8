"""actorwire.messages: what is said on the bus.

The typed message catalog (one tagged union of frozen msgspec structs), the
envelope, and the codec that turns them into msgpack frames and back, with
validation.  This package imports nothing else of actorwire.  The node protocol's own kinds are in
:mod:`actorwire.messages.runtime`; kinds kept only for their tags, in
:mod:`actorwire.messages.reserved`.
"""

from __future__ import annotations

from . import kinds
from ._base import Message, Record
from ._catalog import BY_KIND, FAMILIES, MESSAGE_TYPES, AnyMessage, message_type
from ._codec import (
    DEFAULT_MAX_MESSAGE_SIZE,
    Codec,
    decode,
    decode_message,
    encode,
    encode_message,
)
from ._envelope import PROTOCOL_VERSION, Envelope
from ._errors import (
    ActorwireError,
    DecodeError,
    MalformedMessage,
    MessageTooLarge,
    PeerError,
    ProtocolVersionMismatch,
    UnknownMessage,
    UsageError,
)
from ._public import publish as _publish
from ._schema import describe, example, json_schema

__all__ = [
    "PROTOCOL_VERSION", "DEFAULT_MAX_MESSAGE_SIZE",
    # codec
    "Codec", "encode", "decode", "encode_message", "decode_message",
    # base and catalog
    "Message", "Record", "Envelope", "AnyMessage", "MESSAGE_TYPES", "FAMILIES",
    "BY_KIND", "message_type", "describe", "example", "json_schema",
    # errors
    "ActorwireError", "UsageError", "PeerError", "DecodeError", "MalformedMessage", "UnknownMessage", "MessageTooLarge",
    "ProtocolVersionMismatch",
]
_publish(globals(), __all__)


def __getattr__(name: str) -> object:
    """The kinds' old path (``from actorwire.messages import StartEpoch``), kept for code written
    before they moved to :mod:`actorwire.messages.kinds`."""
    if name in kinds.__all__:
        return getattr(kinds, name)
    raise AttributeError(f"module 'actorwire.messages' has no attribute {name!r}")
